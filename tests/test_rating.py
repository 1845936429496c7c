"""apply.apply_match: the one path that applies a match, for replay and stream."""

import orjson
import pytest

from stream_app.inputs import BadEvent, parse_match
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.apply import apply_match
from stream_app.rating.errors import DuplicateMatch
from stream_app.rating.history import history_entry

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n[leagues."kart*"]\nalgorithm = "elo-pairwise"\n')


def match(match_id: str, *players: str, league: str = "chess"):
    return parse_match({"league": league, "match_id": match_id,
                        "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players)]})


def test_newcomers_start_from_the_initial_state_and_the_league_record_counts_matches_and_players():
    ledger = Ledger(CONFIG)
    first = apply_match(CONFIG, ledger.tables, match("1", "a", "b"))
    assert first.prior == [None, None] and first.algorithm == "elo"
    assert [c.before for c in first.changes] == [CONFIG.system_for("chess").initial_state()] * 2
    second = apply_match(CONFIG, ledger.tables, match("2", "b", "c"))
    assert second.prior[0] == first.changes[1].after and second.prior[1] is None
    assert ledger.league("chess") == {"algorithm": "elo", "matches": 2, "players": 3, "received": 2}
    assert ledger.placed("chess", "1") is not None and ledger.placed("go", "1") is None


def test_a_match_id_applied_before_is_a_duplicate_and_changes_nothing():
    ledger = Ledger(CONFIG)
    apply_match(CONFIG, ledger.tables, match("1", "a", "b"))
    states = dict(ledger.leagues["chess"])
    with pytest.raises(DuplicateMatch) as caught:
        apply_match(CONFIG, ledger.tables, match("1", "b", "a"))
    assert caught.value.code == "duplicate_match" and caught.value.field == "match_id"
    assert ledger.leagues["chess"] == states and ledger.league("chess")["matches"] == 1
    assert ledger.apply(match("1", "b", "a")) is None and ledger.duplicates == 1  # the replay counts it


def test_a_match_the_system_cannot_rate_is_refused_before_anything_is_saved():
    ledger = Ledger(CONFIG)
    with pytest.raises(BadEvent) as caught:
        apply_match(CONFIG, ledger.tables, match("1", "a", "b", "c"))  # elo rates two players
    assert caught.value.code == "system_rule"
    assert ledger.league("chess") is None and ledger.leagues == {}


@pytest.mark.parametrize("algorithm", ["elo", "elo-pairwise", "elo-mmr"])
def test_systems_without_teams_or_partial_play_refuse_them_naming_the_system(algorithm):
    config = LeagueConfig.from_toml(f'[default]\nalgorithm = "{algorithm}"\n')
    ledger = Ledger(config)
    teams = parse_match({"league": "l", "match_id": "t", "participants": [
        {"player": "a", "rank": 1, "team": "red"}, {"player": "b", "rank": 2, "team": "blue"}]})
    with pytest.raises(BadEvent) as caught:
        apply_match(config, ledger.tables, teams)
    assert caught.value.code == "system_rule" and caught.value.field == "participants[0].team"
    assert f"{algorithm!r} system rates individuals, not teams" in caught.value.message
    assert "weng-lin" in caught.value.message  # where to go instead
    partial = parse_match({"league": "l", "match_id": "w", "participants": [
        {"player": "a", "rank": 1}, {"player": "b", "rank": 2, "weight": 0.5}]})
    with pytest.raises(BadEvent) as caught:
        apply_match(config, ledger.tables, partial)
    assert caught.value.code == "system_rule" and caught.value.field == "participants[1].weight"
    assert ledger.league("l") is None


def test_a_team_match_survives_the_log_with_its_teams_and_weights():
    from stream_app.rating.log_rows import log_entry, match_from_log

    m = parse_match({"league": "l", "match_id": "t", "occurred_at": "2026-01-01T00:00:00Z", "participants": [
        {"player": "a", "score": 3, "team": "red", "weight": 0.25}, {"player": "b", "score": 3, "team": "red"},
        {"player": "c", "score": 1, "team": "blue"}]})
    assert match_from_log("l", log_entry(m)) == m
    plain = match("p", "a", "b")
    assert log_entry(plain)[2] == [["a", 1], ["b", 2]]  # unchanged for individual matches
    assert match_from_log("chess", log_entry(plain)) == plain


def test_a_league_rated_with_another_system_is_refused():
    ledger = Ledger(CONFIG)
    apply_match(CONFIG, ledger.tables, match("1", "a", "b", "c", league="karting"))
    changed = LeagueConfig.from_toml('[default]\nalgorithm = "elo-mmr"\n')
    with pytest.raises(BadEvent) as caught:
        apply_match(changed, ledger.tables, match("2", "a", "b", league="karting"))
    assert caught.value.code == "system_rule" and "elo-pairwise" in caught.value.message


def test_each_participant_gets_a_history_entry_numbered_by_its_match_count():
    ledger = Ledger(CONFIG, keep_history=True)
    apply_match(CONFIG, ledger.tables, match("1", "a", "b"))
    timed = parse_match({"league": "chess", "match_id": "2", "occurred_at": "2026-03-04T05:06:07Z",
                         "participants": [{"player": "b", "rank": 1}, {"player": "c", "rank": 2}]})
    applied = apply_match(CONFIG, ledger.tables, timed)
    written = [(league, player, entry) for (league, player) in ledger.histories for entry in ledger.history(league, player)]
    assert [(league, player, entry["seq"]) for league, player, entry in written] == [
        ("chess", "a", 1), ("chess", "b", 1), ("chess", "b", 2), ("chess", "c", 1)]
    b = written[2][2]
    assert b == {"seq": 2, "match_id": "2", "occurred_at": "2026-03-04T05:06:07Z", "rank": 1,
                 "rating_before": written[1][2]["rating_after"], "rating_after": ledger.state("chess", "b").rating,
                 "cause": "match"}
    assert [history_entry(row) for row in applied.history] == [b, written[3][2]]
    assert written[0][2]["occurred_at"] is None and "uncertainty" not in written[0][2]  # elo has none
    assert ledger.league("chess")["latest_time"] == timed.time


def test_history_entries_carry_the_uncertainty_of_systems_that_have_one_and_none_when_history_max_is_0():
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo-mmr"\n[leagues."quiet"]\nalgorithm = "elo"\nhistory_max = 0\n')
    ledger = Ledger(config, keep_history=True)
    applied = apply_match(config, ledger.tables, match("1", "a", "b", "c"))
    assert [history_entry(row)["uncertainty"] for row in applied.history] == [change.after.sigma for change in applied.changes]
    assert apply_match(config, ledger.tables, match("1", "a", "b", league="quiet")).history == []


def test_no_history_entries_are_built_for_a_state_that_does_not_keep_them():
    ledger = Ledger(CONFIG)  # as `ratings replay` without --history
    assert not ledger.keeps_history
    applied = apply_match(CONFIG, ledger.tables, match("1", "a", "b"))
    assert applied.history == [] and ledger.histories == {}
    assert ledger.state("chess", "a") == applied.changes[0].after


def test_a_history_row_is_compact_and_gives_the_entry_the_api_answers():
    timed = parse_match({"league": "chess", "match_id": "m-9", "occurred_at": "2026-01-01T00:01:00Z",
                         "participants": [{"player": "a", "rank": 2}, {"player": "b", "rank": 1}]})
    ledger = Ledger(LeagueConfig.from_toml('[default]\nalgorithm = "elo-mmr"\n'), keep_history=True)
    ledger.apply(match("0", "a", "b"))
    applied = apply_match(ledger.config, ledger.tables, timed)
    row = applied.history[0]
    entry = history_entry(orjson.loads(orjson.dumps(row)))
    assert entry == {"seq": 2, "match_id": "m-9", "occurred_at": "2026-01-01T00:01:00Z", "rank": 2,
                     "rating_before": applied.changes[0].before.rating, "rating_after": applied.changes[0].after.rating,
                     "uncertainty": applied.changes[0].after.sigma, "cause": "match"}
    assert len(orjson.dumps(row)) < 0.7 * len(orjson.dumps(entry))
    untimed = history_entry(ledger.histories[("chess", "a")][1])
    assert untimed["occurred_at"] is None and untimed["seq"] == 1
