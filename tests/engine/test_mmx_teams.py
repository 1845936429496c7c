"""Teams in elo-mmx (the Elo-MMR paper's section 7 proposal): a team's
performance is the sum of its members' weighted Gaussian performances, the
round is solved between teams, each member's posterior is the Gaussian
conditioning of the members' joint prior on the team's performance."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.engine import Match, Participant
from stream_app.engine.mmr import EloMmx, EloMmxParams, MmrState

SYSTEM = EloMmx()


def state(mu: float, sigma: float, matches: int = 3) -> MmrState:
    return MmrState(rating=mu, sigma=sigma, matches=matches, gauss_mu=mu, gauss_sigma=sigma)


@st.composite
def team_rounds(draw, max_teams: int = 5, max_size: int = 4):
    teams = draw(st.integers(2, max_teams))
    sizes = draw(st.lists(st.integers(1, max_size), min_size=teams, max_size=teams))
    ranks = draw(st.lists(st.integers(1, teams), min_size=teams, max_size=teams))
    n = sum(sizes)
    mus = draw(st.lists(st.floats(500, 2500), min_size=n, max_size=n))
    sigmas = draw(st.lists(st.floats(60, 350), min_size=n, max_size=n))
    weights = draw(st.lists(st.sampled_from([1.0, 1.0, 0.5, 0.25, 0.9]), min_size=n, max_size=n))
    people, k = [], 0
    for t, size in enumerate(sizes):
        for _ in range(size):
            people.append(Participant(f"p{k}", ranks[t], None, f"t{t}", weights[k]))
            k += 1
    return Match("l", "m", tuple(people)), [state(m, s) for m, s in zip(mus, sigmas)]


def diffused_variance(before: MmrState) -> float:
    p = SYSTEM.params
    return before.sigma**2 + p.drift_variance(p.weights(np.array([before.matches])), np.zeros(1))[0]


@settings(max_examples=80, deadline=None)
@given(data=team_rounds(max_size=1))
def test_a_match_of_teams_of_one_equals_the_individual_match_bit_for_bit(data):
    match, before = data
    full_time = Match("l", "m", tuple(Participant(x.player, x.rank, None, x.team) for x in match.participants))
    alone = Match("l", "m", tuple(Participant(x.player, x.rank) for x in match.participants))
    assert [c.after for c in SYSTEM.rate(full_time, before)] == [c.after for c in SYSTEM.rate(alone, before)]


@settings(max_examples=60, deadline=None)
@given(data=team_rounds())
def test_members_posteriors_are_the_joint_gaussian_conditioned_on_the_team_performance(data):
    # Worked out independently: the members' joint prior N(mu, diag(v)) and the
    # observation P = w . s + noise(w^2 . beta^2); P itself is recovered from one
    # member's reported performance.
    match, before = data
    changes = SYSTEM.rate(match, before)
    if len({x.rank for x in match.participants}) == 1:  # outcome-free: nothing moves
        assert [c.after.rating for c in changes] == [s.rating for s in before]
        return
    p = SYSTEM.params
    for team in {x.team for x in match.participants}:
        idx = [i for i, x in enumerate(match.participants) if x.team == team]
        if len(idx) == 1 and match.participants[idx[0]].weight == 1.0:
            continue
        w = np.array([match.participants[i].weight for i in idx])
        mu = np.array([before[i].rating for i in idx])
        cov = np.diag([diffused_variance(before[i]) for i in idx])
        beta2 = np.array([p.perf_sigma(p.weights(np.array([before[i].matches])))[0] ** 2 for i in idx])
        first = idx[0]
        perf = w[0] * changes[first].extras["performance"] + (w @ mu - w[0] * mu[0])
        gain = cov @ w / (w @ cov @ w + (w * w) @ beta2)
        mean = mu + gain * (perf - w @ mu)
        var = np.diag(cov - np.outer(gain, w @ cov))
        for k, i in enumerate(idx):
            assert math.isclose(changes[i].after.rating, mean[k], rel_tol=0, abs_tol=1e-7 * max(1.0, abs(mean[k])))
            assert math.isclose(changes[i].after.sigma, math.sqrt(var[k]), rel_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(data=team_rounds())
def test_full_time_members_changes_are_proportional_to_their_variances(data):
    match, before = data
    changes = SYSTEM.rate(match, before)
    for team in {x.team for x in match.participants}:
        idx = [i for i, x in enumerate(match.participants) if x.team == team and x.weight == 1.0]
        for i in idx[1:]:
            j = idx[0]
            # delta_i / v_i is the team's common factor (perf - mu_T) / (total variance).
            left = changes[i].delta * diffused_variance(before[j])
            right = changes[j].delta * diffused_variance(before[i])
            assert math.isclose(left, right, rel_tol=1e-6, abs_tol=1e-6 * diffused_variance(before[i]) ** 2)


@settings(max_examples=60, deadline=None)
@given(data=team_rounds(), who=st.integers(0, 50), better=st.integers(1, 5))
def test_a_better_team_rank_never_lowers_any_members_rating(data, who, better):
    match, before = data
    teams = sorted({x.team for x in match.participants})
    team = teams[who % len(teams)]
    rank = next(x.rank for x in match.participants if x.team == team)
    improved = Match("l", "m", tuple(
        Participant(x.player, min(rank, better) if x.team == team else x.rank, None, x.team, x.weight)
        for x in match.participants))
    old = SYSTEM.rate(match, before)
    new = SYSTEM.rate(improved, before)
    for x, a, b in zip(match.participants, old, new):
        if x.team == team:
            assert b.after.rating >= a.after.rating - 1e-7 * abs(a.after.rating)
    # Aligned incentives inside the team too: every member gains or loses together.
    for team in teams:
        signs = {np.sign(round(c.delta, 9)) for x, c in zip(match.participants, old) if x.team == team}
        assert len(signs - {0.0}) <= 1


@settings(max_examples=40, deadline=None)
@given(data=team_rounds(), shift=st.floats(-1000, 1000))
def test_shifting_every_rating_shifts_every_new_rating_when_the_teams_play_the_same_total_time(data, shift):
    match, before = data
    size = max(sum(1 for x in match.participants if x.team == t) for t in {x.team for x in match.participants})
    teams = sorted({x.team for x in match.participants})
    # Every team gets `size` full-time members (padding with copies of its first member's state).
    people, states = [], []
    for t in teams:
        idx = [i for i, x in enumerate(match.participants) if x.team == t]
        for k in range(size):
            i = idx[k % len(idx)]
            people.append(Participant(f"{t}-{k}", match.participants[i].rank, None, t))
            states.append(before[i])
    even = Match("l", "m", tuple(people))
    moved = [state(s.rating + shift, s.sigma, s.matches) for s in states]
    for a, b in zip(SYSTEM.rate(even, states), SYSTEM.rate(even, moved)):
        assert math.isclose(b.after.rating - shift, a.after.rating, abs_tol=1e-6)
        assert math.isclose(b.after.sigma, a.after.sigma, rel_tol=1e-9)


def test_a_bigger_team_is_expected_to_do_better_so_uneven_teams_are_not_translation_invariant():
    # The sum model (as openskill's team mu): two players at 1500 outweigh one at 1500,
    # so the pair gains little for beating the single player; shifted to 0 they are even.
    people = (Participant("a", 1, None, "x"), Participant("b", 1, None, "x"), Participant("c", 2, None, "y"))
    high = SYSTEM.rate(Match("l", "m", people), [state(1500.0, 150.0)] * 3)
    zero = SYSTEM.rate(Match("l", "m", people), [state(0.0, 150.0)] * 3)
    assert 0 < high[0].delta < zero[0].delta / 2


def test_a_part_time_member_moves_less_and_the_stronger_team_is_expected_to_win():
    before = [state(1500.0, 200.0), state(1500.0, 200.0), state(1500.0, 200.0), state(1500.0, 200.0)]
    people = (Participant("a", 1, None, "x"), Participant("b", 1, None, "x", 0.5),
              Participant("c", 2, None, "y"), Participant("d", 2, None, "y"))
    a, b, c, d = SYSTEM.rate(Match("l", "m", people), before)
    assert a.delta > b.delta > 0 > c.delta and c.delta == d.delta
    # The team with a part-timer winning was an upset; the full team winning was
    # expected, and gains less.
    expected = SYSTEM.rate(Match("l", "m", tuple(
        Participant(x.player, 3 - x.rank, None, x.team, x.weight) for x in people)), before)
    assert 0 < expected[2].delta < a.delta


def test_split_ties_and_subsampling_also_take_teams():
    people = tuple(Participant(f"p{i}", 1 + i // 4, None, f"t{i // 2}") for i in range(12))
    before = [state(1400.0 + 17 * i, 120.0 + 9 * i) for i in range(12)]
    for params in (EloMmxParams(split_ties=True), EloMmxParams(subsample_size=3)):
        changes = EloMmx(params).rate(Match("l", "m", people), before)
        assert changes[0].delta > 0 > changes[-1].delta
        assert changes[0].extras["performance"] != changes[2].extras["performance"]
