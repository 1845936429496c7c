"""The Codeforces round algorithm (M. Mirzayanov, "Open Codeforces Rating System",
codeforces.com/blog/entry/20762, the 2010 formula opened in 2015), as EbTech/Elo-MMR
implements it for the Elo-MMR paper (multi-skill/src/systems/codeforces_sys.rs).

One round, all from the ratings before it:

1. Seed (expected place): seed_i = 1 + sum_{j != i} P(j beats i), where
   P(j beats x) = 1 / (1 + 10 ** ((x - r_j) / scale)).
2. Place: 1 + the number of participants strictly ahead; a tie takes the
   middle of the tied places (three tied for 2nd take 3).
3. Target m_i = sqrt(seed_i * place_i), and the performance: the rating x
   whose seed is m_i, i.e. S(x) = 1/2 + sum_j P(j beats x) = m_i with j
   running over everyone, i itself at its old rating (S(r_i) = seed_i).
   S decreases in x; the root is found for all participants at once.
4. Change d_i = weight * (performance_i - r_i) (weight 1/2: "half the way").
5. Against inflation (the blog post; codeforces_sys.rs has neither step):
   every change is shifted by -sum(d)/n - 1, so the mean change is -1; then
   by min(max(-sum_top / s, -top_correction), 0), where "top" are the
   s = min(n, 4 * round(sqrt(n))) participants highest rated before the round
   (ties by better place), so that their changes sum to 0 where the cap allows.

Where the two sources differ this follows codeforces_sys.rs:
- the performance solves S(x) = m with the 1/2 self-term above, so a player
  who places exactly at their seed keeps their rating; Codeforces' Java
  searches 1 + sum_j P(j beats x) instead (j again over everyone), 1/2 more,
  which biases every performance upwards, most in small rounds;
- ties take the middle place (Codeforces: the last of the tied places);
- real numbers throughout (Codeforces: integer ratings, an integer binary
  search on [1, 8000], integer divisions);
- a round that everyone ties (or with one participant) changes no rating
  (codeforces_sys.rs skips it); it still counts in `matches`.
Newcomers start at `initial` (1500, Codeforces' 2010-2020 rule and the
paper's mu_noob) with no special first rounds. codeforces_sys.rs's own weight
w gives the new rating (r + w p) / (1 + w): our weight is w / (1 + w), so its
default w = 1 is our 0.5 and the paper's tuned 0.631 is 0.3869.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import Params, PlayerState, RoundSystem, require
from .numeric import solve_decreasing

# Cells (candidates x ratings) of one block of tanh evaluations: 2 MB, so the
# block stays in cache between the tanh and the two sums.
BLOCK_CELLS = 1 << 18
# Newton stops once its step is this small (rating points); the error left is
# then about STEP_TOL**2 * ln(10) / scale, near 1e-8 (quadratic convergence).
STEP_TOL = 1e-3


@dataclass(frozen=True)
class CodeforcesParams(Params):
    initial: float = 1500.0
    scale: float = 400.0  # 400: a 400-point gap is 10:1 odds
    weight: float = 0.5  # share of the way to the performance taken each round
    sum_correction: bool = True  # shift so that the mean change is -1
    top_correction: float = 10.0  # cap of the top participants' shift; 0: off

    def check(self) -> None:
        require(self.scale > 0, "scale", f"must be > 0 (got {self.scale})")
        require(0 < self.weight <= 1, "weight", f"must be > 0 and <= 1 (got {self.weight})")
        require(self.top_correction >= 0, "top_correction", f"must be >= 0; 0 turns it off (got {self.top_correction})")


@dataclass(frozen=True, slots=True)
class CodeforcesState(PlayerState):
    rating: float
    matches: int = 0


class SeedFunction:
    """S(x) = 1/2 + sum_j P(j beats x) over one round's ratings, and S'(x), for
    many x at once. With t_j = tanh(c (r_j - x) / 2), c = ln 10 / scale:
    P(j beats x) = (1 + t_j) / 2 and dP/dx = -c (1 - t_j^2) / 4."""

    def __init__(self, ratings: np.ndarray, scale: float):
        self.half_c = math.log(10.0) / (2.0 * scale)
        self.u = ratings * self.half_c
        self.n = len(ratings)

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, m = self.n, len(x)
        total = np.empty(m)
        squares = np.empty(m)
        rows = max(1, BLOCK_CELLS // max(n, 1))
        block = np.empty((min(rows, m), n))
        y = x * self.half_c
        for lo in range(0, m, rows):
            hi = min(m, lo + rows)
            t = block[: hi - lo]
            np.subtract(self.u[None, :], y[lo:hi, None], out=t)
            np.tanh(t, out=t)
            total[lo:hi] = t.sum(axis=1)
            squares[lo:hi] = np.einsum("ij,ij->i", t, t)
        return 0.5 + 0.5 * (n + total), -0.5 * self.half_c * (n - squares)


def centred(ratings: np.ndarray) -> tuple[np.ndarray, float]:
    """The ratings minus their mean: a shift of every rating then shifts the
    results (up to rounding), as nothing depends on the absolute level."""
    ref = float(ratings.mean()) if len(ratings) else 0.0
    return ratings - ref, ref


def performances(ratings: np.ndarray, places: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Per participant: the seed and the rating whose seed is sqrt(seed * place)."""
    n = len(ratings)
    r, ref = centred(ratings)
    seed_of = SeedFunction(r, scale)
    seed, slope = seed_of(r)
    target = np.sqrt(seed * places)
    # 1 <= target <= n; S is above n + 0.45 at lo and below 0.55 at hi
    # (10 ** (margin / scale) = 20 n), so every root is inside.
    margin = scale * (math.log10(2.0 * n) + 1.0)
    lo = np.full(n, r.min() - margin)
    hi = np.full(n, r.max() + margin)
    # Newton on the log-odds of the mean P(j beats x): nearly linear in x, with
    # slope about -c, from far below to far above (plain S is flat at both ends).
    goal = np.log(target - 0.5) - np.log(n + 0.5 - target)

    def log_odds(s: np.ndarray, ds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = np.maximum(s - 0.5, 0.0)  # sum_j P(j beats x)
        b = np.maximum(n + 0.5 - s, 0.0)  # sum_j P(x beats j)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(a) - np.log(b), ds * (1.0 / a + 1.0 / b)

    # S(r_i) = seed_i is already known: bracket by it and start from its Newton step.
    above = seed > target  # placed better than the seed: performance above r_i
    lo = np.where(above, r, lo)
    hi = np.where(above, hi, r)
    h, dh = log_odds(seed, slope)
    guess = r - (h - goal) / dh

    def evaluate(idx: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, dh = log_odds(*seed_of(x))
        return h - goal[idx], dh

    perf = solve_decreasing(evaluate, guess, lo, hi, STEP_TOL)
    return seed, perf + ref


class Codeforces(RoundSystem[CodeforcesState]):
    name = "codeforces"
    Params = CodeforcesParams
    State = CodeforcesState
    params: CodeforcesParams

    def rate_round(self, ratings: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self.params
        n = len(ratings)
        if n < 2 or ranks.min() == ranks.max():
            # Outcome-free: codeforces_sys.rs skips the round. The match still
            # counts as played (events need matches >= 1).
            r, _ = centred(ratings)
            seed, _ = SeedFunction(r, p.scale)(r)
            return ratings, {"expected_rank": seed}
        # The middle of the tied places: (first + last) / 2, 1-based.
        order = np.sort(ranks)
        places = (np.searchsorted(order, ranks, "left") + np.searchsorted(order, ranks, "right") + 1) / 2.0
        seed, perf = performances(ratings, places, p.scale)
        delta = p.weight * (perf - ratings)
        if p.sum_correction:
            delta += -delta.sum() / n - 1.0
        if p.top_correction > 0:
            # Highest rated first; equal ratings by place, then input order
            # (Codeforces sorts its standings by rating with a stable sort).
            top = np.lexsort((np.arange(n), ranks, -ratings))[: min(n, 4 * round(math.sqrt(n)))]
            delta += min(max(-delta[top].sum() / len(top), -p.top_correction), 0.0)
        return ratings + delta, {"expected_rank": seed, "performance": perf}
