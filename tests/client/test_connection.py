"""KafkaConnection.ensure_topics on Apache Kafka, which answers CreateTopics before
every broker's metadata has the new topics: the counts it returns are the topics'
partitions every time, so that a worker started on a fresh cluster comes up."""

from __future__ import annotations

import asyncio

from stream_app.client import KafkaConnection
from tests.support.names import unique_name

TRIES = 5


def test_topics_just_created_are_counted_with_their_partitions_every_time(broker):
    for _ in range(TRIES):
        name = unique_name("created")
        connection = KafkaConnection(broker.url, f"{name}.matches", f"{name}.changes", f"{name}.dlq", partitions=8)
        counts = asyncio.run(connection.ensure_topics(extra=[f"{name}.forward"], compacted=[f"{name}.changelog"]))
        assert counts == {topic: 8 for topic in (f"{name}.matches", f"{name}.changes", f"{name}.dlq",
                                                 f"{name}.forward", f"{name}.changelog")}, counts
