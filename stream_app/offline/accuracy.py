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

The MSE index is the Codeforces analysis's (its formula 8): the mean over pairs of
(P(i beats j) - outcome)^2 with outcome 1, 0.5 or 0, P from the logistic Elo
formula on a 400 scale, here with the ratings before the round (a forecast).
Rounds with more than MSE_MAX_PAIRS pairs use a fixed random sample of pairs.

`Calibration` asks whether the systems' own win probabilities mean what they
say, again before each round: in every round, up to CALIBRATION_PAIRS pairs of
sides (participants, or teams in a team match) drawn at random (seeded by the
round's index, so every system gets the same pairs), each in a random order;
P(first ahead of second) is `system.win_probability(first, second)` on the
sides' members' states before the round, the outcome 1 if the first finished
strictly ahead, 0 if behind, 0.5 for a tie. A side with a newcomer is left out,
as newcomers are above. The report: the Brier score (the mean of
(P - outcome)^2) and ten bins of P, [0, 0.1) ... [0.9, 1], each with its
count, mean P and observed frequency (the mean outcome).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, is_not
from typing import Any, Callable, Sequence

import numpy as np

from ..engine import Match, PlayerState, RatingSystem, is_team_match, team_members

EXPERIENCED = 5
MSE_MAX_PAIRS = 100_000
CALIBRATION_PAIRS = 50
CALIBRATION_BINS = 10
_RANK = attrgetter("rank")
_RATING_MATCHES = attrgetter("rating", "matches")


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
    """Pairs p < q with values[p] > values[q], one bit of the dense ranks at a time.

    Before the pass of bit b the ranks are ordered by (their bits above b,
    position); a stable sort by the bits from b up moves each rank with a 0
    at b from index order[q] down to q, past exactly order[q] - q ranks of its
    group with a 1 there, which precede it and are larger. A stable sort of
    16-bit keys is a radix sort (linear), hence uint16 when the ranks fit.
    """
    n = len(values)
    if n < 2:
        return 0
    _, dense = np.unique(values, return_inverse=True)
    bits = int(dense.max()).bit_length()
    dense = dense.astype(np.uint16 if bits <= 16 else np.int64)
    position = np.arange(n)
    total = 0
    for b in range(bits - 1, -1, -1):
        order = np.argsort(dense >> b, kind="stable")
        dense = dense[order]
        zero = ((dense >> b) & 1) == 0
        total += int((order - position)[zero].sum())
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
    # 1 / (1 + 10^((mu_j - mu_i) / 400)), with exp (much faster than a power
    # of 10); in place: these are the biggest arrays of a round's metrics.
    p_i_wins = mu[j]
    p_i_wins -= mu[i]
    p_i_wins *= _LN10_OVER_400
    with np.errstate(over="ignore"):  # a gap of thousands of points: exp is inf, the probability 0, as it should be
        np.exp(p_i_wins, out=p_i_wins)
    p_i_wins += 1.0
    np.divide(1.0, p_i_wins, out=p_i_wins)
    # 1 if i finished ahead, 0.5 for a tie, 0 if behind.
    p_i_wins -= _OUTCOMES[np.sign(ranks[j] - ranks[i]) + 1]
    p_i_wins *= p_i_wins
    return float(np.mean(p_i_wins))


_OUTCOMES = np.array([0.0, 0.5, 1.0])
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
        row = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, float("nan")]
        ranks, mu, played = (_teams if is_team_match(match) else _individuals)(match, prior)
        n = len(ranks)
        if n >= 2:
            everyone = subset_places(ranks)
            if not outcome_free(*everyone):
                experienced = played >= EXPERIENCED
                subsets = [(0, mu, everyone)]
                if experienced.sum() >= 2:
                    subsets.append((3, mu[experienced], subset_places(ranks[experienced])))
                for offset, m, (lo, hi) in subsets:
                    if outcome_free(lo, hi):
                        continue
                    w, s = pair_inversion(m, lo)
                    _, d = rank_deviation(m, lo, hi)
                    row[offset], row[offset + 1], row[offset + 2] = w, s, d
                row[6] = mse_index(mu, ranks, seed=index)
        self.rows.append(tuple(row))  # type: ignore[arg-type]

    def report(self, skip_fraction: float = 0.1) -> dict[str, float | int | None]:
        """Every round but the first `skip_fraction` (ratings are still settling there)."""
        return self.report_rounds(int(len(self.rows) * skip_fraction), len(self.rows))

    def report_rounds(self, first: int, stop: int) -> dict[str, float | int | None]:
        """Rounds first .. stop - 1 (0-based, in the order observed)."""
        skip = first
        table = np.array(self.rows[first:stop], dtype=float).reshape(-1, 7)

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


def _individuals(match: Match, prior: Sequence[PlayerState | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranks, ratings and matches played of the participants who have a rating."""
    has = list(map(is_not, prior, repeat(None)))
    states = list(compress(prior, has))
    n = len(states)
    # Rating and matches in one pass over the states: fetching each state from
    # memory is most of the cost. Match counts are exact as floats.
    numbers = np.fromiter(chain.from_iterable(map(_RATING_MATCHES, states)), float, 2 * n).reshape(n, 2)
    return (np.fromiter(map(_RANK, compress(match.participants, has)), np.int64, n),
            numbers[:, 0].copy(), numbers[:, 1].astype(np.int64))


def _teams(match: Match, prior: Sequence[PlayerState | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same for teams: a team's rating is the weighted sum of its members'
    (the team systems' model), its experience its least experienced member's;
    a team with a newcomer is left out, as a newcomer is."""
    rows = []
    for members in team_members(match):
        states = [prior[i] for i in members]
        if all(state is not None for state in states):
            people = [match.participants[i] for i in members]
            rows.append((people[0].rank, math.fsum(x.weight * s.rating for x, s in zip(people, states)),
                         min(s.matches for s in states)))
    ranks, mu, played = zip(*rows) if rows else ((), (), ())
    return np.array(ranks, np.int64), np.array(mu, float), np.array(played, np.int64)


def sample_pairs(m: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(first, second): k distinct unordered pairs of 0 .. m - 1 drawn uniformly (every
    pair when there are at most k), each pair in a random order."""
    total = m * (m - 1) // 2
    if total <= k:
        first, second = np.triu_indices(m, k=1)
    else:
        chosen = np.sort(rng.choice(total, k, replace=False))
        # Pairs (i, j), i < j, numbered row by row: row i holds m - 1 - i of them from starts[i].
        starts = np.concatenate(([0], np.cumsum(np.arange(m - 1, 0, -1))))
        first = np.searchsorted(starts, chosen, side="right") - 1
        second = first + 1 + (chosen - starts[first])
    swap = rng.random(len(first)) < 0.5
    return np.where(swap, second, first), np.where(swap, first, second)


def calibration_table(p: np.ndarray, outcome: np.ndarray, bins: int = CALIBRATION_BINS) -> dict[str, Any]:
    """Brier score and reliability bins of predictions `p` (in [0, 1]) against
    outcomes (1, 0.5 or 0). `reliability` is the Brier score's calibration term
    over the bins (Murphy): sum of count * (mean P - observed)^2 / pairs."""
    p = np.asarray(p, float)
    outcome = np.asarray(outcome, float)
    n = len(p)
    index = np.minimum(np.floor(p * bins), bins - 1).astype(np.int64)
    counts = np.bincount(index, minlength=bins)
    predicted = np.bincount(index, weights=p, minlength=bins)
    observed = np.bincount(index, weights=outcome, minlength=bins)
    rows = [{"low": b / bins, "high": (b + 1) / bins, "count": int(c),
             "predicted": float(predicted[b] / c) if c else None,
             "observed": float(observed[b] / c) if c else None} for b, c in enumerate(counts.tolist())]
    used = counts > 0
    gaps = float((counts[used] * ((predicted[used] - observed[used]) / counts[used]) ** 2).sum())
    return {
        "pairs": n,
        "ties": int((outcome == 0.5).sum()),
        "brier": float(np.mean((p - outcome) ** 2)) if n else None,
        "reliability": float(gaps / n) if n else None,
        "bins": rows,
    }


@dataclass
class Calibration:
    """Collects (P, outcome) pairs during a replay (the module's docstring);
    `system_for(league)` gives the league's system (LeagueConfig.system_for)."""

    system_for: Callable[[str], RatingSystem]
    pairs: int = CALIBRATION_PAIRS
    seed: int = 0
    rounds: int = 0
    # Per round: the pairs' predictions and outcomes (empty when nothing was scored).
    rows: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def observe(self, match: Match, prior: Sequence[PlayerState | None]) -> None:
        index = self.rounds
        self.rounds += 1
        ranks, sides = rated_sides(match, prior)
        p = outcome = np.empty(0)
        if len(sides) >= 2:
            rng = np.random.default_rng((self.seed, index))
            first, second = sample_pairs(len(sides), self.pairs, rng)
            win = self.system_for(match.league).win_probability
            p = np.array([win(sides[a], sides[b]) for a, b in zip(first.tolist(), second.tolist())], float)
            outcome = _OUTCOMES[np.sign(ranks[second] - ranks[first]) + 1]
        self.rows.append((p, outcome))

    def report(self, skip_fraction: float = 0.1) -> dict[str, Any]:
        """Every round but the first `skip_fraction`, as Accuracy.report."""
        skip = int(len(self.rows) * skip_fraction)
        kept = self.rows[skip:]
        p = np.concatenate([r[0] for r in kept]) if kept else np.empty(0)
        outcome = np.concatenate([r[1] for r in kept]) if kept else np.empty(0)
        return {**calibration_table(p, outcome), "rounds_scored": sum(1 for r in kept if len(r[0])),
                "rounds_skipped": skip}


def rated_sides(match: Match, prior: Sequence[PlayerState | None]) -> tuple[np.ndarray, list[list[PlayerState]]]:
    """The sides of the match (its teams; each participant alone without teams)
    whose members all have a state before it: their ranks and those states."""
    people = match.participants
    if not is_team_match(match):
        has = list(map(is_not, prior, repeat(None)))
        alone = [[state] for state in prior if state is not None]
        return np.fromiter(map(_RANK, compress(people, has)), np.int64, len(alone)), alone
    ranks: list[int] = []
    sides: list[list[PlayerState]] = []
    for members in team_members(match):
        states = [prior[i] for i in members]
        if all(state is not None for state in states):
            ranks.append(people[members[0]].rank)
            sides.append(states)  # type: ignore[arg-type]
    return np.array(ranks, np.int64), sides


def format_calibration(report: dict[str, Any]) -> str:
    """The bins as `observed / mean P (count)`, and the Brier score."""
    lines = [f"calibration over {report['pairs']:,} pairs ({report['ties']:,} tied), {report['rounds_scored']} rounds "
             f"(the first {report['rounds_skipped']} skipped), ratings before each round",
             f"{'P(first ahead)':<16}{'pairs':>8}{'mean P':>10}{'observed':>10}"]
    for row in report["bins"]:
        if row["count"]:
            lines.append(f"{row['low']:.1f}-{row['high']:.1f}{'':<9}{row['count']:>8,}{row['predicted']:>10.3f}"
                         f"{row['observed']:>10.3f}")
    brier = "-" if report["brier"] is None else format(report["brier"], ".4f")
    lines.append(f"Brier score: {brier} (P = 0.5 always would score 0.25 without ties)")
    return "\n".join(lines)


def format_report(report: dict[str, float | int | None]) -> str:
    def pct(x: float | int | None) -> str:
        return "-" if x is None else f"{x:.2f}%"

    lines = [
        f"accuracy over {report['rounds_scored']} rounds (the first {report['rounds_skipped']} skipped), ratings before each round",
        f"{'':<30}{'pair inversion':>16}{'rank deviation':>16}",
        f"{'experienced (>= 5 rounds)':<30}{pct(report['pair_inversion']):>16}{pct(report['rank_deviation']):>16}",
        f"{'all rated participants':<30}{pct(report['pair_inversion_all']):>16}{pct(report['rank_deviation_all']):>16}",
        f"MSE index (Codeforces analysis): {'-' if report['mse'] is None else format(report['mse'], '.5f')}",
    ]
    return "\n".join(lines)
