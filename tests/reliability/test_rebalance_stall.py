"""Rebalances and a frozen broker while a stream is being applied: the final
state is still exactly the replay."""

from __future__ import annotations

import asyncio
import signal
import time

import orjson
import pytest

from stream_app.leagues import LeagueConfig
from tests.support.brokers import start_broker
from tests.support.broker_control import resume, suspend
from tests.support.kafka import SteadyPublisher, ensure_topics, keyed, publish, topic_args as topics_of
from tests.support.leagues import CONFIG, assert_same_state, league_matches, match_counts, replay_state, stream_events
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, wait_for


pytestmark = pytest.mark.reliability


def prepare(broker, tmp_path, seed, steady: bool = False):
    prefix = unique_name("rb")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    events = stream_events(seed, matches=10_000)
    lines = [orjson.dumps(e) for e in events]
    ledger, _ = replay_state(lines, LeagueConfig.from_toml(CONFIG))
    asyncio.run(ensure_topics(broker.url, prefix))
    records = keyed(events)
    if steady:
        publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches", records)
        publisher.start()
    else:
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", records))
        publisher = None
    return prefix, topic_args, config_path, ledger, publisher


def applied(worker: WorkerProcess, counts: dict[str, int]) -> int:
    return sum(max(0, league_matches(worker, league)) for league in counts)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_second_worker_joins_halfway_and_the_first_stops_later(broker, tmp_path, stop):
    prefix, topic_args, config_path, ledger, publisher = prepare(broker, tmp_path, seed=21 + int(stop), steady=True)
    counts = match_counts(ledger)
    total = sum(counts.values())
    a = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "a", config_path, name="a")
    b = None
    try:
        wait_for(lambda: (a.health() or {}).get("applied", 0) > 0, 120, "the first worker to apply matches", workers=[a])
        b = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "b", config_path, name="b")
        wait_for(lambda: (b.health() or {}).get("ready") and b.health()["assigned_partitions"], 120,
                 "the second worker to take partitions", workers=[a, b])
        progress_when_joined = applied(b, counts)
        a.stop(stop)
        publisher.join(120)
        assert publisher.error is None, publisher.error
        wait_for(lambda: applied(b, counts) == total, 240, "the stream to drain on the second worker", workers=[b])
        assert_same_state(b, ledger)
        # The rebalance really happened mid-stream (else this test proves nothing).
        assert progress_when_joined < total
    finally:
        for w in (a, b):
            if w is not None:
                w.stop()


STALL_SECONDS = 8  # longer than the worker's consumer session (6 s, settings.session_timeout)


def test_a_frozen_broker_longer_than_the_session_mid_stream(tmp_path):
    with start_broker() as broker:
        prefix, topic_args, config_path, ledger, publisher = prepare(broker, tmp_path, seed=31, steady=True)
        counts = match_counts(ledger)
        total = sum(counts.values())
        worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "w", config_path, name="w")
        try:
            wait_for(lambda: (worker.health() or {}).get("applied", 0) > 0, 120, "the worker to apply matches", workers=[worker])
            before = applied(worker, counts)
            suspend(broker)
            time.sleep(STALL_SECONDS)
            resume(broker)
            publisher.join(120)
            assert publisher.error is None, publisher.error
            wait_for(lambda: applied(worker, counts) == total, 240, "the stream to drain after the stall", workers=[worker])
            assert worker.alive(), "the worker must recover by itself"
            assert_same_state(worker, ledger)
            assert before < total, "the stall did not happen mid-stream"
        finally:
            worker.stop()
