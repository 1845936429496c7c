"""A worker SIGKILLed at random moments while it applies a stream, restarted
each time (on the same data directory, or an empty one so that everything comes
back from the changelogs): the final state is exactly the replay, nothing is
lost and nothing applied twice, and every rating change was published."""

from __future__ import annotations

import asyncio
import random
import time

import orjson
import pytest

from conftest import unique_name
from streamkit import SteadyPublisher, WorkerProcess, wait_for
from stream_app.config import LeagueConfig
from stream_app.events import event_id, parse_match
from stream_app.replay import Ledger
from stream_app.sample import multi_player_league, two_player_league
from test_stream_e2e import CONFIG, _ensure, _match_counts, assert_same_state, league_matches, publish, read_all


pytestmark = pytest.mark.reliability


def stream_events(seed: int) -> list[dict]:
    rng = random.Random(seed)
    leagues = [list(two_player_league(f"chess-{i}", 30, 700, rng)) for i in range(6)]
    leagues += [list(multi_player_league(f"kart-{i}", 16, 60, 6, rng)) for i in range(2)]
    leagues += [list(multi_player_league("arena-1", 60, 20, 40, rng))]
    merged, cursors = [], [0] * len(leagues)
    while any(c < len(l) for c, l in zip(cursors, leagues)):
        i = rng.choice([k for k, l in enumerate(leagues) if cursors[k] < len(l)])
        merged.append(leagues[i][cursors[i]])
        cursors[i] += 1
    return merged


@pytest.mark.parametrize("fresh_dir", [False, True], ids=["same-data-dir", "empty-data-dir"])
def test_sigkill_and_restart_loses_nothing_and_applies_nothing_twice(broker, tmp_path, fresh_dir):
    prefix = unique_name("crash")
    topic_args = ["--match-topic", f"{prefix}.matches", "--changes-topic", f"{prefix}.changes", "--dlq-topic", f"{prefix}.dlq"]
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    config = LeagueConfig.from_toml(CONFIG)
    events = stream_events(seed=11 + fresh_dir)
    lines = [orjson.dumps(e) for e in events]
    ledger = Ledger(config)
    expected_ids = set()
    for line in lines:
        match = parse_match(line)
        if ledger.apply(match) is not None:
            expected_ids.update(event_id(match.league, match.match_id, p.player) for p in match.participants)
    counts = _match_counts(ledger)
    total = sum(counts.values())

    asyncio.run(_ensure(broker, prefix))
    # Published over about 30 s, so that the kills hit a worker in the middle of a stream.
    publisher = SteadyPublisher(broker.bootstrap, f"{prefix}.matches",
                                [(e["league"].encode(), l) for e, l in zip(events, lines)], seconds=30.0)
    publisher.start()
    rng = random.Random(5 + fresh_dir)
    generation = 0
    worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "data-0", config_path, name="w0")
    kills = 0
    mid_stream = 0  # kills that hit the worker while matches were still unapplied
    try:
        while kills < 3:
            # Let it get going, then kill it at a random moment while it applies.
            wait_for(lambda: (worker.health() or {}).get("applied", 0) > 0, 120, "the worker to apply matches", workers=[worker])
            time.sleep(rng.uniform(1.0, 4.0))
            applied = sum(max(0, league_matches(worker, l)) for l in counts)
            worker.kill()
            kills += 1
            mid_stream += applied < total
            if applied >= total:
                break  # already drained: later kills would not hit in-flight work
            generation += 1 if fresh_dir else 0
            worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / f"data-{generation}", config_path,
                                   name=f"w{kills}")
        publisher.join(120)
        assert publisher.error is None, publisher.error
        if not worker.alive():
            worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / f"data-{generation + 1}", config_path, name="final")
        wait_for(lambda: all(league_matches(worker, l) == n for l, n in counts.items()), 240, "the stream to drain",
                 workers=[worker])
        assert_same_state(worker, ledger)
        health = worker.health()
        assert health["duplicates"] == 0  # redeliveries are skipped by offset, not mistaken for producer retries
        assert mid_stream >= 1, "no kill hit the worker mid-stream: the test proved nothing"
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(expected_ids), timeout=60, drain=True))
        published = {c["event_id"] for c in changes}
        assert expected_ids <= published, f"{len(expected_ids - published)} rating changes never published"
        assert published <= expected_ids
    finally:
        worker.stop()
