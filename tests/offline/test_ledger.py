"""The replay's Ledger (offline/ledger.py) through its own interface: results,
duplicates, voids, corrections and late results, seasons and history, each
checked against an independent computation (a system's `rate` applied by hand,
or a second Ledger over only the results that count)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from stream_app.engine import Match, Participant
from stream_app.inputs import BadEvent, Correction, SeasonStart, Void
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.rating.records import VOIDED
from stream_app.rerate import Rerated

CONFIG = LeagueConfig.from_toml("""
[default]
algorithm = "elo"
snapshot_every = 3

[leagues."late*"]
algorithm = "elo"
late_results = "in_order"
snapshot_every = 3

[leagues."split*"]
algorithm = "elo"
season = "manual"
season_reset = {shrink = 0.5, toward = "mean"}

[leagues."short*"]
algorithm = "elo"
history_max = 2
""")
PLAYERS = ["ann", "ben", "cat", "dan", "eve"]


def match(league: str, match_id: str, winner: str, loser: str, time: float | None = None) -> Match:
    return Match(league, match_id, (Participant(winner, 1), Participant(loser, 2)), time)


def matches(league: str, count: int, seed: int = 0, start: float = 1_000_000.0) -> list[Match]:
    rng = random.Random(seed)
    return [match(league, f"m{i:03}", *rng.sample(PLAYERS, 2), time=start + 60 * i) for i in range(count)]


def ledger_of(items, config: LeagueConfig = CONFIG, keep_history: bool = False) -> Ledger:
    ledger = Ledger(config, keep_history=keep_history)
    for item in items:
        ledger.apply(item)
    return ledger


def states(ledger: Ledger) -> dict[str, dict[str, dict]]:
    return {league: {p: s.to_dict() for p, s in players.items()} for league, players in ledger.leagues.items()}


def test_each_result_is_the_systems_rate_of_the_players_states_before_it():
    ledger = Ledger(CONFIG)
    system = CONFIG.system_for("chess")
    by_hand: dict[tuple[str, str], object] = {}
    results = matches("chess", 12) + [match("go", "m000", "ann", "ben")]  # another league: its own players
    for item in results:
        expected = system.rate(item, [by_hand.get((item.league, p.player)) or system.initial_state()
                                      for p in item.participants])
        changes = ledger.apply(item)
        assert [(c.player, c.after.to_dict()) for c in changes] == [(c.player, c.after.to_dict()) for c in expected]
        by_hand.update({(item.league, c.player): c.after for c in expected})
    assert ledger.applied == len(results) and ledger.duplicates == 0
    assert ledger.snapshot() == {league: {p: s.public() for (lg, p), s in by_hand.items() if lg == league}
                                 for league in ("chess", "go")}
    assert ledger.player_count == len(by_hand)
    assert ledger.records["chess"]["matches"] == 12


def test_a_repeated_match_id_is_counted_as_a_duplicate_and_changes_nothing():
    results = matches("chess", 6)
    ledger = Ledger(CONFIG)
    # What a replay counts as changes published: one per participant of each result applied.
    published = sum(len(ledger.apply(m) or []) for m in results)
    before = states(ledger)
    again = match("chess", results[2].match_id, "eve", "dan", results[-1].time)  # other standings, same id
    assert ledger.apply(again) is None
    assert ledger.apply(results[4]) is None
    assert (ledger.duplicates, ledger.applied, published) == (2, 6, 12)
    assert states(ledger) == before
    assert ledger.apply(match("go", results[2].match_id, "eve", "dan")) is not None  # ids are per league


def test_a_void_ends_as_the_replay_without_the_voided_result():
    results = matches("chess", 10, seed=1)
    ledger = ledger_of(results)
    done = ledger.apply(Void("chess", results[4].match_id, "annulled"))
    assert isinstance(done, Rerated) and done.reapplied > 0
    assert (ledger.rerates, ledger.applied) == (1, 10)
    without = ledger_of(results[:4] + results[5:])
    assert states(ledger) == states(without)
    assert ledger.snapshot() == without.snapshot()
    assert ledger.records["chess"]["matches"] == without.records["chess"]["matches"] == 9
    assert ledger.placed("chess", results[4].match_id) == VOIDED
    assert [m.match_id for _, m in ledger.log("chess", b"")] == [m.match_id for m in results if m is not results[4]]
    with pytest.raises(BadEvent):  # a match the league never had
        ledger.apply(Void("chess", "no-such-match", "typo"))
    assert ledger.apply(results[4]) is None  # a voided match_id stays taken
    assert states(ledger) == states(without)


def test_a_correction_ends_as_the_replay_with_the_corrected_standings():
    results = matches("chess", 10, seed=2)
    target = results[3]
    fixed = match("chess", target.match_id, target.participants[1].player, target.participants[0].player, target.time)
    ledger = ledger_of(results)
    assert isinstance(ledger.apply(Correction(fixed, "wrong standings")), Rerated)
    expected = ledger_of(results[:3] + [fixed] + results[4:])
    assert states(ledger) == states(expected) != states(ledger_of(results))
    # Correcting it to the standings it already has changes nothing: counted as a duplicate.
    assert ledger.apply(Correction(fixed, "again")) is None
    assert (ledger.duplicates, ledger.rerates) == (1, 1)


def test_a_late_result_in_an_in_order_league_is_rated_at_its_place_in_time():
    results = matches("late", 10, seed=3)
    arrival = results[:2] + results[3:8] + [results[2]] + results[8:]  # results[2] arrives late
    ledger = ledger_of(arrival)
    assert ledger.rerates == 1 and ledger.applied == 10
    assert states(ledger) == states(ledger_of(results))
    appended = ledger_of([m for m in arrival if m.league == "late"], LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n'))
    assert states(appended)["late"] != states(ledger)["late"]  # the order made a difference: the test means something


def test_history_is_kept_only_when_asked_and_follows_every_change():
    results = matches("chess", 8, seed=4)
    kept = Ledger(CONFIG, keep_history=True)
    changes = {p: [] for p in PLAYERS}
    for m in results:
        for c in kept.apply(m):
            changes[c.player].append((m.match_id, c.before.rating, c.after.rating))
    for player, expected in changes.items():
        assert [(e["match_id"], e["rating_before"], e["rating_after"]) for e in kept.history("chess", player)] == expected
        assert [e["seq"] for e in kept.history("chess", player)] == list(range(1, len(expected) + 1))
    assert all(ledger_of(results).history("chess", p) == [] for p in PLAYERS)
    # history_max keeps each player's last entries only.
    short = ledger_of([match("short", m.match_id, *(p.player for p in m.participants), m.time) for m in results],
                      keep_history=True)
    for player, expected in changes.items():
        assert [e["match_id"] for e in short.history("short", player)] == [e[0] for e in expected][-2:]


def test_a_void_takes_the_history_back_to_the_replay_without_it():
    results = matches("chess", 9, seed=5)
    ledger = ledger_of(results, keep_history=True)
    ledger.apply(Void("chess", results[1].match_id, "annulled"))
    without = ledger_of(results[:1] + results[2:], keep_history=True)
    for player in PLAYERS:
        assert [(e["match_id"], e["rating_after"]) for e in ledger.history("chess", player)] == \
               [(e["match_id"], e["rating_after"]) for e in without.history("chess", player)]


def test_a_seasons_final_standings_are_its_players_at_its_end():
    first, second, third = matches("split", 4, 6), matches("split", 5, 7, 2e6), matches("split", 3, 8, 3e6)
    second = [match("split", "s" + m.match_id, *(p.player for p in m.participants), m.time) for m in second]
    third = [match("split", "t" + m.match_id, *(p.player for p in m.participants), m.time) for m in third]
    s1, s2 = SeasonStart("split", "S1", 1.5e6), SeasonStart("split", "S2", 2.5e6)
    ledger = ledger_of(first + [s1] + second + [s2] + third)
    assert [row["name"] for row in ledger.seasons("split")] == ["S1", "S2"]
    ledger.seasons("split").clear()  # a copy
    assert len(ledger.season_rows["split"]) == 2
    at_end = ledger_of(first + [s1] + second).snapshot()["split"]  # S1 as it stood before S2 began
    played = Counter(p.player for m in second for p in m.participants)  # matches in S1
    final = [row for row in ledger.final_standings() if row["season"] == "S1"]
    assert {row["player"]: (row["rating"], row["matches"]) for row in final} == {
        p: (at_end[p]["rating"], n) for p, n in played.items()}
    ranks = [row["rank"] for row in final]
    assert ranks == sorted(ranks) and [row["rating"] for row in final] == sorted((r["rating"] for r in final), reverse=True)
    assert all(row["season"] != "S2" for row in ledger.final_standings())  # S2 has not ended


def test_the_observer_sees_each_result_applied_with_the_states_before_it():
    results = matches("chess", 6, seed=9)
    ledger, seen = Ledger(CONFIG), []
    ledger.observer = lambda m, prior: seen.append((m.match_id, [None if s is None else s.to_dict() for s in prior]))
    expected, states_now = [], {}
    for m in results + [results[0]]:  # the repeat is a duplicate: not observed
        if ledger.apply(m) is not None:
            expected.append((m.match_id, [states_now.get(p.player) for p in m.participants]))
            states_now.update((p.player, ledger.state("chess", p.player).to_dict()) for p in m.participants)
    assert seen == expected and seen[0][1] == [None, None]  # newcomers have no state before


def test_the_views_by_league_are_built_once_and_again_after_any_write_even_one_not_through_the_ledger():
    from stream_app.apply import apply

    ledger = Ledger(LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n'))
    ledger.apply(Match("chess", "1", (Participant("a", 1), Participant("b", 2))))
    first = ledger.leagues
    assert ledger.leagues is first and set(first["chess"]) == {"a", "b"}  # read in loops: not built again
    apply(ledger.config, ledger.tables, Match("chess", "2", (Participant("c", 1), Participant("a", 2))))
    assert set(ledger.leagues["chess"]) == {"a", "b", "c"} and ledger.records["chess"]["matches"] == 2
    assert ledger.leagues["chess"]["a"].matches == 2
