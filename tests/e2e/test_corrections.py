"""Correcting the record end to end: two real worker processes on the embedded
broker apply results mixed with voids, corrections and late results (re-rates
in parts of 25 participant results, each committed) in every rating system;
their state and every player's history equal `ratings replay` of the same
input and the replay of the results that count; the rating-changed events,
followed as a consumer would, end at the corrected ratings; each bad command
is a dead letter naming its field and rule."""

from __future__ import annotations

import asyncio

import jsonschema
import pytest

from stream_app.inputs import load_schema
from stream_app.leagues import LeagueConfig
from tests.support.corrections import CONFIG, cleaned, corrected_leagues, run
from tests.support.kafka import read_all
from tests.support.leagues import assert_same_history, assert_same_state
from tests.support.workers import applied_by

# Its tests share the workers of a module fixture: under pytest-xdist, one process runs them all.
pytestmark = pytest.mark.xdist_group("test_corrections")


def void(league: str, match_id: str, **extra) -> dict:
    return {"schema": "match-voided.v1", "league": league, "match_id": match_id, "reason": "test", **extra}


def corrected(league: str, match_id: str, participants: list[dict], **extra) -> dict:
    return {"schema": "match-corrected.v1", "league": league, "match_id": match_id, "reason": "test",
            "participants": participants, **extra}


A, B, C = ({"player": p, "rank": r} for p, r in (("x", 1), ("y", 2), ("z", 3)))

# Each bad command kind, in a league of its own, after one result there.
BAD = [
    {"league": "bad", "match_id": "m1", "participants": [A, B]},
    void("bad", "nope"),  # never applied
    void("bad", "m1", reason=""),  # no reason given
    corrected("bad", "m1", [A, {"player": "x", "rank": 2}]),  # a player twice
    corrected("bad", "m1", [A, {"player": "y", "score": 3}]),  # a rank missing (a score instead)
    corrected("bad", "m1", [A, B, C]),  # elo rates two players
    corrected("bad", "m1", [A, B], occurred_at="yesterday"),
    corrected("bad", "m1", [A, B]),  # changes nothing
    {"schema": "match-deleted.v1", "league": "bad", "match_id": "m1"},
    void("bad", "m1"),
    void("bad", "m1"),  # voided already
    {"schema": "season-started.v1", "league": "bad", "season": "S1", "occurred_at": "2030-01-01T00:00:00Z"},  # no seasons
    {"schema": "season-started.v1", "league": "nowhere", "season": "S1", "occurred_at": "2030-01-01T00:00:00Z"},
    {"schema": "season-started.v1", "league": "month", "season": "S1", "occurred_at": "2030-01-01T00:00:00Z"},  # scheduled
    {"schema": "season-started.v1", "league": "split", "season": "S99", "occurred_at": "2020-01-01T00:00:00Z"},  # too early
]


@pytest.fixture(scope="module")
def served(broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corrections")
    config_path = tmp / "leagues.toml"
    config_path.write_text(CONFIG)
    config = LeagueConfig.from_toml(CONFIG)
    docs = corrected_leagues(21, scale=2) + BAD
    ledger, events, refused = run(docs, config)
    expected = {league: {"matches": record["matches"], "rerates": record.get("revision", 0)}
                for league, record in ledger.records.items()}
    with applied_by(broker, tmp, config_path, docs, "fix", expected=expected, extra_args=["--rerate-part", "25"]) as workers:
        yield workers, docs, config, ledger, events, refused


def test_the_stream_ends_as_the_replay_and_as_the_results_that_count(served):
    (a, b), docs, config, ledger, _, _ = served
    assert ledger.rerates > 40
    for worker in (a, b):
        assert_same_state(worker, ledger)
    assert_same_history(a, ledger, per_league=100)
    counted, _, none_refused = run(cleaned(docs, config), config)
    assert none_refused == [] and counted.rerates == 0
    assert {league: {p: s.to_dict() for p, s in players.items()} for league, players in counted.leagues.items()} == \
           {league: {p: s.to_dict() for p, s in players.items()} for league, players in ledger.leagues.items() if players}
    assert_same_history(a, counted, per_league=100)
    healths = [worker.health() for worker in (a, b)]
    assert sum(h["rerates"] for h in healths) == ledger.rerates and all(h["rerating"] == [] for h in healths)
    assert sum(h["rerate_parts"] for h in healths) > 50  # long ones took several parts, each committed


def test_following_the_rating_changed_events_gives_the_corrected_ratings(broker, served):
    (a, _), _, _, ledger, events, _ = served
    published = asyncio.run(read_all(broker.bootstrap, f"{a.topic_prefix}.changes", 8, len(events)))
    validator = jsonschema.Draft202012Validator(load_schema("rating-changed.v1"))
    for event in published:
        validator.validate(event)
    assert sorted(e["event_id"] for e in published) == sorted(e["event_id"] for e in events)
    last: dict[tuple[str, str], dict] = {}
    for event in published:  # in order per league: one partition per league
        last[(event["league"], event["player"])] = event
    rated = {key: (e["rating_after"], e["matches"]) for key, e in last.items() if e["matches"] > 0}
    assert rated == {(league, p): (s.rating, s.matches) for league, players in ledger.leagues.items() for p, s in players.items()}
    assert sum(e.get("cause") == "correction" for e in published) > 100


def test_each_bad_command_is_a_dead_letter_naming_its_field_and_rule(broker, served):
    (a, _), _, _, _, _, refused = served
    letters = asyncio.run(read_all(broker.bootstrap, f"{a.topic_prefix}.dlq", 8, len(refused)))
    validator = jsonschema.Draft202012Validator(load_schema("dead-letter.v1"), format_checker=jsonschema.FormatChecker())
    for letter in letters:
        validator.validate(letter)
    assert sorted((l["reason"], l["field"], l["message"]) for l in letters) == \
           sorted((e.code, e.field, e.message) for e in refused)
    bad = [(l["reason"], l["field"]) for l in letters if l["league"] == "bad"]
    assert sorted(bad) == sorted([
        ("unknown_match", "match_id"), ("schema_violation", "reason"), ("duplicate_player", "participants[1].player"),
        ("inconsistent_standings", "participants[1].rank"), ("system_rule", "participants"),
        ("schema_violation", "occurred_at"), ("duplicate_match", "match_id"), ("schema_violation", "schema"),
        ("unknown_match", "match_id"), ("season_rule", "league")])
    seasons = sorted((l["reason"], l["league"]) for l in letters if l["reason"].startswith("season") or
                     l["reason"] == "unknown_league")
    assert seasons == [("season_exists", "split"), ("season_rule", "bad"), ("season_rule", "month"),
                       ("season_too_early", "split"), ("unknown_league", "nowhere")]


def test_the_seasons_and_their_final_standings_are_the_replays(served):
    """Through late results, voids and corrections placed before their boundaries."""
    (a, b), _, _, ledger, events, _ = served
    final = ledger.final_standings()
    assert {"month", "split"} <= {row["league"] for row in final}
    for worker in (a, b):
        for league, rows in ledger.season_rows.items():
            status, doc = worker.get(f"/leagues/{league}/seasons")
            assert status == 200, doc
            assert doc["season"] == rows[-1]["name"]
            assert [(s["season"], s["players"]) for s in doc["seasons"]] == [(r["name"], r.get("players")) for r in rows]
            for row in rows[:-1]:
                status, board = worker.get(f"/leagues/{league}/seasons/{row['name']}/leaderboard?limit=1000")
                assert status == 200, board
                assert board["players"] == [{k: v for k, v in kept.items() if k not in ("league", "season")}
                                            for kept in final if (kept["league"], kept["season"]) == (league, row["name"])]
            status, _ = worker.get(f"/leagues/{league}/seasons/{rows[-1]['name']}/leaderboard")
            assert status == 404  # in progress
    assert any(row.get("tier") == "Top 10%" for row in final) and any(row["rank"] is None for row in final)
    assert sum(e.get("cause") == "season_reset" for e in events) > 50
