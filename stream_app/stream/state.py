"""Exactly-once application over at-least-once delivery: the state protocol.

Pure rules, no Kafka: the worker gives `PartitionState` a reader of the
tables' stored records; stream/commit.py writes out what it returns, in the
order the rules need. docs/design.md has the argument; in short:

- The worker applies matches in batches. During a batch every write goes to
  an in-memory overlay, so later matches of the batch see earlier ones.
- At the end of a batch (a checkpoint), each written key is stored as a
  versioned record {"s": new value, "b": batch number, "p": the committed
  value before the batch}, sent together with the batch's output events;
  once the broker has acknowledged all of them, the partition's checkpoint
  record {"batch": b, "offsets": {...}} is written and acknowledged. The
  checkpoint's offsets are where input resumes after a restart or a
  rebalance (the worker reads input itself, from there).
- A record is committed when its batch number is at most the checkpoint's
  and not in its `aborted` list; otherwise it is the leftover of a batch
  whose checkpoint never happened, and its "p" is the committed value.
- Each time a partition is taken up (worker start, rebalance), the next
  batch number is burned (added to `aborted`), because a previous owner
  may have crashed half-way through writing exactly that batch.
- An input event at or below the checkpoint's offset for its topic was
  fully applied and its outputs acknowledged: it is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import orjson

from ..events import SEP

# Tables (Faust table names; each has a changelog topic).
PLAYERS = "players"
LEAGUES = "leagues"
MATCHES = "matches"
CHECKPOINTS = "checkpoints"
STATE_TABLES = (PLAYERS, LEAGUES, MATCHES)

CHECKPOINT_KEY = b"checkpoint"


def player_key(league: str, player: str) -> bytes:
    return f"{league}{SEP}{player}".encode()


def match_key(league: str, match_id: str) -> bytes:
    return f"{league}{SEP}{match_id}".encode()


def league_prefix(league: str) -> bytes:
    return f"{league}{SEP}".encode()


@dataclass
class Checkpoint:
    batch: int = 0
    aborted: list[int] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)  # topic -> last applied offset

    @classmethod
    def decode(cls, raw: bytes | None) -> "Checkpoint":
        if raw is None:
            return cls()
        doc = orjson.loads(raw)
        return cls(batch=doc["batch"], aborted=list(doc.get("aborted", [])), offsets=dict(doc.get("offsets", {})))

    def encode(self) -> bytes:
        return orjson.dumps({"batch": self.batch, "aborted": self.aborted, "offsets": self.offsets})

    def committed(self, batch: int) -> bool:
        return batch <= self.batch and batch not in self.aborted

    def applied(self, topic: str, offset: int) -> bool:
        return offset <= self.offsets.get(topic, -1)


def resolve(record: bytes | None, checkpoint: Checkpoint) -> Any:
    """The committed value held by a stored record (None: no committed value)."""
    if record is None:
        return None
    doc = orjson.loads(record)
    return doc["s"] if checkpoint.committed(doc["b"]) else doc["p"]


# Reads a stored record: (table, key) -> bytes or None.
Reader = Callable[[str, bytes], "bytes | None"]

# Committed values of these tables stay cached between batches (read again, batch
# after batch); other keys (match ids: read once, to find a duplicate) only within one.
CACHED_TABLES = (PLAYERS, LEAGUES)
CACHE_LIMIT = 50_000  # entries per partition; the cache starts over when full
_MISSING = object()


def _remember(memo: dict, key: tuple[str, bytes], value: Any) -> None:
    if len(memo) >= CACHE_LIMIT:  # bounded: start over rather than track recency
        memo.clear()
    memo[key] = value


class PartitionState:
    """One partition's committed state plus the overlay of the batch in progress."""

    def __init__(self, partition: int, checkpoint: Checkpoint, reader: Reader):
        self.partition = partition
        self.checkpoint = checkpoint
        self.read = reader
        self.overlay: dict[tuple[str, bytes], Any] = {}
        self.offsets: dict[str, int] = {}  # offsets seen in the batch in progress
        # Committed values already read (decoded). Only this object commits the
        # partition's state while it lives, so they stay true until it commits them anew.
        self.cache: dict[tuple[str, bytes], Any] = {}
        self.reads: dict[tuple[str, bytes], Any] = {}  # the same, for this batch only

    @classmethod
    def take_up(cls, partition: int, reader: Reader) -> tuple["PartitionState", bytes]:
        """Open a partition newly assigned: burn the next batch number.

        Returns the state and the checkpoint record to write (and have
        acknowledged) before the first batch.
        """
        checkpoint = Checkpoint.decode(reader(CHECKPOINTS, CHECKPOINT_KEY))
        checkpoint.batch += 1
        # Kept for good: a record left by a crashed batch stays uncommitted until rewritten.
        checkpoint.aborted.append(checkpoint.batch)
        return cls(partition, checkpoint, reader), checkpoint.encode()

    def get(self, table: str, key: bytes) -> Any:
        item = (table, key)
        # Most keys a match reads are not in the overlay: a default beats a KeyError raised and caught.
        value = self.overlay.get(item, _MISSING)
        return self.committed_value(item) if value is _MISSING else value

    def committed_value(self, item: tuple[str, bytes]) -> Any:
        """The value of a (table, key) as of the last checkpoint (None: none)."""
        memo = self.cache if item[0] in CACHED_TABLES else self.reads
        value = memo.get(item, _MISSING)
        if value is _MISSING:
            value = resolve(self.read(*item), self.checkpoint)
            _remember(memo, item, value)
        return value

    def put(self, table: str, key: bytes, value: Any) -> None:
        self.overlay[(table, key)] = value

    def already_applied(self, topic: str, offset: int) -> bool:
        return self.checkpoint.applied(topic, offset) or offset <= self.offsets.get(topic, -1)

    def next_offset(self, topic: str) -> int | None:
        """The next input offset this partition expects from `topic` (None: no record yet)."""
        last = max(self.checkpoint.offsets.get(topic, -1), self.offsets.get(topic, -1))
        return last + 1 if last >= 0 else None

    def note_offset(self, topic: str, offset: int) -> None:
        if offset > self.offsets.get(topic, -1):
            self.offsets[topic] = offset

    @property
    def dirty(self) -> bool:
        return bool(self.overlay or self.offsets)

    def checkpoint_writes(self) -> tuple[list[tuple[str, bytes, bytes]], bytes]:
        """The versioned records of this batch, and the checkpoint record to write after them."""
        batch = self.checkpoint.batch + 1
        committed = self.committed_value
        dumps = orjson.dumps
        # The bytes of dumps({"s": value, "b": batch, "p": before}), put together around
        # the values' encodings: a result of orjson keeps the block it was written in
        # (about 4 KiB), so a batch of records held at once would cost several times
        # its size; the concatenation has exactly its size.
        middle = b',"b":%d,"p":' % batch
        writes = [
            (item[0], item[1], b'{"s":' + dumps(value) + middle + dumps(committed(item)) + b"}")
            for item, value in self.overlay.items()
        ]
        after = Checkpoint(batch, list(self.checkpoint.aborted), {**self.checkpoint.offsets, **self.offsets})
        return writes, after.encode()

    def checkpointed(self, checkpoint_record: bytes) -> None:
        """The checkpoint record is acknowledged: the overlay is now the committed state."""
        self.checkpoint = Checkpoint.decode(checkpoint_record)
        for (table, key), value in self.overlay.items():
            if table in CACHED_TABLES:
                _remember(self.cache, (table, key), value)
        self.overlay.clear()
        self.reads.clear()
        self.offsets.clear()


def iter_committed(records: Iterator[tuple[bytes, bytes]], checkpoint: Checkpoint) -> Iterator[tuple[bytes, Any]]:
    """Committed values of stored records (skipping keys with none)."""
    for key, record in records:
        value = resolve(record, checkpoint)
        if value is not None:
            yield key, value
