"""The exactly-once commit sequence: how a batch's state, outputs and
checkpoint reach the broker and the local store, in the order the rules of
stream/state.py need (docs/design.md has the proof).

For each partition the batch touched, concurrently:
1. its state records (versioned: stream/state.py) go to the tables' changelogs
   and the local store; the batch's outputs go to their topics at the same time;
2. once the broker has acknowledged both, a fence record goes to each written
   table's changelog, alone (the embedded broker reports a partition's end as
   the base offset of its last record batch + 1, so Faust's recovery would miss
   the tail of a multi-record batch; a batch of one makes the end true);
3. then the checkpoint record, alone: from its acknowledgement on, the batch's
   records are committed and its input offsets are applied.
A failure anywhere leaves the batch uncommitted: its records read as their
previous values, and input resumes from the last checkpoint.

Taking a partition up writes a checkpoint record first, which burns a batch
number (a previous owner may have crashed half-way through writing it).

No Faust here: `Sender` and `Store` are what the sequence needs of the
broker and of the local tables (stream/kafka_io.py has Faust's; the tests
have in-memory ones).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Iterable, Iterator, Protocol

from . import observe
from .records import Output, key_partition
from .state import CHECKPOINT_KEY, CHECKPOINTS, PartitionState

# Written alone after each checkpoint's records (step 2 above).
FENCE_KEY = b"\x00fence"


class Sender(Protocol):
    async def partitions(self, topic: str) -> int:
        """The topic's partition count."""

    async def send(self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes]]) -> list[Awaitable[int]]:
        """Queue records for one topic partition, in order; each awaitable gives the
        offset of the last record of one record batch once it is acknowledged."""


class Store(Protocol):
    def get(self, table: str, partition: int, key: bytes) -> bytes | None: ...

    def scan(self, table: str, partition: int, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]: ...

    def write(self, table: str, partition: int, records: list[tuple[bytes, bytes]]) -> None:
        """Store the records of one table partition in one atomic write."""

    def changelog_topic(self, table: str) -> str: ...

    def persist_offsets(self, partition: int, offsets: dict[str, int]) -> None:
        """Record how far each table's changelog is in the local store."""


class Committer:
    def __init__(self, store: Store, sender: Sender, output_topics: dict[str, str]):
        self.store = store
        self.sender = sender
        self.output_topics = output_topics  # Output.kind -> topic

    def reader(self, partition: int):
        store = self.store

        def read(table: str, key: bytes) -> bytes | None:
            return store.get(table, partition, key)

        return read

    async def take_up(self, partition: int) -> PartitionState:
        """A partition newly owned: its state as of the last checkpoint, with the next batch number burned."""
        state, record = PartitionState.take_up(partition, self.reader(partition))
        self.store.persist_offsets(partition, await self._write(partition, [(CHECKPOINTS, CHECKPOINT_KEY, record)]))
        return state

    async def commit(self, states: list[PartitionState], outputs: list[Output]) -> None:
        """Commit a batch: the partitions' states and the batch's outputs, as above."""
        outputs_acked = asyncio.ensure_future(asyncio.gather(*await self._send_outputs(outputs)))
        dirty = [state for state in states if state.dirty]
        # Every part finishes (or fails) before the batch does: nothing of a failed
        # batch may still be writing when input goes back to the checkpoints.
        done = await asyncio.gather(outputs_acked, *(self._checkpoint(state, outputs_acked) for state in dirty),
                                    return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result

    async def _checkpoint(self, state: PartitionState, outputs_acked: Awaitable) -> None:
        partition = state.partition
        writes, checkpoint = state.checkpoint_writes()
        await self._write(partition, writes)
        await outputs_acked
        tables = sorted({table for table, _, _ in writes})
        alone = await self._write(partition, [(table, FENCE_KEY, checkpoint) for table in tables])
        alone.update(await self._write(partition, [(CHECKPOINTS, CHECKPOINT_KEY, checkpoint)]))
        # Only offsets of records sent alone, which the embedded broker counts in a partition's end.
        self.store.persist_offsets(partition, alone)
        state.checkpointed(checkpoint)
        observe.CHECKPOINTS.inc()

    async def _write(self, partition: int, writes: list[tuple[str, bytes, bytes]]) -> dict[str, int]:
        """Store each record locally and send it to its table's changelog; wait for the
        acks. Returns the offset of each table's last record."""
        per_table: dict[str, list[tuple[bytes, bytes]]] = {}
        for table, key, value in writes:
            per_table.setdefault(table, []).append((key, value))
        sent = []
        for table, records in per_table.items():
            self.store.write(table, partition, records)
            sent.append((table, await self.sender.send(self.store.changelog_topic(table), partition, records)))
        last: dict[str, int] = {}
        for table, acks in sent:
            for ack in acks:
                last[table] = await ack
        return last

    async def _send_outputs(self, outputs: list[Output]) -> list[Awaitable[int]]:
        """The outputs in order, grouped per topic partition (partitioned by key)."""
        counts = {topic: await self.sender.partitions(topic) for topic in {self.output_topics[o.kind] for o in outputs}}
        groups: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        partitions: dict[tuple[str, bytes], int] = {}
        for out in outputs:
            topic = self.output_topics[out.kind]
            partition = partitions.get((topic, out.key))
            if partition is None:
                partition = partitions[(topic, out.key)] = key_partition(out.key, counts[topic])
            groups.setdefault((topic, partition), []).append((out.key, out.value))
        acks: list[Awaitable[int]] = []
        for (topic, partition), records in groups.items():
            acks += await self.sender.send(topic, partition, records)
        return acks
