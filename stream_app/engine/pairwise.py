"""Multi-player Elo by pairwise comparison: ELORank (P. Baillehache's C library) and the
round-robin Codeforces-style variant (the Codeforces rating analysis).

Every pair of participants plays a virtual game; all deltas come from the
ratings before the match and are applied at once:

    delta_i = K_i * sum_j (S_ij - P(i beats j)),  P(i beats j) = 1 / (1 + 10 ** ((r_j - r_i) / 400))

S_ij is 1 if i finished ahead of j, 0 if behind; a tie is skipped (ELORank)
or scores 0.5 (the Codeforces analysis). K_i is `k_top` for the top `top_n` finishers,
`k` otherwise. The Codeforces analysis rounds the new rating to an integer (`round`).

ELORank's soft rating: after every match the new rating is added to a sum
that is first decayed by 0.99 once the player has 100 or more matches;
soft = sum / min(100, matches).

The Codeforces analysis's expected rank (its "seed"): 0.5 + sum over all participants, self
included, of the probability of losing to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import Params, PlayerState, RoundSystem, require
from .numeric import round_half_away

# Rows of the pairwise matrix computed at once: bounds memory to about
# 8 * BLOCK_CELLS bytes per temporary even for rounds of 16k participants.
BLOCK_CELLS = 1 << 21


@dataclass(frozen=True)
class PairwiseParams(Params):
    k: float = 8.0
    initial: float = 0.0
    ties: str = "skip"
    top_n: int = 0
    k_top: float | None = None  # None: same as k
    round: bool = False
    scale: float = 400.0

    def check(self) -> None:
        require(self.k > 0, "k", f"must be > 0 (got {self.k})")
        require(self.ties in ("skip", "half"), "ties", f"must be \"skip\" or \"half\" (got {self.ties!r})")
        require(self.top_n >= 0, "top_n", f"must be >= 0 (got {self.top_n})")
        require(self.scale > 0, "scale", f"must be > 0 (got {self.scale})")

    @property
    def k_for_top(self) -> float:
        return self.k if self.k_top is None else self.k_top


@dataclass(frozen=True, slots=True)
class PairwiseState(PlayerState):
    rating: float
    matches: int = 0
    soft_sum: float = 0.0

    @property
    def soft_rating(self) -> float:
        if self.matches == 0:
            return self.rating
        return self.soft_sum / min(100, self.matches)

    def public(self) -> dict[str, Any]:
        return {"rating": self.rating, "matches": self.matches, "soft_rating": self.soft_rating}


def pairwise_deltas(
    ratings: np.ndarray, ranks: np.ndarray, k: np.ndarray, half_ties: bool, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per participant: the summed delta and the expected rank."""
    n = len(ratings)
    deltas = np.empty(n)
    expected_rank = np.empty(n)
    block = max(1, BLOCK_CELLS // max(n, 1))
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        r_i = ratings[lo:hi, None]
        rank_i = ranks[lo:hi, None]
        with np.errstate(over="ignore"):  # gaps of thousands of points: the power is inf, the probability 0
            win_prob = 1.0 / (1.0 + 10.0 ** ((ratings[None, :] - r_i) / scale))
        outcome = (rank_i < ranks[None, :]).astype(float)
        tie = rank_i == ranks[None, :]  # includes self, whose term is 0 either way
        if half_ties:
            outcome[tie] = 0.5
            terms = outcome - win_prob
        else:
            terms = np.where(tie, 0.0, outcome - win_prob)
        deltas[lo:hi] = k[lo:hi] * terms.sum(axis=1)
        # P(i loses to j) = 1 - P(i beats j); self contributes 0.5.
        expected_rank[lo:hi] = 0.5 + (1.0 - win_prob).sum(axis=1)
    return deltas, expected_rank


class Pairwise(RoundSystem[PairwiseState]):
    name = "elo-pairwise"
    Params = PairwiseParams
    State = PairwiseState
    params: PairwiseParams

    def after(self, state: PairwiseState, rating: float) -> PairwiseState:
        """One more match, and ELORank's soft rating: the sum decays from the 100th."""
        matches = state.matches + 1
        soft_sum = state.soft_sum * 0.99 if matches >= 100 else state.soft_sum
        return PairwiseState(rating=rating, matches=matches, soft_sum=soft_sum + rating)

    def rate_round(self, ratings: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self.params
        k = np.full(len(ratings), p.k)
        if p.top_n:
            # "Top n" by finishing position: rank r is in the top n when fewer
            # than n participants finished strictly ahead of it.
            ahead = np.searchsorted(np.sort(ranks), ranks, side="left")
            k[ahead < p.top_n] = p.k_for_top
        deltas, expected_rank = pairwise_deltas(ratings, ranks, k, p.ties == "half", p.scale)
        new_ratings = ratings + deltas
        if p.round:
            new_ratings = round_half_away(new_ratings)
        return new_ratings, {"expected_rank": expected_rank}
