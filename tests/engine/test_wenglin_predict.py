"""Weng-Lin predictions of a match to come (stream_app/engine/wenglin.py):
predict_win and predict_draw against openskill 6.2.0's, for all five models,
the ranks against its predict_rank, and the properties of the probabilities
and of match_quality."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_app.engine.wenglin import MODELS, PART_MODELS, TM_MODELS, WengLin, WengLinParams, WengLinState
from tests.support.openskill import OPENSKILL

TOL = 1e-9
PARAMS = [
    {},
    {"balance": True},
    {"beta": 2.0, "kappa": 0.01, "mu": 1000.0, "sigma": 200.0},
    {"beta": 40.0, "kappa": 0.5, "tau": 0.0, "limit_sigma": True, "balance": True},
]

# A side is a list of (mu, sigma).


def system(model: str, params: dict) -> WengLin:
    extra = {}
    if model in PART_MODELS:
        extra["window_size"] = 2
    if model in TM_MODELS:
        extra["epsilon"] = 0.5
    return WengLin(WengLinParams.from_mapping({"model": model, **params, **extra}))


def oracle(p: WengLinParams):
    """openskill's model with our system's parameters (as test_wenglin.py builds it)."""
    kwargs = {"mu": p.mu, "sigma": p.sigma, "beta": p.beta, "kappa": p.kappa, "tau": p.tau, "margin": p.margin,
              "limit_sigma": p.limit_sigma, "balance": p.balance}
    if p.window_size is not None:
        kwargs["window_size"] = p.window_size
    if p.epsilon is not None:
        kwargs["epsilon"] = p.epsilon
    if p.weight_bounds is not None:
        kwargs["weight_bounds"] = p.weight_bounds
    model = OPENSKILL[p.model](**kwargs)
    if p.weight_bounds is None:
        model.weight_bounds = None  # the compiled constructor refuses None
    return model


def states(sides) -> list[list[WengLinState]]:
    return [[WengLinState(mu, sigma, 3) for mu, sigma in side] for side in sides]


def ratings(model, sides):
    return [[model.rating(mu=mu, sigma=sigma) for mu, sigma in side] for side in sides]


def ranks_of(win: list[float]) -> list[int]:
    """Rank 1 for the likeliest winner, equal probabilities sharing a rank (1, 1, 3)."""
    order = sorted(range(len(win)), key=lambda i: win[i], reverse=True)
    ranks = [0] * len(win)
    for place, i in enumerate(order):
        ranks[i] = ranks[order[place - 1]] if place and win[i] == win[order[place - 1]] else place + 1
    return ranks


def check_against_openskill(ours: WengLin, sides, ranks: bool = True) -> None:
    theirs = oracle(ours.params)
    win = ours.predict_win(states(sides))
    try:
        want = theirs.predict_win(ratings(theirs, sides))
    except ZeroDivisionError:  # balance with best ordinal + kappa = 0: openskill divides by it, ours counts once
        assume(False)
    assert len(win) == len(want)
    assert all(abs(a - b) <= TOL for a, b in zip(win, want)), (win, want)
    draw = ours.predict_draw(states(sides))
    assert abs(draw - theirs.predict_draw(ratings(theirs, sides))) <= TOL
    if ranks:
        assert ranks_of(win) == [rank for rank, _ in theirs.predict_rank(ratings(theirs, sides))], win


# Ratings on a grid (multiples of 1/8 and 1/16): sums are exact, so equal sides
# tie exactly and unequal ones are far from a tie; a few repeated values for ties.
grid_mu = st.one_of(st.sampled_from([0.0, 25.0, -3.5]), st.integers(-80_000, 80_000).map(lambda k: k / 8))
grid_sigma = st.one_of(st.sampled_from([25.0 / 3.0, 1.0]), st.integers(1, 8_000).map(lambda k: k / 16))
any_mu = st.floats(-1e6, 1e6, allow_nan=False)
any_sigma = st.floats(1e-6, 1e4, allow_nan=False)


@st.composite
def matches(draw, mu=grid_mu, sigma=grid_sigma, min_sides=2, max_sides=6):
    """2 to 6 sides of 1 to 5 players, drawn from a small pool so that players,
    and whole sides, repeat (ties), sometimes with their members in another order."""
    pool = draw(st.lists(st.tuples(mu, sigma), min_size=1, max_size=8))
    sides = draw(st.lists(st.lists(st.sampled_from(pool), min_size=1, max_size=5),
                          min_size=min_sides, max_size=max_sides))
    if len(sides) > 2 and draw(st.booleans()):
        copy = list(sides[0])
        draw(st.randoms(use_true_random=False)).shuffle(copy)
        sides[-1] = copy
    return sides


# ---- against openskill ----

@pytest.mark.slow  # many examples against the reference: make test runs it, make check (a minute) does not
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("params", PARAMS, ids=repr)
@settings(max_examples=150, deadline=None)
@given(sides=matches())
def test_predictions_match_openskill(model, params, sides):
    check_against_openskill(system(model, params), sides)


@pytest.mark.slow  # many examples against the reference: make test runs it, make check (a minute) does not
@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=150, deadline=None)
@given(params=st.sampled_from(PARAMS), sides=matches(mu=any_mu, sigma=any_sigma))
def test_predictions_match_openskill_on_any_ratings(model, params, sides):
    # Two sides whose gap is within a few 1e-16 of a tie are the one place where
    # openskill's predict_rank disagrees with its own predict_win (see below).
    check_against_openskill(system(model, params), sides, ranks=len(sides) > 2)


@pytest.mark.parametrize("model", MODELS)
def test_predict_win_is_openskills_bit_for_bit(model):
    rng = random.Random(model)
    ours = system(model, {})
    theirs = oracle(ours.params)
    for _ in range(300):
        sides = [[(rng.uniform(-50.0, 100.0), rng.uniform(0.1, 15.0)) for _ in range(rng.randint(1, 5))]
                 for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.3:
            sides.append(sides[0][::-1])  # equal sides must tie exactly, as in openskill's ranks
        assert ours.predict_win(states(sides)) == theirs.predict_win(ratings(theirs, sides))
        assert ours.predict_draw(states(sides)) == theirs.predict_draw(ratings(theirs, sides))


def test_openskill_ranks_two_sides_apart_that_its_predict_win_ties():
    # Phi(x) rounds to 1/2 while Phi(-x) does not: predict_win says [0.5, 0.5] and
    # predict_rank, normalising Phi(x) and Phi(-x), separates them. Ours follow predict_win.
    ours = system("plackett-luce", {})
    theirs = oracle(ours.params)
    sides = [[(5e-16, 1.0)], [(0.0, 1.0)]]
    assert ours.predict_win(states(sides)) == theirs.predict_win(ratings(theirs, sides)) == [0.5, 0.5]
    assert [rank for rank, _ in theirs.predict_rank(ratings(theirs, sides))] == [1, 2]
    assert ranks_of(ours.predict_win(states(sides))) == [1, 1]


# ---- properties ----

@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=100, deadline=None)
@given(params=st.sampled_from(PARAMS), sides=matches(mu=any_mu, sigma=any_sigma), data=st.data())
def test_probabilities_sum_to_one_and_follow_the_sides(model, params, sides, data):
    ours = system(model, params)
    win = ours.predict_win(states(sides))
    assert all(0.0 <= p <= 1.0 for p in win)
    assert math.fsum(win) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= ours.predict_draw(states(sides)) <= 1.0
    i = data.draw(st.integers(0, len(sides) - 1))
    j = data.draw(st.integers(0, len(sides) - 1).filter(lambda j: j != i))
    swapped = list(sides)
    swapped[i], swapped[j] = sides[j], sides[i]
    again = ours.predict_win(states(swapped))
    want = list(win)
    want[i], want[j] = win[j], win[i]
    assert again == pytest.approx(want, abs=1e-12)
    assert ours.predict_draw(states(swapped)) == pytest.approx(ours.predict_draw(states(sides)), abs=1e-12)


def test_a_side_is_its_members_sums():
    ours = system("plackett-luce", {})
    team = [[(10.0, 3.0), (20.0, 4.0)], [(28.0, 2.0)]]
    alone = [[(30.0, 5.0)], [(28.0, 2.0)]]
    assert ours.predict_win(states(team)) == ours.predict_win(states(alone))
    p = ours.predict_win(states(alone))[0]
    assert p == pytest.approx(0.5 * (1 + math.erf(2.0 / math.sqrt(2 * (2 * (25 / 6) ** 2 + 25 + 4)))), abs=1e-15)


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=100, deadline=None)
@given(params=st.sampled_from(PARAMS[:2]),
       sides=matches(mu=st.floats(0.0, 50.0), sigma=st.floats(1.0, 10.0)))
def test_match_quality_is_in_0_1(model, params, sides):
    assert 0.0 < system(model, params).match_quality(states(sides)) <= 1.0


def test_match_quality_of_two_players_is_trueskills():
    ours = system("bradley-terry-full", {})
    beta = ours.params.beta
    (mu_a, sigma_a), (mu_b, sigma_b) = (27.0, 3.0), (22.0, 6.0)
    spread = 2 * beta ** 2 + sigma_a ** 2 + sigma_b ** 2
    want = math.sqrt(2 * beta ** 2 / spread) * math.exp(-(mu_a - mu_b) ** 2 / (2 * spread))
    assert ours.match_quality(states([[(mu_a, sigma_a)], [(mu_b, sigma_b)]])) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_an_even_match_of_certain_players_has_quality_1(model):
    ours = system(model, {})
    assert ours.match_quality(states([[(25.0, 1e-6)], [(25.0, 1e-6)]])) == pytest.approx(1.0, abs=1e-9)
    assert ours.match_quality(states([[(25.0, 1e-6)] * 3] * 4)) == pytest.approx(1.0, abs=1e-9)
    assert ours.match_quality(states([[(25.0, 8.0)], [(25.0, 8.0)]])) < 0.5
    assert ours.predict_win(states([[(25.0, 8.0)], [(25.0, 8.0)]])) == [0.5, 0.5]


def test_a_balanced_side_whose_best_ordinal_is_minus_kappa_is_still_predicted():
    # mu 24.5, sigma 25/3: the ordinal mu - 3 sigma is exactly -0.5 = -kappa, where openskill divides by zero.
    ours = system("plackett-luce", {"balance": True, "kappa": 0.5})
    side = [WengLinState(24.5, 25.0 / 3.0, 3)]
    assert side[0].display_rating + 0.5 == 0.0
    assert ours.predict_win([side, [WengLinState(30.0, 2.0, 9)]])[0] < 0.5
