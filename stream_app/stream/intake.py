"""Input for the partitions a worker owns, read with its own aiokafka consumer.

Faust decides which worker owns which partitions (its consumer group, its
tables and their recovery); the match results of those partitions are then
fetched here, in batches, for the batch loop (stream/worker.py). Faust's
per-message path (a fetcher thread, the conductor, one queue and one stream
step per event) cost more CPU than applying the matches, and its positions
could not be trusted across rebalances (docs/design.md); this consumer is
outside any group and goes exactly where the worker's checkpoints say.

Rebalances: `pause` stops taking input and waits for the batch in progress
(called while Faust revokes partitions, so the next owner cannot start before
this one has finished writing); `resume` takes the new partitions at the
positions the worker gives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition

log = logging.getLogger(__name__)

# (topic, partition) -> the next offset to apply (None: the partition's beginning).
Positions = dict[tuple[str, int], "int | None"]


@dataclass
class InputRecord:
    """An input record read by `read_range` (the batch loop takes these and aiokafka's alike)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None  # milliseconds, as aiokafka's records have it


class Intake:
    def __init__(self, options: dict[str, Any], max_records: int, wait_ms: int = 100, fetch_wait_ms: int = 500):
        self.options = options
        self.max_records = max_records
        self.wait_ms = wait_ms
        self.fetch_wait_ms = fetch_wait_ms  # the broker's hold on a fetch (Settings.fetch_wait)
        self.owned: list[TopicPartition] = []
        self.consumer: AIOKafkaConsumer | None = None
        self._running = asyncio.Event()  # positions are valid: take input
        self._idle = asyncio.Event()  # no batch is being applied
        self._idle.set()
        self._generation = 0  # bumped by every pause: a fetch begun before it is stale
        # Held around each fetch, and by resume and rewind around their seeks: a
        # fetch begun before a pause never runs into the new positions.
        self._turn = asyncio.Lock()

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def owned_partitions(self) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in self.owned]

    async def resume(self, positions: Positions, generation: int | None = None) -> bool:
        """Own these input partitions from now on, each at its position.

        With `generation` (read when the partitions were assigned), nothing happens if a
        pause came since: that assignment is already over. Returns whether input resumed."""
        def current() -> bool:
            return generation is None or generation == self._generation

        if self.consumer is None:
            consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest",
                                        fetch_max_wait_ms=self.fetch_wait_ms, **self.options)
            try:
                await consumer.start()
            except BaseException:
                await consumer.stop()
                raise
            self.consumer = consumer
        async with self._turn:
            if not current():
                return False
            self.owned = sorted(TopicPartition(topic, partition) for topic, partition in positions)
            self.consumer.assign(self.owned)
            await self._seek(positions)
            if not current() or not self.owned:
                return False
            self._running.set()
            return True

    async def pause(self, timeout: float) -> bool:
        """Take no more input; wait (up to `timeout` s) for the batch in progress.
        Returns False if it is still in progress (the broker is not answering)."""
        self._running.clear()
        self._generation += 1
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self) -> None:
        self._running.clear()
        self._generation += 1
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    @asynccontextmanager
    async def batch(self) -> AsyncIterator[list[Any]]:
        """The next batch of input (at most max_records, in order per partition);
        it counts as in progress until the block ends. Waits while paused."""
        records = await self._fetch()
        self._idle.clear()
        try:
            yield records
        finally:
            self._idle.set()

    async def _fetch(self) -> list[Any]:
        while True:
            await self._running.wait()
            async with self._turn:
                generation = self._generation
                if not self._running.is_set():
                    continue
                assert self.consumer is not None
                batches = await self.consumer.getmany(timeout_ms=self.wait_ms, max_records=self.max_records)
                # Records fetched for an assignment since changed are dropped: resume seeks anew.
                if batches and generation == self._generation:
                    return [record for part in batches.values() for record in part]

    async def rewind(self, positions: Positions, delay: float) -> None:
        """After a failed batch: back to these positions in `delay` seconds, unless
        a pause comes first. Seeks are retried until they succeed (the broker is away)."""
        generation = self._generation
        loop = asyncio.get_running_loop()
        while generation == self._generation:
            deadline = loop.time() + delay
            while loop.time() < deadline:  # in short steps: a pause must not wait for the whole delay
                if generation != self._generation:
                    return
                await asyncio.sleep(min(0.1, delay))
            try:
                async with self._turn:
                    if generation == self._generation:
                        await self._seek(positions)
                return
            except Exception as exc:
                log.warning("seeking input back to the checkpoints failed (%s): retrying", exc)

    async def _seek(self, positions: Positions) -> None:
        assert self.consumer is not None
        for tp in self.owned:
            offset = positions.get((tp.topic, tp.partition))
            if offset is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)


# Reading a range that is known to exist: large fetches, no waiting for more.
RANGE_FETCH = dict(max_partition_fetch_bytes=32 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024, fetch_max_wait_ms=50)


async def read_partition(options: dict[str, Any], topic: str, partition: int, start: int, end: int,
                         timeout: float = 60.0) -> AsyncIterator[list[Any]]:
    """Records [start, end) of one partition, in order, in chunks of aiokafka's
    records, read by a consumer outside any group. Raises TimeoutError if no
    record arrives for `timeout` seconds before the range is complete."""
    if start >= end:
        return
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **RANGE_FETCH, **options)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        position = start
        while position < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}[{partition}] offsets {start} to {end - 1}: "
                                   f"nothing past {position - 1} arrived in {timeout:.0f} s")
            chunk = (await consumer.getmany(tp, timeout_ms=500)).get(tp)
            # The position, not the last record: a compacted topic has offsets without records.
            position = await consumer.position(tp)
            if not chunk:
                continue
            deadline = time.monotonic() + timeout
            if chunk[-1].offset >= end:
                chunk = [r for r in chunk if r.offset < end]
            yield chunk
    finally:
        await consumer.stop()


async def read_range(options: dict[str, Any], topic: str, partition: int, start: int, end: int,
                     timeout: float = 60.0) -> list[InputRecord]:
    """Records [start, end) of one partition (see `read_partition`)."""
    return [InputRecord(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
            async for chunk in read_partition(options, topic, partition, start, end, timeout) for r in chunk]
