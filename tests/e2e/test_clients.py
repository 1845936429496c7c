"""Clients no one here wrote: confluent-kafka (librdkafka) publishes match results,
keyed by league with librdkafka's own partitioner (not Kafka's murmur2: the worker
forwards them, in order per league) and unkeyed (forwarded and applied in arrival
order), and reads the rating changes. Every result is applied once, every event
is read; keyed leagues end exactly at the replay."""

from __future__ import annotations

import asyncio
import time

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from stream_app.leagues import LeagueConfig
from tests.support.kafka import ensure_topics, topic_args
from tests.support.leagues import (CONFIG, assert_same_state, config_file, league_events, league_matches, match_counts,
                                   replay_with_event_ids)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, assigned, wait_for

KEYED = ("chess", "karting", "arena")  # the others (go, team, relay) are sent without a key


def test_confluent_kafka_publishes_keyed_and_unkeyed_results_and_reads_every_change(broker, tmp_path):
    config_path = config_file(tmp_path)
    config = LeagueConfig.from_toml(CONFIG)
    events = league_events(seed=32)
    ledger, ids = replay_with_event_ids(events, config)
    keyed_ledger, _ = replay_with_event_ids([e for e in events if e["league"] in KEYED], config)
    prefix = unique_name("clients")
    asyncio.run(ensure_topics(broker.url, prefix))
    worker = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w", config_path, name="w",
                           extra_args=FAST_GROUP)
    try:
        wait_for(lambda: assigned(worker) == set(range(8)), 120, "the worker to own the partitions", workers=[worker])
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
        failures: list = []
        partitions: dict[bytes, set[int]] = {}

        def delivered(err, msg) -> None:
            if err is not None:
                failures.append(err)
            elif msg.key() is not None:
                partitions.setdefault(msg.key(), set()).add(msg.partition())

        for event in events:
            key = event["league"].encode() if event["league"] in KEYED else None
            producer.produce(f"{prefix}.matches", orjson.dumps(event), key=key, on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0 and failures == []
        assert all(len(found) == 1 for found in partitions.values())  # librdkafka keeps a key on one partition

        counts = match_counts(ledger)
        wait_for(lambda: all(league_matches(worker, league) == n for league, n in counts.items()), 180,
                 "every result applied", workers=[worker])
        health = worker.health()
        assert health["applied"] == len(events) and health["duplicates"] == 0 and health["dead_letters"] == 0
        assert health["forwarded"] > 0
        assert_same_state(worker, keyed_ledger)

        # The rating changes, read by librdkafka (assigned partitions: no group to join).
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_name("reader"),
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(f"{prefix}.changes", p, 0) for p in range(8)])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        try:
            while len(seen) < len(ids) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.append(orjson.loads(message.value())["event_id"])
        finally:
            consumer.close()
        assert len(seen) == len(set(seen)) and set(seen) == ids
    finally:
        worker.stop()
