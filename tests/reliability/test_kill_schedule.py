"""Two workers under a steady stream, killed the ways operators and machines kill
them: one SIGKILLed and restarted on its data directory, one on an empty data
directory, one stopped with SIGTERM, both SIGKILLed at once. On a broker that lost
nothing no worker takes a log for one that started over: no partition's state is
written back, no input is read again from its beginning, no standby starts again
(on Kafka a check once read partitions it had not been assigned as missing: 74
such alarms in six kills). The final state is the replay and every rating change
is published."""

from __future__ import annotations

import asyncio
import time

import pytest

from stream_app.leagues import LeagueConfig
from tests.support.kafka import SteadyPublisher, ensure_topics, keyed, read_all, topic_args
from tests.support.leagues import (CONFIG, assert_same_state, config_file, league_matches, match_counts,
                                   replay_with_event_ids, stream_events)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, matches_served, started_over_lines, wait_for

pytestmark = pytest.mark.reliability


def test_kills_on_a_broker_that_lost_nothing_raise_no_started_over_alarm(broker, tmp_path):
    prefix = unique_name("schedule")
    config_path = config_file(tmp_path)
    events = stream_events(seed=51)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    total = sum(counts.values())
    asyncio.run(ensure_topics(broker.url, prefix))
    every: list[WorkerProcess] = []  # every generation, for the logs

    def start(name: str, directory: str) -> WorkerProcess:
        every.append(WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / directory, config_path,
                                   name=name, extra_args=FAST_GROUP))
        return every[-1]

    def past(fraction: float, workers: list[WorkerProcess]) -> None:
        wait_for(lambda: sum(map(matches_served, workers)) >= fraction * total, 120, f"{fraction:.0%} of the matches applied",
                 interval=0.1, workers=workers)

    a, b = start("a0", "a"), start("b0", "b")
    publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches", keyed(events), seconds=36.0)
    try:
        wait_for(lambda: all((w.health() or {}).get("ready") for w in (a, b)), 120, "both workers ready", workers=[a, b])
        publisher.start()
        past(0.15, [a, b])
        a.kill()  # SIGKILL, back on its data directory
        a = start("a1", "a")
        past(0.35, [a, b])
        b.kill()  # SIGKILL, back on an empty data directory: everything comes from the changelog
        b = start("b1", "b-empty")
        past(0.55, [a, b])
        a.stop()  # SIGTERM: a clean stop, back on its data directory
        a = start("a2", "a")
        past(0.75, [a, b])
        a.kill()  # both at once
        b.kill()
        a, b = start("a3", "a"), start("b2", "b-empty")
        publisher.join(120)
        assert publisher.error is None, publisher.error
        wait_for(lambda: all(league_matches(a, league) == n for league, n in counts.items()), 240,
                 "the stream to drain", workers=[a, b])
        assert_same_state(a, ledger)
        assert_same_state(b, ledger)
        for worker in (a, b):
            health = worker.health()
            assert health["started_over"] == [], health["started_over"]
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=60,
                                       drain=True))
        published = {change["event_id"] for change in changes}
        assert published == expected_ids
    finally:
        for worker in (a, b):
            worker.stop()
    alarms = started_over_lines(every)
    assert alarms == [], f"{len(alarms)} started-over lines on a broker that lost nothing, the first: {alarms[:3]}"
    print(f"{len(every)} worker processes, {total} matches, {len(changes)} rating-changed events "
          f"for {len(expected_ids)} changes; no started-over line")
