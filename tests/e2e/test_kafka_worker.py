"""A worker on Apache Kafka: started on a fresh cluster before any of its topics
exists, it creates them, comes up, and serves exactly the replay of what is then
published, every system of the test leagues, with every rating change published.
(On Kafka 4.1.2 the worker used to exit in 2 of 3 such starts: CreateTopics answers
before the brokers' metadata lists the new partitions.)"""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_app.client.kafka import CHANGELOG_CONFIGS
from stream_app.leagues import LeagueConfig
from tests.support.kafka import keyed, publish, read_all, topic_args
from tests.support.leagues import (CONFIG, assert_same_history, assert_same_state, config_file, league_events,
                                   league_matches, match_counts, replay_with_event_ids)
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, assigned, wait_for


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        [resource] = response.resources
        return {entry[0]: entry[1] for entry in resource[4]}
    finally:
        await admin.close()


def test_a_worker_started_before_its_topics_exist_serves_the_replay(broker, tmp_path):
    events = league_events(seed=43)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    prefix = unique_name("kafka-first")
    worker = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w", config_file(tmp_path), name="w")
    try:
        wait_for(lambda: assigned(worker) == set(range(8)), 120, "the worker to own the partitions", workers=[worker])
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(events)))
        wait_for(lambda: all(league_matches(worker, league) == n for league, n in counts.items()), 120,
                 "every result applied", workers=[worker])
        assert_same_state(worker, ledger)
        assert_same_history(worker, ledger)
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=30, drain=True))
        assert {change["event_id"] for change in changes} == expected_ids
        configs = asyncio.run(topic_configs(broker.bootstrap, f"{prefix}-state-changelog"))
        assert {name: configs[name] for name in CHANGELOG_CONFIGS} == CHANGELOG_CONFIGS
    finally:
        worker.stop()
