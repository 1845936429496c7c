"""Input for the partitions a worker owns, read with its own aiokafka consumer.

Faust decides which worker owns which partitions (its consumer group, its
tables and their recovery); the match results of those partitions are then
fetched here, in batches, and handed to the worker whole. Faust's per-message
path (a fetcher thread, the conductor, one queue and one stream step per
event) cost more CPU than applying the matches, and its positions could not be
trusted across rebalances (see README, "Delivery guarantees"); this consumer
is outside any group and goes exactly where the worker's checkpoints say.

Rebalances: `pause` stops taking input and waits for the batch in progress
(called while Faust revokes partitions, so the next owner cannot start before
this one has finished writing); `resume` takes the new partitions at the
positions the worker gives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

log = logging.getLogger("stream_app.intake")

# (topic, partition) -> the next offset to apply (None: the partition's beginning).
Positions = Callable[[str, int], "int | None"]


class Intake:
    def __init__(self, options: dict[str, Any], apply: Callable[[list[Any]], Awaitable[None]], positions: Positions,
                 max_records: int, wait_ms: int = 100, retry_seconds: float = 1.0, retry_max_seconds: float = 30.0):
        self.options = options
        self.apply = apply  # applies a batch of ConsumerRecords (at most max_records, in order per partition)
        self.positions = positions
        self.max_records = max_records
        self.wait_ms = wait_ms
        self.retry_seconds = retry_seconds
        self.retry_max_seconds = retry_max_seconds
        self.owned: list[TopicPartition] = []
        self.consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task | None = None
        self._running = asyncio.Event()  # positions are valid: take input
        self._idle = asyncio.Event()  # no batch is being applied
        self._idle.set()
        self._generation = 0  # bumped by every pause: a fetch begun before it is stale
        # Held by the loop around each fetch and batch, and by resume around its seeks:
        # a fetch begun before a pause never runs into a resume's new positions.
        self._turn = asyncio.Lock()
        self.failures = 0

    @property
    def generation(self) -> int:
        return self._generation

    async def resume(self, partitions: Iterable[tuple[str, int]], generation: int | None = None) -> bool:
        """Own these input partitions from now on, each at the position the worker gives.

        With `generation` (read when the partitions were assigned), nothing happens if a
        pause came since: that assignment is already over. Returns whether input resumed."""
        def current() -> bool:
            return generation is None or generation == self._generation

        if self.consumer is None:
            consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **self.options)
            try:
                await consumer.start()
            except BaseException:
                await consumer.stop()
                raise
            self.consumer = consumer
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="ratings-intake")
        async with self._turn:
            if not current():
                return False
            self.owned = sorted(TopicPartition(topic, partition) for topic, partition in partitions)
            self.consumer.assign(self.owned)
            await self._seek()
            if not current() or not self.owned:
                return False
            self._running.set()
            return True

    async def pause(self, timeout: float) -> None:
        """Take no more input; wait (up to `timeout` s) for the batch in progress.

        A batch that does not finish in time (the broker is not answering) is
        cancelled: its state writes stay uncommitted (see stream_app/state.py)."""
        self._running.clear()
        self._generation += 1
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("the batch in progress did not finish in %.0f s: cancelling it", timeout)
            await self._cancel()

    async def stop(self, timeout: float) -> None:
        await self.pause(timeout)
        await self._cancel()
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._idle.set()

    async def _seek(self) -> None:
        assert self.consumer is not None
        for tp in self.owned:
            offset = self.positions(tp.topic, tp.partition)
            if offset is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    async def _run(self) -> None:
        assert self.consumer is not None
        delay = self.retry_seconds
        while True:
            await self._running.wait()
            async with self._turn:
                generation = self._generation
                if not self._running.is_set():
                    continue
                records: list[Any] = []
                try:
                    batches = await self.consumer.getmany(timeout_ms=self.wait_ms, max_records=self.max_records)
                    if not batches or generation != self._generation:
                        continue  # nothing, or fetched for an assignment since changed (resume seeks anew)
                    records = [record for part in batches.values() for record in part]
                    self._idle.clear()
                    await self.apply(records)
                    delay = self.retry_seconds
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # The worker left the batch's writes uncommitted; start again from the
                    # checkpoints, waiting longer after each failure in a row (the broker is away).
                    self.failures += 1
                    log.exception("taking or applying a batch of %d records failed: resuming from the checkpoints in %.0f s",
                                  len(records), delay)
                    self._idle.set()
                    await self._seek_again(generation, delay)
                    delay = min(delay * 2, self.retry_max_seconds)
                finally:
                    self._idle.set()

    async def _seek_again(self, generation: int, delay: float) -> None:
        """Back to the checkpoints after a failed batch (unless a pause has come since)."""
        loop = asyncio.get_running_loop()
        while generation == self._generation:
            deadline = loop.time() + delay
            while loop.time() < deadline:  # in short steps: a pause must not wait for the whole delay
                if generation != self._generation:
                    return
                await asyncio.sleep(min(0.1, delay))
            try:
                await self._seek()
                return
            except Exception as exc:  # the broker is away: keep trying, never give up the loop
                log.warning("seeking input back to the checkpoints failed (%s): retrying", exc)
