"""Every Kafka read of the worker: the input of the partitions it owns, read with
its own aiokafka consumer (`Intake`), and the changelog's partitions
(`KafkaChangelog`: a take-up's read, the checks of what a log still holds, a
standby's following; and the one write that is not a producer's, the deletion of
the records before a base).

Faust decides which worker owns which partitions (its consumer group, its
tables and their recovery); the match results of those partitions are then
fetched here, in batches, for the batch loop (stream/batch_loop.py). Faust's
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
from typing import Any, AsyncGenerator, AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import OffsetOutOfRangeError

from .changelog import StartedOver
from .kafka_io import topic_partitions

log = logging.getLogger(__name__)

# (topic, partition) -> the next offset to apply (None: the partition's beginning).
Positions = dict[tuple[str, int], "int | None"]

# Input left behind this long while fetches bring nothing is said once (and again after as
# long), with the intake's state: once, a worker's own consumer stopped fetching some of its
# partitions after a broker's return (issue #44), and nothing said so.
STALL_SECONDS = 30.0


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
        self._next: dict[TopicPartition, int] = {}  # the next offset of each owned partition, once known
        self.stall_seconds = STALL_SECONDS
        self._quiet_since: float | None = None  # since when fetches brought nothing
        self._stall_said = 0.0

    @property
    def generation(self) -> int:
        return self._generation

    def describe(self) -> str:
        """The intake's state, for a stuck worker's task dump (SIGUSR1)."""
        consumer = self.consumer
        positions = {}
        if consumer is not None:
            for tp in self.owned:
                try:
                    positions[f"{tp.topic}[{tp.partition}]"] = (consumer.highwater(tp), self._next.get(tp))
                except Exception as exc:  # not assigned (any more)
                    positions[f"{tp.topic}[{tp.partition}]"] = repr(exc)
        return (f"running {self._running.is_set()}, idle {self._idle.is_set()}, generation {self._generation}, "
                f"turn held {self._turn.locked()}, (end, next) of each owned partition {positions}")

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
            # No reset policy: an offset out of range is a log that started over (or lost
            # records to retention), which the batch loop must see, not skip over.
            consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="none",
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

    @asynccontextmanager
    async def busy(self) -> AsyncIterator[None]:
        """Work a pause waits for as for a batch (or cancels with it): taking the
        partitions up again after a failed batch."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    async def close(self) -> None:
        self._running.clear()
        self._generation += 1
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    @asynccontextmanager
    async def batch(self, idle: bool = False) -> AsyncIterator[list[Any]]:
        """The next batch of input (at most max_records, in order per partition);
        it counts as in progress until the block ends. Waits while paused. With `idle`,
        an empty one if a fetch brings nothing (the batch loop has work of its own)."""
        records = await self._fetch(idle)
        self._idle.clear()
        try:
            yield records
        finally:
            self._idle.set()

    async def _fetch(self, idle: bool = False) -> list[Any]:
        while True:
            await self._running.wait()
            async with self._turn:
                generation = self._generation
                if not self._running.is_set():
                    continue
                assert self.consumer is not None
                try:
                    batches = await self.consumer.getmany(timeout_ms=self.wait_ms, max_records=self.max_records)
                except OffsetOutOfRangeError as exc:  # Kafka: the embedded broker answers such a fetch empty
                    raise StartedOver(await self._out_of_range(exc.args[0])) from None
                if generation != self._generation:
                    continue  # fetched for an assignment since changed: dropped, resume seeks anew
                for tp, part in batches.items():
                    self._next[tp] = part[-1].offset + 1
                await self._check_ends()
                if batches:
                    self._quiet_since = None
                    return [record for part in batches.values() for record in part]
                await self._check_stalled()
                if idle:
                    return []

    async def _check_stalled(self) -> None:
        """Fetches brought nothing for `stall_seconds` though a partition's log goes past
        its next offset: a warning naming them, with the intake's state."""
        now = time.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < self.stall_seconds or now - self._stall_said < self.stall_seconds:
            return
        self._stall_said = now
        consumer = self.consumer
        assert consumer is not None
        async def behind_ends() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
            # The fetch position, not the next offset to apply: it moves past transaction markers.
            positions = {tp: await consumer.position(tp) for tp in self.owned}
            return positions, await consumer.end_offsets(list(positions))

        try:
            positions, ends = await asyncio.wait_for(behind_ends(), 10)
        except Exception as exc:  # (a broker down: the broker watch says so)
            log.debug("input ends not known: %s", exc)
            return
        behind = {tp: ends[tp] - at for tp, at in positions.items() if ends.get(tp, 0) > at}
        if behind:
            log.warning("input %s: records past the next offset to apply, and nothing fetched for %.0f s (%s)",
                        ", ".join(f"{tp.topic}[{tp.partition}] {count} behind" for tp, count in sorted(behind.items())),
                        now - self._quiet_since, self.describe())

    async def _out_of_range(self, positions: dict[TopicPartition, int]) -> str:
        """What Kafka's OFFSET_OUT_OF_RANGE means for each partition: its log ends before
        the next offset to read, or starts after it (retention removed records)."""
        assert self.consumer is not None
        ends = await self.consumer.end_offsets(list(positions))
        said = []
        for tp, offset in sorted(positions.items()):
            said.append(ends_below(tp, ends[tp], offset) if ends[tp] < offset else  # else: the take-up says how far
                        f"input {tp.topic}[{tp.partition}] starts past the next offset to apply ({offset})")
        return "; ".join(said)

    async def _check_ends(self) -> None:
        """A partition whose end is below the next offset to read has started over: the
        broker forgot its records, or the topic was recreated. Raises StartedOver: the
        batch loop takes it up anew.

        The high watermark of a partition's last fetch says so first; it counts once
        ListOffsets agrees (`true_ends`)."""
        assert self.consumer is not None
        below: dict[TopicPartition, int] = {}
        for tp, expected in self._next.items():
            end = self.consumer.highwater(tp)
            if end is not None and end < expected:
                below[tp] = expected
        if not below:
            return
        ends = await true_ends(self.consumer, list(below))
        said = [ends_below(tp, ends[tp], expected) for tp, expected in sorted(below.items()) if ends[tp] < expected]
        if said:
            raise StartedOver("; ".join(said))

    async def wait(self, delay: float, generation: int, wake: asyncio.Event | None = None) -> bool:
        """Sleep `delay` seconds, in short steps, or until `wake` is set; False (at once)
        if a pause came since `generation` was read."""
        deadline = asyncio.get_running_loop().time() + delay
        while generation == self._generation:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or (wake is not None and wake.is_set()):
                return True
            await asyncio.sleep(min(0.1, left))
        return False

    async def rewind(self, positions: Positions, generation: int) -> None:
        """After a failed batch: back to these positions, unless a pause came since
        `generation` was read."""
        async with self._turn:
            if generation == self._generation:
                await self._seek(positions)

    async def _seek(self, positions: Positions) -> None:
        assert self.consumer is not None
        self._next = {}
        for tp in self.owned:
            offset = positions.get((tp.topic, tp.partition))
            if offset is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)
                self._next[tp] = offset


async def true_ends(consumer: Any, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The end of each partition whose last fetch's high watermark looked too low: the
    higher of that watermark and ListOffsets' answer. Kafka's watermark can be below
    records already committed: a fetch answer carries the one from before its read
    (Partition.readRecords), and a leader just elected has not learnt the last one yet;
    ListOffsets is refused until it has (KIP-207; aiokafka asks again). The embedded
    broker's ListOffsets answers too low, its watermark right."""
    listed = await consumer.end_offsets(partitions)
    return {tp: max(consumer.highwater(tp) or 0, listed[tp]) for tp in partitions}


def ends_below(tp: TopicPartition, end: int, expected: int) -> str:
    return f"input {tp.topic}[{tp.partition}] ends at offset {end}, below the next offset to apply ({expected})"


# Reading a range that is known to exist: large fetches, no waiting for more.
DELETE_SECONDS = 10.0  # the longest a deletion before a base waits for the broker (each of its two steps)
RANGE_FETCH = dict(max_partition_fetch_bytes=32 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024, fetch_max_wait_ms=50)


async def read_partition(options: dict[str, Any], topic: str, partition: int, start: int, end: int,
                         timeout: float = 60.0) -> AsyncIterator[list[Any]]:
    """Records [start, end) of one partition, in order, in chunks of aiokafka's
    records, read by a consumer outside any group. Raises TimeoutError if no
    record arrives for `timeout` seconds before the range is complete."""
    if start >= end:
        return
    # From below the partition's first offset (records deleted before a base, or removed
    # by retention): from its first offset. (aiokafka's default, "latest", jumped to the end.)
    consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **RANGE_FETCH, **options)
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


async def first_records(options: dict[str, Any], wanted: dict[tuple[str, int], int],
                        timeout: float = 30.0) -> dict[tuple[str, int], InputRecord | None]:
    """For each (topic, partition): its first record at or after the offset, or None
    if the partition ends at or before that offset, or does not exist. A record
    removed by retention is not read: its place is given by an InputRecord at the
    partition's first offset, without key or value. Raises TimeoutError if the
    broker does not answer for all in `timeout` seconds."""
    found: dict[tuple[str, int], InputRecord | None] = {}
    consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="none", max_partition_fetch_bytes=64 * 1024,
                                fetch_max_wait_ms=50, **options)
    await consumer.start()
    try:
        # Not consumer.topics() with partitions_for_topic(): on Kafka the latter knows no
        # topic before one is assigned, and every partition read as missing (issue #43).
        topics = await topic_partitions(consumer)
        pending: dict[TopicPartition, int] = {}
        for (topic, partition), offset in wanted.items():
            if partition in topics.get(topic, ()):
                pending[TopicPartition(topic, partition)] = offset
            else:
                found[(topic, partition)] = None
        deadline = time.monotonic() + timeout
        consumer.assign(list(pending))
        for tp, offset in pending.items():
            consumer.seek(tp, offset)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading the records at {sorted(pending.values())} of {sorted(pending)}: "
                                   f"no answer in {timeout:.0f} s")
            try:
                fetched = await consumer.getmany(*pending, timeout_ms=200, max_records=len(pending))
            except OffsetOutOfRangeError as exc:  # Kafka: before the partition's start or past its end
                starts = await consumer.beginning_offsets(list(exc.args[0]))
                past = [tp for tp in exc.args[0] if starts[tp] <= pending[tp]]
                ends = await consumer.end_offsets(past) if past else {}
                for tp in exc.args[0]:
                    offset = pending[tp]
                    if starts[tp] > offset:
                        found[(tp.topic, tp.partition)] = InputRecord(tp.topic, tp.partition, starts[tp], None, None, None)
                    elif ends[tp] <= offset:
                        found[(tp.topic, tp.partition)] = None
                    else:
                        continue  # the log holds it after all: read again
                    del pending[tp]
                if not pending:
                    # Not an assign([]) just before stop(): aiokafka 0.14's fetcher can swallow
                    # stop()'s cancel while it drops the old assignment, and stop() then never returns.
                    break
                consumer.assign(list(pending))
                for tp, offset in pending.items():
                    consumer.seek(tp, offset)
                continue
            short = []  # partitions whose fetch said they end at or before the offset
            for tp in list(pending):
                records = fetched.get(tp)
                end = consumer.highwater(tp)
                if records:
                    r = records[0]
                    found[(tp.topic, tp.partition)] = InputRecord(r.topic, r.partition, r.offset, r.key, r.value,
                                                                  r.timestamp)
                    del pending[tp]
                elif end is not None and end <= pending[tp]:  # the embedded broker answers past the end this way
                    short.append(tp)
            if short:
                ends = await true_ends(consumer, short)
                for tp in short:
                    if ends[tp] <= pending[tp]:
                        found[(tp.topic, tp.partition)] = None
                        del pending[tp]
    finally:
        await consumer.stop()
    return found


async def read_range(options: dict[str, Any], topic: str, partition: int, start: int, end: int,
                     timeout: float = 60.0) -> list[InputRecord]:
    """Records [start, end) of one partition (see `read_partition`)."""
    return [InputRecord(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
            async for chunk in read_partition(options, topic, partition, start, end, timeout) for r in chunk]


class KafkaChangelog:
    """Changelog partitions on the broker (stream/commit.py's `ChangelogTopic`): the
    read of a take-up, the check of another writer's records, whether a log still
    holds what was applied from it, and the deletion of what a base made void. A take-up reads existing records, so it
    fetches large (tens of MiB a request) and never waits for more; the rule that
    turns them into committed state is stream/changelog.py's."""

    def __init__(self, options: dict[str, Any], timeout: float = 60.0):
        self.options = options  # aiokafka connection options
        self.timeout = timeout

    async def read(self, topic: str, partition: int, start: int, end: int) -> AsyncIterator[list[tuple[int, bytes, bytes]]]:
        async for chunk in read_partition(self.options, topic, partition, start, end, self.timeout):
            yield [(r.offset, r.key, r.value) for r in chunk]

    async def first_records(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], Any]:
        return await first_records(self.options, wanted, self.timeout)

    async def end_offset(self, topic: str, partition: int) -> int:
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **self.options)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            return (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()

    async def delete_before(self, topic: str, partition: int, offset: int) -> int:
        # The batch that ended the base waits for it: a broker that does not answer soon
        # leaves the records to the next base (stream/commit.py's `clean`).
        wait = min(self.timeout, DELETE_SECONDS)
        admin = AIOKafkaAdminClient(**self.options)
        await asyncio.wait_for(admin.start(), wait)
        try:
            tp = TopicPartition(topic, partition)
            found = await asyncio.wait_for(admin.delete_records({tp: RecordsToDelete(before_offset=offset)}), wait)
            return found[tp]
        finally:
            await admin.close()

    async def follow(self, topic: str,
                     starts: dict[int, int]) -> AsyncGenerator[tuple[dict[int, list[Any]], dict[int, int | None]], None]:
        """These partitions of `topic` read from these offsets on as they grow (a
        standby's changelogs): each round, the records fetched by partition (aiokafka's)
        and each partition's end (None: not known yet). A partition that ends below
        where its reading stands started over (StartedOver). Close it with
        contextlib.aclosing: its consumer stops then."""
        consumer = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="none",
                                    **{**RANGE_FETCH, "fetch_max_wait_ms": 200}, **self.options)
        await consumer.start()
        try:
            tps = {TopicPartition(topic, p): p for p in starts}
            consumer.assign(list(tps))
            positions = dict(starts)
            for tp, p in tps.items():
                consumer.seek(tp, positions[p])
            while True:
                try:
                    fetched = await consumer.getmany(timeout_ms=500)
                except OffsetOutOfRangeError as exc:
                    await self._past_deleted(consumer, exc.args[0], tps, positions)
                    continue
                short = [tp for tp, p in tps.items()
                         if (end := consumer.highwater(tp)) is not None and end < positions[p]]
                for tp, end in (await true_ends(consumer, short) if short else {}).items():
                    if end < positions[tps[tp]]:
                        raise StartedOver(f"changelog partition {tps[tp]} ends at {end}, below {positions[tps[tp]]}")
                records = {tps[tp]: chunk for tp, chunk in fetched.items()}
                for p, chunk in records.items():
                    if chunk:
                        positions[p] = chunk[-1].offset + 1
                yield records, {p: consumer.highwater(tp) for tp, p in tps.items()}
        finally:
            await consumer.stop()

    @staticmethod
    async def _past_deleted(consumer: Any, gone: Any, tps: dict[Any, int], positions: dict[int, int]) -> None:
        """A standby fetching below a partition's first offset: the owner deleted the
        records before a base (the rule then reads the whole base: its state before is
        void), so on from the first offset. Past the end: the log started over."""
        firsts = await consumer.beginning_offsets(list(gone))
        for tp in gone:
            if firsts[tp] <= positions[tps[tp]]:
                raise StartedOver(f"changelog partition {tps[tp]} ends below {positions[tps[tp]]}")
            positions[tps[tp]] = firsts[tp]
            consumer.seek(tp, firsts[tp])
