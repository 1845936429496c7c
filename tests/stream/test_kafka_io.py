"""stream/kafka_io.py against the installed Faust and aiokafka: each private
attribute it uses is still there and still does what the worker needs."""

import asyncio

import pytest
from faust.types import TP

from stream_app.settings import Settings
from stream_app.stream import kafka_io
from stream_app.stream.app import WorkerApp


@pytest.fixture
async def worker(tmp_path):
    w = WorkerApp(Settings(data_dir=tmp_path / "data", partitions=2))
    w.app.loop = asyncio.get_running_loop()
    w.app.finalize()
    yield w
    w.store.close()


async def test_faust_never_activates_input_partitions(worker):
    """Faust's consumer must not fetch input for its agent: neither when partitions
    are newly assigned nor when they are resumed after recovery."""
    consumer = worker.app.consumer
    kafka_io.keep_input_from_faust(consumer, worker.settings.input_topics)
    kafka_io.keep_input_from_faust(consumer, worker.settings.input_topics)  # once only
    inputs = {TP(topic, 0) for topic in worker.settings.input_topics}
    changelog = TP(worker.settings.changelog_topic, 0)
    assert consumer._set_active_tps(inputs | {changelog}) == {changelog}
    consumer.pause_partitions(inputs | {changelog})
    consumer.resume_partitions(inputs | {changelog})
    assert consumer._get_active_partitions() == {changelog}


async def test_the_group_commit_goes_through_the_consumer_thread_of_the_group_member(worker):
    # What commit_group_offsets reaches for; the end-to-end test checks the commits land.
    thread = worker.app.consumer._thread
    assert callable(thread.call_thread) and callable(thread._ensure_consumer)


async def test_the_sender_sends_record_batches_through_fausts_aiokafka_producer(broker, tmp_path):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from tests.support.names import unique_name

    topic = unique_name("sender")
    w = WorkerApp(Settings(broker=broker.url, data_dir=tmp_path / "data", partitions=1))
    w.app.loop = asyncio.get_running_loop()
    w.app.finalize()
    await w.app.producer.start()
    try:
        sender = kafka_io.ProducerSender(w.app)
        records = [(b"k", b"x" * 1000 + str(i).encode()) for i in range(1500)]  # more than one 512 KiB batch
        acks = await sender.send(topic, 0, records)
        assert len(acks) > 1
        spans = [await ack for ack in acks]
        assert spans[0][0] == 0 and spans[-1][1] == 1499
        assert all(later[0] == earlier[1] + 1 for earlier, later in zip(spans, spans[1:]))
        assert await sender.partitions(topic) >= 1
    finally:
        await w.app.producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < 1500:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            got += [(r.key, r.value) for r in batch.get(tp, [])]
        assert got == records
    finally:
        await consumer.stop()


async def test_no_topic_is_created_by_asking_about_it(broker, monkeypatch):
    """aiokafka lets every metadata request create a missing topic; the worker's never do
    (the embedded broker would create it with 4 partitions, Kafka with num.partitions)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    import aiokafka.client

    from tests.support.names import unique_name

    monkeypatch.setattr(aiokafka.client, "MetadataRequest", aiokafka.client.MetadataRequest)  # undone after the test
    kafka_io.no_topics_created_by_metadata()
    missing = unique_name("never-created")
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(missing, 0)])
        await consumer.getmany(timeout_ms=1000)
        assert missing not in await consumer.topics()
    finally:
        await consumer.stop()


async def test_topic_partitions_lists_every_topic_with_its_partitions_for_a_fresh_consumer(broker):
    """What topic_partitions reaches for (the consumer's client's fetch_all_metadata);
    tests/stream/test_intake.py checks first_records through it on Apache Kafka too."""
    from aiokafka import AIOKafkaConsumer

    from tests.support.kafka import ensure_topics
    from tests.support.names import unique_name

    prefix = unique_name("parts-of")
    await ensure_topics(broker.url, prefix, partitions=3)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        assert callable(consumer._client.fetch_all_metadata)
        found = await kafka_io.topic_partitions(consumer)
    finally:
        await consumer.stop()
    assert {name: found.get(f"{prefix}.{name}") for name in ("matches", "changes", "dlq")} == \
        {name: {0, 1, 2} for name in ("matches", "changes", "dlq")}, found


@pytest.fixture
def avoiding():
    """The process-wide list of brokers to avoid, emptied again afterwards."""
    yield kafka_io.avoid_brokers
    kafka_io.avoid_brokers(())


async def test_a_broker_found_silent_is_not_connected_to_while_others_answer(avoiding, monkeypatch):
    """A frozen broker cost each request to it a whole request timeout, one after another
    (issue #44): every client but the watch's leaves it, and asks for metadata again."""
    from types import SimpleNamespace

    import aiokafka.client

    kafka_io.silent_brokers_avoided()
    kafka_io.silent_brokers_avoided()  # idempotent
    assert aiokafka.client.AIOKafkaClient._get_conn is kafka_io._conn_unless_silent
    connected = []

    async def connect(client, node_id, **kwargs):
        connected.append(node_id)
        return f"connection to {node_id}"

    monkeypatch.setattr(kafka_io, "_get_conn", connect)
    addresses = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    client = aiokafka.client.AIOKafkaClient(bootstrap_servers="127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003")
    client.cluster = SimpleNamespace(broker_metadata=lambda node: SimpleNamespace(host=addresses[node][0],
                                                                                  port=addresses[node][1]))
    avoiding([addresses[1]])
    assert await client._get_conn(1) is None and client._md_update_fut is not None  # metadata asked again
    assert await client._get_conn(2) == "connection to 2"
    assert await kafka_io.asks_every_broker(client)._get_conn(1) == "connection to 1"  # the watch asks it
    assert connected == [2, 1]
    # Bootstrapping: the silent one last, the others still in a random order.
    other = aiokafka.client.AIOKafkaClient(bootstrap_servers="127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003")
    orders = {tuple(port for _, port, _ in other.hosts) for _ in range(50)}
    assert all(order[-1] == 9001 for order in orders) and len(orders) == 2
    avoiding(())
    assert {tuple(port for _, port, _ in other.hosts)[-1] for _ in range(50)} == {9001, 9002, 9003}
