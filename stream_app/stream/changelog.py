"""The changelog: how a partition's state reaches Kafka, and the rule that reads it back.

Pure: records in, committed rows out; no Kafka, no RocksDB. docs/design.md has
the argument. One changelog topic, partitioned like the input: its partition P
holds input partition P's state. Every record carries the epoch of the worker
that wrote it (a number each take-up of the partition raises) and a batch number:

- a row (kind D): a key's new value and its value before the batch;
- a checkpoint (kind C): the batch is complete, with the input offsets applied;
- a fence (kind F): a worker took the partition up with a higher epoch;
- a start (kind S): a fence after which the log starts over. A worker whose
  changelog lost records (the broker forgot them, the topic was recreated)
  writes its whole local state back after one: rows, then a checkpoint.

Read in log order from a consistent point, the committed state follows one rule:
- accepted so far: epoch E and its last batch B;
- a row of an epoch below E comes from a replaced worker: dropped;
- other rows wait for a checkpoint;
- a fence of an epoch above E, or a checkpoint of epoch E (or above) and a batch
  above B, is accepted: waiting rows of its epoch up to its batch are committed
  with their new values; waiting rows of an older epoch were never committed,
  their keys keep the value before;
- any other fence or checkpoint is dropped (a replaced worker's, or a rival
  take-up that came second);
- a start of an epoch above E waits for its epoch's checkpoint: then that
  checkpoint is accepted and everything before the start is void (the state
  read so far, and a reader's local store, is wiped). A fence or a checkpoint
  of a higher epoch that comes first abandons it: its rows are dropped.

A worker takes a partition up by writing a fence and reading the log up to it:
if the rule accepts its fence it owns the partition, with the state read. Each
epoch's fence and checkpoints share one key, so a compacted topic keeps each
epoch's last checkpoint.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

import orjson

ROW = 0x44  # b"D"
CHECKPOINT = 0x43  # b"C"
FENCE = 0x46  # b"F"
START = 0x53  # b"S"

_ROW_HEAD = struct.Struct(">QQI")  # epoch, batch, length of the new value
_MARK_HEAD = struct.Struct(">QQ")  # epoch, batch
EPOCH_KEY = b"\x00epoch"  # + the epoch: row keys never start with a zero byte
START_KEY = b"\x00start"  # + the epoch: not a checkpoint's key, so that compaction keeps every start


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

    def applied(self, topic: str, offset: int) -> bool:
        return offset <= self.offsets.get(topic, -1)

    def encode(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "batch": self.batch, "offsets": self.offsets,
                             "changelog": self.changelog, "fingerprints": self.fingerprints})

    @classmethod
    def decode(cls, raw: bytes | None) -> "Checkpoint":
        if raw is None:
            return cls()
        doc = orjson.loads(raw)
        return cls(doc["epoch"], doc["batch"], dict(doc["offsets"]), doc["changelog"], dict(doc.get("fingerprints", {})))


def input_fingerprint(timestamp: int | None, key: bytes | None, value: bytes | None) -> int:
    """What identifies an input record besides its offset: a record sent again after a
    topic started over has another timestamp, a new one other contents."""
    digest = hashlib.blake2b((timestamp or 0).to_bytes(8, "big", signed=True), digest_size=8)
    digest.update(len(key or b"").to_bytes(4, "big"))
    digest.update(key or b"")
    digest.update(value or b"")
    return int.from_bytes(digest.digest(), "big")


def epoch_key(epoch: int) -> bytes:
    return EPOCH_KEY + epoch.to_bytes(8, "big")


def row_record(epoch: int, batch: int, key: bytes, value: bytes | None, before: bytes | None) -> tuple[bytes, bytes]:
    """A row: the key's new value and its committed value before the batch (None: none)."""
    return RowWriter(epoch, batch).row(key, value, before)


class RowWriter:
    """The rows of one batch: its epoch and batch are packed once, not per row (a
    checkpoint writes about six rows per two-player match)."""

    __slots__ = ("head",)

    def __init__(self, epoch: int, batch: int):
        self.head = bytes([ROW]) + _MARK_HEAD.pack(epoch, batch)

    def row(self, key: bytes, value: bytes | None, before: bytes | None) -> tuple[bytes, bytes]:
        value = value or b""
        # One join: the record has exactly its size (a batch holds thousands until acknowledged).
        return key, b"".join((self.head, len(value).to_bytes(4, "big"), value, before or b""))


def checkpoint_record(epoch: int, batch: int, offsets: dict[str, int],
                      fingerprints: dict[str, int] | None = None) -> tuple[bytes, bytes]:
    payload = {"offsets": offsets, "fingerprints": fingerprints or {}}
    return epoch_key(epoch), b"C" + _MARK_HEAD.pack(epoch, batch) + orjson.dumps(payload)


def _checkpoint_payload(raw: bytes) -> tuple[dict[str, int], dict[str, int]]:
    """(offsets, fingerprints) of a checkpoint record; records written before
    fingerprints held the offsets alone (topic -> offset: never a dict)."""
    doc = orjson.loads(raw)
    if isinstance(doc.get("offsets"), dict):
        return doc["offsets"], doc["fingerprints"]
    return doc, {}


def fence_record(epoch: int) -> tuple[bytes, bytes]:
    return epoch_key(epoch), b"F" + _MARK_HEAD.pack(epoch, 0)


def start_record(epoch: int) -> tuple[bytes, bytes]:
    return START_KEY + epoch.to_bytes(8, "big"), b"S" + _MARK_HEAD.pack(epoch, 0)


def mark_of(value: bytes) -> tuple[int, int, int]:
    """(kind, epoch, batch) of a fence, start or checkpoint record."""
    epoch, batch = _MARK_HEAD.unpack_from(value, 1)
    return value[0], epoch, batch


def epoch_of(value: bytes) -> int:
    """The epoch of any changelog record."""
    return int.from_bytes(value[1:9], "big")


def is_mark(value: bytes) -> bool:
    """A fence or a checkpoint (not a row)."""
    return value[0] != ROW


class ChangelogReader:
    """The committed state of one partition, read from its changelog in log order.

    Starts from a checkpoint (what a local store holds, or nothing), reading the
    log from the record after it, or from `start` (a log that started over: read
    from there, the checkpoint's state stands until a start record completes);
    `feed` each record from `position` on; `take` hands over the rows committed
    since the last take together with the checkpoint they make up, ready to be
    stored in one write, and whether the store must be wiped first (a start
    completed)."""

    def __init__(self, checkpoint: Checkpoint | None = None, start: int | None = None):
        self.checkpoint = checkpoint or Checkpoint()
        self.position = self.checkpoint.changelog + 1 if start is None else start  # the next offset to feed
        self.waiting: list[tuple[int, int, bytes, bytes]] = []  # rows not yet checkpointed: (epoch, batch, key, record)
        self.rows: dict[bytes, bytes | None] = {}  # committed since the last take (None: no value)
        self.start: int | None = None  # the epoch of a start read, until its checkpoint
        self.wipe = False  # a start completed since the last take: the state before it is void
        self.fenced = 0  # rows and marks of replaced workers dropped
        self.accepted = 0  # fences and checkpoints accepted

    def feed(self, offset: int, key: bytes, value: bytes) -> None:
        self.position = offset + 1
        kind = value[0]
        if kind == ROW:
            epoch, batch, _ = _ROW_HEAD.unpack_from(value, 1)
            if epoch < self.checkpoint.epoch:
                self.fenced += 1
            else:
                self.waiting.append((epoch, batch, key, value))
            return
        epoch, batch = _MARK_HEAD.unpack_from(value, 1)
        current = self.checkpoint
        if kind == FENCE:
            if epoch <= current.epoch:
                self.fenced += 1
                return
            self._abandon_start(epoch)
            self._accept(offset, epoch, current.batch, current.offsets, current.fingerprints, ours=0)
        elif kind == CHECKPOINT:
            if epoch < current.epoch or (epoch == current.epoch and batch <= current.batch):
                self.fenced += 1
                return
            if epoch == self.start:  # a start completed: its rows are the whole state
                self.rows, self.wipe, self.start = {}, True, None
                self.waiting = [row for row in self.waiting if row[0] >= epoch]
            else:
                self._abandon_start(epoch)
            self._accept(offset, epoch, batch, *_checkpoint_payload(value[1 + _MARK_HEAD.size:]), ours=batch)
        elif kind == START:
            if epoch <= max(current.epoch, self.start or 0):
                self.fenced += 1
                return
            self._abandon_start(epoch)
            self.start = epoch
        else:
            raise ValueError(f"changelog record at offset {offset}: unknown kind {value[:1]!r}")

    def _abandon_start(self, epoch: int) -> None:
        """A mark of `epoch` came before the pending start's checkpoint: if it is above the
        start's epoch, that start never completes, and its rows are dropped (their value
        before is none: they must not delete what the state before the start holds)."""
        if self.start is not None and epoch > self.start:
            start, self.start = self.start, None
            self.waiting = [row for row in self.waiting if row[0] != start]

    def _accept(self, offset: int, epoch: int, batch: int, offsets: dict[str, int], fingerprints: dict[str, int],
                ours: int) -> None:
        """A fence (ours=0) or a checkpoint of `batch` (ours=batch) of `epoch`."""
        still: list[tuple[int, int, bytes, bytes]] = []
        rows = self.rows
        for row in self.waiting:
            row_epoch, row_batch, key, record = row
            if row_epoch == epoch and row_batch <= ours:
                rows[key] = new_value(record)
            elif row_epoch < epoch:  # its batch never completed: the value before it stands
                rows[key] = old_value(record)
            else:
                still.append(row)
        self.waiting = still
        self.checkpoint = Checkpoint(epoch, batch, dict(offsets), offset, dict(fingerprints))
        self.accepted += 1

    def take(self) -> tuple[dict[bytes, bytes | None], Checkpoint, bool]:
        rows, self.rows = self.rows, {}
        wipe, self.wipe = self.wipe, False
        return rows, self.checkpoint, wipe


VALUE_START = 1 + _ROW_HEAD.size  # where a row record's new value starts


def new_value(record: bytes) -> bytes | None:
    """A row record's new value (None: none)."""
    return record[VALUE_START : VALUE_START + _ROW_HEAD.unpack_from(record, 1)[2]] or None


def old_value(record: bytes) -> bytes | None:
    """A row record's value before its batch (None: none)."""
    return record[VALUE_START + _ROW_HEAD.unpack_from(record, 1)[2]:] or None


def row_values(rows: list[tuple[bytes, bytes]]) -> dict[bytes, bytes | None]:
    """The new values of row records, by key."""
    return {key: new_value(record) for key, record in rows}
