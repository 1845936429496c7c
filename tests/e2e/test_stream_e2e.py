"""End to end against the real embedded broker and real worker processes:
the stream's state equals `ratings replay` of the same events, exactly."""

from __future__ import annotations

import asyncio
import signal

import jsonschema
import orjson
import pytest

from stream_app.inputs import load_schema
from stream_app.leagues import LeagueConfig
from tests.support.kafka import ensure_topics, group_offsets, keyed, publish, read_all, topic_args
from tests.support.leagues import CONFIG, assert_same_state, league_events, league_matches, match_counts, replay_state
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, assigned, wait_for


@pytest.fixture
def setup(broker, tmp_path):
    prefix = unique_name("e2e")
    topics = topic_args(prefix)
    config = tmp_path / "leagues.toml"
    config.write_text(CONFIG)
    return prefix, topics, config


def test_stream_equals_replay_with_events_dead_letters_and_metrics(broker, tmp_path, setup):
    prefix, topic_args, config_path = setup
    config = LeagueConfig.from_toml(CONFIG)
    events = league_events(seed=1)
    lines = [orjson.dumps(e) for e in events]
    records = keyed(events)
    bad = [
        (b"chess", b"{not json"),
        (b"chess", orjson.dumps({"league": "chess", "match_id": "three", "participants": [
            {"player": "a", "rank": 1}, {"player": "b", "rank": 2}, {"player": "c", "rank": 3}]})),
        (b"chess", orjson.dumps({"league": "chess", "match_id": "x", "participants": [{"player": "a", "rank": 0}, {"player": "b", "rank": 1}]})),
        (b"chess", b"\xff\xfe\xfd"),
        (b"chess", lines[0]),  # a producer's retry: same match_id in the same league
        # Teams: a team match where the system has none, a team whose members disagree, a single team.
        (b"chess", orjson.dumps({"league": "chess", "match_id": "pairs", "participants": [
            {"player": "a", "rank": 1, "team": "x"}, {"player": "b", "rank": 2, "team": "y"}]})),
        (b"team", orjson.dumps({"league": "team", "match_id": "split", "participants": [
            {"player": "a", "rank": 1, "team": "x"}, {"player": "b", "rank": 2, "team": "x"},
            {"player": "c", "rank": 3, "team": "y"}]})),
        (b"team", orjson.dumps({"league": "team", "match_id": "alone", "participants": [
            {"player": "a", "rank": 1, "team": "x"}, {"player": "b", "rank": 1, "team": "x"}]})),
    ]
    # Interleave the bad ones among the valid ones.
    for i, item in enumerate(bad):
        records.insert(50 + 40 * i, item)
    # A valid event published under the wrong key: the worker re-keys it by league.
    stray = {"league": "solo", "match_id": "s-1", "participants": [{"player": "x", "rank": 1}, {"player": "y", "rank": 2}]}
    from stream_app.stream.partitioner import league_partition

    wrong_key = next(k for k in (f"wrong-{i}" for i in range(100)) if league_partition(k, 8) != league_partition("solo", 8))
    records.append((wrong_key.encode(), orjson.dumps(stray)))
    all_lines = [value for _, value in records]
    ledger, invalid = replay_state(all_lines, config)
    assert invalid == 7 and ledger.duplicates == 1

    worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "w1", config_path, name="w1")
    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", records))
        counts = match_counts(ledger)
        wait_for(lambda: all(league_matches(worker, l) == n for l, n in counts.items()),
                 180, "the stream to drain", workers=[worker])
        assert_same_state(worker, ledger)

        # Extras: soft rating (pairwise) and uncertainty (elo-mmr) served as replay computes them.
        snap = ledger.snapshot()
        for league, extra in (("karting", "soft_rating"), ("arena", "uncertainty")):
            player = sorted(snap[league])[0]
            status, body = worker.get(f"/leagues/{league}/players/{player}")
            assert status == 200 and body[extra] == snap[league][player][extra] and body["rating"] == snap[league][player]["rating"]

        # rating-changed events: one per participant per applied match, valid, unique ids, adding up.
        expected_changes = ledger.changes_published
        changes = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, expected_changes))
        validator = jsonschema.Draft202012Validator(load_schema("rating-changed.v1"))
        for event in changes:
            validator.validate(event)
        assert len(changes) == expected_changes
        assert len({e["event_id"] for e in changes}) == expected_changes
        last: dict[tuple[str, str], dict] = {}
        for event in changes:
            last[(event["league"], event["player"])] = event
        for (league, player), event in last.items():
            assert event["rating_after"] == snap[league][player]["rating"]
            assert event["matches"] == snap[league][player]["matches"]

        # Dead letters: each bad input with its reason.
        letters = asyncio.run(read_all(broker.bootstrap, f"{prefix}.dlq", 8, 8))
        dl_validator = jsonschema.Draft202012Validator(load_schema("dead-letter.v1"))
        for letter in letters:
            dl_validator.validate(letter)
        assert sorted(l["reason"] for l in letters) == sorted(
            ["invalid_json", "system_rule", "schema_violation", "invalid_encoding", "duplicate_match",
             "system_rule", "inconsistent_standings", "invalid_teams"])
        by_match = {l["match_id"]: l for l in letters if l.get("match_id") in ("pairs", "split", "alone")}
        assert by_match["pairs"]["field"] == "participants[0].team" and "'elo' system" in by_match["pairs"]["message"]
        assert by_match["split"]["field"] == "participants[1].rank"
        assert by_match["alone"]["field"] == "participants" and "at least 2 teams" in by_match["alone"]["message"]

        # Metrics match what was processed; once drained, no partition lags.
        def lag_lines():
            text = worker.get("/metrics")[1]
            lines = [l for l in text.splitlines() if l.startswith("ratings_consumer_lag{") and f"{prefix}.matches\"" in l]
            return lines if len(lines) == 8 and all(l.endswith(" 0.0") for l in lines) else None

        wait_for(lag_lines, 30, "consumer lag 0 on all 8 input partitions", workers=[worker])
        # The checkpoints are committed to the consumer group too (for Kafka's own tools):
        # every input partition at its end, i.e. as many offsets as records were published.
        wait_for(lambda: sum(asyncio.run(group_offsets(broker.bootstrap, prefix, f"{prefix}.matches")).values()) == len(records),
                 30, "the group's committed offsets at the end of the input", workers=[worker])
        status, text = worker.get("/metrics")
        assert status == 200
        counts = match_counts(ledger)
        for league, n in counts.items():
            algorithm = config.rule_for(league).algorithm
            assert f'ratings_matches_applied_total{{algorithm="{algorithm}",league="{league}"}} {float(n)}' in text
        assert 'ratings_duplicate_matches_total{algorithm="elo",league="chess"} 1.0' in text
        assert 'reason="system_rule"' in text and "ratings_processing_latency_seconds_bucket" in text
        assert "ratings_forwarded_events_total 1.0" in text
        assert f'ratings_input_records_total{{topic="{prefix}.matches"}} {float(len(records))}' in text
        assert f'ratings_input_records_total{{topic="{prefix}.matches-by-league"}} 1.0' in text  # the re-keyed one
        assert f'ratings_league_players{{algorithm="elo-mmr",league="arena"}} {float(len(snap["arena"]))}' in text

        # The API: errors are JSON with the right status.
        assert worker.get("/leagues/nope/leaderboard")[0] == 404
        assert worker.get("/leagues/chess/players/nobody")[0] == 404
        assert worker.get("/leagues/bad%20id/leaderboard")[0] == 400
        assert worker.get("/leagues/chess/leaderboard?limit=100001")[0] == 400
        status, page = worker.get("/leagues/chess/leaderboard?limit=5&offset=5")
        assert status == 200 and [r["rank"] for r in page["players"]] == [6, 7, 8, 9, 10]
        assert worker.get("/health")[1]["status"] == "ok"

        # `ratings leaderboard` prints the table from the API.
        import subprocess
        import sys

        done = subprocess.run([sys.executable, "-m", "stream_app.cli", "leaderboard", "chess", "--limit", "3",
                               "--web-port", str(worker.port)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        top = sorted(snap["chess"].items(), key=lambda kv: (-kv[1]["rating"], kv[0]))[:3]
        lines = done.stdout.splitlines()
        assert lines[0] == f"chess ({len(snap['chess'])} players, {len(snap['chess'])} ranked)"  # no eligibility rules
        for line, (player, state) in zip(lines[2:], top):
            assert line.split()[1] == player and float(line.split()[2]) == round(state["rating"], 1)
        missing = subprocess.run([sys.executable, "-m", "stream_app.cli", "leaderboard", "nope",
                                  "--web-port", str(worker.port)], capture_output=True, text=True, timeout=60)
        assert missing.returncode == 1 and "not found" in missing.stderr
    finally:
        worker.stop()


def test_two_workers_share_partitions_and_a_fresh_worker_restores_from_changelogs(broker, tmp_path, setup):
    """Two workers split the partitions and answer for any league; one is killed
    (SIGKILL) and a worker with an empty data directory takes its partitions over,
    restoring them from the changelogs: the final state is exactly the replay."""
    prefix, topic_args, config_path = setup
    config = LeagueConfig.from_toml(CONFIG)
    first, second = league_events(seed=2), league_events(seed=3)
    # The second half continues the same leagues with new match ids.
    for e in second:
        e["match_id"] = "b-" + e["match_id"]
    ledger_half, _ = replay_state([orjson.dumps(e) for e in first], config)
    ledger_all, _ = replay_state([orjson.dumps(e) for e in first + second], config)

    a = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "a", config_path, name="a")
    b = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "b", config_path, name="b")
    c = None
    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        wait_for(lambda: assigned(a) and assigned(b) and assigned(a) | assigned(b) == set(range(8)),
                 120, "two workers to share the partitions", workers=[a, b])
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first)))
        counts = match_counts(ledger_half)
        wait_for(lambda: all(league_matches(a, l) == n for l, n in counts.items()), 180, "the first half", workers=[a, b])
        # Either worker answers for every league (requests are routed to the owner).
        assert_same_state(a, ledger_half)
        assert_same_state(b, ledger_half)

        a.kill()
        c = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "c", config_path, name="c")
        wait_for(lambda: assigned(c) and assigned(b) | assigned(c) == set(range(8)), 180,
                 "a fresh worker to take over", workers=[b, c])
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(second)))
        counts = match_counts(ledger_all)
        wait_for(lambda: all(league_matches(c, l) == n for l, n in counts.items()), 180, "the second half", workers=[b, c])
        assert_same_state(c, ledger_all)
        assert_same_state(b, ledger_all)
        # Now c, which started with an empty data directory, takes every partition:
        # all league state it serves comes back from the changelogs.
        b.stop(signal.SIGTERM)
        wait_for(lambda: assigned(c) == set(range(8)), 120, "the fresh worker to own every partition", workers=[c])
        assert c.health()["take_up_records"] > 0
        assert_same_state(c, ledger_all)
    finally:
        for w in (a, b, c):
            if w is not None:
                w.stop()
