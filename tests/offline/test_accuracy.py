"""Accuracy metrics against direct transcriptions of their definitions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.offline.accuracy import (
    Accuracy,
    count_strict_inversions,
    mse_index,
    pair_inversion,
    rank_deviation,
    subset_places,
)
from stream_app.engine import Match, Participant
from stream_app.engine.elo import EloState


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
