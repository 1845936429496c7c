"""How well ratings predict standings, measured before each round.

Pair inversion and rank deviation follow the Elo-MMR paper (section 6.2) and
are computed as its authors' `metrics.rs` does, so that figures compare:

- only participants who already have a rating count (newcomers are left out);
  "experienced" ones have played at least 5 rounds before;
- their places are renumbered within that subset, ties keeping a shared
  interval [lo, hi] of 0-based places;
- pair inversion: the percentage of pairs ordered correctly by rating (mu),
  pairs tied in the standings counting as correct; a round's figure has
  weight n and sum 100 * fraction * n;
- rank deviation: sort by rating, highest first; each participant is off by
  the distance from its position in that order to its interval [lo, hi];
  sum 100 * total / (n - 1), weight n;
- a round where everyone tied tells nothing and is skipped.

The MSE index is seed 003's (its formula 8): the mean over pairs of
(P(i beats j) - outcome)^2 with outcome 1, 0.5 or 0, P from the logistic Elo
formula on a 400 scale, here with the ratings before the round (a forecast).
Rounds with more than MSE_MAX_PAIRS pairs use a fixed random sample of pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .engine import Match, PlayerState

EXPERIENCED = 5
MSE_MAX_PAIRS = 100_000


def subset_places(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """0-based [lo, hi] places of each participant among those given, ties shared."""
    order = np.argsort(ranks, kind="stable")
    sorted_ranks = ranks[order]
    lo_sorted = np.searchsorted(sorted_ranks, sorted_ranks, side="left")
    hi_sorted = np.searchsorted(sorted_ranks, sorted_ranks, side="right") - 1
    lo = np.empty_like(lo_sorted)
    hi = np.empty_like(hi_sorted)
    lo[order] = lo_sorted
    hi[order] = hi_sorted
    return lo, hi


def count_strict_inversions(values: np.ndarray) -> int:
    """Pairs p < q with values[p] > values[q], by bottom-up merging (NumPy)."""
    n = len(values)
    if n < 2:
        return 0
    # Dense integer ranks keep ties equal and make a run-offset key possible.
    _, dense = np.unique(values, return_inverse=True)
    dense = dense.astype(np.int64)
    total = 0
    width = 1
    positions = np.arange(n)
    while width < n:
        run = positions // width  # run index of each element at this level
        key = run * n + dense  # runs are sorted, so key is globally sorted
        is_right = (run % 2) == 1
        if is_right.any():
            right_keys = dense[is_right]
            right_runs = run[is_right]
            left_runs = right_runs - 1
            left_start = left_runs * width
            left_len = np.minimum(width, n - left_start)
            # Elements of the left run that are <= r: searchsorted over the
            # globally sorted keys, relative to the left run's start.
            not_greater = np.searchsorted(key, left_runs * n + right_keys, side="right") - left_start
            total += int((left_len - not_greater).sum())
        # Merge pairs of runs: sort within each run of width 2 * width.
        merged_run = positions // (2 * width)
        order = np.lexsort((dense, merged_run))
        dense = dense[order]
        width *= 2
    return total


def pair_inversion(mu: np.ndarray, lo: np.ndarray) -> tuple[float, float]:
    """(weight, sum) as metrics.rs: 100 * (correct + tied pairs) / (n - 1) with weight n."""
    n = len(mu)
    # Order by place, and by rating ascending within a tie, so that strict
    # inversions of the rating sequence are exactly the correctly ordered
    # pairs across different places.
    order = np.lexsort((mu, lo))
    correct = count_strict_inversions(mu[order])
    sizes = np.bincount(lo)
    tied = int((sizes * (sizes - 1) // 2).sum())
    pairs = n * (n - 1) // 2
    return float(n), 100.0 * (correct + tied) / pairs * n


def rank_deviation(mu: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    n = len(mu)
    # Highest rating first; equal ratings keep standings order (a stable sort, as the reference).
    by_rating = np.argsort(-mu, kind="stable")
    position = np.arange(n)
    closest = np.clip(position, lo[by_rating], hi[by_rating])
    return float(n), 100.0 * float(np.abs(position - closest).sum()) / (n - 1)


def mse_index(mu: np.ndarray, ranks: np.ndarray, seed: int) -> float:
    n = len(mu)
    pairs = n * (n - 1) // 2
    if pairs <= MSE_MAX_PAIRS:
        i, j = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(seed)
        i = rng.integers(0, n, MSE_MAX_PAIRS)
        j = rng.integers(0, n - 1, MSE_MAX_PAIRS)
        j = j + (j >= i)  # uniform over j != i
    # 1 / (1 + 10^((mu_j - mu_i) / 400)), with exp (much faster than a power of 10).
    p_i_wins = 1.0 / (1.0 + np.exp((mu[j] - mu[i]) * _LN10_OVER_400))
    # 1 if i finished ahead, 0.5 for a tie, 0 if behind.
    outcome = 0.5 + 0.5 * np.sign(ranks[j] - ranks[i])
    return float(np.mean((p_i_wins - outcome) ** 2))


_LN10_OVER_400 = math.log(10.0) / 400.0


def outcome_free(lo: np.ndarray, hi: np.ndarray) -> bool:
    """Fewer than two participants, or all tied: the round predicts nothing."""
    return len(lo) < 2 or int(lo.max()) == 0


@dataclass
class Accuracy:
    """Collects per-round figures during a replay; `report()` aggregates them."""

    rounds: int = 0
    # Per round: weights and sums for (all, experienced), MSE (nan when not scored).
    rows: list[tuple[float, float, float, float, float, float, float]] = field(default_factory=list)

    def observe(self, match: Match, prior: Sequence[PlayerState | None]) -> None:
        index = self.rounds
        self.rounds += 1
        rated = [k for k, state in enumerate(prior) if state is not None]
        row = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, float("nan")]
        if len(rated) >= 2:
            ranks = np.fromiter((match.participants[k].rank for k in rated), np.int64, len(rated))
            mu = np.fromiter((prior[k].rating for k in rated), float, len(rated))  # type: ignore[union-attr]
            played = np.fromiter((prior[k].matches for k in rated), np.int64, len(rated))  # type: ignore[union-attr]
            for offset, mask in ((0, np.ones(len(rated), bool)), (3, played >= EXPERIENCED)):
                if mask.sum() < 2:
                    continue
                lo, hi = subset_places(ranks[mask])
                if outcome_free(lo, hi):
                    continue
                w, s = pair_inversion(mu[mask], lo)
                _, d = rank_deviation(mu[mask], lo, hi)
                row[offset], row[offset + 1], row[offset + 2] = w, s, d
            lo, hi = subset_places(ranks)
            if not outcome_free(lo, hi):
                row[6] = mse_index(mu, ranks, seed=index)
        self.rows.append(tuple(row))  # type: ignore[arg-type]

    def report(self, skip_fraction: float = 0.1) -> dict[str, float | int | None]:
        skip = int(len(self.rows) * skip_fraction)
        table = np.array(self.rows[skip:], dtype=float).reshape(-1, 7)

        def ratio(w: int, s: int) -> float | None:
            weight = table[:, w].sum()
            return float(table[:, s].sum() / weight) if weight > 0 else None

        mse = table[:, 6][~np.isnan(table[:, 6])] if len(table) else np.array([])
        return {
            "pair_inversion": ratio(3, 4),
            "rank_deviation": ratio(3, 5),
            "pair_inversion_all": ratio(0, 1),
            "rank_deviation_all": ratio(0, 2),
            "mse": float(mse.mean()) if len(mse) else None,
            "rounds_scored": int((table[:, 0] > 0).sum()) if len(table) else 0,
            "rounds_skipped": skip,
        }


def format_report(report: dict[str, float | int | None]) -> str:
    def pct(x: float | int | None) -> str:
        return "-" if x is None else f"{x:.2f}%"

    lines = [
        f"accuracy over {report['rounds_scored']} rounds (the first {report['rounds_skipped']} skipped), ratings before each round",
        f"{'':<30}{'pair inversion':>16}{'rank deviation':>16}",
        f"{'experienced (>= 5 rounds)':<30}{pct(report['pair_inversion']):>16}{pct(report['rank_deviation']):>16}",
        f"{'all rated participants':<30}{pct(report['pair_inversion_all']):>16}{pct(report['rank_deviation_all']):>16}",
        f"MSE index (seed 003): {'-' if report['mse'] is None else format(report['mse'], '.5f')}",
    ]
    return "\n".join(lines)
