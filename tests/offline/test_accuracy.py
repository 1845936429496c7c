"""Accuracy metrics against direct transcriptions of their definitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.offline.accuracy import (
    Accuracy,
    Calibration,
    calibration_table,
    count_strict_inversions,
    format_calibration,
    mse_index,
    pair_inversion,
    rank_deviation,
    sample_pairs,
    subset_places,
)
from stream_app.engine import Match, Participant, make_system
from stream_app.engine.elo import EloState
from stream_app.engine.wenglin import WengLinState
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger


def brute_pair_inversion(mu, lo):
    """metrics.rs's double loop: ordered pairs counted twice, ties correct."""
    n = len(mu)
    correct = total = 0.0
    for l in range(n):
        for w in range(n):
            if lo[w] < lo[l]:
                if mu[w] > mu[l]:
                    correct += 2
                total += 2
    tied = n * (n - 1) - total
    return float(n), 100.0 * (correct + tied) / (n - 1)


def brute_rank_deviation(mu, lo, hi, order_in_standings):
    items = sorted(order_in_standings, key=lambda k: -mu[k])  # stable, as Rust's sort_by
    total = sum(abs(i - min(max(i, lo[k]), hi[k])) for i, k in enumerate(items))
    return float(len(mu)), 100.0 * total / (len(mu) - 1)


values = st.lists(st.integers(0, 6), min_size=0, max_size=60)


@given(values)
@settings(max_examples=300, deadline=None)
def test_strict_inversions_match_the_double_loop(xs):
    arr = np.array(xs, dtype=float)
    brute = sum(1 for p in range(len(xs)) for q in range(p + 1, len(xs)) if xs[p] > xs[q])
    assert count_strict_inversions(arr) == brute


@st.composite
def rounds(draw):
    n = draw(st.integers(2, 40))
    ranks = np.array(draw(st.lists(st.integers(1, 8), min_size=n, max_size=n)))
    mu = np.array(draw(st.lists(st.sampled_from([1400.0, 1500.0, 1500.0, 1620.5, 1700.0, 1333.3]), min_size=n, max_size=n)))
    return ranks, mu


@given(rounds())
@settings(max_examples=300, deadline=None)
def test_pair_inversion_and_rank_deviation_match_the_reference_definitions(data):
    ranks, mu = data
    # Participants listed in standings order, as the reference's input is.
    order = np.argsort(ranks, kind="stable")
    ranks, mu = ranks[order], mu[order]
    lo, hi = subset_places(ranks)
    assert pair_inversion(mu, lo) == pytest.approx(brute_pair_inversion(mu, lo))
    assert rank_deviation(mu, lo, hi) == pytest.approx(brute_rank_deviation(mu, lo, hi, list(range(len(mu)))))


def test_subset_places_share_intervals_for_ties():
    lo, hi = subset_places(np.array([3, 1, 3, 7, 1]))
    assert lo.tolist() == [2, 0, 2, 4, 0]
    assert hi.tolist() == [3, 1, 3, 4, 1]


def test_perfect_prediction_and_perfectly_wrong_prediction():
    ranks = np.arange(1, 11)
    lo, hi = subset_places(ranks)
    good = np.linspace(2000, 1000, 10)
    assert pair_inversion(good, lo)[1] / 10 == pytest.approx(100.0)
    assert rank_deviation(good, lo, hi)[1] == 0.0
    bad = good[::-1].copy()
    assert pair_inversion(bad, lo)[1] == 0.0
    # Reversed: positions off by |i - (n-1-i)|, summed and scaled by 100 / (n-1).
    assert rank_deviation(bad, lo, hi)[1] / 10 == pytest.approx(100 * sum(abs(i - (9 - i)) for i in range(10)) / 9 / 10)


def test_mse_is_the_codeforces_analysis_formula_on_pairs():
    mu = np.array([1600.0, 1500.0, 1500.0])
    ranks = np.array([1, 2, 2])
    p = 1 / (1 + 10 ** (-100 / 400))
    expected = ((p - 1) ** 2 + (p - 1) ** 2 + (0.5 - 0.5) ** 2) / 3
    assert mse_index(mu, ranks, seed=0) == pytest.approx(expected)


def test_accuracy_leaves_newcomers_out_and_skips_the_first_tenth():
    acc = Accuracy()
    players = ["a", "b", "c", "d"]
    for index in range(20):
        match = Match("l", str(index), tuple(Participant(p, k + 1) for k, p in enumerate(players)))
        if index < 2:
            prior = [None] * 4  # nobody rated yet: nothing to score
        else:
            # d is a newcomer each time; a, b, c rated in the right order, experienced after 5.
            prior = [EloState(1200.0, index), EloState(1100.0, index), EloState(1000.0, index), None]
        acc.observe(match, prior)
    report = acc.report()
    assert report["rounds_skipped"] == 2
    assert report["rounds_scored"] == 18
    assert report["pair_inversion_all"] == pytest.approx(100.0)
    assert report["rank_deviation_all"] == pytest.approx(0.0)
    assert report["pair_inversion"] == pytest.approx(100.0)  # rounds with index >= 5
    assert report["mse"] > 0


def test_all_tied_round_predicts_nothing():
    acc = Accuracy()
    match = Match("l", "1", (Participant("a", 1), Participant("b", 1)))
    acc.observe(match, [EloState(1000.0, 9), EloState(1200.0, 9)])
    assert acc.report(skip_fraction=0)["rounds_scored"] == 0


def test_a_team_match_is_scored_between_teams_by_the_sum_of_their_members_ratings():
    acc = Accuracy()
    # Teams x (won) and y: x's members sum to 2000 (1500 + half of 1000), y's to 1900;
    # z (third) has a newcomer and is left out, as a newcomer is.
    match = Match("l", "1", (Participant("a", 1, None, "x"), Participant("b", 1, None, "x", 0.5),
                             Participant("c", 2, None, "y"), Participant("d", 2, None, "y"),
                             Participant("e", 3, None, "z"), Participant("f", 3, None, "z")))
    prior = [EloState(1500.0, 9), EloState(1000.0, 9), EloState(950.0, 9), EloState(950.0, 2),
             EloState(3000.0, 9), None]
    acc.observe(match, prior)
    report = acc.report(skip_fraction=0)
    assert report["rounds_scored"] == 1
    assert report["pair_inversion_all"] == pytest.approx(100.0)  # one pair (x, y), ordered right
    assert report["pair_inversion"] is None  # y's least experienced member has 2 rounds: no experienced pair
    wrong = Accuracy()
    wrong.observe(match, [EloState(1500.0, 9), EloState(700.0, 9)] + prior[2:])  # x now sums to 1850
    assert wrong.report(skip_fraction=0)["pair_inversion_all"] == pytest.approx(0.0)


def test_report_rounds_scores_a_range_of_rounds():
    acc = Accuracy()
    for index in range(10):
        right = index < 6
        acc.observe(Match("l", str(index), (Participant("a", 1), Participant("b", 2))),
                    [EloState(1100.0 if right else 900.0, 9), EloState(1000.0, 9)])
    assert acc.report_rounds(0, 6)["pair_inversion"] == pytest.approx(100.0)
    assert acc.report_rounds(6, 10)["pair_inversion"] == pytest.approx(0.0)
    assert acc.report_rounds(4, 8)["pair_inversion"] == pytest.approx(50.0)


# -- calibration of the systems' win probabilities ---------------------------------------


def test_calibration_bins_and_brier_by_hand():
    p = [0.05, 0.05, 0.0, 0.3, 0.55, 0.95, 1.0, 0.1]
    outcome = [0.0, 1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0]
    table = calibration_table(np.array(p), np.array(outcome))
    assert table["pairs"] == 8
    assert table["ties"] == 1
    # (p - outcome)^2: .0025 .9025 0 .09 .0025 .0025 0 .81
    assert table["brier"] == pytest.approx((0.0025 + 0.9025 + 0.09 + 0.0025 + 0.0025 + 0.81) / 8)
    bins = table["bins"]
    assert [b["low"] for b in bins] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    # 0.1 and 0.3 open their bins, 1.0 is in the last.
    assert [b["count"] for b in bins] == [3, 1, 0, 1, 0, 1, 0, 0, 0, 2]
    assert bins[0]["predicted"] == pytest.approx(0.1 / 3)
    assert bins[0]["observed"] == pytest.approx(1 / 3)
    assert (bins[1]["predicted"], bins[1]["observed"]) == pytest.approx((0.1, 1.0))
    assert (bins[3]["predicted"], bins[3]["observed"]) == pytest.approx((0.3, 0.0))
    assert (bins[5]["predicted"], bins[5]["observed"]) == pytest.approx((0.55, 0.5))  # a tie observed as half
    assert (bins[9]["predicted"], bins[9]["observed"]) == pytest.approx((0.975, 1.0))
    assert bins[2]["predicted"] is None and bins[2]["observed"] is None
    gaps = 3 * (0.1 / 3 - 1 / 3) ** 2 + 0.9 ** 2 + 0.3 ** 2 + 0.05 ** 2 + 2 * 0.025 ** 2
    assert table["reliability"] == pytest.approx(gaps / 8)
    empty = calibration_table(np.empty(0), np.empty(0))
    assert empty["pairs"] == 0 and empty["brier"] is None and all(b["count"] == 0 for b in empty["bins"])


def _two_player_rounds(rounds, seed):
    """Rounds of two rated players whose Elo win probability (scale 400) is drawn
    uniformly, the winner drawn with that probability."""
    rng = np.random.default_rng(seed)
    for index in range(rounds):
        p = rng.uniform(0.01, 0.99)
        gap = 400 * np.log10(p / (1 - p))  # P(a ahead) = p exactly
        a_wins = rng.random() < p
        match = Match("l", str(index), (Participant("a", 1 if a_wins else 2), Participant("b", 2 if a_wins else 1)))
        yield match, [EloState(1500.0 + gap, 9), EloState(1500.0, 9)]


def _calibrated(system, rounds=20_000):
    calibration = Calibration(lambda league: system)
    for match, prior in _two_player_rounds(rounds, seed=7):
        calibration.observe(match, prior)
    return calibration.report(skip_fraction=0)


def test_outcomes_drawn_with_the_predicted_probabilities_are_observed_at_them():
    report = _calibrated(make_system("elo"))
    assert report["pairs"] == 20_000
    for row in report["bins"]:
        assert row["count"] > 1500  # about 2,000 each: the observed frequency is known to about 0.011
        assert row["observed"] == pytest.approx(row["predicted"], abs=0.04)
    assert report["brier"] == pytest.approx(1 / 6, abs=0.01)  # E[p (1 - p)] for p uniform
    assert report["reliability"] < 0.001
    # The same outcomes predicted by an overconfident model (half the scale) are not.
    overconfident = _calibrated(make_system("elo", {"scale": 200.0}))
    outer = [overconfident["bins"][k] for k in (0, 1, 8, 9)]
    assert all(abs(row["observed"] - row["predicted"]) > 0.04 for row in outer)
    assert overconfident["brier"] > report["brier"] + 0.01


def test_calibration_uses_the_states_before_each_round():
    ledger = Ledger(LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n'))
    system = ledger.config.system_for("l")
    calibration = Calibration(ledger.config.system_for)
    ledger.observer = calibration.observe
    ledger.apply(Match("l", "1", (Participant("a", 1), Participant("b", 2))))
    assert len(calibration.rows[0][0]) == 0  # two newcomers: no pair
    before = [ledger.state("l", "a"), ledger.state("l", "b")]
    ledger.apply(Match("l", "2", (Participant("a", 1), Participant("b", 2))))
    after = [ledger.state("l", "a"), ledger.state("l", "b")]
    (q,), (outcome,) = calibration.rows[1]
    a_first = q if outcome == 1.0 else 1.0 - q  # P(a ahead of b), whichever came first
    assert a_first == pytest.approx(system.win_probability(before[:1], before[1:]), abs=1e-12)
    assert a_first != pytest.approx(system.win_probability(after[:1], after[1:]), abs=1e-3)


def test_ties_count_half_and_newcomers_are_left_out():
    system = make_system("elo")
    ratings = {"a": 1500.0, "b": 1400.0, "c": 1250.0}
    names = {}
    for x in ratings:
        for y in ratings:
            if x != y:
                names[round(system.win_probability([EloState(ratings[x], 9)], [EloState(ratings[y], 9)]), 12)] = (x, y)
    rank = {"a": 1, "b": 1, "c": 2, "d": 3}
    match = Match("l", "1", tuple(Participant(x, rank[x]) for x in "abcd"))
    calibration = Calibration(lambda league: system)
    calibration.observe(match, [EloState(ratings["a"], 9), EloState(ratings["b"], 9), EloState(ratings["c"], 9), None])
    p, outcome = calibration.rows[0]
    seen = {}
    for q, o in zip(p.tolist(), outcome.tolist()):
        first, second = names[round(q, 12)]
        seen[frozenset((first, second))] = o if first < second else 1 - o  # seen from the earlier name
    # d, the newcomer, is in no pair; a and b tied: half; each ahead of c: 1.
    assert seen == {frozenset("ab"): 0.5, frozenset("ac"): 1.0, frozenset("bc"): 1.0}
    report = calibration.report(skip_fraction=0)
    assert report["pairs"] == 3 and report["ties"] == 1
    assert "3 pairs (1 tied)" in format_calibration(report)


def test_team_matches_pair_teams_with_their_members_states():
    calls = []

    class Recording:
        def win_probability(self, side, other):
            calls.append((list(side), list(other)))
            return 0.7

    x1, x2, y1, y2, z1 = (WengLinState(25.0 + k, 8.0, 3) for k in range(5))
    match = Match("l", "1", (Participant("a", 1, None, "x"), Participant("b", 1, None, "x"),
                             Participant("c", 2, None, "y"), Participant("d", 2, None, "y"),
                             Participant("e", 3, None, "z"), Participant("f", 3, None, "z")))
    calibration = Calibration(lambda league: Recording())
    calibration.observe(match, [x1, x2, y1, y2, z1, None])  # z has a newcomer: left out
    assert len(calls) == 1
    side, other = calls[0]
    (q,), (outcome,) = calibration.rows[0]
    if side == [x1, x2]:
        assert other == [y1, y2] and outcome == 1.0
    else:
        assert (side, other) == ([y1, y2], [x1, x2]) and outcome == 0.0
    assert q == 0.7


def test_every_system_gets_the_same_pairs_in_the_same_order():
    rng = np.random.default_rng(3)
    rounds = [Match("l", str(index), tuple(Participant(f"p{k}", int(r)) for k, r in enumerate(rng.permutation(40) + 1)))
              for index in range(5)]
    prior = [EloState(1000.0 + 10 * k, 9) for k in range(40)]
    tallies = [Calibration(lambda league, s=make_system("elo", {"scale": scale}): s) for scale in (400.0, 100.0)]
    for tally in tallies:
        for match in rounds:
            tally.observe(match, prior)
    for (p1, o1), (p2, o2) in zip(tallies[0].rows, tallies[1].rows):
        assert len(o1) == 50
        assert o1.tolist() == o2.tolist()
        assert ((p1 > 0.5) == (p2 > 0.5)).all() and not np.allclose(p1, p2)


def test_sample_pairs_are_distinct_and_all_when_few():
    rng = np.random.default_rng(0)
    first, second = sample_pairs(5, 50, rng)
    assert sorted(map(tuple, map(sorted, zip(first.tolist(), second.tolist())))) == [
        (i, j) for i in range(5) for j in range(i + 1, 5)]
    first, second = sample_pairs(1000, 50, rng)
    pairs = {tuple(sorted(x)) for x in zip(first.tolist(), second.tolist())}
    assert len(pairs) == 50 and all(0 <= i < j < 1000 for i, j in pairs)
    assert 0 < int((first > second).sum()) < 50  # each pair in a random order
