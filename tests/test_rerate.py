"""Voids, corrections and late results (stream_app/rating/, rerate.py), on the replay's
Ledger: the league ends exactly as the replay of the results that count."""

from __future__ import annotations

import random

import orjson
import pytest

from stream_app.inputs import BadEvent, parse_input
from stream_app.published import correction_events
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.apply import apply
from stream_app.rating.errors import DuplicateMatch
from stream_app.rerate import Rerated, proceed
from tests.support.corrections import CONFIG, cleaned, corrected_leagues, run


def same_leagues(one: Ledger, other: Ledger) -> None:
    assert one.leagues.keys() == other.leagues.keys()
    for league, players in one.leagues.items():
        assert {p: s.to_dict() for p, s in players.items()} == {p: s.to_dict() for p, s in other.leagues[league].items()}, league
        for player in players:
            assert one.history(league, player) == other.history(league, player), (league, player)
        for key in ("matches", "players", "latest_time", "season"):
            assert one.records[league].get(key) == other.records[league].get(key), (league, key)
    # Seasons: each start's order key names its arrival, which commands refused or voided shift.
    assert {league: [{k: v for k, v in row.items() if k != "key"} for row in rows]
            for league, rows in one.season_rows.items()} == {
        league: [{k: v for k, v in row.items() if k != "key"} for row in rows] for league, rows in other.season_rows.items()}
    assert one.final_standings() == other.final_standings()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_results_with_voids_corrections_and_late_results_end_as_the_replay_of_the_results_that_count(seed):
    config = LeagueConfig.from_toml(CONFIG)
    docs = corrected_leagues(seed)
    ledger, _, refused = run(docs, config)
    commands = [d for d in docs if "schema" in d]
    assert len(commands) > 20 and ledger.rerates > 20  # the input does what the test is about
    assert {e.code for e in refused} <= {"unknown_match", "duplicate_match", "season_exists"}
    assert any(e.code == "unknown_match" for e in refused) and any(e.code == "season_exists" for e in refused)
    assert len(ledger.season_rows["month"]) >= 4 and len(ledger.season_rows["split"]) >= 3
    expected, _, none_refused = run(cleaned(docs, config), config)
    assert none_refused == [] and expected.rerates == 0
    same_leagues(ledger, expected)


def test_the_last_event_per_player_gives_the_corrected_ratings():
    config = LeagueConfig.from_toml(CONFIG)
    ledger, events, _ = run(corrected_leagues(4), config)
    view: dict[tuple[str, str], dict] = {}
    for event in events:
        view[(event["league"], event["player"])] = event
    rated = {key: (e["rating_after"], e["matches"]) for key, e in view.items() if e["matches"] > 0}
    assert rated == {(league, p): (s.rating, s.matches) for league, players in ledger.leagues.items() for p, s in players.items()}
    corrections = [e for e in events if e.get("cause") == "correction"]
    assert corrections and any(e["matches"] == 0 for e in view.values()) is (len(view) > len(rated))
    assert len({e["event_id"] for e in events}) == len(events)  # a match corrected twice still has distinct ids


def result(match_id: str, *players: str, league: str = "chess", at: str | None = None) -> dict:
    doc = {"league": league, "match_id": match_id, "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players)]}
    if at is not None:
        doc["occurred_at"] = at
    return doc


def void(match_id: str, league: str = "chess") -> dict:
    return {"schema": "match-voided.v1", "league": league, "match_id": match_id, "reason": "annulled"}


def test_a_void_gives_each_changed_player_one_correction_from_the_last_rating_published():
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\nsnapshot_every = 2\n')
    docs = [result("1", "a", "b"), result("2", "b", "c"), result("3", "c", "a"), result("4", "d", "e")]
    ledger, events, _ = run(docs, config)
    published = {e["player"]: e["rating_after"] for e in events}
    done = apply(config, ledger.tables, parse_input(orjson.dumps(void("1"))))
    assert isinstance(done, Rerated) and done.revision == 1
    assert sorted(c.player for c in done.corrections) == ["a", "b", "c"]  # d and e never met them
    for c in done.corrections:
        assert c.published.rating == published[c.player]
    expected, _, _ = run(docs[1:], config)
    same_leagues(ledger, expected)
    assert ledger.records["chess"]["matches"] == 3 and ledger.records["chess"]["revision"] == 1


def test_a_player_whose_only_match_is_voided_has_no_rating_and_a_0_match_correction():
    config = LeagueConfig.defaults()
    ledger, _, _ = run([result("1", "a", "b"), result("2", "b", "c")], config)
    done = apply(config, ledger.tables, parse_input(orjson.dumps(void("1"))))
    assert "a" not in ledger.leagues["chess"] and ledger.history("chess", "a") == []
    [event] = [e for e in correction_events(done.algorithm, "chess", "1", done.revision, done.corrections,
                                            config.system_for("chess").initial_state()) if e["player"] == "a"]
    assert event["matches"] == 0 and event["rating_after"] == config.system_for("chess").initial_state().rating and event["cause"] == "correction"
    assert ledger.records["chess"]["players"] == 2


def test_commands_for_matches_not_applied_are_unknown_and_a_correction_that_changes_nothing_is_a_duplicate():
    config = LeagueConfig.defaults()
    ledger, _, _ = run([result("1", "a", "b")], config)
    for doc in (void("2"), void("1", league="go")):
        with pytest.raises(BadEvent) as caught:
            apply(config, ledger.tables, parse_input(orjson.dumps(doc)))
        assert caught.value.code == "unknown_match" and caught.value.field == "match_id"
    same = {"schema": "match-corrected.v1", "league": "chess", "match_id": "1", "reason": "retry",
            "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}
    with pytest.raises(DuplicateMatch):
        apply(config, ledger.tables, parse_input(orjson.dumps(same)))
    apply(config, ledger.tables, parse_input(orjson.dumps(void("1"))))
    with pytest.raises(BadEvent) as caught:
        apply(config, ledger.tables, parse_input(orjson.dumps(void("1"))))
    assert caught.value.code == "unknown_match" and "was voided" in caught.value.message
    with pytest.raises(DuplicateMatch):  # a voided match_id stays used
        apply(config, ledger.tables, parse_input(orjson.dumps(result("1", "a", "b"))))
    wrong = dict(same, participants=[{"player": "a", "rank": 1}, {"player": "b", "rank": 2}, {"player": "c", "rank": 3}],
                 match_id="x")
    ledger2, _, _ = run([result("x", "a", "b")], config)
    with pytest.raises(BadEvent) as caught:  # elo rates two players: the correction is refused as a result would be
        apply(config, ledger2.tables, parse_input(orjson.dumps(wrong)))
    assert caught.value.code == "system_rule"


def test_a_late_result_is_appended_or_placed_in_time_order_as_the_league_says():
    base = [result("1", "a", "b", at="2026-01-01T10:00:00Z"), result("2", "b", "c", at="2026-01-01T12:00:00Z")]
    late = result("0", "c", "a", at="2026-01-01T09:00:00Z")
    appending = LeagueConfig.defaults()
    ledger, _, _ = run([*base, late], appending)
    expected, _, _ = run([*base, late], appending)
    assert ledger.rerates == 0 and ledger.leagues == expected.leagues
    in_order = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\nlate_results = "in_order"\n')
    ledger, events, _ = run([*base, late], in_order)
    expected, _, _ = run([late, *base], in_order)
    assert ledger.rerates == 1 and expected.rerates == 0
    same_leagues(ledger, expected)
    assert {e["player"] for e in events if e.get("cause") == "correction"} == {"a", "b", "c"}


def test_a_re_rate_starts_at_the_last_boundary_before_the_change():
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\nsnapshot_every = 10\n')
    rng = random.Random(5)
    docs = [result(str(i), *rng.sample("abcdefgh", 2)) for i in range(100)]
    ledger, _, _ = run(docs, config)
    assert ledger.records["chess"]["boundary"] == [9, 90] and len(ledger.boundaries["chess"]) == 9
    done = apply(config, ledger.tables, parse_input(orjson.dumps(void("73"))))
    assert done.reapplied == 29  # results 70..99 but the voided one: boundary 7 opened at result 70
    expected, _, _ = run([d for d in docs if d["match_id"] != "73"], config)
    same_leagues(ledger, expected)
    assert ledger.boundaries["chess"].keys() == expected.boundaries["chess"].keys()


@pytest.mark.parametrize("seed", [0, 6])
@pytest.mark.parametrize("budget", [1, 9, 10, 40])
def test_a_re_rate_in_parts_ends_as_in_one(budget, seed):
    """With a budget (participant results per part), a re-rate stops and saves its
    job; rerate.proceed goes on from there; the end is the same as in one part."""
    config = LeagueConfig.from_toml(CONFIG)
    docs = corrected_leagues(seed)
    whole, events, _ = run(docs, config)
    parts = Ledger(config, keep_history=True)
    stopped = 0
    published = []
    for doc in docs:
        try:
            done = apply(config, parts.tables, parse_input(orjson.dumps(doc)), budget)
        except BadEvent:
            continue
        league = doc["league"]
        while done is None:
            stopped += 1
            assert parts.tables.job(league)["next"] is not None
            done = proceed(config, parts.tables, league, budget)
        assert league not in parts.tables.jobs()
        if isinstance(done, Rerated):
            published += correction_events(done.algorithm, league, done.match_id, done.revision, done.corrections,
                                           config.system_for(league).initial_state())
    assert stopped > 0
    same_leagues(parts, whole)
    assert [e for e in published] == [e for e in events if e.get("cause") == "correction"]


def test_a_newcomer_after_a_boundary_writes_no_snapshot_row_and_a_re_rate_from_before_they_joined_leaves_them_out():
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\nsnapshot_every = 2\n')
    docs = [result("1", "a", "b"), result("2", "a", "b"), result("3", "a", "c"), result("4", "c", "d"),
            result("5", "d", "b")]
    ledger, _, _ = run(docs, config)
    rows = ledger.snapshot_rows["chess"]
    assert all(record is not None for by_player in rows.values() for record in by_player.values())
    # Matches 3 and 4 are in interval 1: c and d join in it (no rows), a's first write there keeps a row.
    assert set(rows[1]) == {"a"} and set(rows[2]) == {"b", "d"}
    assert ledger.since["chess"] == {"c": 1, "d": 1}  # the boundary each joined after
    # Match 4 is after boundary 1: the re-rate starts there, where c and d had no state yet
    # (they have no snapshot rows at all: their records say so).
    done = apply(config, ledger.tables, parse_input(orjson.dumps(void("4"))))
    assert isinstance(done, Rerated)
    expected, _, _ = run([*docs[:3], docs[4]], config)
    same_leagues(ledger, expected)
    assert ledger.since["chess"] == expected.since["chess"]


def test_a_players_record_at_a_boundary_follows_since_then_the_first_snapshot_row_then_the_record():
    from stream_app.engine.elo import EloState
    from stream_app.rating.records import NO_SNAPSHOT, PlayerRecord
    from stream_app.rating.snapshots import at_boundary

    now = PlayerRecord(EloState(rating=1510.0, matches=3), None, snap=4, since=2)
    then = PlayerRecord(EloState(rating=1490.0, matches=1), None, snap=2, since=2)
    assert at_boundary(2, now, then) is None  # joined after boundary 2: no state at it, whatever the rows
    assert at_boundary(3, now, then) is then
    assert at_boundary(3, now, None) is None  # a row written before since existed: none then
    assert at_boundary(3, now, NO_SNAPSHOT) is now
    assert at_boundary(3, None, then) is then
