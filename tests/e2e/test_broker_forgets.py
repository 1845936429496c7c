"""A broker that forgets, with real processes: Kafka stopped for 20 s and
started again empty on its ports under a worker with applied state, and an input
topic deleted and created again on a running broker. Nothing applied is lost,
nothing is applied twice, results sent again are dead-lettered as duplicates,
and the worker says what it saw (/health, a handful of log lines)."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient

from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from tests.support.brokers import start_broker
from tests.support.kafka import ensure_topics, keyed, publish, topic_args
from tests.support.leagues import (CONFIG, assert_same_history, assert_same_state, config_file, league_events,
                                   league_matches, match_counts, replay_with_event_ids)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, assigned, wait_for

# Unfiltered, aiokafka logs about 30 lines a second while the broker is down: 20 s would be
# some 600 lines against the 20 allowed. (Longer shows nothing more: the filter's
# once-a-minute repeats are tested in tests/stream/test_broker_watch.py.)
OUTAGE_SECONDS = 20
RESENT = 15  # results applied before the broker forgot them, sent again after


def _halves(seed: int) -> tuple[list[dict], list[dict], Ledger, Ledger]:
    """The leagues' events in two halves, the replay of all of them and of the first half."""
    config = LeagueConfig.from_toml(CONFIG)
    events = league_events(seed=seed)
    first, rest = events[: len(events) // 2], events[len(events) // 2:]
    return first, rest, replay_with_event_ids(events, config)[0], replay_with_event_ids(first, config)[0]


def _log_lines(worker: WorkerProcess) -> int:
    return len(worker.log_path.read_text(errors="replace").splitlines())


def _applied_all(worker: WorkerProcess, counts: dict[str, int]) -> bool:
    return all(league_matches(worker, league) == n for league, n in counts.items())


def test_a_broker_gone_for_a_while_and_back_empty_loses_nothing(tmp_path):
    config_path = config_file(tmp_path)
    first, rest, ledger, ledger_first = _halves(seed=30)
    prefix = unique_name("forgets")
    broker = start_broker()
    ports = broker.ports
    workers: list[WorkerProcess] = []
    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        w1 = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w1", config_path, name="w1",
                           extra_args=FAST_GROUP)
        workers.append(w1)
        wait_for(lambda: assigned(w1) == set(range(8)), 120, "w1 to own the partitions", workers=workers)
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first)))
        wait_for(lambda: _applied_all(w1, match_counts(ledger_first)), 120, "the first half applied", workers=workers)

        # The broker goes away for a while: said on /health, and in a few log lines.
        before = _log_lines(w1)
        broker.stop()
        stopped = time.monotonic()
        seen = []
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            seen.append(w1.health() or {})
            time.sleep(2)
        during = _log_lines(w1) - before
        assert any(h.get("status") == "degraded" and str(h.get("broker")).startswith("unreachable since") for h in seen)
        assert all(h.get("status") for h in seen), "/health stopped answering"
        assert during <= 20, w1.log_path.read_text(errors="replace").splitlines()[before:]

        # Back, empty. Producers create the topics (as `ratings produce` does), send the last
        # results again, and the rest.
        broker = start_broker(ports)
        asyncio.run(ensure_topics(broker.url, prefix))
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first[-RESENT:] + rest)))
        wait_for(lambda: _applied_all(w1, match_counts(ledger)), 180, "every result applied", workers=workers)
        health = w1.health()
        assert health["status"] == "ok" and health["broker"] == "connected"
        assert health["duplicates"] == RESENT
        logs = {found["log"] for found in health["started_over"]}
        assert logs == {"input", "changelog"}, health["started_over"]
        assert_same_state(w1, ledger)

        # A worker on an empty data directory restores its share from the changelogs written back.
        w2 = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w2", config_path, name="w2",
                           extra_args=FAST_GROUP)
        workers.append(w2)
        wait_for(lambda: all(map(assigned, workers)) and set.union(*map(assigned, workers)) == set(range(8)),
                 180, "the workers to share the partitions", workers=workers)
        assert assigned(w2)
        wait_for(lambda: _applied_all(w2, match_counts(ledger)), 60, "w2 to serve every league", workers=workers)
        for worker in workers:
            assert_same_state(worker, ledger)
        assert_same_history(w2, ledger)
    finally:
        for worker in workers:
            worker.stop()
        broker.stop()


def test_an_input_topic_deleted_and_created_again_is_read_from_its_new_beginning(broker, tmp_path):
    config_path = config_file(tmp_path)
    first, rest, ledger, ledger_first = _halves(seed=31)
    prefix = unique_name("recreated")
    asyncio.run(ensure_topics(broker.url, prefix))
    worker = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w", config_path, name="w",
                           extra_args=FAST_GROUP)
    try:
        wait_for(lambda: assigned(worker) == set(range(8)), 120, "the worker to own the partitions", workers=[worker])
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first)))
        wait_for(lambda: _applied_all(worker, match_counts(ledger_first)), 120, "the first half applied",
                 workers=[worker])

        async def recreate() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            try:
                await admin.delete_topics([f"{prefix}.matches"])
            finally:
                await admin.close()
            await asyncio.sleep(2)
            await ensure_topics(broker.url, prefix)

        asyncio.run(recreate())
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first[-RESENT:] + rest)))
        wait_for(lambda: _applied_all(worker, match_counts(ledger)), 180, "every result applied", workers=[worker])
        health = worker.health()
        assert health["duplicates"] == RESENT
        found = health["started_over"]
        assert found and {f["log"] for f in found} == {"input"}, found  # the changelog was not touched
        assert all(f["topic"] == f"{prefix}.matches" for f in found)
        assert_same_state(worker, ledger)
    finally:
        worker.stop()
