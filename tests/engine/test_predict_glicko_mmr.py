"""Predictions of a match to come by glicko2, glicko, elo-mmr and elo-mmx
(RatingSystem.win_probability, predict_win, predict_draw, match_quality):
properties on random states, and worked values computed here from the
papers' formulas (Glickman's examples, the `glicko2` PyPI package's E)."""

from __future__ import annotations

import math
from statistics import NormalDist

import glicko2 as pkg
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_app.engine.base import gaussian_quality
from stream_app.engine.glicko import G1_SCALE, G2_SCALE, Glicko, Glicko2, Glicko2State, GlickoState
from stream_app.engine.mmr import EloMmr, EloMmx, MmrState

SYSTEMS = {"glicko2": Glicko2(), "glicko": Glicko(), "elo-mmr": EloMmr(), "elo-mmx": EloMmx()}
NAMES = list(SYSTEMS)
# Glickman's examples: a 1500 player (RD 200) against 1400/30, 1550/100 and 1700/300.
OPPONENTS = [(1400.0, 30.0), (1550.0, 100.0), (1700.0, 300.0)]
PAPER_E = [0.639, 0.432, 0.303]  # printed in both papers: E with the opponent's RD alone
# Elo-MMR's default beta: (1 + 1/w) sig_limit^2 with w = 0.2 and sig_limit = 80.
BETA2 = 6.0 * 80.0**2


def player(name: str, rating: float, uncertainty: float, matches: int = 10, volatility: float = 0.06):
    if name == "glicko2":
        return Glicko2State(rating, uncertainty, volatility, matches)
    if name == "glicko":
        return GlickoState(rating, uncertainty, matches)
    return MmrState(rating=rating, sigma=uncertainty, matches=matches, gauss_mu=rating, gauss_sigma=uncertainty)


def shifted(name: str, state, by: float):
    """The same player, `by` points higher."""
    return player(name, state.rating + by, state.uncertainty, state.matches, getattr(state, "volatility", 0.06))


@st.composite
def states(draw, name: str):
    return player(name, draw(st.floats(1000, 2000)), draw(st.floats(30, 350)), draw(st.integers(0, 20)),
                  draw(st.floats(0.03, 0.1)))


@st.composite
def sides(draw, name: str, min_sides: int = 2, max_sides: int = 5):
    """Sides of a match: one player each, or 1 to 4 for elo-mmx (teams)."""
    count = draw(st.integers(min_sides, max_sides))
    most = 4 if SYSTEMS[name].teams else 1
    return [draw(st.lists(states(name), min_size=1, max_size=most)) for _ in range(count)]


def each_system(test):
    return pytest.mark.parametrize("name", NAMES)(settings(max_examples=60, deadline=None)(test))


# --- properties -------------------------------------------------------------------------------------


@each_system
@given(data=st.data())
def test_probabilities_are_in_0_1_and_sum_to_1(name, data):
    system = SYSTEMS[name]
    match = data.draw(sides(name))
    p = system.predict_win(match)
    assert len(p) == len(match)
    assert all(0.0 <= x <= 1.0 for x in p)
    assert sum(p) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= system.win_probability(match[0], match[1]) <= 1.0


@each_system
@given(data=st.data())
def test_the_order_of_sides_and_of_members_changes_nothing(name, data):
    system = SYSTEMS[name]
    match = data.draw(sides(name))
    p = system.predict_win(match)
    order = data.draw(st.permutations(range(len(match))))
    reordered = [data.draw(st.permutations(match[k])) for k in order]
    assert system.predict_win(reordered) == pytest.approx([p[k] for k in order], rel=1e-12, abs=1e-15)
    assert system.match_quality(reordered) == pytest.approx(system.match_quality(match), rel=1e-9)


@each_system
@given(data=st.data())
def test_swapping_two_sides_swaps_their_probabilities(name, data):
    system = SYSTEMS[name]
    a, b = data.draw(sides(name, 2, 2))
    pa, pb = system.predict_win([a, b])
    assert system.predict_win([b, a]) == pytest.approx([pb, pa], abs=1e-12)
    assert system.win_probability(a, b) + system.win_probability(b, a) == pytest.approx(1.0, abs=1e-12)


@each_system
@given(data=st.data(), by=st.floats(1, 500))
def test_a_higher_rated_side_is_more_likely_to_win(name, data, by):
    # Two sides alike but for their ratings (each member `by` higher), among others.
    system = SYSTEMS[name]
    others = data.draw(sides(name, 0, 3))
    side = data.draw(sides(name, 1, 1))[0]
    stronger = [shifted(name, x, by) for x in side]
    assert system.win_probability(stronger, side) > 0.5 > system.win_probability(side, stronger)
    p = system.predict_win([side, *others, stronger])
    assert p[-1] > p[0]


@each_system
@given(data=st.data(), by=st.floats(1, 500))
def test_raising_any_one_members_rating_raises_the_sides_chances(name, data, by):
    system = SYSTEMS[name]
    match = data.draw(sides(name))
    k = data.draw(st.integers(0, len(match) - 1))
    i = data.draw(st.integers(0, len(match[k]) - 1))
    raised = list(match)
    raised[k] = [shifted(name, x, by) if j == i else x for j, x in enumerate(match[k])]
    before = [system.win_probability(match[k], other) for j, other in enumerate(match) if j != k]
    after = [system.win_probability(raised[k], other) for j, other in enumerate(match) if j != k]
    assert all(y >= x for x, y in zip(before, after))
    assert system.predict_win(raised)[k] >= system.predict_win(match)[k]
    # Strictly, where the model has not saturated at float precision (teams of
    # unequal size are thousands of points apart: their sums are compared).
    if all(1e-6 < x < 1.0 - 1e-6 for x in before):
        assert all(y > x for x, y in zip(before, after))
        assert system.predict_win(raised)[k] > system.predict_win(match)[k]


@each_system
@given(data=st.data())
def test_no_draw_model(name, data):
    assert SYSTEMS[name].predict_draw(data.draw(sides(name))) is None


@each_system
@given(data=st.data(), closer=st.floats(0.05, 0.95))
def test_match_quality_is_in_0_1_and_larger_for_closer_ratings(name, data, closer):
    system = SYSTEMS[name]
    match = data.draw(sides(name))
    assert 0.0 < system.match_quality(match) <= 1.0
    a, b = match[:2]
    gap = sum(x.rating for x in a) - sum(x.rating for x in b)
    assume(abs(gap) > 1.0)
    nearer = [shifted(name, b[0], closer * gap), *b[1:]]  # the gap shrinks to (1 - closer) gap
    assert system.match_quality([a, nearer]) > system.match_quality([a, b])


@pytest.mark.parametrize("name", NAMES)
def test_match_quality_is_1_for_an_even_match_without_uncertainty(name):
    system = SYSTEMS[name]
    even = [[player(name, 1620.0, 0.0)], [player(name, 1620.0, 0.0)]]
    assert system.predict_win(even) == pytest.approx([0.5, 0.5])
    assert system.match_quality(even) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", ["glicko2", "glicko", "elo-mmr"])
def test_systems_without_teams_refuse_a_side_of_two(name):
    system = SYSTEMS[name]
    one, two = [player(name, 1500.0, 100.0)], [player(name, 1500.0, 100.0), player(name, 1600.0, 100.0)]
    with pytest.raises(ValueError, match="rates individuals"):
        system.win_probability(two, one)
    with pytest.raises(ValueError, match="rates individuals"):
        system.match_quality([one, two])


# --- Glicko: worked values ----------------------------------------------------------------------------


def glicko2_e(r: float, rd: float, r_j: float, rd_j: float) -> float:
    """Glickman's E on the Glicko-2 scale, g taking the combined deviation."""
    phi = math.sqrt(rd**2 + rd_j**2) / 173.7178
    g = 1.0 / math.sqrt(1.0 + 3.0 * phi**2 / math.pi**2)
    return 1.0 / (1.0 + math.exp(-g * (r - r_j) / 173.7178))


def glicko1_e(r: float, rd: float, r_j: float, rd_j: float) -> float:
    """Glicko-1's E with q = ln 10 / 400, g taking sqrt(RD^2 + RD_j^2)."""
    q = math.log(10.0) / 400.0
    g = 1.0 / math.sqrt(1.0 + 3.0 * q**2 * (rd**2 + rd_j**2) / math.pi**2)
    return 1.0 / (1.0 + 10.0 ** (-g * (r - r_j) / 400.0))


@pytest.mark.parametrize("r_j, rd_j", OPPONENTS)
def test_glicko2_is_glickmans_e_with_the_combined_deviation(r_j, rd_j):
    ours = SYSTEMS["glicko2"].win_probability([player("glicko2", 1500.0, 200.0)], [player("glicko2", r_j, rd_j)])
    assert ours == pytest.approx(glicko2_e(1500.0, 200.0, r_j, rd_j), rel=1e-12)
    # The package's own E (Glicko-2 scale), given the combined deviation.
    reference = pkg.Player(rating=1500.0, rd=200.0)._E((r_j - 1500.0) / 173.7178, math.hypot(200.0, rd_j) / 173.7178)
    assert ours == pytest.approx(reference, rel=1e-12)


@pytest.mark.parametrize("r_j, rd_j", OPPONENTS)
def test_glicko_is_glickmans_e_with_the_combined_deviation(r_j, rd_j):
    ours = SYSTEMS["glicko"].win_probability([player("glicko", 1500.0, 200.0)], [player("glicko", r_j, rd_j)])
    assert ours == pytest.approx(glicko1_e(1500.0, 200.0, r_j, rd_j), rel=1e-12)


@pytest.mark.parametrize("name", ["glicko2", "glicko"])
def test_with_a_certain_player_e_is_the_papers(name):
    # RD 0 for the 1500 player leaves the opponent's RD alone in g: the papers' E_j.
    system = SYSTEMS[name]
    for (r_j, rd_j), printed in zip(OPPONENTS, PAPER_E):
        assert system.win_probability([player(name, 1500.0, 0.0)], [player(name, r_j, rd_j)]) == pytest.approx(
            printed, abs=5e-4)


def test_glicko_combined_deviation_example():
    # 1400/80 against 1500/150: g(170) = 0.880, E = 1 / (1 + 10^(0.880 / 4)) = 0.376.
    p = SYSTEMS["glicko"].win_probability([player("glicko", 1400.0, 80.0)], [player("glicko", 1500.0, 150.0)])
    assert p == pytest.approx(glicko1_e(1400.0, 80.0, 1500.0, 150.0), rel=1e-12)
    assert round(p, 3) == 0.376


def test_glicko_predictions_ignore_time_and_step_1():
    # The states as they stand: no idle growth, no Step 1 (c) and no volatility.
    a, b = player("glicko", 1600.0, 60.0), player("glicko", 1450.0, 90.0)
    late = GlickoState(1600.0, 60.0, 10, last_time=0.0)
    assert Glicko.from_mapping({"c": 200}).win_probability([late], [b]) == Glicko().win_probability([a], [b])
    assert Glicko2().win_probability([Glicko2State(1600.0, 60.0, 0.5, 3)], [player("glicko2", 1450.0, 90.0)]) == (
        pytest.approx(glicko2_e(1600.0, 60.0, 1450.0, 90.0), rel=1e-12))


@pytest.mark.parametrize("name, scale", [("glicko2", G2_SCALE), ("glicko", G1_SCALE)])
def test_glicko_quality_uses_the_normal_with_the_logistics_slope(name, scale):
    system = SYSTEMS[name]
    beta = 2.0 * scale / math.sqrt(math.pi)
    # Two certain players: Phi(d / (sqrt 2 beta)) and E have the same slope at d = 0.
    h = 1e-3
    normal = (NormalDist().cdf(h / (math.sqrt(2.0) * beta)) - 0.5) / h
    logistic = (system.win_probability([player(name, 1500.0 + h, 0.0)], [player(name, 1500.0, 0.0)]) - 0.5) / h
    assert normal == pytest.approx(logistic, rel=1e-6)
    # TrueSkill's two-player quality with (rating, RD) and that beta.
    (ra, da), (rb, db) = (1500.0, 200.0), (1400.0, 30.0)
    total = 2.0 * beta**2 + da**2 + db**2
    expected = math.sqrt(2.0 * beta**2 / total) * math.exp(-((ra - rb) ** 2) / (2.0 * total))
    assert system.match_quality([[player(name, ra, da)], [player(name, rb, db)]]) == pytest.approx(expected, rel=1e-12)


# --- Elo-MMR and Elo-MMchi: worked values -------------------------------------------------------------


def test_elo_mmx_is_the_normal_of_the_combined_spread():
    a, b = player("elo-mmx", 1600.0, 100.0), player("elo-mmx", 1500.0, 80.0)
    delta = math.sqrt(100.0**2 + 80.0**2 + 2.0 * BETA2)
    assert SYSTEMS["elo-mmx"].win_probability([a], [b]) == pytest.approx(NormalDist().cdf(100.0 / delta), rel=1e-12)


def test_elo_mmr_is_the_logistic_of_the_combined_spread():
    a, b = player("elo-mmr", 1600.0, 100.0), player("elo-mmr", 1500.0, 80.0)
    delta = math.sqrt(100.0**2 + 80.0**2 + 2.0 * BETA2)
    expected = 1.0 / (1.0 + math.exp(-math.pi * 100.0 / (math.sqrt(3.0) * delta)))  # logistic of deviation delta
    assert SYSTEMS["elo-mmr"].win_probability([a], [b]) == pytest.approx(expected, rel=1e-12)
    far = SYSTEMS["elo-mmr"].win_probability([player("elo-mmr", -1e9, 0.0)], [b])
    assert 0.0 <= far < 1e-300  # far behind: no overflow


def test_elo_mmx_team_is_the_sum_of_its_members():
    team = [player("elo-mmx", 1500.0, 100.0), player("elo-mmx", 1600.0, 120.0)]
    solo = [player("elo-mmx", 1550.0, 90.0)]
    variance = 100.0**2 + 120.0**2 + 90.0**2 + 3.0 * BETA2
    expected = NormalDist().cdf((3100.0 - 1550.0) / math.sqrt(variance))
    assert SYSTEMS["elo-mmx"].win_probability(team, solo) == pytest.approx(expected, rel=1e-12)
    quality = gaussian_quality([[(1500.0, 100.0), (1600.0, 120.0)], [(1550.0, 90.0)]], math.sqrt(BETA2))
    assert SYSTEMS["elo-mmx"].match_quality([team, solo]) == pytest.approx(quality, rel=1e-12)


@pytest.mark.parametrize("name", ["elo-mmr", "elo-mmx"])
def test_elo_mmr_beta_is_the_players_next_rounds(name):
    # noob_delay 0.5 on the first round: a newcomer's w is 0.1, beta^2 = 11 * 80^2.
    system = type(SYSTEMS[name]).from_mapping({"noob_delay": [0.5]})
    new, old = player(name, 1600.0, 100.0, matches=0), player(name, 1500.0, 80.0, matches=5)
    variance = 100.0**2 + 80.0**2 + 11.0 * 80.0**2 + BETA2
    z = 100.0 / math.sqrt(variance)
    expected = NormalDist().cdf(z) if name == "elo-mmx" else 1.0 / (1.0 + math.exp(-math.pi * z / math.sqrt(3.0)))
    assert system.win_probability([new], [old]) == pytest.approx(expected, rel=1e-12)
    # Quality: the least beta, the newcomer's extra performance variance with its sigma.
    quality = gaussian_quality([[(1600.0, math.sqrt(100.0**2 + 5.0 * 80.0**2))], [(1500.0, 80.0)]], math.sqrt(BETA2))
    assert system.match_quality([[new], [old]]) == pytest.approx(quality, rel=1e-12)
    explicit = type(SYSTEMS[name]).from_mapping({"beta": 150.0, "noob_delay": [0.5]})
    assert explicit.match_quality([[new], [old]]) == pytest.approx(
        gaussian_quality([[(1600.0, 100.0)], [(1500.0, 80.0)]], 150.0), rel=1e-12)
