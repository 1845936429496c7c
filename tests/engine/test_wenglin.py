"""Weng-Lin (stream_app/engine/wenglin.py): cross-checks against openskill 6.2.0 for
all five models (teams, ties, partial-play weights, tau, limit_sigma, margins),
the properties that hold and the ones openskill's formulas break (shown with
concrete matches), big rounds, state round trips and parameter validation."""

from __future__ import annotations

import math
import random

import numpy as np
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_app.engine import InvalidMatch, Match, ParamError, Participant
from stream_app.engine.wenglin import MODELS, WengLin, WengLinParams, WengLinState
from tests.support.openskill import OPENSKILL

PAIRWISE_FULL = ("bradley-terry-full", "thurstone-mosteller-full")
TOL = 1e-6
TAU_SQUARED = (25.0 / 300.0) ** 2

# A team is a list of (mu, sigma, weight); a game is (teams, ranks, scores or None).


def random_game(rng: random.Random, max_teams: int = 8, max_size: int = 5, weights: bool = True,
                scores: bool = False):
    k = rng.randint(2, max_teams)
    partial = weights and rng.random() < 0.5
    teams = [[(rng.uniform(-5.0, 55.0), rng.uniform(0.5, 10.0),
               rng.choice([1.0, rng.uniform(0.05, 1.0)]) if partial else 1.0)
              for _ in range(rng.randint(1, max_size))] for _ in range(k)]
    if scores:
        points = [float(rng.randint(0, 12)) for _ in range(k)]
        return teams, [1 + sum(s > x for s in points) for x in points], points
    return teams, [rng.randint(1, k) for _ in range(k)], None


def to_match(teams, ranks, scores=None, team_ids=None) -> tuple[Match, list[WengLinState]]:
    if team_ids is None:
        team_ids = any(len(team) > 1 for team in teams)
    parts, states = [], []
    for t, team in enumerate(teams):
        for m, (mu, sigma, weight) in enumerate(team):
            parts.append(Participant(f"p{t}.{m}", ranks[t], None if scores is None else scores[t],
                                     f"t{t}" if team_ids else None, weight))
            states.append(WengLinState(mu, sigma, 3))
    return Match("league", "m", tuple(parts)), states


def ours(model, teams, ranks, scores=None, team_ids=None, **params) -> list[tuple[float, float]]:
    system = WengLin(WengLinParams.from_mapping({"model": model, **params}))
    match, states = to_match(teams, ranks, scores, team_ids)
    return [(c.after.rating, c.after.sigma) for c in system.rate(match, states)]


def theirs(model, teams, ranks, scores=None, **params) -> list[tuple[float, float]]:
    no_bounds = params.get("weight_bounds") is False
    if no_bounds:
        del params["weight_bounds"]
    elif "weight_bounds" in params:
        params["weight_bounds"] = tuple(float(b) for b in params["weight_bounds"])
    oracle = OPENSKILL[model](**params)
    if no_bounds:
        oracle.weight_bounds = None  # the compiled constructor refuses None
    ratings = [[oracle.rating(mu=mu, sigma=sigma) for mu, sigma, _ in team] for team in teams]
    weights = [[w for _, _, w in team] for team in teams]
    # Our participants always have a weight (1 by default): openskill only gets
    # weights when one differs from 1.
    weights = weights if any(w != 1.0 for team in weights for w in team) else None
    if scores is not None:
        result = oracle.rate(ratings, scores=scores, weights=weights)
    else:
        result = oracle.rate(ratings, ranks=ranks, weights=weights)
    return [(p.mu, p.sigma) for team in result for p in team]


def assert_close(got, want, tol=TOL):
    assert len(got) == len(want)
    for (mu, sigma), (mu_ref, sigma_ref) in zip(got, want):
        assert abs(mu - mu_ref) <= tol and abs(sigma - sigma_ref) <= tol, (got, want)


# ---- cross-checks against openskill ----

CASES = [
    ({}, False),
    ({"limit_sigma": True}, False),
    ({"tau": 0.7}, False),
    ({"tau": 0.0}, False),
    ({"margin": 2.0}, True),
    ({"margin": 0.5, "limit_sigma": True}, True),
]


@pytest.mark.slow  # many examples against the reference: make test runs it, make check (a minute) does not
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("params, scores", CASES, ids=lambda v: repr(v))
def test_matches_openskill_on_random_games(model, params, scores):
    rng = random.Random(f"{model} {params}")
    for _ in range(200):
        teams, ranks, points = random_game(rng, scores=scores)
        assert_close(ours(model, teams, ranks, points, **params), theirs(model, teams, ranks, points, **dict(params)))


OTHER_PARAMS = [
    {"balance": True},
    {"weight_bounds": False},
    {"weight_bounds": [0.5, 3]},
    {"beta": 2.0, "kappa": 0.01, "mu": 1000.0, "sigma": 200.0},
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("params", OTHER_PARAMS, ids=repr)
def test_matches_openskill_with_other_parameters(model, params):
    rng = random.Random(f"{model} {params} other")
    for _ in range(60):
        teams, ranks, _ = random_game(rng)
        assert_close(ours(model, teams, ranks, **params), theirs(model, teams, ranks, **dict(params)))


@pytest.mark.parametrize("model, params", [
    ("bradley-terry-part", {"window_size": 1}),
    ("thurstone-mosteller-part", {"window_size": 2}),
    ("thurstone-mosteller-part", {"window_size": 9}),
    ("thurstone-mosteller-full", {"epsilon": 1.5}),
    ("thurstone-mosteller-part", {"epsilon": 0.01}),
])
def test_matches_openskill_with_window_and_draw_margin(model, params):
    rng = random.Random(f"{model} {params}")
    for _ in range(60):
        teams, ranks, _ = random_game(rng, max_teams=12, max_size=3)
        assert_close(ours(model, teams, ranks, **params), theirs(model, teams, ranks, **dict(params)))


@pytest.mark.parametrize("model", MODELS)
def test_one_team_is_refused_as_by_openskill(model):
    with pytest.raises(ValueError, match="at least 2 teams"):
        theirs(model, [[(25.0, 8.0, 1.0), (20.0, 8.0, 1.0)]], [1])
    match, states = to_match([[(25.0, 8.0, 1.0), (20.0, 8.0, 1.0)]], [1], team_ids=True)
    system = WengLin(WengLinParams(model=model))
    for call in (lambda: system.check(match), lambda: system.rate(match, states)):
        with pytest.raises(InvalidMatch, match="at least 2 teams") as error:
            call()
        assert error.value.code == "system_rule"


def test_a_far_tail_win_follows_openskills_rounding_of_phi():
    # An upset by about 7 standard deviations: openskill's Phi is 0.5 (1 + erf),
    # which is off by a few percent there; the engine rounds the same way.
    teams = [[(0.0, 1.0, 1.0)], [(60.0, 1.0, 1.0)]]
    for model in ("thurstone-mosteller-full", "thurstone-mosteller-part"):
        for gap in np.linspace(40.0, 70.0, 61):
            teams[1][0] = (float(gap), 1.0, 1.0)
            assert_close(ours(model, teams, [1, 2]), theirs(model, teams, [1, 2]))


# ---- big rounds ----

def big_round(n: int, seed: int) -> tuple[list[list[tuple[float, float, float]]], list[int]]:
    rng = np.random.default_rng(seed)
    mus, sigmas = rng.normal(25.0, 8.0, n), rng.uniform(1.0, 25.0 / 3.0, n)
    return [[(float(m), float(s), 1.0)] for m, s in zip(mus, sigmas)], [int(r) + 1 for r in rng.permutation(n)]


@pytest.mark.parametrize("model", MODELS)
def test_300_teams_match_openskill(model):
    teams, ranks = big_round(300, 1)
    ranks[5] = ranks[6]  # and a tie
    assert_close(ours(model, teams, ranks), theirs(model, teams, ranks))


@pytest.mark.parametrize("model", MODELS)
def test_a_round_of_5000_players(model):
    teams, ranks = big_round(5000, 2)
    result = ours(model, teams, ranks)
    assert all(math.isfinite(mu) and 0 < sigma <= math.sqrt(s * s + TAU_SQUARED) + 1e-12
               for (mu, sigma), [(_, s, _)] in zip(result, teams))
    winner, loser = ranks.index(1), ranks.index(5000)
    assert result[winner][0] > teams[winner][0][0] and result[loser][0] < teams[loser][0][0]
    assert ours(model, teams, ranks) == result  # bit for bit


# ---- engine behaviour ----

def test_state_extras_and_round_trip():
    system = WengLin()
    first = system.initial_state()
    assert (first.rating, first.sigma, first.matches) == (25.0, 25.0 / 3.0, 0)
    match, states = to_match([[(30.0, 4.0, 1.0)], [(20.0, 6.0, 1.0)]], [1, 2])
    frozen = [s.to_dict() for s in states]
    changes = system.rate(match, states)
    assert [s.to_dict() for s in states] == frozen  # not mutated
    after = changes[0].after
    assert after.matches == 4 and after.uncertainty == after.sigma
    assert changes[0].extras == {"uncertainty": after.sigma, "uncertainty_before": 4.0,
                                 "display_rating": after.rating - 3.0 * after.sigma}
    assert after.public() == {"rating": after.rating, "uncertainty": after.sigma,
                              "display_rating": after.rating - 3.0 * after.sigma, "matches": 4}
    data = orjson.loads(orjson.dumps(after.to_dict()))
    assert system.state_from_dict(data) == after
    assert not {"last_occurred", "snap"} & set(data)


def test_class_flags():
    assert WengLin.name == "weng-lin" and WengLin.teams and WengLin.partial_play and WengLin.has_uncertainty


def test_a_missing_score_falls_back_to_the_ranks():
    teams = [[(30.0, 4.0, 1.0)], [(20.0, 6.0, 1.0)], [(25.0, 5.0, 1.0)]]
    system = WengLin(WengLinParams(margin=2.0))
    match, states = to_match(teams, [1, 2, 3], [9.0, 5.0, 1.0])
    match.participants[2].score = None
    plain = WengLin().rate(match, states)
    assert [c.after for c in system.rate(match, states)] == [c.after for c in plain]


def test_margin_needs_scores_that_agree_with_the_ranks():
    system = WengLin(WengLinParams(margin=2.0))
    match, states = to_match([[(30.0, 4.0, 1.0)], [(20.0, 6.0, 1.0)]], [1, 2], [3.0, 5.0])
    with pytest.raises(InvalidMatch, match=r"participants\[1\].score: with a margin the scores must agree") as error:
        system.check(match)
    assert error.value.field == "participants[1].score"
    teammates, states = to_match([[(30.0, 4.0, 1.0), (29.0, 4.0, 1.0)], [(20.0, 6.0, 1.0)]], [1, 2], [7.0, 5.0])
    teammates.participants[1].score = 8.0
    with pytest.raises(InvalidMatch, match="equal ranks, equal scores"):
        system.rate(teammates, states)
    WengLin().check(match)  # without a margin the scores are not used


# ---- properties ----

mus = st.floats(min_value=0.0, max_value=50.0)
sigmas = st.floats(min_value=0.5, max_value=10.0)


@st.composite
def games(draw, max_teams=6, max_size=3, weights=False):
    k = draw(st.integers(2, max_teams))
    teams = [[(draw(mus), draw(sigmas), draw(st.sampled_from([1.0, 0.25, 0.6])) if weights else 1.0)
              for _ in range(draw(st.integers(1, max_size)))] for _ in range(k)]
    return teams, [draw(st.integers(1, k)) for _ in range(k)]


def singles(teams):
    return [[member] for team in teams for member in team[:1]]


@pytest.mark.parametrize("model", ["plackett-luce", "bradley-terry-full", "thurstone-mosteller-full"])
@given(game=games(max_size=1), who=st.integers(0, 5))
@settings(max_examples=150, deadline=None)
def test_a_better_place_never_lowers_mu(model, game, who):
    """Swapping places with the player just ahead, in standings without ties."""
    teams, _ = game
    ranks = list(range(1, len(teams) + 1))
    who %= len(teams)
    assume(who > 0)
    better = list(ranks)
    better[who], better[who - 1] = better[who - 1], better[who]
    assert ours(model, teams, better)[who][0] >= ours(model, teams, ranks)[who][0] - 1e-9


@given(game=games(max_size=3), who=st.integers(0, 5), step=st.integers(1, 5))
@settings(max_examples=150, deadline=None)
def test_bradley_terry_full_is_monotone_with_ties_and_teams(game, who, step):
    teams, ranks = game
    who %= len(teams)
    better = list(ranks)
    better[who] = max(1, ranks[who] - step)
    model = "bradley-terry-full"
    for m in range(len(teams[who])):
        index = sum(len(t) for t in teams[:who]) + m
        assert ours(model, teams, better)[index][0] >= ours(model, teams, ranks)[index][0] - 1e-9


# Matches where openskill's formulas move a player down for a better result.
SINGLES = [(-18.0, 14.8), (7.4, 4.4), (66.7, 0.55), (34.1, 9.2)]
VIOLATIONS = [
    # Plackett-Luce shares a tie among the tied teams (1/A in Omega): tying for
    # first with two others is worth less than a clear second place.
    ("plackett-luce", SINGLES, [2, 1, 4, 1], [1, 1, 4, 1], 0),
    # The -part models compare only the neighbours within the window and
    # average: moving up one place changes who the neighbours are.
    ("bradley-terry-part",
     [(46.7, 0.62), (42.8, 11.9), (18.5, 0.79), (-5.1, 5.1), (15.3, 10.1), (10.4, 4.2), (54.1, 9.7), (-10.0, 3.6),
      (37.1, 9.5), (10.7, 8.6)], [7, 6, 3, 2, 9, 1, 4, 8, 10, 5], [7, 5, 3, 2, 9, 1, 4, 8, 10, 6], 1),
    ("thurstone-mosteller-part",
     [(-11.6, 4.5), (64.8, 11.0), (14.1, 10.6), (0.8, 4.5), (67.9, 7.1), (20.4, 3.4), (16.0, 3.4), (-8.9, 11.8),
      (59.0, 8.1), (-7.0, 11.1)], [5, 3, 1, 2, 10, 4, 7, 8, 9, 6], [6, 3, 1, 2, 10, 4, 7, 8, 9, 5], 9),
    # Thurstone-Mosteller: losing to a far weaker player costs less than tying
    # with them, because openskill's Phi = 0.5 (1 + erf) has lost its digits that
    # far in the tail: 4.44e-16 instead of 4.23e-16, so v = 7.78 instead of 8.17
    # (a tie there costs v~ = -x + t = 8.02).
    ("thurstone-mosteller-full", [(55.5, 3.0), (0.0, 2.0)], [2, 1], [1, 1], 0),
]


@pytest.mark.parametrize("model, players, ranks, better, who", VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_where_a_better_result_lowers_mu_as_in_openskill(model, players, ranks, better, who):
    teams = [[(mu, sigma, 1.0)] for mu, sigma in players]
    worse_result, better_result = ours(model, teams, ranks), ours(model, teams, better)
    assert better_result[who][0] < worse_result[who][0] - 0.1
    assert_close(worse_result, theirs(model, teams, ranks))
    assert_close(better_result, theirs(model, teams, better))


@pytest.mark.parametrize("model", MODELS)
@given(game=games(max_size=1, weights=True), bounds=st.sampled_from([[1, 2], False]))
@settings(max_examples=60, deadline=None)
def test_teams_of_one_are_individuals(model, game, bounds):
    teams, ranks = game
    assert (ours(model, teams, ranks, team_ids=True, weight_bounds=bounds)
            == ours(model, teams, ranks, team_ids=False, weight_bounds=bounds))


@pytest.mark.parametrize("model", MODELS)
@given(game=games(), size=st.integers(1, 3), shift=st.floats(min_value=-500.0, max_value=500.0))
@settings(max_examples=60, deadline=None)
def test_shifting_every_mu_shifts_the_results(model, game, size, shift):
    """For teams of one size: a team's mu is its members' sum, so with teams of
    different sizes a shift of every player changes the gaps between teams."""
    teams, ranks = game
    teams = [(team * size)[:size] for team in teams]
    moved = [[(mu + shift, sigma, w) for mu, sigma, w in team] for team in teams]
    for (mu, sigma), (mu2, sigma2) in zip(ours(model, teams, ranks), ours(model, moved, ranks)):
        assert mu2 == pytest.approx(mu + shift, abs=1e-7) and sigma2 == pytest.approx(sigma, abs=1e-9)


def test_teams_of_different_sizes_are_not_translation_invariant():
    teams = [[(0.0, 1.0, 1.0), (0.0, 1.0, 1.0)], [(0.0, 1.0, 1.0)]]
    moved = [[(mu + 1.0, sigma, w) for mu, sigma, w in team] for team in teams]
    assert ours("plackett-luce", moved, [1, 1])[2][0] != pytest.approx(ours("plackett-luce", teams, [1, 1])[2][0] + 1.0)


@pytest.mark.parametrize("model", ["plackett-luce", "bradley-terry-full", "bradley-terry-part"])
@given(game=games(weights=True), bounds=st.sampled_from([None, False]))
@settings(max_examples=80, deadline=None)
def test_sigma_never_grows_beyond_tau(model, game, bounds):
    teams, ranks = game
    params = {} if bounds is None else {"weight_bounds": bounds}
    for (_, sigma), (_, s, _) in zip(ours(model, teams, ranks, **params), [m for t in teams for m in t]):
        assert sigma <= math.sqrt(s * s + TAU_SQUARED) * (1 + 1e-12)


def test_thurstone_mosteller_sigma_can_grow_on_a_lopsided_tie():
    # A tie between players 7.9 c apart: openskill's W~ divides by
    # b = Phi(t - x) - Phi(-t - x), which has rounded to one step of 2^-52
    # (2.2e-16, exactly 2.4e-16) while its V~ has switched to -x + t: W~ comes
    # out at -3.75 instead of near 1, and sigma grows from 7 to 11.2.
    teams = [[(74.0, 7.0, 1.0)], [(0.0, 2.0, 1.0)]]
    result = ours("thurstone-mosteller-full", teams, [1, 1])
    assert result[0][1] > 1.5 * math.sqrt(7.0 ** 2 + TAU_SQUARED)
    assert_close(result, theirs("thurstone-mosteller-full", teams, [1, 1]))
    assert ours("thurstone-mosteller-full", teams, [1, 1], limit_sigma=True)[0][1] == 7.0  # limit_sigma caps it
    # thurstone-mosteller-part too, less (its doubled c keeps b larger): 3 -> 3.11.
    teams = [[(105.0, 3.0, 1.0)], [(0.0, 1.0, 1.0)]]
    result = ours("thurstone-mosteller-part", teams, [1, 1])
    assert result[0][1] > 1.03 * math.sqrt(3.0 ** 2 + TAU_SQUARED)
    assert_close(result, theirs("thurstone-mosteller-part", teams, [1, 1]))


# ---- partial play: openskill's weights are credit, not time played ----

@pytest.mark.parametrize("model", MODELS)
@given(game=games(max_size=1), weight=st.floats(min_value=0.05, max_value=0.95))
@settings(max_examples=40, deadline=None)
def test_raw_weights_scale_gains_down_and_losses_up(model, game, weight):
    """With weight_bounds = false a weight w < 1 scales a gain by w (the member moves
    less), but divides a loss by w: a partial player loses more."""
    teams, ranks = game
    full = ours(model, teams, ranks)
    teams[0] = [(teams[0][0][0], teams[0][0][1], weight)]
    part = ours(model, teams, ranks, weight_bounds=False)
    mu0 = teams[0][0][0]
    gain, gain_part = full[0][0] - mu0, part[0][0] - mu0
    if gain >= 0:
        assert gain_part == pytest.approx(gain * weight, rel=1e-12, abs=1e-12)
    else:
        assert gain_part == pytest.approx(gain / weight, rel=1e-12)
        assert abs(gain_part) > abs(gain)


def test_default_weight_bounds_give_every_lone_player_weight_2():
    """openskill rescales each team's weights onto [1, 2]; a team of one always gets
    2. One partial player in a free-for-all therefore doubles every gain and
    halves every loss, whatever the weight."""
    teams = [[(30.0, 4.0, 1.0)], [(20.0, 6.0, 1.0)], [(25.0, 5.0, 1.0)]]
    plain = ours("plackett-luce", teams, [1, 2, 3])
    teams[2] = [(25.0, 5.0, 0.3)]
    weighted = ours("plackett-luce", teams, [1, 2, 3])
    teams[2] = [(25.0, 5.0, 0.9)]
    assert ours("plackett-luce", teams, [1, 2, 3]) == weighted
    assert weighted[0][0] - 30.0 == pytest.approx(2 * (plain[0][0] - 30.0))
    assert weighted[2][0] - 25.0 == pytest.approx((plain[2][0] - 25.0) / 2)


def test_a_teammate_with_less_weight_gains_less_and_loses_more():
    teams = [[(25.0, 5.0, 1.0), (25.0, 5.0, 0.5)], [(25.0, 5.0, 1.0), (25.0, 5.0, 1.0)]]
    win = ours("bradley-terry-full", teams, [1, 2])
    assert win[1][0] - 25.0 < win[0][0] - 25.0  # the normalised weights are 2 and 1
    loss = ours("bradley-terry-full", teams, [2, 1])
    assert loss[1][0] - 25.0 < loss[0][0] - 25.0 < 0


# ---- parameters ----

@pytest.mark.parametrize("values, key, text", [
    ({"model": "glicko"}, "model", "must be one of plackett-luce"),
    ({"sigma": 0}, "sigma", "> 0"),
    ({"beta": -1}, "beta", "> 0"),
    ({"kappa": 1}, "kappa", "> 0 and < 1"),
    ({"tau": -0.1}, "tau", ">= 0"),
    ({"margin": -1}, "margin", ">= 0"),
    ({"window_size": 3}, "window_size", "only the bradley-terry-part and thurstone-mosteller-part models"),
    ({"model": "bradley-terry-part", "window_size": 0}, "window_size", "> 0"),
    ({"epsilon": 0.2}, "epsilon", "only the thurstone-mosteller-full and thurstone-mosteller-part models"),
    ({"model": "thurstone-mosteller-full", "epsilon": 0}, "epsilon", "> 0"),
    ({"weight_bounds": [0, 1]}, "weight_bounds", "0 < low <= high"),
    ({"weight_bounds": [2, 1]}, "weight_bounds", "0 < low <= high"),
    ({"weight_bounds": "wide"}, "weight_bounds", "or false"),
    ({"limit_sigma": 1}, "limit_sigma", "true or false"),
    ({"window_size": 2.5, "model": "bradley-terry-part"}, "window_size", "integer"),
    ({"gamma": 1.0}, "gamma", "unknown parameter"),
])
def test_bad_parameters_name_the_key_and_the_rule(values, key, text):
    with pytest.raises(ParamError, match=text) as error:
        WengLinParams.from_mapping(values)
    assert error.value.key == key


def test_parameters_from_toml_values():
    params = WengLinParams.from_mapping({"model": "thurstone-mosteller-part", "window_size": 2, "epsilon": 0.5,
                                         "weight_bounds": [1, 3], "tau": 0})
    assert params.weight_bounds == (1.0, 3.0) and params.tau == 0.0
    assert WengLinParams.from_mapping({"weight_bounds": False}).weight_bounds is None
    assert WengLinParams().to_dict()["weight_bounds"] == (1.0, 2.0)
