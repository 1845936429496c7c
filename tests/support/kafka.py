"""Talking to the broker directly: raw records in (bypassing the client's
validation, to send what a hostile producer would), topics read back, the
consumer group's offsets."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Iterable

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from stream_app.client import RatingsClient
from stream_app.stream.kafka_io import topic_partitions


async def publish(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
                  in_flight: int = 5000, **producer_options) -> int:
    """Publish (key, value) records in order, pipelined; returns how many."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **producer_options)
    await producer.start()
    sent = 0
    try:
        pending = []
        for key, value in records:
            pending.append(await producer.send(topic, value, key=key))
            if len(pending) >= in_flight:
                await asyncio.gather(*pending)
                sent += len(pending)
                pending = []
        await asyncio.gather(*pending)
        sent += len(pending)
    finally:
        await producer.stop()
    return sent


def keyed(events: Iterable[dict]) -> list[tuple[bytes, bytes]]:
    """Match results as (league, JSON) records."""
    return [(event["league"].encode(), orjson.dumps(event)) for event in events]


class SteadyPublisher(threading.Thread):
    """Publishes the records in chunks over about `seconds`, in order, in the background."""

    def __init__(self, bootstrap: str, topic: str, records: list, seconds: float = 25.0, chunks: int = 50):
        super().__init__(daemon=True)
        self.args = (bootstrap, topic, records, seconds, chunks)
        self.error: BaseException | None = None

    def run(self) -> None:
        bootstrap, topic, records, seconds, chunks = self.args
        size = max(1, len(records) // chunks)
        try:
            for start in range(0, len(records), size):
                asyncio.run(publish(bootstrap, topic, records[start:start + size]))
                time.sleep(seconds / chunks)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


async def _from_beginning(bootstrap: str, topic: str, partitions: int,
                          isolation_level: str = "read_uncommitted") -> AIOKafkaConsumer:
    """A started consumer of every partition of the topic, at its beginning (no group)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation_level)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0,
                   drain: bool = False) -> list[dict]:
    """Read from the beginning until `expected` records (with drain: then until 2 s pass with none)."""
    consumer = await _from_beginning(bootstrap, topic, partitions)
    out: list[dict] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        idle_since = None
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                out.extend(orjson.loads(m.value) for m in messages)
            if len(out) >= expected:
                if not drain:
                    break
                if batch:
                    idle_since = None
                elif idle_since is None:
                    idle_since = loop.time()
                elif loop.time() - idle_since > 2.0:
                    break
    finally:
        await consumer.stop()
    return out


async def read_records(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0,
                       isolation_level: str = "read_uncommitted") -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record, each partition in order: until `expected`
    are read, then one more second for any beyond them."""
    consumer = await _from_beginning(bootstrap, topic, partitions, isolation_level)
    records: list[tuple[int, bytes, bytes]] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(records) < expected and loop.time() < deadline:
            for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                records.extend((tp.partition, m.key, m.value) for m in messages)
        for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
            records.extend((tp.partition, m.key, m.value) for m in messages)
    finally:
        await consumer.stop()
    return records


async def group_offsets(bootstrap: str, group: str, topic: str, partitions: int = 8) -> dict[int, int]:
    """The consumer group's committed offsets (asked by a consumer of the group that never joins it)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        offsets = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()
    return {p: offset for p, offset in offsets.items() if offset is not None}


async def records_in(bootstrap: str, topic: str, partitions: int = 8) -> int:
    """How many records the topic holds, by its partitions' end offsets (the embedded
    broker reports an end up to one record batch short)."""
    return sum((await end_offsets(bootstrap, topic, partitions)).values())


async def ensure_topics(broker_url: str, prefix: str, partitions: int = 8) -> None:
    """The service's three topics named after `prefix` (the worker would create them too)."""
    client = RatingsClient(broker_url, match_topic=f"{prefix}.matches", changes_topic=f"{prefix}.changes",
                           dlq_topic=f"{prefix}.dlq", partitions=partitions)
    await client.start()  # creates the topics (idempotent)
    await client.stop()


def topic_args(prefix: str) -> list[str]:
    """The worker flags of the topics `ensure_topics` creates."""
    return ["--match-topic", f"{prefix}.matches", "--changes-topic", f"{prefix}.changes", "--dlq-topic", f"{prefix}.dlq"]


async def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 10.0, settle: float = 0.5):
    """Every record of `topic` from the beginning: waits for `expected`, then `settle` s for extras."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = None
        deadline = time.monotonic() + timeout
        while not parts:
            parts = (await topic_partitions(consumer)).get(topic)  # partitions_for_topic is empty on Kafka
            assert parts or time.monotonic() < deadline, f"topic {topic} never appeared"
            if not parts:
                await asyncio.sleep(0.1)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = []
        while len(records) < expected and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            for batch in (await consumer.getmany(timeout_ms=100)).values():
                records.extend(batch)
        return records, len(tps)
    finally:
        await consumer.stop()


async def write_topic(bootstrap: str, topic: str, events: list[dict], key: bytes = b"k") -> None:
    """Send in one go with linger: multi-record batches (where Tansu's ListOffsets is wrong)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, orjson.dumps(e), key=key) for e in events]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def collect(iterator, count: int, timeout: float = 10.0) -> list[dict]:
    out: list[dict] = []
    async with contextlib.aclosing(iterator) as events:

        async def take() -> None:
            async for event in events:
                out.append(event)
                if len(out) >= count:
                    return

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(take(), timeout)
    return out


def match(league: str, match_id: str, *players: str) -> dict:
    """A two-player result (alice beats bob unless `players` say otherwise)."""
    return {
        "match_id": match_id,
        "league": league,
        "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players or ("alice", "bob"))],
    }


def change(league: str, player: str, n: int) -> dict:
    """A rating-changed event as far as following cares: league, player, numbered `n`."""
    return {"schema": "rating-changed.v1", "league": league, "match_id": f"m{n}", "player": player, "n": n}


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset (records plus transaction markers, which take offsets too)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}
