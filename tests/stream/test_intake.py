"""The worker's input consumer (stream/intake.py) against the real broker: it
starts each partition where it is told, hands out batches in order, stops
taking input while paused (waiting for the batch in progress), refuses a
resume of an assignment already over, and goes back to given positions; a
partition that ends below its position has started over."""

import asyncio

import aiokafka.client
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import pytest

from stream_app.stream import kafka_io
from stream_app.stream.changelog import StartedOver
from stream_app.stream.intake import Intake, KafkaChangelog, first_records
from tests.support.kafka import ensure_topics, publish
from tests.support.names import unique_name


async def _prepare(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for partition, values in ((0, [f"a{i}" for i in range(10)]), (1, [f"b{i}" for i in range(4)])):
            await asyncio.gather(*[await producer.send(topic, v.encode(), key=b"k", partition=partition) for v in values])
    finally:
        await producer.stop()


async def _take(intake: Intake, until: int, seen: list) -> None:
    while len(seen) < until:
        async with intake.batch() as records:
            seen += [(r.partition, r.offset) for r in records]


def test_batches_start_at_the_positions_pause_waits_for_the_batch_and_rewind_goes_back(broker):
    topic = unique_name("intake")

    async def scenario():
        await _prepare(broker.bootstrap, topic)
        intake = Intake({"bootstrap_servers": broker.bootstrap}, max_records=3)
        try:
            assert await intake.resume({(topic, 0): 7, (topic, 1): None})
            seen: list = []
            await asyncio.wait_for(_take(intake, 7, seen), 30)
            by_partition = {p: [o for q, o in seen if q == p] for p in (0, 1)}
            assert by_partition == {0: [7, 8, 9], 1: [0, 1, 2, 3]}

            # A pause waits for the batch in progress, and gives up after its timeout.
            await intake.rewind({(topic, 0): 8, (topic, 1): 3}, intake.generation)
            entered = asyncio.Event()
            release = asyncio.Event()

            async def hold_a_batch():
                async with intake.batch() as records:
                    entered.set()
                    await release.wait()
                    return records

            holder = asyncio.ensure_future(hold_a_batch())
            await asyncio.wait_for(entered.wait(), 30)
            assert await intake.pause(timeout=0.3) is False
            release.set()
            held = await holder
            assert sorted((r.partition, r.offset) for r in held) == [(0, 8), (0, 9), (1, 3)]
            assert await intake.pause(timeout=1) is True

            # A resume of an assignment made before the last pause is over already.
            assigned = intake.generation
            await intake.pause(timeout=1)
            assert await intake.resume({(topic, 1): 2}, assigned) is False
            assert await intake.resume({(topic, 1): 2}, intake.generation) is True
            async with intake.batch() as records:
                assert [(r.partition, r.offset) for r in records] == [(1, 2), (1, 3)]
            assert intake.owned_partitions == [(topic, 1)]
            # Nothing more to read: an idle batch (the batch loop writing a base) is empty at
            # once, where a batch waits for input.
            async with intake.batch(idle=True) as records:
                assert records == []
            with pytest.raises(asyncio.TimeoutError):
                async with asyncio.timeout(1.0):
                    async with intake.batch() as records:
                        pass
        finally:
            await intake.close()

    asyncio.run(scenario())


def test_first_records_tell_a_record_from_a_partition_that_ends_before_it(broker):
    topic = unique_name("intake-first")

    async def scenario():
        await _prepare(broker.bootstrap, topic)
        found = await first_records({"bootstrap_servers": broker.bootstrap},
                                    {(topic, 0): 9, (topic, 1): 4, (topic, 0 + 2): 0, ("no-such-topic-" + topic, 0): 0})
        assert (found[(topic, 0)].offset, found[(topic, 0)].value) == (9, b"a9")
        assert found[(topic, 0)].timestamp is not None
        assert found[(topic, 1)] is None  # partition 1 holds offsets 0 to 3
        assert found[(topic, 2)] is None and found[("no-such-topic-" + topic, 0)] is None  # no such partition, topic
        far = await first_records({"bootstrap_servers": broker.bootstrap}, {(topic, 1): 1000})
        assert far == {(topic, 1): None}

    asyncio.run(scenario())


@pytest.mark.broker
@pytest.mark.parametrize("which", ["broker", "embedded_broker"])
def test_input_that_ends_below_the_position_has_started_over(request, which):
    """Kafka answers such a fetch OFFSET_OUT_OF_RANGE; the embedded broker answers it empty,
    with the partition's end as its high watermark."""
    broker = request.getfixturevalue(which)
    topic = unique_name("intake-over")

    async def scenario():
        await _prepare(broker.bootstrap, topic)
        intake = Intake({"bootstrap_servers": broker.bootstrap}, max_records=100)
        try:
            assert await intake.resume({(topic, 0): 3, (topic, 1): 40})  # partition 1 ends at 4
            with pytest.raises(StartedOver, match=r"\[1\] ends at offset 4"):
                for _ in range(50):
                    async with intake.batch():
                        pass
        finally:
            await intake.close()

    asyncio.run(scenario())


class _Answers:
    """A consumer's answers about ends: each partition's last fetch's high watermark, and
    what ListOffsets says now."""

    def __init__(self, highwater: dict, ends: dict):
        self._highwater, self.ends, self.asked = highwater, ends, []

    def highwater(self, tp):
        return self._highwater.get(tp)

    async def end_offsets(self, tps):
        self.asked.append(sorted(tps))
        return {tp: self.ends[tp] for tp in tps}


def test_a_fetch_whose_high_watermark_lags_its_own_records_is_not_a_start_over():
    """Kafka's fetch answer carries the high watermark from before its read, so it can be
    below the records the same answer returned (seen at 2,000 matches/s: a partition
    taken up anew for nothing). The end is asked again; only a log that really ends
    below the next offset has started over."""
    from aiokafka import TopicPartition

    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    intake = Intake({}, max_records=10)
    intake._next = {a: 120, b: 40}
    intake.consumer = _Answers({a: 117, b: 40}, {a: 120, b: 40})  # a: records 117..119 came with watermark 117
    asyncio.run(intake._check_ends())
    assert intake.consumer.asked == [[a]]  # b's watermark was not below: not asked
    intake.consumer = _Answers({a: 117, b: 40}, {a: 117, b: 40})  # a really ends at 117
    with pytest.raises(StartedOver, match=r"t\[0\] ends at offset 117, below the next offset to apply \(120\)"):
        asyncio.run(intake._check_ends())


# -- first_records on Apache Kafka too (issue #43): a fresh consumer's client there knows no
# topic until one is assigned, and every partition once read as missing: each take-up of a
# partition with a checkpoint wrote its state back and read its input again from offset 0.

async def _first_records_everywhere(bootstrap: str, url: str, prefix: str) -> None:
    await ensure_topics(url, prefix)
    topic = f"{prefix}.matches"
    sent = [(b"league-a", b"match-%d" % i) for i in range(20)]  # one key: one partition
    await publish(bootstrap, topic, sent)
    options = {"bootstrap_servers": bootstrap}
    # Which partition holds them: the one whose record at offset 0 exists.
    everywhere = await first_records(options, {(topic, p): 0 for p in range(8)})
    held = [key for key, record in everywhere.items() if record is not None]
    assert len(held) == 1, everywhere  # before the fix: none (every partition read as missing)
    [(_, partition)] = held
    found = await first_records(options, {(topic, partition): 7, (topic, partition + 8): 0,
                                          (f"{prefix}.missing", 0): 0})
    record = found[(topic, partition)]
    assert (record.offset, record.key, record.value) == (7, b"league-a", b"match-7")
    assert found[(topic, partition + 8)] is None  # no such partition
    assert found[(f"{prefix}.missing", 0)] is None  # no such topic
    assert (await first_records(options, {(topic, partition): 20}))[(topic, partition)] is None  # at the end
    assert (await first_records(options, {(topic, partition): 19}))[(topic, partition)].offset == 19  # the last
    reader = KafkaChangelog(options, timeout=20)
    assert (await reader.first_records({(topic, partition): 0}))[(topic, partition)].value == b"match-0"


@pytest.mark.broker
@pytest.mark.parametrize("which", ["broker", "embedded_broker"])
def test_first_records_finds_a_record_the_log_holds(request, monkeypatch, which):
    # As in a worker (kafka_io.no_topics_created_by_metadata), for this test only: other tests
    # of the process rely on a metadata request creating their topic.
    monkeypatch.setattr(aiokafka.client, "MetadataRequest", kafka_io._MetadataRequestNoCreation)
    running = request.getfixturevalue(which)
    asyncio.run(_first_records_everywhere(running.bootstrap, running.url, unique_name("held")))


def test_input_left_behind_while_fetches_bring_nothing_is_said_with_the_intakes_state(broker, caplog):
    """A consumer whose fetches stop bringing the records its partitions hold (a fetcher that
    stopped: its getmany stands in here, answering nothing) is named in a warning once
    `stall_seconds` have passed, not before; the records themselves are in the log."""
    topic = unique_name("intake-stall")

    async def scenario():
        await _prepare(broker.bootstrap, topic)
        intake = Intake({"bootstrap_servers": broker.bootstrap}, max_records=100)
        intake.stall_seconds = 1.0
        try:
            assert await intake.resume({(topic, 0): 4, (topic, 1): 4})  # partition 1 holds 4: none behind
            consumer = intake.consumer

            async def nothing(*args, **kwargs):
                await asyncio.sleep(0.05)
                return {}

            consumer.getmany = nothing
            with caplog.at_level("WARNING", logger="stream_app.stream.intake"):
                fetching = asyncio.ensure_future(intake._fetch())
                await asyncio.sleep(0.5)
                assert not [r for r in caplog.records if "nothing fetched" in r.getMessage()]  # not yet
                await asyncio.sleep(1.5)
                fetching.cancel()
            [said] = [r.getMessage() for r in caplog.records if "nothing fetched" in r.getMessage()]
            assert f"{topic}[0] 6 behind" in said and f"{topic}[1]" not in said.split("(")[0], said
            assert "(end, next) of each owned partition" in said
        finally:
            await intake.close()

    asyncio.run(scenario())


def test_a_changelog_deletes_before_an_offset_and_reads_from_below_it_start_at_its_first(broker):
    """A base's deletion on Kafka (DeleteRecords, on a topic made as the worker makes its
    changelog): a read from below the first offset gives the records from it on (aiokafka's
    default reset, "latest", gave none), what a log holds there is its first record, and a
    standby following from below it goes on from there; a compacted-only topic refuses."""
    from stream_app.client.kafka import CHANGELOG_CONFIGS

    topic, compacted = unique_name("changelog-delete"), unique_name("changelog-compacted")

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=CHANGELOG_CONFIGS),
                                       NewTopic(compacted, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        finally:
            await admin.close()
        for name in (topic, compacted):
            await publish(broker.bootstrap, name, [(b"k%d" % i, b"v%d" % i) for i in range(10)])
        changelog = KafkaChangelog({"bootstrap_servers": broker.bootstrap}, timeout=20)
        assert await changelog.delete_before(topic, 0, 6) == 6
        read = [record async for chunk in changelog.read(topic, 0, 2, 10) for record in chunk]
        assert [(offset, value) for offset, _, value in read] == [(i, b"v%d" % i) for i in range(6, 10)]
        found = (await changelog.first_records({(topic, 0): 2}))[(topic, 0)]
        assert found.offset == 6  # a later record in its place: what holds() takes as deleted
        following = changelog.follow(topic, {0: 3})
        try:
            seen: list[int] = []
            while len(seen) < 4:
                records, _ = await asyncio.wait_for(following.__anext__(), 20)
                seen += [record.offset for record in records.get(0, [])]
            assert seen == [6, 7, 8, 9]
        finally:
            await following.aclose()
        with pytest.raises(Exception, match="PolicyViolation"):
            await changelog.delete_before(compacted, 0, 6)

    asyncio.run(scenario())
