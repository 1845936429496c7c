"""Exactly-once application over at-least-once delivery: one partition's state
while the worker applies its batches.

Pure, no Kafka: `PartitionTransaction` reads committed values through a reader of
the local store (stream/store.py); stream/commit.py writes what it returns out,
in the order the rules need. docs/design.md has the argument; in short:

- The worker applies matches in batches. During a batch every write goes to
  an in-memory overlay, so later matches of the batch see earlier ones.
- At the end of a batch (a checkpoint) the overlay is encoded once, as the
  local store takes it: those values, as packed rows tagged with the owner's
  epoch and the batch number, are the batch's changelog records, then the
  checkpoint record; once the broker has acknowledged them, the same values and
  the checkpoint go into the local store in one write (stream/changelog.py has
  the rule that reads them back).
- The checkpoint's input offsets are where input resumes after a restart or a
  rebalance; an input record at or below them was applied and its outputs
  acknowledged: it is skipped.
"""

from __future__ import annotations

import dataclasses

from itertools import islice
from operator import itemgetter
from typing import Any, Callable, Iterable, NamedTuple

import orjson

from ..state.base import Tables
from .changelog import Checkpoint, RecordWriter, checkpoint_record, input_fingerprint

# Reads a committed value: store key -> bytes or None.
Reader = Callable[[bytes], "bytes | None"]
# Reads committed rows in order: (start, end) store keys -> (key, bytes) for start <= key < end.
Scanner = Callable[[bytes, bytes], Iterable[tuple[bytes, bytes]]]

# Per partition, the cache starts over when it holds this many entries, or when the
# values put in it since it last started over took this many stored bytes (decoded,
# they take more). A value replaced counts again: the bytes
# bound what the cache holds, not exactly, and a small set of players updated again
# and again starts it over now and then (a re-read of each from RocksDB). A count
# alone does not bound the memory: an Elo-MMR player with a long history decodes to
# many times an `elo` player (docs/performance.md, "Settings chosen by measurement").
CACHE_LIMIT = 50_000
CACHE_BYTES = 16 * 1024 * 1024
_MISSING = object()


class CheckpointWrites(NamedTuple):
    """What a checkpoint sends: the changelog's data records, the checkpoint record, the
    checkpoint, and the local store's values (written once the records are acknowledged:
    the records are these values, packed)."""

    records: list[tuple[bytes, bytes]]
    mark: tuple[bytes, bytes]
    checkpoint: Checkpoint
    values: dict[bytes, bytes | None]


def _first(item: tuple) -> Any:
    return item[0]


def _as_stored(table: str, key: bytes, raw: bytes) -> bytes:
    return raw


_THIRD = itemgetter(2)


class PartitionTransaction:
    """One partition's committed state plus the overlay of the batch in progress. It
    knows tables by their prefixes only (`Tables`): nothing of leagues."""

    def __init__(self, partition: int, checkpoint: Checkpoint, reader: Reader, tables: Tables,
                 scanner: Scanner | None = None):
        self.partition = partition
        self.tables = tables
        self.checkpoint = checkpoint
        self.read = reader
        self.scanner = scanner
        self.overlay: dict[tuple[str, bytes], Any] = {}
        self.offsets: dict[str, int] = {}  # offsets seen in the batch in progress
        self.last_input: dict[str, Any] = {}  # the record at each of those offsets (for its fingerprint)
        self.input_restarted = False  # an input topic started over: the next checkpoint says so
        # Committed values already read (decoded). Only this object commits the
        # partition's state while it lives, so they stay true until it commits them anew.
        self.cache: dict[tuple[str, bytes], Any] = {}
        self.cache_bytes = 0  # stored bytes of the values cached since the cache last started over
        # The cached tables' writes of the batch, with their stored bytes: cached once it commits.
        self.to_cache: list[tuple[tuple[str, bytes], Any, bytes]] = []
        self.reads: dict[tuple[str, bytes], Any] = {}  # the same, for this batch only
        self.changelog_next = checkpoint.changelog + 1  # where this owner's next changelog record lands
        # The overlay before each write since the savepoint (None: not kept, see `savepoint`).
        self.journal: list[tuple[tuple[str, bytes], Any]] | None = None

    @property
    def epoch(self) -> int:
        return self.checkpoint.epoch

    def get(self, table: str, key: bytes) -> Any:
        item = (table, key)
        # The overlay, then what was read before (`in`, not a call: the calls a match
        # makes are counted, docs/performance.md), then the store.
        overlay = self.overlay
        if item in overlay:
            return overlay[item]
        read = self.cache if table in self.tables.cached else self.reads
        if item in read:
            return read[item]
        return self._read(item)

    def get_many(self, table: str, keys: list[bytes]) -> list[Any]:
        overlay = self.overlay
        read = self.cache if table in self.tables.cached else self.reads
        found = []
        for key in keys:  # `get`'s steps, without a call a key on a hit
            item = (table, key)
            found.append(overlay[item] if item in overlay else read[item] if item in read else self._read(item))
        return found

    def committed_value(self, item: tuple[str, bytes]) -> Any:
        """The value of a (table, key) as of the last checkpoint (None: none)."""
        read = self.cache if item[0] in self.tables.cached else self.reads
        return read[item] if item in read else self._read(item)

    def _read(self, item: tuple[str, bytes]) -> Any:
        """A committed value from the store, decoded and kept."""
        raw = self.read(self.tables.prefixes[item[0]] + item[1])
        value = None if raw is None else self.tables.decode(item[0], item[1], raw)
        if item[0] in self.tables.cached:
            self._cache(item, value, 0 if raw is None else len(raw))
        else:
            reads = self.reads
            if len(reads) >= CACHE_LIMIT:  # bounded: start over rather than track recency
                reads.clear()
            reads[item] = value
        return value

    def _cache(self, item: tuple[str, bytes], value: Any, size: int) -> None:
        if len(self.cache) >= CACHE_LIMIT or self.cache_bytes + size > CACHE_BYTES:
            self.cache.clear()  # bounded: start over rather than track recency or sizes
            self.cache_bytes = 0
        self.cache[item] = value
        self.cache_bytes += size

    def put(self, table: str, key: bytes, value: Any) -> None:
        self.put_many([(table, key, value)])

    def put_many(self, items: list[tuple[str, bytes, Any]]) -> None:
        overlay = self.overlay
        journal = self.journal
        for table, key, value in items:
            item = (table, key)
            if journal is not None:
                journal.append((item, overlay.get(item, _MISSING)))
            overlay[item] = value

    def savepoint(self, journal: bool) -> None:
        """Where `rollback` goes back to, set before each input record is applied; with
        `journal`, the record's writes are undone if it fails half way (a re-rate:
        a match at the end of its league writes only once it is rated)."""
        self.journal = [] if journal else None

    def rollback(self) -> None:
        """Undo the overlay's writes since the savepoint (without a journal nothing is
        undone: what was written stays)."""
        journal = self.journal
        if journal is not None:
            overlay = self.overlay
            for item, value in journal[::-1]:  # (mypyc 2.4 cannot compile reversed() of this list)
                if value is _MISSING:
                    del overlay[item]
                else:
                    overlay[item] = value
        self.journal = None

    def put_stored(self, store_key: bytes, raw: bytes | None) -> None:
        """Write a value as stored (a changelog row): decoded, as every value the overlay holds."""
        table, key = self.tables.table_of[store_key[:1]], store_key[1:]
        self.put(table, key, None if raw is None else self.tables.decode(table, key, raw))

    def scan(self, table: str, start: bytes, end: bytes, limit: int | None = None,
             raw: bool = False) -> list[tuple[bytes, Any]]:
        """The (key, value) of a table in [start, end), in key order, as of the batch
        in progress (the committed rows with the overlay over them): the first
        `limit` committed rows and what the overlay has up to the last of them (fewer
        than `limit` when the overlay deleted some). For re-rates: the overlay is
        searched whole, once per call. With `raw`, committed values come as their
        bytes (the overlay's as they are), for callers that decode few of them."""
        committed: list[tuple[bytes, bytes]] = []
        if self.scanner is not None:
            prefix = self.tables.prefixes[table]
            rows = self.scanner(prefix + start, prefix + end)
            committed = [(key[1:], value) for key, value in (rows if limit is None else islice(rows, limit))]
            if limit is not None and len(committed) == limit:
                end = committed[-1][0] + b"\x00"  # the overlay beyond the last committed row read waits
        decode = self.tables.decode
        if raw:
            decode = _as_stored
        overlaid = sorted((key, value) for (name, key), value in self.overlay.items()
                          if name == table and start <= key < end)
        if not overlaid:
            return [(key, decode(table, key, value)) for key, value in committed]
        written = dict(overlaid)
        found = [(key, decode(table, key, value)) for key, value in committed if key not in written]
        found += [(key, value) for key, value in overlaid if value is not None]  # None: deleted in this batch
        found.sort(key=_first)
        return found if limit is None else found[:limit]

    def already_applied(self, topic: str, offset: int) -> bool:
        """Whether the input record at `offset` was applied: by the checkpoint, or in this batch."""
        committed, offsets = self.checkpoint.offsets, self.offsets
        # (`in`, not get: `take_offset` runs once a match)
        return (topic in committed and offset <= committed[topic]) or (topic in offsets and offset <= offsets[topic])

    def take_offset(self, topic: str, offset: int) -> bool:
        """Whether the input record at `offset` is new (not `already_applied`); a new one
        is noted as the batch's (`note_offset`)."""
        if self.already_applied(topic, offset):
            return False
        self.offsets[topic] = offset
        return True

    def next_offset(self, topic: str) -> int | None:
        """The next input offset this partition expects from `topic` (None: no record yet)."""
        last = max(self.checkpoint.offsets.get(topic, -1), self.offsets.get(topic, -1))
        return last + 1 if last >= 0 else None

    def note_offset(self, topic: str, offset: int) -> None:
        if offset > self.offsets.get(topic, -1):
            self.offsets[topic] = offset

    def note_input(self, record: Any) -> None:
        """The input record last applied from its topic (offset, key, value, timestamp):
        the checkpoint keeps its fingerprint, so that a topic that started over is told
        apart from one that merely grew."""
        self.last_input[record.topic] = record

    def restart_input(self, topic: str, at: int | None = None) -> None:
        """The topic's input resumes at offset `at`, or at its beginning (None: it started
        over, nothing of it counts as applied; a result already applied is then a
        duplicate). The next checkpoint says so."""
        offsets = {name: offset for name, offset in self.checkpoint.offsets.items() if name != topic}
        if at is not None:
            offsets[topic] = at - 1
        fingerprints = {name: value for name, value in self.checkpoint.fingerprints.items() if name != topic}
        self.checkpoint = dataclasses.replace(self.checkpoint, offsets=offsets, fingerprints=fingerprints)
        self.offsets.pop(topic, None)
        self.last_input.pop(topic, None)
        self.input_restarted = True

    @property
    def dirty(self) -> bool:
        return bool(self.overlay or self.offsets or self.input_restarted)

    def checkpoint_writes(self) -> CheckpointWrites:
        """This batch's changelog records (its local values, packed), its checkpoint record,
        the checkpoint (its changelog offset is set once the broker has acknowledged the
        record), and the local values."""
        epoch, batch = self.checkpoint.epoch, self.checkpoint.batch + 1
        values = self.local_values()
        writer = RecordWriter(epoch, batch)
        records = list(writer.packed(values))
        fingerprints = {**self.checkpoint.fingerprints, **{topic: input_fingerprint(r.timestamp, r.key, r.value)
                                                          for topic, r in self.last_input.items()}}
        after = dataclasses.replace(self.checkpoint, epoch=epoch, batch=batch,
                                    offsets={**self.checkpoint.offsets, **self.offsets}, fingerprints=fingerprints,
                                    rows=self.checkpoint.rows + writer.rows_packed)
        return CheckpointWrites(records, checkpoint_record(epoch, batch, after.offsets, fingerprints, after.base), after,
                                values)

    def local_values(self) -> dict[bytes, bytes | None]:
        """The overlay as the local store takes it: encoded values by store key (None:
        delete), each value encoded once: the changelog's rows are these bytes. One pass
        over the overlay (a batch's values are cold in the CPU's caches: a pass a column
        measured slower, docs/performance.md)."""
        prefix = self.tables.prefixes
        cached_tables = self.tables.cached
        encoders = self.tables.encoders
        values: dict[bytes, bytes | None] = {}
        to_cache = self.to_cache = []
        for item, value in self.overlay.items():
            table, key = item
            stored = None if value is None else encoders[table](value)
            if table in cached_tables:
                to_cache.append((item, value, stored or b""))
            values[prefix[table] + key] = stored
        return values

    def checkpointed(self, checkpoint: Checkpoint) -> None:
        """The batch is committed: the overlay is now the committed state."""
        self.checkpoint = checkpoint
        # The batch's cached values, in one pass under `_cache`'s bounds (a start over
        # at most, before them): its loop, not a call per value.
        cache, to_cache = self.cache, self.to_cache[-CACHE_LIMIT:]
        new = 0
        for item, _, _ in to_cache:
            if item not in cache:
                new += 1
        added = sum(map(len, map(_THIRD, to_cache)))  # (the sizes summed in C: no call a value)
        if added > CACHE_BYTES:  # more than the whole cache holds (a season's start): value by value
            for item, value, stored in to_cache:
                self._cache(item, value, len(stored))
        else:
            if len(cache) + new > CACHE_LIMIT or self.cache_bytes + added > CACHE_BYTES:
                cache.clear()
                self.cache_bytes = 0
            for item, value, _ in to_cache:
                cache[item] = value
            self.cache_bytes += added
        self.to_cache = []
        self.overlay.clear()
        self.journal = None
        self.reads.clear()
        self.offsets.clear()
        self.last_input.clear()
        self.input_restarted = False
