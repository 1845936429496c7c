"""Two workers on three Kafka nodes (KRaft, replication 3, min.insync.replicas 2)
while match results keep arriving, through the faults a production cluster meets:
a leader SIGKILLed, a broker frozen, the active controller killed, a worker killed
while a broker is down, two brokers down at once, a rolling restart.

While one broker is down the workers go on applying: the longest pause in
rating-changed events is measured per fault and printed (docs/reliability.md has
the table; the bound asserted is loose, the figures are the benchmark's). With two
down no write can be accepted: both workers say so in /health. Afterwards the state
is the replay's, every rating change is published once, nothing is dead-lettered
but a result the publisher wrote twice, and no log is taken for one that started over."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from stream_app.leagues import LeagueConfig
from tests.support.brokers import start_broker
from tests.support.cluster import ChangeWatch, SteadyProducer, active_controller, leading_most
from tests.support.kafka import ensure_topics, keyed, read_topic, topic_args
from tests.support.leagues import (CONFIG, assert_same_state, config_file, league_matches, match_counts,
                                   replay_with_event_ids, stream_events)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, started_over_lines, wait_for

# One three-node cluster at a time: tests/client/test_kafka.py's runs in this group too.
pytestmark = [pytest.mark.reliability, pytest.mark.xdist_group("three_nodes")]

DOWN_SECONDS = 7.0  # how long a killed broker stays down: past the 5 s that fence it
SETTLE_SECONDS = 5.0  # after a fault, before the next: the pause is measured over both
# The pace: 20 results a second (20,000 over 1,000 s), the rest at once after the last
# fault. Far longer than the schedule (about 170 s; over 400 s beside the rest of the suite).
MATCHES, PUBLISH_SECONDS = 20_000, 1000.0
ONE_DOWN_PAUSE = 30.0  # asserted for a fault of one broker: the measured figures are far below (docs/reliability.md)


def kill(cluster, node: int) -> None:
    process = cluster.node(node).process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    cluster.node(node).process = None  # start_node starts it again on its data


def publishers_resends(bootstrap: str, prefix: str, letters: int, results: int) -> int:
    """The dead letters, each checked to be a result the publisher wrote twice: an
    idempotent producer may write a record again when a broker's failure leaves its
    first write's fate unknown (the issue allows these, and only these). Each is a
    duplicate_match whose match the input holds at an earlier offset too; else fails."""
    found, _ = asyncio.run(read_topic(bootstrap, f"{prefix}.dlq", expected=letters))
    inputs, _ = asyncio.run(read_topic(bootstrap, f"{prefix}.matches", expected=results + letters, timeout=60))
    offsets: dict[str, list[tuple[int, int]]] = {}
    for record in inputs:
        offsets.setdefault(json.loads(record.value)["match_id"], []).append((record.partition, record.offset))
    for letter in map(json.loads, (record.value for record in found)):
        source = letter["source"]
        written = offsets.get(letter["match_id"], [])
        assert letter["reason"] == "duplicate_match" and any(
            partition == source["partition"] and offset < source["offset"] for partition, offset in written), (
            f"a dead letter that is not a result written twice: {letter} (the input holds it at {written})")
    return len(found)


def test_the_workers_go_on_through_a_three_node_clusters_faults(tmp_path):
    cluster = start_broker(nodes=3)
    prefix = unique_name("faults")
    config_path = config_file(tmp_path)
    events = stream_events(seed=44, matches=MATCHES)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    asyncio.run(ensure_topics(cluster.url, prefix))
    every: list[WorkerProcess] = []

    def start(name: str, directory: str) -> WorkerProcess:
        every.append(WorkerProcess(cluster.url, topic_args(prefix), prefix, tmp_path / directory, config_path,
                                   name=name, extra_args=FAST_GROUP))
        return every[-1]

    a, b = start("a0", "a"), start("b0", "b")
    watch = ChangeWatch(cluster.bootstrap, f"{prefix}.changes")
    pauses: dict[str, float] = {}
    try:
        wait_for(lambda: all((w.health() or {}).get("ready") for w in (a, b)), 120, "both workers ready",
                 workers=[a, b])
        watch.start()
        producer = SteadyProducer(cluster.bootstrap, f"{prefix}.matches", keyed(events), seconds=PUBLISH_SECONDS)
        producer.start()
        time.sleep(SETTLE_SECONDS)

        def fault(name: str, act) -> None:
            began = time.time()
            act()
            time.sleep(SETTLE_SECONDS)
            pauses[name] = watch.longest_pause(began, time.time() - 2)  # events of the last 2 s may still be on the way
            print(f"{name}: longest pause in rating-changed events {pauses[name]:.1f} s", flush=True)

        def leader_killed(topic: str):
            def act() -> None:
                node = leading_most(cluster.bootstrap, topic)
                kill(cluster, node)
                time.sleep(DOWN_SECONDS)
                cluster.start_node(node)
            return act

        def frozen() -> None:
            node = cluster.node(2).process
            os.killpg(node.pid, signal.SIGSTOP)
            time.sleep(20)
            os.killpg(node.pid, signal.SIGCONT)

        def controller_killed() -> None:
            node = active_controller(cluster)
            kill(cluster, node)
            time.sleep(DOWN_SECONDS)
            cluster.start_node(node)

        def worker_killed_while_a_broker_is_down() -> None:
            nonlocal a
            kill(cluster, 1)
            a.kill()
            a = start("a1", "a")
            wait_for(lambda: (a.health() or {}).get("ready"), 60, "a1 ready with broker 1 down", workers=[a, b])
            # One broker down: named by the worker that knew it (a1 started after it was
            # fenced, and the metadata it bootstrapped from has no broker 1), and not a
            # reason to stop: two of three take every write.
            seen: list = []

            def named() -> bool:
                seen[:] = [{key: (w.health() or {}).get(key) for key in ("status", "broker", "trouble")} for w in (a, b)]
                return seen[1]["broker"] == "connected; broker 1 does not answer" and all(
                    h["status"] == "ok" for h in seen)

            try:
                wait_for(named, 10, "b to name broker 1, both ok", workers=[a, b])
            except AssertionError:
                raise AssertionError(f"with broker 1 down, the workers' health: {seen}") from None
            cluster.start_node(1)

        def two_down() -> None:
            kill(cluster, 2)
            kill(cluster, 3)
            # No write can be accepted: each worker says so (its batches wait; nothing is lost).
            wait_for(lambda: all("min.insync.replicas" in ((w.health() or {}).get("trouble") or "")
                                 and w.health()["status"] == "degraded" for w in (a, b)),
                     30, "both workers degraded", workers=[a, b])
            cluster.start_node(2)
            cluster.start_node(3)

        def rolling_restart() -> None:
            for node in (1, 2, 3):
                cluster.stop_node(node)
                cluster.start_node(node)

        fault("input leader SIGKILLed", leader_killed(f"{prefix}.matches"))
        fault("changelog leader SIGKILLed", leader_killed(f"{prefix}-state-changelog"))
        fault("a broker frozen 20 s", frozen)
        fault("active controller SIGKILLed", controller_killed)
        fault("a worker SIGKILLed and restarted while a broker is down", worker_killed_while_a_broker_is_down)
        fault("two brokers down", two_down)
        fault("rolling restart", rolling_restart)
        assert producer.is_alive(), "the results ran out before the last fault: the pauses measured nothing"
        producer.hurry()

        producer.join(400)
        assert producer.error is None and producer.failed == [], (producer.error, producer.failed[:3])
        assert producer.delivered == len(events)
        try:
            wait_for(lambda: all(league_matches(a, league) == n for league, n in counts.items()), 180,
                     "the stream to drain", workers=[a, b])
        except AssertionError as exc:  # which leagues, as each worker serves them, and the dead letters
            served = {league: (n, league_matches(a, league), league_matches(b, league))
                      for league, n in counts.items() if league_matches(a, league) != n}
            healths = [(w.health() or {}) for w in (a, b)]
            raise AssertionError(f"leagues (expected, a, b) {served}; dead letters "
                                 f"{[h.get('dead_letters') for h in healths]}; applied "
                                 f"{[h.get('applied') for h in healths]}\n{exc}") from None
        assert_same_state(a, ledger)
        assert_same_state(b, ledger)
        wait_for(lambda: watch.ids >= expected_ids, 60, "every rating change read")
        # Copies are allowed: a batch whose commit failed in a fault is applied again and its
        # events sent again with the same ids (consumers drop them by event_id: docs/design.md).
        assert watch.ids == expected_ids, (len(watch.ids), len(expected_ids))
        wait_for(lambda: all((w.health() or {}).get("status") == "ok" for w in (a, b)), 30, "both workers ok",
                 workers=[a, b])
        healths = [worker.health() for worker in (a, b)]
        letters = sum(health["dead_letters"] for health in healths)
        if letters:
            resends = publishers_resends(cluster.bootstrap, prefix, letters, len(events))
            print(f"{resends} dead letters: results the publisher wrote twice (duplicate_match)")
        for health in healths:
            assert health["started_over"] == [], health
    finally:
        watch.stop()
        for worker in (a, b):
            worker.stop()
        cluster.stop()
    assert watch.error is None, watch.error
    alarms = started_over_lines(every)
    assert alarms == [], f"{len(alarms)} started-over lines on a cluster that lost nothing, the first: {alarms[:3]}"
    one_down = {name: pause for name, pause in pauses.items() if name != "two brokers down"}
    assert max(one_down.values()) < ONE_DOWN_PAUSE, pauses
    print("longest pauses (s): " + ", ".join(f"{name} {pause:.1f}" for name, pause in pauses.items())
          + f"; {watch.copies} events sent again")
