"""What the domain's tables are to the storage that holds them: each table's key
prefix, which tables stay cached, and the codecs of their values. Both backends
take them: the stream's transaction over RocksDB (stream/transaction.py) and the
replay's memory (state/memory.py)."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import orjson


class Codec(Protocol):
    """How a table's values are stored: the transaction holds them decoded (the
    domain's objects) and encodes each once, when its batch is committed."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, key: bytes, raw: bytes) -> Any:
        """The value stored under `key` (the table's key, without its prefix)."""


class Tables:
    """The tables of a partition's key space, as the transaction needs them: each
    table's key prefix (one byte), the tables whose committed values stay cached
    between batches (the rest are cached within a batch only), and the codecs of
    the tables whose values are not JSON as they are."""

    def __init__(self, prefixes: dict[str, bytes], cached: frozenset[str], codecs: dict[str, Codec] | None = None):
        self.prefixes = prefixes
        self.table_of = {prefix: table for table, prefix in prefixes.items()}
        self.cached = cached
        self.codecs = dict(codecs or {})
        # Each table's encoder: its codec's, else JSON as it is.
        self.encoders: dict[str, Callable[[Any], bytes]] = {
            table: self.codecs[table].encode if table in self.codecs else orjson.dumps for table in prefixes}

    def decode(self, table: str, key: bytes, raw: bytes) -> Any:
        return self.codecs[table].decode(key, raw) if table in self.codecs else orjson.loads(raw)


class Storage(Protocol):
    """One partition's tables, as the domain reads and writes them: the port both
    backends implement. Keys are a table's keys without its prefix; values are
    decoded (the codecs' objects, else JSON values); None is no value (put: delete)."""

    def get(self, table: str, key: bytes) -> Any: ...

    def put(self, table: str, key: bytes, value: Any) -> None: ...

    def get_many(self, table: str, keys: list[bytes]) -> list[Any]:
        """`get` of each key, in order: one call for a match's players, where a round of
        thousands spends more in the calls than in the reads."""

    def put_many(self, items: list[tuple[str, bytes, Any]]) -> None:
        """`put` of each (table, key, value), in order: one call for a match's writes."""

    def scan(self, table: str, start: bytes, end: bytes, limit: int | None = None,
             raw: bool = False) -> list[tuple[bytes, Any]]:
        """The (key, value) in [start, end), in key order (the first `limit`). With
        `raw` a backend may hand stored values as their bytes (callers that decode
        few of them)."""
