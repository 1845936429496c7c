"""Multi-player pairwise Elo: ELORank's trajectory and the Codeforces rating analysis."""

import itertools
from pathlib import Path

import pytest

from stream_app.engine import Match, ParamError, Participant, make_system
from stream_app.engine.numeric import round_half_away

TRAJECTORY = Path(__file__).parent / "data" / "elorank_trajectory.txt"


def match(ranks, players=None):
    players = players or [f"p{i}" for i in range(len(ranks))]
    return Match("l", "m", tuple(Participant(p, r) for p, r in zip(players, ranks)))


def load_trajectory():
    rows = []
    for line in TRAJECTORY.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        run, *values = line.split()
        rows.append((int(run), [float(v) for v in values]))
    return rows


def test_elorank_trajectory_of_100_runs():
    """Every row of ELORank's section 7: three ratings and three soft ratings within 1e-3.

    The file gives ratings, not finishing orders; each run's order is the one of
    the six that reproduces the row (ELORank's scores are Gaussian draws: no ties).
    """
    system = make_system("elo-pairwise")  # ELORank's defaults: K=8, start 0, ties skipped
    assert system.params.k == 8.0 and system.params.initial == 0.0 and system.params.ties == "skip"
    states = [system.initial_state() for _ in range(3)]
    rows = load_trajectory()
    assert len(rows) == 100
    for run, expected in rows:
        best = None
        for order in itertools.permutations(range(3)):
            ranks = [order.index(i) + 1 for i in range(3)]
            changes = system.rate(match(ranks), states)
            got = [c.after.rating for c in changes] + [c.after.soft_rating for c in changes]
            error = max(abs(g - e) for g, e in zip(got, expected))
            if best is None or error < best[0]:
                best = (error, changes)
        error, changes = best
        assert error < 1e-3, f"run {run}: no finishing order reproduces the row (closest off by {error})"
        states = [c.after for c in changes]
    assert all(s.matches == 100 for s in states)


def test_soft_rating_decays_from_the_100th_match():
    system = make_system("elo-pairwise")
    state = system.State(rating=10.0, matches=98, soft_sum=980.0)
    # 99th match: plain sum.
    a = system.rate(match([1, 2]), [state, system.State(rating=10.0, matches=98, soft_sum=980.0)])[0].after
    assert a.matches == 99 and a.soft_sum == pytest.approx(980.0 + a.rating)
    # 100th match: the sum is multiplied by 0.99 before the new rating is added.
    b = system.rate(match([1, 2]), [a, a])[0].after
    assert b.matches == 100 and b.soft_sum == pytest.approx(a.soft_sum * 0.99 + b.rating)
    assert b.soft_rating == pytest.approx(b.soft_sum / 100)


# The Codeforces analysis by hand: A 1500, B 1400, C 1400, D 1300 finish 1, 2, 2, 4; ties score 0.5;
# K = 16, and the top 1 finisher uses K_top = 8.
#   P(100 points better wins) = 1 / (1 + 10^-0.25) = 0.640065;  P(200 better) = 0.759747
#   A: (1 - .640065) + (1 - .640065) + (1 - .759747) = 0.960123 -> x8  = +7.680985
#   B: (0 - .359935) + (0.5 - 0.5)   + (1 - .640065) = 0         -> x16 = 0
#   D: (0 - .240253) + (0 - .359935) + (0 - .359935) = -0.960123 -> x16 = -15.361970
# Expected ranks (0.5 + sum of P(losing to j), self included):
#   A: 0.5 + 0.5 + .359935 + .359935 + .240253 = 1.960123;  B = C = 2.5;  D = 3.039877
HAND_RATINGS = [1500.0, 1400.0, 1400.0, 1300.0]
HAND_RANKS = [1, 2, 2, 4]


def test_codeforces_analysis_contest_with_ties_and_a_top_k_worked_by_hand():
    system = make_system("elo-pairwise", {"k": 16, "ties": "half", "top_n": 1, "k_top": 8})
    before = [system.State(rating=r) for r in HAND_RATINGS]
    changes = system.rate(match(HAND_RANKS), before)
    assert [c.delta for c in changes] == pytest.approx([7.680985, 0.0, 0.0, -15.361970], abs=1e-6)
    assert [c.extras["expected_rank"] for c in changes] == pytest.approx([1.960123, 2.5, 2.5, 3.039877], abs=1e-6)
    # The expected ranks of a match add up to 1 + 2 + ... + n (the Codeforces analysis's check).
    assert sum(c.extras["expected_rank"] for c in changes) == pytest.approx(10.0)


def test_codeforces_analysis_rounds_new_ratings_to_integers():
    system = make_system("elo-pairwise", {"k": 16, "ties": "half", "top_n": 1, "k_top": 8, "round": True})
    changes = system.rate(match(HAND_RANKS), [system.State(rating=r) for r in HAND_RATINGS])
    assert [c.after.rating for c in changes] == [1508.0, 1400.0, 1400.0, 1285.0]


def test_ties_skip_versus_half():
    # A (1500) ties B (1400); both beat C (1300).
    ratings, ranks = [1500.0, 1400.0, 1300.0], [1, 1, 3]
    skip = make_system("elo-pairwise", {"k": 10, "ties": "skip"})
    half = make_system("elo-pairwise", {"k": 10, "ties": "half"})
    d_skip = skip.rate(match(ranks), [skip.State(rating=r) for r in ratings])[0].delta
    d_half = half.rate(match(ranks), [half.State(rating=r) for r in ratings])[0].delta
    assert d_skip == pytest.approx(10 * (1 - 0.759746927))  # the tie with B changes nothing
    assert d_half == pytest.approx(10 * ((1 - 0.759746927) + (0.5 - 0.640065080)))


def test_top_n_counts_finishing_positions_so_a_tie_at_the_top_shares_k_top():
    system = make_system("elo-pairwise", {"k": 16, "top_n": 2, "k_top": 4, "ties": "half"})
    ratings = [1500.0, 1500.0, 1500.0, 1500.0]
    # Two tied winners are both in the top 2; the third finisher is not.
    changes = system.rate(match([1, 1, 3, 4]), [system.State(rating=r) for r in ratings])
    assert changes[0].delta == pytest.approx(4 * (0 + 0.5 + 0.5))
    assert changes[2].delta == pytest.approx(16 * (-0.5 - 0.5 + 0.5))


def test_round_half_away_from_zero_like_c():
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, -2.5, 2.49)] == [1.0, 2.0, 3.0, -1.0, -3.0, 2.0]


def test_large_round_is_computed_in_blocks_and_matches_the_direct_sum(monkeypatch):
    import stream_app.engine.pairwise as pairwise

    system = make_system("elo-pairwise", {"ties": "half"})
    n = 300
    before = [system.State(rating=float((i * 37) % 400)) for i in range(n)]
    ranks = [1 + (i * 7) % 120 for i in range(n)]
    whole = [c.delta for c in system.rate(match(ranks), before)]
    monkeypatch.setattr(pairwise, "BLOCK_CELLS", 1000)  # 3 rows per block
    blocked = [c.delta for c in system.rate(match(ranks), before)]
    assert blocked == pytest.approx(whole, abs=1e-9)
    # And against a plain double loop.
    i = 5
    direct = 0.0
    for j in range(n):
        if j != i:
            outcome = 1.0 if ranks[i] < ranks[j] else 0.0 if ranks[i] > ranks[j] else 0.5
            direct += outcome - 1 / (1 + 10 ** ((before[j].rating - before[i].rating) / 400))
    assert whole[i] == pytest.approx(8 * direct)


@pytest.mark.parametrize(
    "params, key", [({"ties": "never"}, "ties"), ({"k": -8}, "k"), ({"top_n": -1}, "top_n"), ({"round": 1}, "round")]
)
def test_bad_parameters_name_the_key(params, key):
    with pytest.raises(ParamError) as err:
        make_system("elo-pairwise", params)
    assert err.value.key == key
