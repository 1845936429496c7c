"""The changelog: how a partition's state reaches Kafka, and the rule that reads it back.

Pure: records in, committed records out; no Kafka, no RocksDB. docs/design.md
has the argument. One changelog topic, partitioned like the input: its partition
P holds input partition P's state. Every record carries the epoch of the worker
that wrote it (a number each take-up of the partition raises) and a batch number:

- packed rows (kind X): many local keys and their values (or their deletion),
  compressed (Zstandard), about PACK_BYTES a record before compression: a batch's
  local writes, or a base's or a write-back's rows (the whole state, in key order);
  kinds P (uncompressed) and Q (zlib) are earlier releases';
- an entry (kind E), as earlier releases wrote one an input applied, with its
  outcome (what the domain needs to write its tables again without doing the
  work again: stream/records.py's deriver);
- a row (kind R), as earlier releases wrote a re-rate's: a local key's new value;
- a checkpoint (kind C): the batch is complete, with the input offsets applied;
- a fence (kind F): a worker took the partition up with a higher epoch;
- a start (kind S): the rows after it, up to its checkpoint, are the whole
  state: a write-back (a worker whose changelog lost records, because the broker
  forgot them or the topic was recreated, writes its local state back under a
  new epoch; releases before this one wrote bases this way too);
- a base (kind B) and its end (kind Z): the owner's whole state as of its batch
  B, as packed rows of B's epoch and batch, written between the batches after B
  (stream/commit.py); once it ends, every record before the base is deleted.

Entries, rows and packed rows are data records. Every record has a key of its own (a data
record's: its epoch, batch and place in the batch; a mark's: its kind, epoch and
batch, a fence's a random number), so that compaction, where a topic has it (releases
before this one cleaned with tombstones), never drops one that a tombstone did not, and
their order is the order in which the owner applied them.
The local tables are a function of the committed data records in that order.

Read in log order from a consistent point, the committed records follow one rule:
- accepted so far: epoch E and its last batch B;
- a data record of an epoch below E comes from a replaced worker: dropped;
- other data records wait for a checkpoint;
- a fence of an epoch above E, or a checkpoint of epoch E (or above) and a batch
  above B, is accepted: waiting records of its epoch up to its batch are
  committed, in order; waiting records of an older epoch were never committed:
  dropped;
- any other fence or checkpoint is dropped (a replaced worker's, or a rival
  take-up that came second);
- a start of an epoch above E, or of epoch E and a batch above B, waits for
  its checkpoint: then that checkpoint is accepted and everything before the
  start is void (the state read so far, and a reader's local store, is wiped;
  records of the start's epoch from before it are dropped). A fence or a
  checkpoint of a higher epoch that comes first abandons it: its records are
  dropped;
- a base of epoch E and batch B (or later: a reader that starts at the base has
  accepted nothing) opens: its packed rows are set aside, and what is committed
  from then on is kept as well as committed. At its end the state is void: it
  is wiped, and the base's rows, then what was kept, are committed (the state a
  reader of the whole log has, made from the base). A fence or a checkpoint of
  a higher epoch abandons it. Packed rows after their batch's checkpoint that
  belong to no open base (one opened before the reader's point) are dropped, as
  is an end with no open base: the reader has that state already;
- a data record whose key is not above the last one taken is a copy (the producer,
  not idempotent, sent its record batch again after an answer it lost): dropped;
- a tombstone (no value) is skipped.

A worker takes a partition up by writing a fence and reading the log up to it:
if the rule accepts its fence it owns the partition, with the state read.
"""

from __future__ import annotations

import hashlib
import random
import struct
import zlib
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import orjson
import zstandard

ENTRY = 0x45  # b"E"
ROW = 0x52  # b"R"
CHECKPOINT = 0x43  # b"C"
FENCE = 0x46  # b"F"
START = 0x53  # b"S"
OLD_ROW = 0x44  # b"D": a row of the format before entries (its key, new value and value before the batch)
ROWS = 0x50  # b"P": packed rows (earlier releases')
ZROWS = 0x51  # b"Q": packed rows compressed with zlib, a value may be a deletion (earlier releases')
ZSTD_ROWS = 0x58  # b"X": packed rows compressed with Zstandard, a value may be a deletion
PACKED = (ROWS, ZROWS, ZSTD_ROWS)
BASE = 0x42  # b"B": a base opens: the owner's state as of its batch, in packed rows written between later batches
BASE_END = 0x5A  # b"Z": the base's rows are complete

_MARK_HEAD = struct.Struct(">QQ")  # epoch, batch
_OLD_ROW_HEAD = struct.Struct(">QQI")  # epoch, batch, length of the new value
_DATA_KEY = struct.Struct(">BQQI")  # 0x01, epoch, batch, place in the batch
_KEY_LENGTH = struct.Struct(">H")
# Packed rows: their count, then each row's key and value lengths, then the keys and values
# in turn. The lengths up front let a reader find every row's bounds at once (NumPy).
_PACKED_COUNT = struct.Struct(">I")
_PACKED_LENGTHS = np.dtype([("key", ">u2"), ("value", ">u4")])
_DELETED = 0xFFFFFFFF  # a compressed packed row's value length: the key is deleted
# Zstandard's level 1: rows of JSON values shrink about seven times (563 to 78 bytes a
# two-player match's writes), at about 1.6 ns a byte; zlib's fastest level, which releases
# before this one wrote, made 100 bytes at 4 (docs/performance.md).
_ZSTD_LEVEL = 1
# About the bytes of a packed record before compression: a base of a million keys is a few
# hundred records (each a producer call), far below Kafka's 1 MiB bound on a record.
PACK_BYTES = 256 * 1024
DATA_START = 1 + _MARK_HEAD.size  # where a data record's payload starts
# A mark's key is its own too: a zero byte, its kind, its epoch, and its batch (a fence: a
# random number). A mark that shared its key with a later one would be removed by the log
# cleaner in favour of it, and the later one can be a mark the rule drops: a take-up's
# fence of a stale epoch, or a replaced worker's late checkpoint. (Releases before this
# one keyed a fence and the checkpoints of an epoch alike, and a start by its epoch.)
_MARK_KEY = struct.Struct(">BBQQ")  # 0x00, kind, epoch, batch or a fence's random number


class StartedOver(Exception):
    """A log holds less than what was applied from it: the broker forgot records, or
    the topic was deleted and created again. The partition is taken up anew."""


@dataclass
class Checkpoint:
    """A partition's committed point: the epoch and batch, the input applied, and
    the changelog record it stands at (-1: none). `fingerprints` identify the last
    applied record of each input topic (`input_fingerprint`): a topic that started
    over holds another record at that offset, or none."""

    epoch: int = 0
    batch: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # input topic -> last applied offset
    changelog: int = -1
    fingerprints: dict[str, int] = field(default_factory=dict)  # input topic -> its last applied record's
    # Where the last completed start (a base or a write-back) is in the changelog (-1: none
    # known); checkpoint records carry it, so a take-up onto an empty directory reads from there.
    base: int = -1
    # Kept locally only (for when a base is due): the entries committed past the last start
    # (what a take-up from it derives again), and the rows of the packed records among them.
    entries: int = 0
    rows: int = 0
    # Kept locally only, while this owner's base is open: its opening mark's offset, and the
    # entries and rows committed up to its batch. A take-up from this checkpoint (inside the
    # base, past its opening) that reads the base's end counts from there, not from the start
    # before it.
    opened: tuple[int, int, int] | None = None

    def encode(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "batch": self.batch, "offsets": self.offsets,
                             "changelog": self.changelog, "fingerprints": self.fingerprints, "base": self.base,
                             "entries": self.entries, "rows": self.rows, "opened": self.opened})

    @classmethod
    def decode(cls, raw: bytes | None) -> "Checkpoint":
        if raw is None:
            return cls()
        doc = orjson.loads(raw)
        return cls(doc["epoch"], doc["batch"], dict(doc["offsets"]), doc["changelog"], dict(doc.get("fingerprints", {})),
                   base=doc.get("base", -1), entries=doc.get("entries", 0), rows=doc.get("rows", 0),
                   opened=None if doc.get("opened") is None else tuple(doc["opened"]))


def input_fingerprint(timestamp: int | None, key: bytes | None, value: bytes | None) -> int:
    """What identifies an input record besides its offset: a record sent again after a
    topic started over has another timestamp, a new one other contents."""
    digest = hashlib.blake2b((timestamp or 0).to_bytes(8, "big", signed=True), digest_size=8)
    digest.update(len(key or b"").to_bytes(4, "big"))
    digest.update(key or b"")
    digest.update(value or b"")
    return int.from_bytes(digest.digest(), "big")


def mark_key(kind: int, epoch: int, batch: int) -> bytes:
    return _MARK_KEY.pack(0, kind, epoch, batch)


class RecordWriter:
    """The data records of one batch, numbered in order: their epoch and batch are
    packed once, not per record."""

    __slots__ = ("epoch", "batch", "head", "count", "rows_packed", "compressor")

    def __init__(self, epoch: int, batch: int, first: int = 0):
        self.epoch, self.batch = epoch, batch
        self.head = _MARK_HEAD.pack(epoch, batch)
        self.count = first
        self.rows_packed = 0
        self.compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)  # (not shared: one thread each)

    def _key(self) -> bytes:
        key = _DATA_KEY.pack(1, self.epoch, self.batch, self.count)
        self.count += 1
        return key

    def entry(self, payload: bytes) -> tuple[bytes, bytes]:
        """An input applied, with its outcome (the domain's encoding), as earlier releases
        wrote it (the tests write them: the rule reads them)."""
        # One join: the record has exactly its size (a batch holds thousands until acknowledged).
        return self._key(), b"".join((b"E", self.head, payload))

    def row(self, key: bytes, value: bytes | None) -> tuple[bytes, bytes]:
        """A local key's value as it is (None: deleted), as earlier releases wrote it."""
        return self._key(), b"".join((b"R", self.head, _KEY_LENGTH.pack(len(key)), key, value or b""))

    def packed(self, rows: Iterable[tuple[bytes, bytes | None]] | dict[bytes, bytes | None]
               ) -> Iterator[tuple[bytes, bytes]]:
        """Rows (None: the key deleted; a dict's items, or (key, value) pairs) as compressed
        packed records of about PACK_BYTES each before compression, in the order given;
        `rows_packed` counts them. A record ends with the row that brings its bytes (each
        row's lengths, key and value) to PACK_BYTES."""
        keys: list[bytes] = []
        values: list[bytes | None] = []
        size = 0  # the bytes of the rows waiting for the next record
        for chunk_keys, chunk_values in _columns(rows):
            # Each row's end, counted in the record being filled, without a call a row (a
            # batch's writes all come here: the calls a match makes are counted).
            ends = np.cumsum(_lengths(chunk_keys) + _lengths(chunk_values) + _PACKED_LENGTHS.itemsize) + size
            start, target = 0, PACK_BYTES
            while (end := int(ends.searchsorted(target))) < len(chunk_keys):
                keys += chunk_keys[start:end + 1]
                values += chunk_values[start:end + 1]
                yield self._packed_record(keys, values)
                keys, values = [], []
                start, target = end + 1, int(ends[end]) + PACK_BYTES
            keys += chunk_keys[start:]
            values += chunk_values[start:]
            size = int(ends[-1]) - (int(ends[start - 1]) if start else 0)
        if keys:
            yield self._packed_record(keys, values)

    def _packed_record(self, keys: list[bytes], values: list[bytes | None]) -> tuple[bytes, bytes]:
        count = len(keys)
        lengths = np.empty(count, _PACKED_LENGTHS)
        lengths["key"] = _lengths(keys)
        lengths["value"] = _lengths(values)
        if None in values:
            lengths["value"][[value is None for value in values]] = _DELETED
        parts = [lengths.tobytes()]
        for key, value in zip(keys, values):
            parts += (key, value or b"")
        self.rows_packed += count
        body = self.compressor.compress(b"".join(parts))
        return self._key(), b"".join((b"X", self.head, _PACKED_COUNT.pack(count), body))


_PACK_CHUNK = 8192  # rows taken from a scan at a time


def _columns(rows: Iterable[tuple[bytes, bytes | None]] | dict[bytes, bytes | None]
             ) -> Iterator[tuple[Sequence[bytes], Sequence[bytes | None]]]:
    """The rows' keys and values: a dict's (a batch's writes) as they are, a scan's (a
    base's) a chunk of rows at a time."""
    if type(rows) is dict:
        if rows:
            yield list(rows), list(rows.values())
        return
    scanned = iter(rows)
    while chunk := list(islice(scanned, _PACK_CHUNK)):
        keys: tuple[bytes, ...]
        values: tuple[bytes | None, ...]
        keys, values = zip(*chunk)
        yield keys, values


def _lengths(pieces: Sequence[bytes | None]) -> np.ndarray:
    """The length of each (None: 0)."""
    filled: Sequence[Any] = [b"" if piece is None else piece for piece in pieces] if None in pieces else pieces
    return np.fromiter(map(len, filled), np.int64, len(filled))


def row_of(payload: memoryview | bytes) -> tuple[bytes, bytes | None]:
    """A row record's payload: (the local key, its value or None)."""
    length = _KEY_LENGTH.unpack_from(payload)[0]
    start = _KEY_LENGTH.size
    return bytes(payload[start:start + length]), bytes(payload[start + length:]) or None


def rows_of(payload: memoryview | bytes) -> Iterator[tuple[bytes, bytes | None]]:
    """An uncompressed packed record's payload (kind P, earlier releases'): its rows,
    (local key, value: never None), in key order."""
    data = bytes(payload)  # one copy; slices of bytes are then one step each
    count = _PACKED_COUNT.unpack_from(data)[0]
    return _unpacked(data, _PACKED_COUNT.size, count, False)


def packed_rows(kind: int, payload: memoryview | bytes) -> Iterator[tuple[bytes, bytes | None]]:
    """A packed record's rows, (local key, value; None: deleted), in their order."""
    if kind == ROWS:
        return rows_of(payload)
    count = _PACKED_COUNT.unpack_from(payload)[0]
    body = payload[_PACKED_COUNT.size:]
    data = zstandard.ZstdDecompressor().decompress(body) if kind == ZSTD_ROWS else zlib.decompress(body)
    return _unpacked(data, 0, count, True)


def packed_count(payload: memoryview | bytes) -> int:
    """The rows of a packed record (of either kind), without unpacking them."""
    return _PACKED_COUNT.unpack_from(payload)[0]


def _unpacked(data: bytes, at: int, count: int, deletions: bool) -> Iterator[tuple[bytes, bytes | None]]:
    """The rows of `count` lengths at `at` in `data`, then their keys and values in turn."""
    lengths = np.frombuffer(data, _PACKED_LENGTHS, count, at)
    deleted = lengths["value"] == _DELETED if deletions else None
    sizes = np.empty(2 * count, np.int64)
    sizes[0::2], sizes[1::2] = lengths["key"], lengths["value"]
    if deleted is not None and deleted.any():
        sizes[1::2][deleted] = 0
    ends = np.cumsum(sizes)
    ends += at + lengths.nbytes
    bounds = ends.tolist()
    pieces = [data[start:end] for start, end in zip([at + lengths.nbytes] + bounds, bounds)]
    values: list[bytes | None] = [piece for piece in pieces[1::2]]
    if deleted is not None and deleted.any():
        for i in np.flatnonzero(deleted).tolist():
            values[i] = None
    return zip(pieces[0::2], values)


def checkpoint_record(epoch: int, batch: int, offsets: dict[str, int],
                      fingerprints: dict[str, int] | None = None, base: int = -1) -> tuple[bytes, bytes]:
    """A checkpoint; `base`: where the writer's last completed start is (-1: none known). A
    start's own checkpoint never names it: the start counts only if nothing of a newer
    epoch came between, which its writer learns after sending it."""
    payload: dict = {"offsets": offsets, "fingerprints": fingerprints or {}}
    if base >= 0:
        payload["base"] = base
    return mark_key(CHECKPOINT, epoch, batch), b"C" + _MARK_HEAD.pack(epoch, batch) + orjson.dumps(payload)


def checkpoint_payload(value: bytes) -> tuple[dict[str, int], dict[str, int], int]:
    """(offsets, fingerprints, base) of a checkpoint record; records written before
    fingerprints held the offsets alone (topic -> offset: never a dict)."""
    doc = orjson.loads(value[DATA_START:])
    if isinstance(doc.get("offsets"), dict):
        return doc["offsets"], doc["fingerprints"], doc.get("base", -1)
    return doc, {}, -1


def fence_record(epoch: int) -> tuple[bytes, bytes]:
    """A take-up's fence. Two take-ups may fence with one epoch (the second loses): a
    random number in its key keeps each fence apart."""
    return mark_key(FENCE, epoch, random.getrandbits(64)), b"F" + _MARK_HEAD.pack(epoch, 0)


def base_record(epoch: int, batch: int) -> tuple[bytes, bytes]:
    """A base opening: packed rows of this epoch and batch follow, between the batches
    after `batch`, and make the state as it was at `batch`'s checkpoint."""
    return mark_key(BASE, epoch, batch), b"B" + _MARK_HEAD.pack(epoch, batch)


def base_end_record(epoch: int, batch: int) -> tuple[bytes, bytes]:
    """The base of this epoch and batch is complete."""
    return mark_key(BASE_END, epoch, batch), b"Z" + _MARK_HEAD.pack(epoch, batch)


# A base's rows are numbered from here in their batch: apart from the batch's own records.
BASE_ROWS_FIRST = 1 << 31


def start_record(epoch: int, batch: int = 1) -> tuple[bytes, bytes]:
    """A start whose state is the data records of `batch` of `epoch` on (a write-back: a
    new epoch's batch 1; a base of releases before bases had marks of their own: the
    owner's next batch)."""
    return mark_key(START, epoch, batch), b"S" + _MARK_HEAD.pack(epoch, batch)


def mark_of(value: bytes) -> tuple[int, int, int]:
    """(kind, epoch, batch) of a fence, start or checkpoint record."""
    epoch, batch = _MARK_HEAD.unpack_from(value, 1)
    return value[0], epoch, batch


def epoch_of(value: bytes) -> int:
    """The epoch of any changelog record."""
    return int.from_bytes(value[1:9], "big")


def is_mark(value: bytes) -> bool:
    """A fence, start, checkpoint or base mark (not a data record)."""
    return value[0] in (CHECKPOINT, FENCE, START, BASE, BASE_END)


def _old_row(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A row of the format before entries as two rows of today's: its new value, and
    its value before its batch (what stands if the batch never completed: compaction
    may have dropped the key's earlier records)."""
    head = value[:DATA_START]
    length = _OLD_ROW_HEAD.unpack_from(value, 1)[2]
    new, before = value[DATA_START + 4:DATA_START + 4 + length], value[DATA_START + 4 + length:]
    name = _KEY_LENGTH.pack(len(key)) + key
    return b"R" + head[1:] + name + new, b"R" + head[1:] + name + before


class ChangelogRule:
    """The rule applied to a partition's changelog records, fed in log order: its committed state.

    Starts from a checkpoint (what a local store holds, or nothing), reading the
    log from the record after it, or from `start` (a log that started over: read
    from there, the checkpoint's state stands until a start record completes);
    `feed` each record from `position` on; `take` hands over the data records
    committed since the last take, in order, as (kind, payload), together with
    the checkpoint they make up, and whether the store must be wiped before they
    are applied to it (a start completed)."""

    def __init__(self, checkpoint: Checkpoint | None = None, start: int | None = None):
        self.checkpoint = checkpoint or Checkpoint()
        self.position = self.checkpoint.changelog + 1 if start is None else start  # the next offset to feed
        # Data records not yet checkpointed: (epoch, batch, value, the value if never committed, for an old row).
        self.waiting: list[tuple[int, int, bytes, bytes | None]] = []
        self.records: list[tuple[int, memoryview]] = []  # committed since the last take: (kind, payload)
        self.start: tuple[int, int] | None = None  # (epoch, batch) of a start read, until its checkpoint
        self.start_at = -1  # its offset
        self.wipe = False  # a start completed since the last take: the state before it is void
        # Of the records committed since the last take, how many come first that are a base's
        # or a write-back's packed rows: the whole state in key order (a batch's own packed
        # rows, a re-rate's, may follow them).
        self.table = 0
        # What the records committed since the last take hold, a packed record counted as its rows.
        self.pending = 0
        # A base open: (epoch, batch) of its opening, its offset, its rows so far, and the
        # records committed since it opened (applied again on top of its rows when it ends).
        self.base: tuple[int, int] | None = None
        self.base_at = -1
        self.base_rows: list[tuple[int, memoryview]] = []
        self.since_base: list[tuple[int, memoryview]] = []
        self.fenced = 0  # data records and marks of replaced workers dropped
        self.copies = 0  # data records sent twice by the producer, dropped
        self.last_data_key = b""  # the key of the last data record taken (base rows aside)
        self.last_base_key = b""  # the key of the open base's last packed record taken
        self.accepted = 0  # fences and checkpoints accepted

    def feed(self, offset: int, key: bytes, value: bytes | None) -> None:
        self.position = offset + 1
        if value is None:  # a tombstone (releases before this one cleaned with them): its record was void
            return
        kind = value[0]
        epoch, batch = _MARK_HEAD.unpack_from(value, 1)
        packed = kind in PACKED
        if packed or kind == ENTRY or kind == ROW or kind == OLD_ROW:
            if packed and (epoch, batch) == self.base:  # the open base's
                if key <= self.last_base_key:  # a copy the producer sent again (below): stored twice, a
                    self.copies += 1  # table file would have its keys out of order
                    return
                self.last_base_key = key
                self.base_rows.append((kind, memoryview(value)[DATA_START:]))
                return
            if packed and (epoch, batch) <= (self.checkpoint.epoch, self.checkpoint.batch):
                # Rows after their batch's checkpoint: a base whose opening this reader read
                # past (from its checkpoint on): the state they make is the reader's already.
                self.fenced += 1
                return
            if epoch < self.checkpoint.epoch:
                self.fenced += 1
            elif kind == OLD_ROW:
                self.waiting.append((epoch, batch, *_old_row(key, value)))
            elif key[:1] == b"\x01" and len(key) == _DATA_KEY.size and key <= self.last_data_key:
                # An owner numbers its data records in order (epoch, batch, place: the key, big-
                # endian, so bytes compare as the numbers do). One at or below the last is a
                # copy: the producer sent its record batch again after an answer it lost (it is
                # not idempotent: the embedded broker has no InitProducerId). Applied twice, an
                # entry would count its match twice.
                self.copies += 1
            else:
                if key[:1] == b"\x01" and len(key) == _DATA_KEY.size:
                    self.last_data_key = key
                self.waiting.append((epoch, batch, value, None))
            return
        current = self.checkpoint
        if kind == FENCE:
            if epoch <= current.epoch:
                self.fenced += 1
                return
            self._abandon_start(epoch)
            self._abandon_base(epoch)
            self.checkpoint = replace(current, opened=None)  # (its writer's base ends with its epoch)
            self._accept(offset, epoch, current.batch, current.offsets, current.fingerprints, ours=0)
        elif kind == CHECKPOINT:
            if epoch < current.epoch or (epoch == current.epoch and batch <= current.batch):
                self.fenced += 1
                return
            offsets, fingerprints, base = checkpoint_payload(value)
            start = self.start
            completed = False
            if start is not None and epoch == start[0] and batch >= start[1]:
                # A start completed: its records are the whole state.
                completed = True
                self.records, self.wipe, self.start, self.pending = [], True, None, 0
                self.waiting = [waiting for waiting in self.waiting if waiting[:2] >= start]
                self.checkpoint = replace(current, base=self.start_at, entries=0, opened=None)
            else:
                self._abandon_start(epoch)
                opened = current.opened
                if opened is not None and base == opened[0] and base != current.base:
                    # The base this reader's checkpoint is inside ended (its end mark came before
                    # this checkpoint, dropped above: its opening is behind this reader): what
                    # the changelog holds past it is what was committed since its opening.
                    self.checkpoint = replace(current, base=base, entries=current.entries - opened[1],
                                              rows=current.rows - opened[2], opened=None)
                elif base >= 0:
                    self.checkpoint = replace(current, base=base)
            self._abandon_base(epoch)
            self._accept(offset, epoch, batch, offsets, fingerprints, ours=batch)
            if completed:  # its packed rows are the state, not rows past it
                self.table = next((i for i, (kind, _) in enumerate(self.records) if kind not in PACKED),
                                  len(self.records))
                self.checkpoint = replace(self.checkpoint, rows=0)
        elif kind == START:
            # A write-back's start has an epoch above the accepted one; an earlier release's
            # base, the owner's epoch and a later batch.
            if (epoch, batch) <= (current.epoch, current.batch) or (self.start and (epoch, batch) <= self.start):
                self.fenced += 1
                return
            self._abandon_start(epoch)
            self.start, self.start_at = (epoch, batch), offset
        elif kind == BASE:
            # Opened right after its batch's checkpoint, by that batch's writer: a reader that
            # accepted the batch, or one that starts at the base (an empty directory, or the
            # records before it deleted).
            if (epoch, batch) < (current.epoch, current.batch):
                self.fenced += 1
                return
            # Every reader of the whole log accepted its writer's fence and batch: one that
            # starts here does too (so that a rival's fence of that epoch is dropped here as
            # there), and what waits of batches up to it is in the base.
            self.waiting = [waiting for waiting in self.waiting if waiting[:2] > (epoch, batch)]
            if (epoch, batch) > (current.epoch, current.batch):
                self.checkpoint = replace(current, epoch=epoch, batch=batch)
            self.base, self.base_at, self.base_rows, self.since_base = (epoch, batch), offset, [], []
            self.last_base_key = b""
        elif kind == BASE_END:
            if (epoch, batch) != self.base:  # one opened before this reader's point, or abandoned
                self.fenced += 1
                return
            # The base's rows are the state at its batch, and what was committed since goes on top.
            self.records, self.wipe, self.table = [*self.base_rows, *self.since_base], True, len(self.base_rows)
            entries = sum(kind == ENTRY for kind, _ in self.since_base)
            rows = sum(packed_count(payload) for kind, payload in self.since_base if kind in PACKED)
            self.checkpoint = replace(current, base=self.base_at, entries=entries, rows=rows, opened=None)
            self.pending = len(self.since_base) + rows
            self.base, self.base_rows, self.since_base = None, [], []
        else:
            raise ValueError(f"changelog record at offset {offset}: unknown kind {value[:1]!r}")

    def _abandon_start(self, epoch: int) -> None:
        """A mark of `epoch` came before the pending start's checkpoint: if it is above the
        start's epoch, that start never completes, and its records are dropped."""
        if self.start is not None and epoch > self.start[0]:
            start, self.start = self.start, None
            self.waiting = [waiting for waiting in self.waiting if waiting[0] != start[0] or waiting[1] < start[1]]

    @property
    def storable(self) -> bool:
        """Whether what was committed may be stored now: not inside an open base. A reader
        that stored there, with a checkpoint inside the base, and read on from it later
        would drop the base's rows (its opening is behind it): right if its state before
        the base was whole, not if it started at the base (an empty directory, or the
        records before it deleted)."""
        return self.base is None

    def _abandon_base(self, epoch: int) -> None:
        """A mark of a newer epoch: the open base's writer was replaced before it ended."""
        if self.base is not None and epoch > self.base[0]:
            self.base, self.base_rows, self.since_base = None, [], []

    def _accept(self, offset: int, epoch: int, batch: int, offsets: dict[str, int], fingerprints: dict[str, int],
                ours: int) -> None:
        """A fence (ours=0) or a checkpoint of `batch` (ours=batch) of `epoch`."""
        still: list[tuple[int, int, bytes, bytes | None]] = []
        records = self.records
        first = len(records)
        entries, rows, pending = self.checkpoint.entries, self.checkpoint.rows, self.pending
        for waiting in self.waiting:
            record_epoch, record_batch, value, before = waiting
            if record_epoch == epoch and record_batch <= ours:
                payload = memoryview(value)[DATA_START:]
                records.append((value[0], payload))
                entries += value[0] == ENTRY
                pending += 1
                if value[0] in PACKED:
                    count = packed_count(payload)
                    rows += count
                    pending += count
            elif record_epoch > epoch:
                still.append(waiting)
            elif before is not None:  # an old row whose batch never completed: its value before stands
                records.append((ROW, memoryview(before)[DATA_START:]))
            # else: its batch never completed, dropped
        self.waiting = still
        if self.base is not None:
            self.since_base += records[first:]
        self.checkpoint = replace(self.checkpoint, epoch=epoch, batch=batch, offsets=dict(offsets), changelog=offset,
                                  fingerprints=dict(fingerprints), entries=entries, rows=rows)
        self.pending = pending
        self.accepted += 1

    def take(self) -> tuple[list[tuple[int, memoryview]], Checkpoint, bool]:
        """The records committed since the last take, the checkpoint, and whether they start
        from a wiped state (`table` says how many of them come first as a table's rows)."""
        records, self.records = self.records, []
        self.table = self.pending = 0
        wipe, self.wipe = self.wipe, False
        return records, self.checkpoint, wipe
