"""A worker frozen (SIGSTOP) mid-stream for longer than the group's session
timeout: its standby takes its partitions over; then it thaws (SIGCONT) and
whatever it had under way lands late, with its old epoch. The final state is
exactly the replay and every rating change the replay implies is published,
no other.

On Kafka, with other tests beside it, this test once applied matches twice (a league
counted 1,604 to 1,638 matches of 1,320): a batch loop took its last assignment's
partitions up after a rebalance, at the same time as the new assignment's resume,
and both read the changelog into one local store (tests/stream/test_commit.py and
test_batch_loop.py hold that race now)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from stream_app.leagues import LeagueConfig
from tests.support.kafka import SteadyPublisher, ensure_topics, keyed, read_all, topic_args as topics_of
from tests.support.leagues import (CONFIG, assert_same_history, assert_same_state, league_matches, match_counts, replay_with_event_ids,
                                  stream_events)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, assigned, wait_for

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize("seed", [51, 52])
def test_a_frozen_owner_thawed_after_its_partitions_moved_changes_nothing(broker, tmp_path, seed):
    prefix = unique_name("zombie")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    events = stream_events(seed=seed)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    asyncio.run(ensure_topics(broker.url, prefix))
    a = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "a", config_path, name="a", extra_args=FAST_GROUP)
    b = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "b", config_path, name="b", extra_args=FAST_GROUP)
    publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches", keyed(events), seconds=40.0)
    try:
        wait_for(lambda: assigned(a) and assigned(b) and assigned(a) | assigned(b) == set(range(8)), 120,
                 "two workers to share the partitions", workers=[a, b])
        publisher.start()
        wait_for(lambda: (a.health() or {}).get("applied", 0) > 0, 60, "the first worker to apply matches", workers=[a, b])
        time.sleep(3 + seed % 3)
        os.killpg(a.proc.pid, signal.SIGSTOP)
        wait_for(lambda: assigned(b) == set(range(8)), 60, "the standby to take every partition", workers=[b])
        time.sleep(2)
        os.killpg(a.proc.pid, signal.SIGCONT)
        publisher.join(120)
        assert publisher.error is None, publisher.error
        wait_for(lambda: all(league_matches(b, league) == n for league, n in counts.items()), 240,
                 "the stream to drain", workers=[a, b])
        wait_for(lambda: assigned(a) | assigned(b) == set(range(8)), 120, "the group to settle", workers=[a, b])
        assert_same_state(b, ledger)
        assert_same_state(a, ledger)
        assert_same_history(a, ledger)
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=60, drain=True))
        published = {c["event_id"] for c in changes}
        assert published == expected_ids, f"{len(expected_ids - published)} missing, {len(published - expected_ids)} extra"
        ha, hb = a.health(), b.health()
        print(f"zombie: the thawed worker found itself replaced {ha['found_replaced']} times; "
              f"fenced changelog records seen: {ha['fenced_records']} by it, {hb['fenced_records']} by the other")
    finally:
        publisher.join(1)
        os.killpg(a.proc.pid, signal.SIGCONT) if a.alive() else None
        for w in (a, b):
            w.stop()
