"""A worker SIGKILLed at random moments while it applies a stream, restarted
each time (on the same data directory, which holds its last checkpoint, or an
empty one so that everything comes back from the changelog): the final state
is exactly the replay, nothing is lost and nothing applied twice, and every
rating change was published."""

from __future__ import annotations

import asyncio
import random
import time

import orjson
import pytest

from stream_app.leagues import LeagueConfig
from stream_app.stream.store import LocalStore
from tests.support.kafka import SteadyPublisher, ensure_topics, keyed, read_all, records_in, topic_args as topics_of
from tests.support.leagues import (CONFIG, assert_same_history, assert_same_state, league_matches, match_counts, replay_with_event_ids,
                                  stream_events)
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, matches_served, wait_for


pytestmark = pytest.mark.reliability
KILLS = 5


@pytest.mark.parametrize("fresh_dir", [False, True], ids=["same-data-dir", "empty-data-dir"])
def test_sigkill_and_restart_loses_nothing_and_applies_nothing_twice(broker, tmp_path, fresh_dir):
    prefix = unique_name("crash")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    events = stream_events(seed=11 + fresh_dir)
    ledger, expected_ids = replay_with_event_ids(events, LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    total = sum(counts.values())

    def drained(worker: WorkerProcess) -> bool:
        return all(league_matches(worker, league) == n for league, n in counts.items())

    asyncio.run(ensure_topics(broker.url, prefix))
    # Published over about 40 s; the kills land where the worker is in the stream, not
    # where a timer is: kill k once the worker has applied about k/(KILLS+1) of it, so each
    # hits a worker that is applying, however long its restarts take on a busy machine.
    publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches", keyed(events), seconds=40.0)
    publisher.start()
    rng = random.Random(5 + fresh_dir)
    marks = [int(total * (k + rng.uniform(0.6, 1.4)) / (KILLS + 1)) for k in range(KILLS)]
    generation = 0
    spawned = time.time()
    worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "data-0", config_path, name="w0",
                           extra_args=FAST_GROUP)
    kills = 0
    mid_stream = 0  # kills that hit the worker while matches were still unapplied
    recovery = []  # seconds from a restart to its first applied match
    changelog_at_kill = 0  # records in the changelog when the worker was last killed
    taken_up = []  # changelog records each restart read
    try:
        while kills < KILLS:
            wait_for(lambda: (worker.health() or {}).get("applied", 0) > 0 or drained(worker), 120,
                     "the worker to apply matches", workers=[worker])
            if kills:
                health = worker.health()
                if health["first_applied_at"] is not None:
                    recovery.append(health["first_applied_at"] - spawned)
                # On its data directory a restart reads only the changelog past its last
                # checkpoint; on an empty one, all of it.
                taken_up.append(health["take_up_records"])
                if fresh_dir:
                    assert health["take_up_records"] >= 0.9 * changelog_at_kill
                else:
                    assert health["take_up_records"] < 0.5 * changelog_at_kill
            applied = wait_for(lambda: (n := matches_served(worker)) >= marks[kills] and n, 120,
                               f"the worker past {marks[kills]} matches", interval=0.1, workers=[worker])
            worker.kill()
            changelog_at_kill = asyncio.run(records_in(broker.bootstrap, f"{prefix}-state-changelog"))
            kills += 1
            mid_stream += applied < total
            generation += 1 if fresh_dir else 0
            spawned = time.time()
            worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / f"data-{generation}", config_path,
                                   name=f"w{kills}", extra_args=FAST_GROUP)
        publisher.join(120)
        assert publisher.error is None, publisher.error
        wait_for(lambda: drained(worker), 240, "the stream to drain", workers=[worker])
        assert_same_state(worker, ledger)
        assert_same_history(worker, ledger)
        health = worker.health()
        if health["first_applied_at"] is not None:
            recovery.append(health["first_applied_at"] - spawned)
        assert health["duplicates"] == 0  # redeliveries are skipped by offset, not mistaken for producer retries
        assert mid_stream >= KILLS - 1, f"only {mid_stream} of {KILLS} kills hit the worker mid-stream"
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=60, drain=True))
        published = {c["event_id"] for c in changes}
        assert expected_ids <= published, f"{len(expected_ids - published)} rating changes never published"
        assert published <= expected_ids
        print(f"{KILLS} kills ({mid_stream} mid-stream), {total} matches; recovery to first applied match: "
              + ", ".join(f"{r:.1f} s" for r in recovery) + "; changelog records read by each restart: "
              + ", ".join(map(str, taken_up)))
    finally:
        worker.stop()


def test_a_restore_killed_part_way_goes_on_from_what_it_stored(broker, tmp_path):
    """A worker restoring a large changelog onto an empty data directory is
    SIGKILLed in the middle of it, twice; restarted on that directory it reads
    only the rest, and serves exactly the replay."""
    from tests.support.kafka import publish
    from tests.support.leagues import replay_state
    from tests.support.workers import assigned

    prefix = unique_name("restore")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    rng = random.Random(61)
    events = [{"league": f"big-{j % 40:02d}", "match_id": f"m{j:06d}",
               "participants": [{"player": f"p{a}", "rank": 1}, {"player": f"p{b}", "rank": 2}]}
              for j, (a, b) in enumerate(rng.sample(range(1500), 2) for _ in range(120_000))]
    ledger, _ = replay_state([orjson.dumps(e) for e in events], LeagueConfig.from_toml(CONFIG))
    counts = match_counts(ledger)
    asyncio.run(ensure_topics(broker.url, prefix))
    asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(events)))

    def drained(worker: WorkerProcess) -> bool:
        return all(league_matches(worker, league) == n for league, n in counts.items())

    builder = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "built", config_path, name="builder",
                            extra_args=FAST_GROUP)
    worker = builder
    try:
        wait_for(lambda: drained(builder), 300, "the stream applied", workers=[builder])
        builder.kill()
        changelog = asyncio.run(records_in(broker.bootstrap, f"{prefix}-state-changelog"))
        killed_restoring = 0
        for attempt in range(6):
            if killed_restoring == 2:
                break
            worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "restoring", config_path,
                                   name=f"r{attempt}", extra_args=FAST_GROUP)
            # Killed once its take-up has stored a part (take_up_records counts what is stored),
            # before it is done: where the kill lands is decided here, not by a timer.
            health = wait_for(lambda: (h := worker.health()) and (h["take_up_records"] > 0 or h["ready"]) and h,
                              120, "a part of the take-up stored", interval=0.01, workers=[worker])
            worker.kill()
            killed_restoring += not health["ready"]
        assert killed_restoring == 2, "no kill hit a restore in progress"
        # What the killed restores stored: each partition's records up to its local checkpoint.
        store = LocalStore(tmp_path / "restoring" / "state")
        stored = sum(store.checkpoint(p).changelog + 1 for p in range(8))
        store.close()
        assert stored > 0
        worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "restoring", config_path, name="last",
                               extra_args=FAST_GROUP)
        wait_for(lambda: set(assigned(worker)) == set(range(8)), 120, "the last restart to be ready", workers=[worker])
        read = worker.health()["take_up_records"]
        held = asyncio.run(records_in(broker.bootstrap, f"{prefix}-state-changelog"))  # the fences of the restarts too
        assert read <= held - stored, (read, held, stored)  # it went on from what the killed restores stored
        assert_same_state(worker, ledger)
        print(f"restore killed twice part-way; the last restart read {read:,} of {changelog:,} changelog records")
    finally:
        worker.stop()
        builder.stop()
