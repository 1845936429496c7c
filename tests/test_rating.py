"""rating.apply_match: the one path that applies a match, for replay and stream."""

import pytest

from stream_app.events import BadEvent, parse_match
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.rating import DuplicateMatch, apply_match

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n[leagues."kart*"]\nalgorithm = "elo-pairwise"\n')


def match(match_id: str, *players: str, league: str = "chess"):
    return parse_match({"league": league, "match_id": match_id,
                        "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players)]})


def test_newcomers_start_from_the_initial_state_and_the_league_record_counts_matches_and_players():
    ledger = Ledger(CONFIG)
    first = apply_match(CONFIG, ledger, match("1", "a", "b"))
    assert first.prior == [None, None] and first.algorithm == "elo"
    assert [c.before for c in first.changes] == [CONFIG.system_for("chess").initial_state()] * 2
    second = apply_match(CONFIG, ledger, match("2", "b", "c"))
    assert second.prior[0] == first.changes[1].after and second.prior[1] is None
    assert ledger.league("chess") == {"algorithm": "elo", "matches": 2, "players": 3}
    assert ledger.has_match("chess", "1") and not ledger.has_match("go", "1")


def test_a_match_id_applied_before_is_a_duplicate_and_changes_nothing():
    ledger = Ledger(CONFIG)
    apply_match(CONFIG, ledger, match("1", "a", "b"))
    states = dict(ledger.leagues["chess"])
    with pytest.raises(DuplicateMatch) as caught:
        apply_match(CONFIG, ledger, match("1", "b", "a"))
    assert caught.value.code == "duplicate_match" and caught.value.field == "match_id"
    assert ledger.leagues["chess"] == states and ledger.league("chess")["matches"] == 1
    assert ledger.apply(match("1", "b", "a")) is None and ledger.duplicates == 1  # the replay counts it


def test_a_match_the_system_cannot_rate_is_refused_before_anything_is_saved():
    ledger = Ledger(CONFIG)
    with pytest.raises(BadEvent) as caught:
        apply_match(CONFIG, ledger, match("1", "a", "b", "c"))  # elo rates two players
    assert caught.value.code == "system_rule"
    assert ledger.league("chess") is None and ledger.leagues == {}


def test_a_league_rated_with_another_system_is_refused():
    ledger = Ledger(CONFIG)
    apply_match(CONFIG, ledger, match("1", "a", "b", "c", league="karting"))
    changed = LeagueConfig.from_toml('[default]\nalgorithm = "elo-mmr"\n')
    with pytest.raises(BadEvent) as caught:
        apply_match(changed, ledger, match("2", "a", "b", league="karting"))
    assert caught.value.code == "system_rule" and "elo-pairwise" in caught.value.message
