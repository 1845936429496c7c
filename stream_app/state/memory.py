"""The memory backend of the storage port (state/base.py `Storage`): a partition's
tables as dicts of decoded values, for `ratings replay`. Nothing is encoded, nothing
is committed: a write is the state. The stream's backend is its transaction over
RocksDB (stream/transaction.py); the domain (state/league_tables.py) is the same over
both."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Iterator

from .base import Tables


class MemoryPartition:
    """Every table of a partition in memory: per table, a dict of key -> value in the
    order the keys were first written (the replay's outputs keep that order), and its
    keys sorted for scans, sorted again only after a key came or went."""

    def __init__(self, tables: Tables):
        self.tables = tables
        self.values: dict[str, dict[bytes, Any]] = {table: {} for table in tables.prefixes}
        self.sorted: dict[str, list[bytes]] = {}  # table -> its keys in order, while no key came or went
        self.stale: dict[str, bool] = dict.fromkeys(tables.prefixes, False)  # a key went since it was sorted
        self.writes = 0  # puts so far: what was built from the tables is out of date once it moves

    def get(self, table: str, key: bytes) -> Any:
        values = self.values[table]
        return values[key] if key in values else None  # (no call: the replay's calls a match are counted)

    def get_many(self, table: str, keys: list[bytes]) -> list[Any]:
        return list(map(self.values[table].get, keys))

    def put_many(self, items: list[tuple[str, bytes, Any]]) -> None:
        self.writes += len(items)
        tables = self.values
        for table, key, value in items:
            if value is not None:
                tables[table][key] = value  # (a key that came changes the count: `_sorted` sees it)
            elif key in tables[table]:
                del tables[table][key]
                self.stale[table] = True  # a key went (the count alone could miss one that came too)

    def put(self, table: str, key: bytes, value: Any) -> None:
        self.put_many([(table, key, value)])

    def scan(self, table: str, start: bytes, end: bytes, limit: int | None = None,
             raw: bool = False) -> list[tuple[bytes, Any]]:
        keys = self._sorted(table)
        first = bisect_left(keys, start)
        last = bisect_left(keys, end, first)
        if limit is not None:
            last = min(last, first + limit)
        values = self.values[table]
        return [(key, values[key]) for key in keys[first:last]]

    def items(self, table: str) -> Iterator[tuple[bytes, Any]]:
        """A table's (key, value) in the order the keys were first written."""
        return iter(self.values[table].items())

    def _sorted(self, table: str) -> list[bytes]:
        if self.stale[table] or table not in self.sorted or len(self.sorted[table]) != len(self.values[table]):
            # Scans are rare in a replay (re-rates, season starts, standings built, the
            # output), writes are per match: sorting at a scan beats keeping order per write.
            self.sorted[table] = sorted(self.values[table])
            self.stale[table] = False
        return self.sorted[table]
