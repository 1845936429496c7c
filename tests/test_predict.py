"""stream_app/predict.py: a match to come, for every system, on states the
systems made themselves (a replay of random results), and the requests it
refuses."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.apply import apply
from stream_app.engine import SYSTEMS, Match, Participant
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.predict import MAX_PLAYERS, PredictionError, parse_sides, predict

PLAYERS = [f"p{i}" for i in range(12)]


def league_of(algorithm: str) -> tuple[LeagueConfig, Ledger]:
    """A league of `algorithm` after 60 random results among PLAYERS (pairs for the
    systems that rate two players; teams for the team systems), p11 never playing."""
    config = LeagueConfig.from_toml(f'[default]\nalgorithm = "{algorithm}"\n')
    system = config.system_for("l")
    ledger = Ledger(config)
    rng = random.Random(algorithm)
    for m in range(60):
        if algorithm in ("elo", "glicko", "glicko2"):
            names = rng.sample(PLAYERS[:11], 2)
            parts = [Participant(names[0], 1), Participant(names[1], rng.choice((1, 2)))]
        elif system.teams:
            names = rng.sample(PLAYERS[:11], 4)
            parts = [Participant(n, 1 if i < 2 else 2, team="x" if i < 2 else "y") for i, n in enumerate(names)]
        else:
            names = rng.sample(PLAYERS[:11], rng.randint(2, 5))
            parts = [Participant(n, i + 1) for i, n in enumerate(names)]
        ledger.apply(Match("l", f"m{m}", tuple(parts), 1_700_000_000.0 + 3600 * m))
    return config, ledger


LEAGUES = {algorithm: league_of(algorithm) for algorithm in sorted(SYSTEMS)}


def sides_strategy(algorithm: str):
    system = LEAGUES[algorithm][0].system_for("l")
    two_only = algorithm in ("elo",)
    n_sides = st.just(2) if two_only else st.integers(2, 4)
    size = st.integers(1, 3) if system.teams else st.just(1)

    @st.composite
    def sides(draw):
        n = draw(n_sides)
        sizes = [draw(size) for _ in range(n)]
        names = draw(st.permutations(PLAYERS))[:sum(sizes)]
        out, at = [], 0
        for k in sizes:
            out.append(names[at:at + k])
            at += k
        return out

    return sides()


def prediction(algorithm: str, sides: list[list[str]]) -> dict:
    config, ledger = LEAGUES[algorithm]
    states = {player: ledger.state("l", player) for side in sides for player in side}
    return predict(config.system_for("l"), "l", sides, states)


@pytest.mark.parametrize("algorithm", sorted(SYSTEMS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_probabilities_sum_to_one_and_follow_the_sides_not_their_order(algorithm, data):
    sides = data.draw(sides_strategy(algorithm))
    doc = prediction(algorithm, sides)
    win = [side["win"] for side in doc["sides"]]
    assert all(0.0 <= p <= 1.0 for p in win) and sum(win) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= doc["quality"] <= 1.0 and 0.0 < doc["rank_probability"] <= 1.0
    assert doc["draw"] is None or 0.0 <= doc["draw"] <= 1.0
    assert sorted(doc["newcomers"]) == sorted(p for side in sides for p in side if p == "p11")
    # The order of the sides and of each side's members changes nothing but the order of the answer.
    order = data.draw(st.permutations(range(len(sides))))
    shuffled = [list(reversed(sides[i])) for i in order]
    again = prediction(algorithm, shuffled)
    assert [s["win"] for s in again["sides"]] == pytest.approx([win[i] for i in order], abs=1e-12)
    assert [s["rank"] for s in again["sides"]] == [doc["sides"][i]["rank"] for i in order]
    assert again["quality"] == pytest.approx(doc["quality"], abs=1e-12)
    # The likeliest winner is ranked first; equal probabilities share a rank.
    best = max(range(len(win)), key=lambda i: win[i])
    assert doc["sides"][best]["rank"] == 1


@pytest.mark.parametrize("algorithm", sorted(SYSTEMS))
def test_the_rating_at_stake_is_what_applying_each_outcome_does(algorithm):
    config, ledger = LEAGUES[algorithm]
    system = config.system_for("l")
    sides = [["p0", "p1"], ["p2", "p3"]] if system.teams else [["p0"], ["p11"]]
    doc = prediction(algorithm, sides)
    for outcome, ranks in (("win", (1, 2)), ("draw", (1, 1)), ("loss", (2, 1))):
        applied = copy.deepcopy(ledger)
        parts = tuple(Participant(player, rank, team=str(n) if system.teams else None)
                      for n, (side, rank) in enumerate(zip(sides, ranks)) for player in side)
        changes = apply(config, applied.tables, Match("l", "to-come", parts)).changes
        done = {change.player: change.after.rating - change.before.rating for change in changes}
        seen_by_second = {"win": "loss", "draw": "draw", "loss": "win"}[outcome]
        for player in sides[0]:
            assert doc["sides"][0]["change"][outcome][player] == done[player]
        for player in sides[1]:
            assert doc["sides"][1]["change"][seen_by_second][player] == done[player]


@pytest.mark.parametrize("algorithm", sorted(SYSTEMS))
def test_a_stronger_side_is_the_likelier_winner_and_an_even_match_the_best(algorithm):
    config, ledger = LEAGUES[algorithm]
    system = config.system_for("l")
    players = ledger.leagues["l"]
    strong, weak = max(players, key=lambda p: players[p].rating), min(players, key=lambda p: players[p].rating)
    doc = prediction(algorithm, [[strong], [weak]])
    assert doc["sides"][0]["win"] > 0.5 > doc["sides"][1]["win"] and doc["sides"][0]["rank"] == 1
    even = predict(system, "l", [["a"], ["b"]], {})
    assert even["sides"][0]["win"] == pytest.approx(0.5) and even["newcomers"] == ["a", "b"]
    assert [side["rank"] for side in even["sides"]] == [1, 1]
    if not system.has_uncertainty:  # (with one, uncertainty lowers the quality too: TrueSkill's)
        assert even["quality"] == pytest.approx(1.0) and doc["quality"] < 1.0


def test_a_two_player_system_refuses_teams_and_says_why_it_cannot_state_the_stakes():
    elo = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n').system_for("l")
    with pytest.raises(PredictionError, match="side 1: the 'elo' system rates individuals"):
        predict(elo, "l", [["a", "b"], ["c"]], {})
    points = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\npoints_method = 1\n').system_for("l")
    doc = predict(points, "l", [["a"], ["b"]], {})
    assert doc["sides"][0]["change"] == {} and "score" in doc["change_unavailable"]
    three = predict(elo, "l", [["a"], ["b"], ["c"]], {})  # the model answers; the update needs two
    assert [s["win"] for s in three["sides"]] == pytest.approx([1 / 3] * 3) and "change" not in three["sides"][0]


def test_the_order_probability_and_shared_ranks():
    elo = LeagueConfig.from_toml('[default]\nalgorithm = "elo-pairwise"\n').system_for("l")
    states = {"a": elo.State(rating=400.0), "b": elo.State(rating=0.0), "c": elo.State(rating=0.0)}
    doc = predict(elo, "l", [["b"], ["a"], ["c"]], states)
    assert [s["rank"] for s in doc["sides"]] == [2, 1, 2]
    p = [s["win"] for s in doc["sides"]]
    assert doc["rank_probability"] == pytest.approx(p[1] * p[0] / (p[0] + p[2]))


@pytest.mark.parametrize("values, words", [
    ([], "at least two sides"),
    (["a"], "at least two sides"),
    (["a", "a"], "player 'a' is on sides 1 and 2"),
    (["a,a", "b"], "player 'a' is twice on the same side"),
    (["a,", "b"], "side 1: an empty id"),
    (["a", "b c"], "side 2: 'b c'"),
    (["a", ",".join(f"p{i}" for i in range(MAX_PLAYERS))], "at most 1,000 players"),
])
def test_bad_sides_name_the_parameter_and_the_rule(values, words):
    with pytest.raises(PredictionError) as caught:
        parse_sides(values)
    assert caught.value.parameter == "team" and words in str(caught.value)


def test_good_sides_are_split_by_commas():
    assert parse_sides(["a,b", "c"]) == [["a", "b"], ["c"]]


@pytest.mark.parametrize("algorithm", [a for a in sorted(SYSTEMS) if LEAGUES[a][0].system_for("l").teams])
def test_every_teammates_rating_changes_the_result(algorithm):
    import dataclasses

    config, ledger = LEAGUES[algorithm]
    system = config.system_for("l")
    sides = [["p0", "p1", "p2"], ["p3", "p4", "p5"]]
    states = {player: ledger.state("l", player) for side in sides for player in side}
    win = predict(system, "l", sides, states)["sides"][0]["win"]
    for player in sides[0]:
        stronger = {**states, player: dataclasses.replace(states[player], rating=states[player].rating + 5.0)}
        assert predict(system, "l", sides, stronger)["sides"][0]["win"] > win, player
