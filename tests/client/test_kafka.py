"""KafkaConnection.ensure_topics on Apache Kafka, which answers CreateTopics before
every broker's metadata has the new topics: the counts it returns are the topics'
partitions every time, so that a worker started on a fresh cluster comes up; and on
a cluster of three, topics get the cluster's replication, and a broker down does
not stop them being made and described."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from stream_app.client import KafkaConnection
from stream_app.client.kafka import start_client
from stream_app.security import KafkaSecurity
from stream_app.stream.broker_watch import RepeatFilter
from tests.support.ports import free_port
from tests.support.brokers import start_broker
from tests.support.names import unique_name

TRIES = 5


def test_topics_just_created_are_counted_with_their_partitions_every_time(broker):
    for _ in range(TRIES):
        name = unique_name("created")
        connection = KafkaConnection(broker.url, f"{name}.matches", f"{name}.changes", f"{name}.dlq", partitions=8)
        counts = asyncio.run(connection.ensure_topics(extra=[f"{name}.forward"], changelogs=[f"{name}.changelog"]))
        assert counts == {topic: 8 for topic in (f"{name}.matches", f"{name}.changes", f"{name}.dlq",
                                                 f"{name}.forward", f"{name}.changelog")}, counts


async def replicas(bootstrap: str, topic: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return [len(partition["replicas"]) for partition in described["partitions"]]


@pytest.mark.broker
@pytest.mark.xdist_group("three_nodes")  # one three-node cluster at a time (tests/reliability/test_cluster_faults.py)
def test_on_three_brokers_topics_get_the_clusters_replication_and_one_broker_down_stops_no_start():
    """A worker's start makes sure its topics exist (list, then describe) by requests that
    go to a broker picked at random: with one of three SIGKILLed, a worker starting then
    exited with NodeNotReadyError (issue #44). Each try here is a new client, right after
    the kill, while the cluster's metadata still lists the broker."""
    with start_broker(nodes=3) as cluster:
        connections = []
        for _ in range(TRIES):
            name = unique_name("replicated")
            connections.append(KafkaConnection(cluster.url, f"{name}.matches", f"{name}.changes", f"{name}.dlq",
                                               partitions=8))
            asyncio.run(connections[-1].ensure_topics(changelogs=[f"{name}.changelog"]))
        assert asyncio.run(replicas(cluster.bootstrap, connections[0].match_topic)) == [3] * 8  # 1 before
        os.killpg(cluster.node(1).process.pid, signal.SIGKILL)
        for connection in connections:
            name = connection.match_topic.removesuffix(".matches")
            counts = asyncio.run(connection.ensure_topics(changelogs=[f"{name}.changelog"]))
            assert counts == {topic: 8 for topic in (f"{name}.matches", f"{name}.changes", f"{name}.dlq",
                                                     f"{name}.changelog")}, counts


async def test_a_broker_not_there_is_named_with_its_reason_even_where_repeated_warnings_are_dropped():
    # A worker drops a client's repeated warnings (RepeatFilter); a refusal it held back
    # must still reach the error, the second time too.
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    nothing_there = f"127.0.0.1:{free_port()}"
    repeats = RepeatFilter()
    repeats.install()
    try:
        for _ in range(2):
            producer = AIOKafkaProducer(bootstrap_servers=nothing_there)
            with pytest.raises(KafkaConnectionError) as raised:
                await start_client(producer, KafkaSecurity())
            await producer.stop()
            assert raised.value.args[0] == f"{nothing_there}: Connection refused"
    finally:
        for name in logging.root.manager.loggerDict:
            logger = logging.getLogger(name)
            if repeats in logger.filters:
                logger.removeFilter(repeats)
        logging.getLogger("aiokafka").removeFilter(repeats)


def test_a_worker_refuses_a_changelog_kafka_would_delete_by_age_and_warns_of_one_it_cannot_clean(broker, caplog):
    """Bases delete the changelog's records themselves; a changelog made another way with
    Kafka's retention (7 days by default) would lose state: the worker refuses it in one
    line that says what to run. A compacted-only one works, with a warning (its bases
    cannot delete). The worker's own passes."""
    import logging

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from stream_app.settings import Settings
    from stream_app.stream.topics import TopicsMismatch, ensure_topics

    name = unique_name("retention")
    made = {"kept-by-age": {"cleanup.policy": "delete"}, "compacted": {"cleanup.policy": "compact"}}

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(f"{name}-{kind}-state-changelog", 8, 1, topic_configs=configs)
                                       for kind, configs in made.items()])
        finally:
            await admin.close()

    def settings(app: str) -> Settings:
        return Settings(broker=broker.url, match_topic=f"{name}.matches", changes_topic=f"{name}.changes",
                        dlq_topic=f"{name}.dlq", app_id=app)

    asyncio.run(create())
    with pytest.raises(TopicsMismatch, match=r"retention\.ms=604800000.*retention\.ms=-1,retention\.bytes=-1"):
        asyncio.run(ensure_topics(settings(f"{name}-kept-by-age")))
    with caplog.at_level(logging.WARNING, logger="stream_app.stream.topics"):
        asyncio.run(ensure_topics(settings(f"{name}-compacted")))
    assert "cannot delete the records before it" in caplog.text
    asyncio.run(ensure_topics(settings(f"{name}-own")))  # created by the worker: as it needs


def test_a_workers_start_checks_ask_through_one_admin_client(broker, monkeypatch):
    """Its topics made and described, the changelog's settings and its group checked: one
    admin client started for them all (each check started its own), and one for the topics
    again before partitions are taken up."""
    from stream_app.client import kafka as kafka_module
    from stream_app.settings import Settings
    from stream_app.stream.topics import check_start, ensure_topics

    started = []

    async def counted(client, security):
        started.append(client)
        await start_client(client, security)

    monkeypatch.setattr(kafka_module, "start_client", counted)
    name = unique_name("one-admin")
    settings = Settings(broker=broker.url, match_topic=f"{name}.matches", changes_topic=f"{name}.changes",
                        dlq_topic=f"{name}.dlq", app_id=name)
    asyncio.run(check_start(settings))
    assert len(started) == 1
    asyncio.run(ensure_topics(settings))
    assert len(started) == 2
    assert asyncio.run(KafkaConnection.of(settings).topic_configs(settings.changelog_topic))["retention.ms"] == "-1"
