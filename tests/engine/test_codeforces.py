"""The Codeforces round algorithm (codeforces.com/blog/entry/20762, as EbTech/Elo-MMR's
codeforces_sys.rs implements it, plus the blog post's two corrections against inflation).

The worked rounds below are derived by hand from the published algorithm; the
arithmetic is in the comments (a calculator suffices), with

    P(j beats x) = 1 / (1 + 10 ** ((x - r_j) / 400))
    seed_i       = 1 + sum_{j != i} P(j beats r_i)
    m_i          = sqrt(seed_i * place_i)          (a tie takes the middle place)
    S(x)         = 1/2 + sum_j P(j beats x)        (j over everyone; S(r_i) = seed_i)
    performance  = the x with S(x) = m_i,   d_i = (performance_i - r_i) / 2
    inc1 = -sum(d) / n - 1;   inc2 = min(max(-sum_top(d + inc1) / s, -10), 0),
    s = min(n, 4 * round(sqrt(n))) highest rated;   change_i = d_i + inc1 + inc2.

The root finder stops within about 1e-8 rating points, so the hand values
(given to 1e-8) are asserted to 1e-6.
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_app.engine import Match, ParamError, Participant
from stream_app.engine.codeforces import Codeforces, CodeforcesState

TOL = 1e-6


def match(ranks):
    return Match("l", "m", tuple(Participant(f"p{i}", r) for i, r in enumerate(ranks)))


def rate(ratings, ranks, **params):
    system = Codeforces.from_mapping(params)
    return system.rate(match(ranks), [CodeforcesState(rating=float(r), matches=3) for r in ratings])


def new_ratings(ratings, ranks, **params):
    return [c.after.rating for c in rate(ratings, ranks, **params)]


# ---- worked rounds ----


def test_two_players_of_1500():
    # Seeds: 1 + P = 1 + 1/(1 + 10^0) = 1.5 each. Places 1 and 2.
    # m_1 = sqrt(1.5 * 1) = 1.2247448714,  m_2 = sqrt(1.5 * 2) = 1.7320508076.
    # Closed form: S(x) = 0.5 + 2 / (1 + q), q = 10^((x - 1500)/400), so
    #   q = (2.5 - m) / (m - 0.5)  and  x - 1500 = 400 log10(q).
    # Winner: q = 1.2752551286 / 0.7247448714 = 1.7595917942, log10 = 0.2454119280,
    #   x - 1500 = 98.16477120, d_1 = 49.08238560.
    # Loser:  q = 0.7679491924 / 1.2320508076 = 0.6233096782, log10 = -0.2052961297,
    #   x - 1500 = -82.11845188, d_2 = -41.05922594.
    # inc1 = -(49.08238560 - 41.05922594)/2 - 1 = -4.01157983 - 1 = -5.01157983.
    # Top: s = min(2, 4 * round(sqrt 2)) = 2; their sum is now -2: inc2 = min(max(1, -10), 0) = 0.
    # New ratings: 1500 + 49.08238560 - 5.01157983 = 1544.07080577,
    #              1500 - 41.05922594 - 5.01157983 = 1453.92919423.
    a, b = rate([1500, 1500], [1, 2])
    assert a.extras["expected_rank"] == pytest.approx(1.5, abs=1e-12)
    assert b.extras["expected_rank"] == pytest.approx(1.5, abs=1e-12)
    assert a.extras["performance"] == pytest.approx(1598.16477120, abs=TOL)
    assert b.extras["performance"] == pytest.approx(1417.88154812, abs=TOL)
    assert a.after.rating == pytest.approx(1544.07080577, abs=TOL)
    assert b.after.rating == pytest.approx(1453.92919423, abs=TOL)
    assert a.after.matches == b.after.matches == 4


def test_two_players_without_corrections_is_codeforces_sys():
    # codeforces_sys.rs has no corrections: the raw d of the round above.
    assert new_ratings([1500, 1500], [1, 2], sum_correction=False, top_correction=0) == pytest.approx(
        [1549.08238560, 1458.94077406], abs=TOL
    )


def test_top_correction_alone_and_its_cap():
    # Without the sum correction, the top s = 2 (everyone) get their sum to 0:
    # inc2 = -(49.08238560 - 41.05922594)/2 = -4.01157983 -> +45.07080577, -45.07080577.
    assert new_ratings([1500, 1500], [1, 2], sum_correction=False) == pytest.approx(
        [1545.07080577, 1454.92919423], abs=TOL
    )
    # scale 800 doubles every x - r (x - r = 800 log10 q), weight 1 takes all of it:
    # d = 196.32954240 and -164.23690376, sum 32.09263864, -sum/2 = -16.04631932: capped at -10.
    assert new_ratings([1500, 1500], [1, 2], sum_correction=False, scale=800, weight=1) == pytest.approx(
        [1686.32954240, 1325.76309624], abs=TOL
    )


def test_three_players_closed_form():
    # Ratings 1700, 1500, 1500 finishing 2nd, 1st, 3rd.
    # P(1500 beats 1700) = 1/(1 + 10^0.5) = 0.2402530734; P(1700 beats 1500) = 0.7597469266.
    # Seeds: 1700: 1 + 2 * 0.2402530734 = 1.4805061467;
    #        1500: 1 + 0.7597469266 + 0.5 = 2.2597469266 (both).
    # m: 1700: sqrt(1.4805061467 * 2) = 1.7207592201; 1500 (1st): sqrt(2.2597469266) = 1.5032454645;
    #    1500 (3rd): sqrt(2.2597469266 * 3) = 2.6036975208.
    # With q = 10^((x - 1500)/400), k = 10^0.5 = 3.1622776602 and g = m - 0.5:
    #   g = 1/(1 + q/k) + 2/(1 + q)  <=>  (g/k) q^2 + (g (1 + 1/k) - 1 - 2/k) q + (g - 3) = 0,
    #   q = the positive root, x = 1500 + 400 log10(q).
    # 1700: g = 1.2207592201 -> A = 0.3860379610, B = -0.0256583510, C = -1.7792407799,
    #       q = 2.1803433755, x = 1635.40995787, d = (1635.40995787 - 1700)/2 = -32.29502106.
    # 1st:  g = 1.0032454645 -> A = 0.3172540720, B = -0.3119559955, C = -1.9967545355,
    #       q = 3.0481292398, x = 1693.61335081, d = 96.80667540.
    # 3rd:  g = 2.1036975208 -> A = 0.6652475674, B = 1.1364895562, C = -0.8963024792,
    #       q = 0.5869788371, x = 1407.44897740, d = -46.27551130.
    # inc1 = -18.23614304/3 - 1 = -7.07871435; s = min(3, 8) = 3, sum -3: inc2 = 0.
    changes = rate([1700, 1500, 1500], [2, 1, 3])
    assert [c.extras["expected_rank"] for c in changes] == pytest.approx(
        [1.4805061467, 2.2597469266, 2.2597469266], abs=1e-9
    )
    assert [c.extras["performance"] for c in changes] == pytest.approx(
        [1635.40995787, 1693.61335081, 1407.44897740], abs=TOL
    )
    assert [c.after.rating for c in changes] == pytest.approx([1660.62626459, 1589.72796106, 1446.64577435], abs=TOL)


def test_four_players_with_a_tie():
    # Ratings 1700, 1500, 1500, 1300; ranks 2, 1, 3, 3: the tie shares places 3 and 4 -> 3.5.
    # P(1500 beats 1700) = 0.2402530734, P(1300 beats 1700) = 1/11 = 0.0909090909,
    # P(1700 beats 1500) = 0.7597469266, P(1300 beats 1500) = 0.2402530734,
    # P(1700 beats 1300) = 10/11 = 0.9090909091, P(1500 beats 1300) = 0.7597469266.
    # Seeds: 1700: 1 + 2 * 0.2402530734 + 0.0909090909 = 1.5714152376
    #        1500: 1 + 0.7597469266 + 0.5 + 0.2402530734 = 2.5 (both)
    #        1300: 1 + 0.9090909091 + 2 * 0.7597469266 = 3.4285847624
    #   (they sum to n(n+1)/2 = 10, as seeds always do).
    # m: sqrt(1.5714152376 * 2) = 1.7728029996, sqrt(2.5 * 1) = 1.5811388301,
    #    sqrt(2.5 * 3.5) = 2.9580398915, sqrt(3.4285847624 * 3.5) = 3.4641083511.
    # No closed form with three rating levels; the performances below check by
    # substitution, S(x) = 0.5 + the four P(r_j beats x) for r_j = 1700, 1500, 1500, 1300:
    #   x = 1652.17007417: 0.5 + 0.56840123 + 2 * 0.29401538 + 0.11637100 = 1.77280300
    #   x = 1697.58516031: 0.5 + 0.50347518 + 2 * 0.24279959 + 0.09206448 = 1.58113884
    #   x = 1406.55957670: 0.5 + 0.84411614 + 2 * 0.63132058 + 0.35128258 = 2.95803988
    #   x = 1291.06992459: 0.5 + 0.91325091 + 2 * 0.76900443 + 0.51284858 = 3.46410835
    # d = -23.91496292, 98.79258015, -46.72021165, -4.46503770 (sum 23.69236788);
    # inc1 = -5.92309197 - 1 = -6.92309197; s = min(4, 8) = 4: inc2 = 0.
    changes = rate([1700, 1500, 1500, 1300], [2, 1, 3, 3])
    assert [c.extras["expected_rank"] for c in changes] == pytest.approx(
        [1.5714152376, 2.5, 2.5, 3.4285847624], abs=1e-9
    )
    assert [c.extras["performance"] for c in changes] == pytest.approx(
        [1652.17007417, 1697.58516031, 1406.55957670, 1291.06992459], abs=TOL
    )
    assert [c.after.rating for c in changes] == pytest.approx(
        [1669.16194511, 1591.86948818, 1446.35669638, 1288.61187033], abs=TOL
    )


# Twenty players of 1500 finishing 1st..20th: seed = 1 + 19/2 = 10.5 for all, and
# S(x) = 0.5 + 20/(1 + q) gives d_k = 200 log10(20 / (sqrt(10.5 k) - 0.5) - 1):
# d_1 = 159.844443, d_2 = 118.187710, ..., d_16 = -43.656733, ..., d_20 = -73.417095;
# sum = 229.39986662, inc1 = -11.46999333 - 1 = -12.46999333.
# s = min(20, 4 * round(sqrt 20)) = 16: the top 16 by rating all have 1500, so
# the tie goes to the better place (places 1..16); their sum after inc1 is
# 278.91146341, so inc2 = -278.91146341/16 = -17.43196646, capped at -10.
def twenty_equal_d():
    return [200 * math.log10(20 / (math.sqrt(10.5 * k) - 0.5) - 1) for k in range(1, 21)]


def test_twenty_players_top_correction_capped():
    d = twenty_equal_d()
    assert d[0] == pytest.approx(159.844443, abs=1e-6) and d[19] == pytest.approx(-73.417095, abs=1e-6)
    got = new_ratings([1500] * 20, list(range(1, 21)))
    assert got == pytest.approx([1500 + x - 12.46999333 - 10 for x in d], abs=TOL)
    assert got[0] == pytest.approx(1637.37444922, abs=TOL) and got[19] == pytest.approx(1404.11291131, abs=TOL)


def test_twenty_players_top_correction_uncapped():
    d = twenty_equal_d()
    got = new_ratings([1500] * 20, list(range(1, 21)), top_correction=30)
    assert got == pytest.approx([1500 + x - 12.46999333 - 17.43196646 for x in d], abs=TOL)
    assert sum(got[:16]) - 16 * 1500 == pytest.approx(0.0, abs=1e-6)


def test_outcome_free_rounds_change_nothing_but_count():
    # codeforces_sys.rs skips a round that everyone ties (and so a round of one).
    for ratings, ranks in (([1500, 1700, 1300], [1, 1, 1]), ([1234.5], [1])):
        changes = rate(ratings, ranks)
        assert [c.after.rating for c in changes] == ratings
        assert all(c.after.matches == 4 for c in changes)
        assert "performance" not in changes[0].extras
    assert rate([1500, 1500], [2, 2])[0].extras["expected_rank"] == 1.5


def test_newcomers_start_at_1500_and_the_state_round_trips():
    system = Codeforces()
    state = system.initial_state()
    assert state == CodeforcesState(rating=1500.0, matches=0)
    assert system.state_from_dict(state.to_dict()) == state
    before = [state, CodeforcesState(1500.0, 0)]
    changes = system.rate(match([1, 2]), before)
    assert before == [CodeforcesState(1500.0, 0), CodeforcesState(1500.0, 0)]  # not mutated
    assert [c.after.matches for c in changes] == [1, 1]
    assert [c.player for c in changes] == ["p0", "p1"]


# ---- cross-check: codeforces_sys.rs's own arithmetic, followed step by step ----

TANH_MULTIPLIER = math.pi / math.sqrt(3.0)


def logistic_cdf(z):
    return 0.5 + 0.5 * math.tanh(0.5 * TANH_MULTIPLIER * z)


def robust_average_zero(offset, ratings, sig):
    """The zero of offset + sum_j w tanh((x - r_j) w / 2), w = TANH_MULTIPLIER / sig
    (robust_average with equal terms and slope 0), by bisection on (-6000, 9000)."""
    w = TANH_MULTIPLIER / sig
    a, b = -6000.0, 9000.0
    for _ in range(200):
        c = 0.5 * (a + b)
        if offset + sum(w * math.tanh((c - r) * w * 0.5) for r in ratings) < 0:
            a = c
        else:
            b = c
    return 0.5 * (a + b)


def codeforces_sys_round(ratings, ranks, beta, weight):
    """A scalar transcription of the computation in codeforces_sys.rs (contest weight
    1, no perf_ceiling): every rating gets sig = beta; lo..hi are the 0-based
    positions tied with the player in the standings; the new mu is
    (mu + weight * perf) / (1 + weight)."""
    n, sig = len(ratings), beta
    order = sorted(ranks)
    out = []
    for mu, rank in zip(ratings, ranks):
        lo, hi = order.index(rank), len(order) - 1 - order[::-1].index(rank)
        pos, neg, total = lo / sig, (n - hi - 1) / sig, n / sig
        ac_rank = 0.5 * (pos - neg + total + 1 / sig)
        ex_rank = 0.5 / sig + sum(logistic_cdf((r - mu) / sig) / sig for r in ratings)
        geo_offset = 2 * math.sqrt(ac_rank * ex_rank) - 1 / sig - total
        perf = robust_average_zero(TANH_MULTIPLIER * geo_offset, ratings, sig)
        out.append(((mu + weight * perf) / (1 + weight), perf))
    return out


@pytest.mark.parametrize(
    "beta, weight",
    [
        (400 * TANH_MULTIPLIER / math.log(10), 1.0),  # CodeforcesSys::default()
        (65.0, 0.631),  # experiments/codeforces/cfsys-*.json (the paper's tuned values)
    ],
)
def test_matches_codeforces_sys_arithmetic(beta, weight):
    ratings = [2100.0, 1830.5, 1500.0, 1500.0, 1420.0, 1200.0, 990.0]
    ranks = [3, 1, 2, 2, 5, 5, 5]
    expected = codeforces_sys_round(ratings, ranks, beta, weight)
    # The same model in our parameters: scale = beta ln 10 / (pi / sqrt 3), share w / (1 + w).
    changes = rate(
        ratings,
        ranks,
        scale=beta * math.log(10) / TANH_MULTIPLIER,
        weight=weight / (1 + weight),
        sum_correction=False,
        top_correction=0,
    )
    assert [c.after.rating for c in changes] == pytest.approx([e[0] for e in expected], abs=1e-6)
    assert [c.extras["performance"] for c in changes] == pytest.approx([e[1] for e in expected], abs=1e-6)


def test_a_large_round_solves_every_participant():
    # 1,500 participants: several blocks of the seed evaluation; check seeds and
    # S(performance) = sqrt(seed * place) directly, densely.
    rng = np.random.default_rng(5)
    n = 1500
    r = rng.normal(1500, 400, n)
    ranks = rng.integers(1, n // 2, n)
    changes = rate(r, ranks.tolist())

    def s_of(x):  # S(x) for each x, densely
        return 0.5 + (1 / (1 + 10 ** ((x[:, None] - r[None, :]) / 400))).sum(axis=1)

    seed = s_of(r)
    place = np.array([(np.sum(ranks < k) + 1 + np.sum(ranks <= k)) / 2 for k in ranks])
    perf = np.array([c.extras["performance"] for c in changes])
    assert [c.extras["expected_rank"] for c in changes] == pytest.approx(seed.tolist(), abs=1e-9)
    assert s_of(perf).tolist() == pytest.approx(np.sqrt(seed * place).tolist(), abs=1e-9)


# ---- properties ----

ratings_st = st.floats(min_value=-2000, max_value=4000, allow_nan=False)


@st.composite
def rounds(draw, min_n=2, max_n=12):
    n = draw(st.integers(min_n, max_n))
    rs = draw(st.lists(ratings_st, min_size=n, max_size=n))
    ranks = draw(st.lists(st.integers(1, n), min_size=n, max_size=n))
    return rs, ranks


@given(data=rounds(max_n=24), who=st.integers(0, 23), better=st.integers(1, 24))
@settings(max_examples=150, deadline=None)
def test_a_better_rank_never_lowers_the_new_rating(data, who, better):
    # The inflation corrections are uniform shifts that pass on at most a share
    # (1/n or 1/s) of a participant's own gain, so monotonicity survives them.
    # Not across an outcome-free round, which changes nothing: breaking a
    # complete tie can cost the new sole winner the correction's 1 point.
    rs, ranks = data
    who %= len(rs)
    improved = list(ranks)
    improved[who] = max(1, ranks[who] - better)
    assume(len(set(ranks)) > 1 and len(set(improved)) > 1)
    assert new_ratings(rs, improved)[who] >= new_ratings(rs, ranks)[who] - 1e-7


@given(data=rounds(max_n=24))
@settings(max_examples=150, deadline=None)
def test_codeforces_first_invariant(data):
    # Codeforces' validateDeltas: placed no worse and rated higher -> not rated lower after.
    rs, ranks = data
    new = new_ratings(rs, ranks)
    for i in range(len(rs)):
        for j in range(len(rs)):
            if ranks[i] <= ranks[j] and rs[i] > rs[j]:
                assert new[i] >= new[j] - 1e-7


@given(data=rounds(max_n=24), shift=st.floats(min_value=-5000, max_value=5000, allow_nan=False))
@settings(max_examples=150, deadline=None)
def test_shifting_every_rating_shifts_the_results(data, shift):
    # Exact up to rounding, as long as the shift keeps the order of the ratings,
    # on which the top participants' correction depends (1e-249 + 1 == 0 + 1:
    # a tie for the last top place then changes hands). Ratings on a 0.01 grid
    # keep their order under any shift.
    rs, ranks = data
    rs, shift = [round(r, 2) for r in rs], round(shift, 2)
    base = rate(rs, ranks)
    moved = rate([r + shift for r in rs], ranks)
    assert [c.delta for c in moved] == pytest.approx([c.delta for c in base], abs=1e-6)
    assert [c.extras["expected_rank"] for c in moved] == pytest.approx(
        [c.extras["expected_rank"] for c in base], abs=1e-9
    )


@given(data=rounds(max_n=40), cap=st.sampled_from([10.0, 3.0, 50.0]))
@settings(max_examples=150, deadline=None)
def test_the_corrections(data, cap):
    rs, ranks = data
    n = len(rs)
    changes = rate(rs, ranks, top_correction=cap)
    if min(ranks) == max(ranks):
        return
    delta = np.array([c.delta for c in changes])
    # After the first correction the mean change is exactly -1; the second adds inc2 in [-cap, 0].
    inc2 = delta.mean() + 1.0
    assert -cap - 1e-7 <= inc2 <= 1e-7
    s = min(n, 4 * round(math.sqrt(n)))
    top = np.lexsort((np.arange(n), ranks, -np.array(rs)))[:s]  # highest rated, ties by place
    top_sum = delta[top].sum()
    if -cap + 1e-7 < inc2 < -1e-7:
        assert top_sum == pytest.approx(0.0, abs=1e-6)  # uncapped: the top's changes sum to 0
    elif inc2 >= -1e-7:
        assert top_sum <= 1e-6  # they already lost in sum: no shift
    else:
        assert top_sum >= -1e-6  # capped: they keep part of their gain
    # Without corrections the changes are just weight * (performance - rating).
    raw = rate(rs, ranks, sum_correction=False, top_correction=0)
    assert [c.delta for c in raw] == pytest.approx(
        [0.5 * (c.extras["performance"] - c.before.rating) for c in raw], abs=1e-9
    )


@given(data=rounds(max_n=10), copies=st.integers(2, 4))
@settings(max_examples=100, deadline=None)
def test_equal_ratings_tied_get_equal_changes(data, copies):
    rs, ranks = data
    rs = rs + [rs[0]] * (copies - 1)
    ranks = ranks + [ranks[0]] * (copies - 1)
    changes = rate(rs, ranks)
    tied = [changes[0]] + changes[len(changes) - copies + 1 :]
    assert [c.delta for c in tied] == pytest.approx([changes[0].delta] * copies, abs=1e-9)


@given(data=rounds(max_n=30))
@settings(max_examples=100, deadline=None)
def test_seeds_sum_to_n_n_plus_1_over_2(data):
    # sum_i seed_i = n + sum over pairs of P(i beats j) + P(j beats i) = n + n(n-1)/2.
    rs, ranks = data
    n = len(rs)
    assert math.fsum(c.extras["expected_rank"] for c in rate(rs, ranks)) == pytest.approx(
        n * (n + 1) / 2, abs=1e-9 * n * n
    )


# ---- parameters ----


def test_defaults():
    p = Codeforces().params
    assert (p.initial, p.scale, p.weight, p.sum_correction, p.top_correction) == (1500.0, 400.0, 0.5, True, 10.0)
    assert Codeforces.name == "codeforces" and not Codeforces.teams and not Codeforces.partial_play


@pytest.mark.parametrize(
    "params, key, rule",
    [
        ({"scale": 0}, "scale", "must be > 0"),
        ({"weight": 0}, "weight", "must be > 0 and <= 1"),
        ({"weight": 1.5}, "weight", "must be > 0 and <= 1"),
        ({"top_correction": -1}, "top_correction", "must be >= 0"),
        ({"sum_correction": 1}, "sum_correction", "must be true or false"),
        ({"initial": "1500"}, "initial", "must be a number"),
        ({"k": 32}, "k", "unknown parameter"),
    ],
)
def test_parameter_errors_name_the_key_and_the_rule(params, key, rule):
    with pytest.raises(ParamError) as err:
        Codeforces.from_mapping(params)
    assert err.value.key == key and rule in err.value.rule
