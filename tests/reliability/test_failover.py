"""Two workers under a steady stream, each the standby of the other's
partitions: the standby is killed and restarted, then the owner is killed and
its partitions are applied again on the survivor, which reads only the tail
of their changelog. The final state is exactly the replay and every rating
change the replay implies is published, no other."""

from __future__ import annotations

import asyncio
import time

import pytest

from stream_app.leagues import LeagueConfig
from stream_app.stream.standby import FLUSH_SECONDS
from tests.support.kafka import SteadyPublisher, ensure_topics, keyed, read_all, records_in, topic_args as topics_of
from tests.support.leagues import (CONFIG, assert_same_history, assert_same_state, league_matches, match_counts, replay_with_event_ids,
                                  stream_events)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, assigned, wait_for

pytestmark = pytest.mark.reliability


def test_the_standby_takes_over_a_killed_owners_partitions_without_a_full_restore(broker, tmp_path):
    prefix = unique_name("failover")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    events = stream_events(seed=41)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    asyncio.run(ensure_topics(broker.url, prefix))

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess(broker.url, topic_args, prefix, tmp_path / name, config_path, name=name,
                             extra_args=FAST_GROUP)

    def split(x: WorkerProcess, y: WorkerProcess) -> bool:
        """Both serve, the partitions split between them, each the other's standby."""
        hx, hy = x.health(), y.health()
        return bool(hx and hy and hx["ready"] and hy["ready"] and hx["assigned_partitions"]
                    and set(hx["assigned_partitions"]) | set(hy["assigned_partitions"]) == set(range(8))
                    and set(hx["standby_partitions"]) == set(hy["assigned_partitions"])
                    and set(hy["standby_partitions"]) == set(hx["assigned_partitions"]))

    # Over 45 s: the owner is killed about 15 s in (more on a busy machine), mid-stream.
    publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches", keyed(events), seconds=45.0)
    a, b = worker("a"), worker("b-0")
    try:
        wait_for(lambda: split(a, b), 120, "two workers, each the other's standby", workers=[a, b])
        publisher.start()
        wait_for(lambda: (a.health() or {}).get("applied", 0) > 0, 60, "matches applied", workers=[a, b])
        # Kill the standby and bring it back on its data directory: it follows again from its
        # checkpoints. Each wait below is two of the standby's checkpoint intervals (standby.FLUSH_SECONDS).
        time.sleep(2 * FLUSH_SECONDS)
        b.kill()
        b = worker("b-0")
        wait_for(lambda: split(a, b), 120, "the standby back", workers=[a, b])
        # Caught up with what a wrote while b was away (on a busy machine that took longer
        # than the wait alone: b's take-up read 1,267 of 4,072 records once), then two flushes.
        wait_for(lambda: (b.health() or {}).get("standby_behind") in range(100), 60, "the standby caught up",
                 workers=[a, b])
        time.sleep(2 * FLUSH_SECONDS)
        # Kill the owner mid-stream: the standby takes its partitions over.
        # (Each asked until it answers: on a busy machine a worker's /health can take over its 2 s.)
        owned_by_a = set(wait_for(a.health, 30, "a's health", workers=[a, b])["assigned_partitions"])
        read_before = wait_for(b.health, 30, "b's health", workers=[a, b])["take_up_records"]
        a.kill()
        killed = time.monotonic()
        wait_for(lambda: assigned(b) == set(range(8)), 60, "the survivor to own every partition", workers=[b])
        took_over = time.monotonic() - killed
        changelog = asyncio.run(records_in(broker.bootstrap, f"{prefix}-state-changelog"))
        read = wait_for(b.health, 30, "b's health", workers=[b])["take_up_records"] - read_before
        # Only the tail past the standby's last checkpoints (a take-up from empty reads them all).
        assert read < 0.2 * changelog * len(owned_by_a) / 8, f"read {read} of {changelog}:\n{b.log_tail(lines=80)}"
        publisher.join(120)
        assert publisher.error is None, publisher.error
        wait_for(lambda: all(league_matches(b, league) == n for league, n in counts.items()), 240,
                 "the stream to drain", workers=[b])
        assert_same_state(b, ledger)
        assert_same_history(b, ledger)
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=60, drain=True))
        published = {c["event_id"] for c in changes}
        assert published == expected_ids, f"{len(expected_ids - published)} missing, {len(published - expected_ids)} extra"
        print(f"failover: {sorted(owned_by_a)} owned by the killed worker, all applying again on the survivor "
              f"after {took_over:.1f} s; it read {read} of {changelog} changelog records")
    finally:
        publisher.join(1)
        for w in (a, b):
            w.stop()
