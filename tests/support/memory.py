"""An in-memory stand-in for the broker, implementing stream/commit.py's
`Sender` and `ChangelogTopic`, so that the batch loop and the commit sequence run
without Kafka or Faust (on a real local store).

The broker delivers each send after a random number of event-loop turns, in
order within a topic partition and in any order across them, as Kafka may.
It can fail a send (the worker sees an error and carries on) or crash at one:
the process is gone, what was delivered stays, sends still in flight are lost."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict, deque
from typing import AsyncIterator, Iterable

from stream_app.stream.intake import InputRecord


class Crash(BaseException):
    """The worker process died at this send (BaseException: no handler of the worker catches it)."""


class MemoryBroker:
    def __init__(self, partitions: int = 8, seed: int = 0):
        self.partition_count = partitions
        self.rng = random.Random(seed)
        self.logs: dict[tuple[str, int], list[tuple[bytes, bytes]]] = defaultdict(list)
        self.in_flight: dict[tuple[str, int], deque] = defaultdict(deque)
        self.sends = 0
        self.fail_at: int | None = None  # this send raises ConnectionError; nothing of it reaches the broker
        self.crash_at: int | None = None  # this send and every later one raise Crash
        self.crash_on: str | None = None  # the first send to this topic, and every later send, raise Crash
        self.held: set[str] = set()  # topics whose sends stay in flight until released
        self.reads = 0  # calls of read()
        self.crash_reading_at: int | None = None  # read() raises Crash after delivering this many chunks in all
        self.chunks_read = 0
        self.inputs: dict[tuple[str, int], list[InputRecord]] = {}  # input topics' records (add_input)
        self.input_start: dict[tuple[str, int], int] = {}  # the first input offset retention kept
        self.deletions = 0  # calls of delete_before()
        self.firsts: dict[tuple[str, int], int] = {}  # each partition's first offset after deletions
        self.refuse_deletion: Exception | None = None  # delete_before() raises this (a broker that cannot)

    async def partitions(self, topic: str) -> int:
        return self.partition_count

    async def send(self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes]]) -> list[asyncio.Future]:
        self.sends += 1
        if self.crash_on == topic:
            self.crash_at = self.sends
        if self.crash_at is not None and self.sends >= self.crash_at:
            self._lose_in_flight()
            raise Crash(f"crashed at send {self.sends} ({topic})")
        if self.fail_at == self.sends:
            raise ConnectionError(f"send {self.sends} failed")
        ack = asyncio.get_running_loop().create_future()
        self.in_flight[(topic, partition)].append((list(records), ack))
        self._deliver_later((topic, partition), self.rng.choice((0, 1, 2, 3, 40)))  # now and then a slow one
        return [ack]

    def _deliver_later(self, tp: tuple[str, int], turns: int) -> None:
        if turns or tp[0] in self.held:
            turns = max(turns, 1)
            asyncio.get_running_loop().call_soon(self._deliver_later, tp, turns - 1)
        elif self.in_flight[tp]:  # the oldest send of the partition: order within a partition holds
            records, ack = self.in_flight[tp].popleft()
            log = self.logs[tp]
            first = len(log)
            log.extend(records)
            ack.set_result((first, len(log) - 1))  # the offsets of the first and last record

    def _lose_in_flight(self) -> None:
        for queue in self.in_flight.values():
            while queue:
                _, ack = queue.popleft()
                ack.set_exception(Crash("lost in flight"))

    def values(self, topic: str) -> list[bytes]:
        return [record[1] for (name, _), log in sorted(self.logs.items()) if name == topic for record in log if record]

    def compact(self, topic: str) -> int:
        """What Kafka's log cleaner does to a compacted topic, all at once: only each key's
        last record stays, at its offset, and a tombstone (a null value) goes too, as if
        delete.retention.ms were over. Offsets left empty hold None. Returns the records removed."""
        removed = 0
        for (name, _), log in self.logs.items():
            if name != topic:
                continue
            last = {record[0]: offset for offset, record in enumerate(log) if record}
            for offset, record in enumerate(log):
                if record and (last[record[0]] != offset or record[1] is None):
                    log[offset] = None
                    removed += 1
        return removed

    async def delete_before(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: the records before `offset` are gone (their offsets hold
        None, as the cleaner's gaps), and a read from below it starts there."""
        self.deletions += 1
        if self.refuse_deletion is not None:
            raise self.refuse_deletion
        log = self.logs[(topic, partition)]
        assert offset <= len(log), f"deleting {topic}[{partition}] before {offset}: the log ends at {len(log) - 1}"
        log[:offset] = [None] * offset
        self.firsts[(topic, partition)] = max(offset, self.firsts.get((topic, partition), 0))
        return self.firsts[(topic, partition)]

    def records(self, topic: str, partition: int) -> list[tuple[int, bytes, bytes | None]]:
        """A partition's records as a consumer reads them: (offset, key, value), without the gaps."""
        return [(offset, *record) for offset, record in enumerate(self.logs[(topic, partition)]) if record]

    async def first_records(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], object]:
        """Each partition's first record at or after the offset, or None past its end."""
        found: dict[tuple[str, int], object] = {}
        for (topic, partition), offset in wanted.items():
            inputs = self.inputs.get((topic, partition))
            if inputs is not None:
                offset = max(offset, self.input_start.get((topic, partition), 0))
                found[(topic, partition)] = inputs[offset] if offset < len(inputs) else None
                continue
            log = self.logs[(topic, partition)]
            while offset < len(log) and log[offset] is None:  # a compacted topic's gap
                offset += 1
            found[(topic, partition)] = (InputRecord(topic, partition, offset, *log[offset], None)
                                         if offset < len(log) else None)
        return found

    def add_input(self, log: dict[int, list[InputRecord]]) -> None:
        """Input records (the test feeds them to the worker itself): what the broker holds of them."""
        for records in log.values():
            for record in records:
                self.inputs.setdefault((record.topic, record.partition), []).append(record)

    def forget(self) -> None:
        """The broker restarted with memory only: every topic starts over, empty."""
        self._lose_in_flight()
        self.logs.clear()
        self.inputs.clear()

    async def end_offset(self, topic: str, partition: int) -> int:
        return len(self.logs[(topic, partition)])

    async def read(self, topic: str, partition: int, start: int, end: int) -> AsyncIterator[list[tuple[int, bytes, bytes]]]:
        """Records start..end-1 in chunks, as a consumer fetches them (all must exist)."""
        self.reads += 1
        log = self.logs[(topic, partition)]
        assert end <= len(log), f"reading {topic}[{partition}] up to {end - 1}: the log ends at {len(log) - 1}"
        for chunk in range(start, end, 7):
            await asyncio.sleep(0)
            if self.crash_reading_at is not None and self.chunks_read >= self.crash_reading_at:
                raise Crash(f"crashed reading {topic}[{partition}] at offset {chunk}")
            self.chunks_read += 1
            yield [(offset, *log[offset]) for offset in range(chunk, min(chunk + 7, end)) if log[offset]]


class StalledSender:
    """A worker's view of the broker whose sends wait while `running` is clear (a process
    paused by the OS, a long GC pause, a network partition)."""

    def __init__(self, broker: MemoryBroker):
        self.broker = broker
        self.running = asyncio.Event()
        self.running.set()

    async def partitions(self, topic: str) -> int:
        return await self.broker.partitions(topic)

    async def send(self, topic, partition, records):
        records = list(records)
        await self.running.wait()
        return await self.broker.send(topic, partition, records)


class CountingReader:
    """The broker as a worker's changelog reader, counting the records of `topic` its reads return."""

    def __init__(self, broker: MemoryBroker, topic: str):
        self.broker, self.topic, self.read_records = broker, topic, 0

    async def read(self, topic, partition, start, end):
        async for chunk in self.broker.read(topic, partition, start, end):
            self.read_records += len(chunk) if topic == self.topic else 0
            yield chunk

    async def first_records(self, wanted):
        return await self.broker.first_records(wanted)

    async def end_offset(self, topic, partition):
        return await self.broker.end_offset(topic, partition)
