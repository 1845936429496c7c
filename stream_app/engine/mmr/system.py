"""What Elo-MMR and Elo-MMchi share (EloMmrBase): newcomers and resets, the
round's skeleton (diffusion, performances, belief update; each system fills
in the phases) and the predictions of a match to come."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..base import Match, RatingChange, RatingSystem, gaussian_quality
from .kernels import INV_SQRT2, TANH_MULTIPLIER
from .params import EloMmxParams
from .state import MmrState
from .terms import Terms

SECS_PER_DAY = 86400.0
# Above this many (participant, term) cells an exact round (no subsampling)
# takes the decomposed path: one shared function plus the ties.
DENSE_LIMIT = 1 << 18
# Root-finding tolerance, relative to the smallest performance deviation.
REL_TOL = 1e-7

_RANK = attrgetter("rank")


def nothing() -> None:
    return None


# Solves rows 0..n-1 of a round (`solve` takes a slice of rows, `cells` is the work's
# size) and runs `first` meanwhile: (the rows solved, first()). Rows are independent.
SplitRows = Callable[[Callable[[slice], np.ndarray], int, int, Callable[[], Any]], tuple[np.ndarray, Any]]


def one_piece(solve: Callable[[slice], np.ndarray], n: int, cells: int,
              first: Callable[[], Any] = nothing) -> tuple[np.ndarray, Any]:
    """Every row at once, on the calling thread (the engine starts no thread: a
    caller may give a system another SplitRows, stream_app/runtime.py)."""
    done = first()
    return solve(slice(0, n)), done


def _gather(states: Sequence[Any], names: tuple[str, ...]) -> np.ndarray:
    """The named numbers (two names or more) of every state as float rows, one
    per name, read in one pass: most of a gather's time goes to fetching each
    state and its numbers from memory, which one pass does once."""
    n, k = len(states), len(names)
    flat = np.fromiter(chain.from_iterable(map(attrgetter(*names), states)), float, n * k)
    return flat.reshape(n, k).T.copy()


class MmrChange(RatingChange[MmrState]):
    """A change whose extras are made when asked (an event asks; a replay does not), so
    a round of thousands makes no dict a participant. `performance`: None in a round
    without an outcome."""

    __slots__ = ("performance",)

    def __init__(self, player: str, before: MmrState, after: MmrState, performance: float | None) -> None:
        # (RatingChange's `extras` slot stays unset: the property below stands for it.)
        self.player = player
        self.before = before
        self.after = after
        self.performance = performance

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled and copied by its own fields: the default would set `extras`, which is read-only.
        return MmrChange, (self.player, self.before, self.after, self.performance)

    @property  # type: ignore[override]
    def extras(self) -> dict[str, Any]:
        after = self.after
        extras = {"uncertainty": after.sigma, "uncertainty_before": self.before.sigma,
                  "display_rating": after.display_rating}
        if self.performance is not None:
            extras["performance"] = self.performance
        return extras


class EloMmrBase(RatingSystem[MmrState]):
    State = MmrState
    has_uncertainty = True
    gaussian: ClassVar[bool]
    params: EloMmxParams
    # The numbers a round reads from each state: rating, sigma and matches,
    # then what the system's _diffuse needs.
    _numbers: ClassVar[tuple[str, ...]] = ("rating", "sigma", "matches")
    split_rows: SplitRows = staticmethod(one_piece)  # type: ignore[assignment]

    def initial_state(self) -> MmrState:
        p = self.params
        return MmrState(
            rating=p.initial,
            sigma=p.initial_sigma,
            gauss_mu=p.initial,
            gauss_sigma=p.initial_sigma,
            sig_limit=p.sig_limit,
        )

    def reset(self, state: MmrState, rating: float, min_uncertainty: float | None) -> MmrState:
        """A fresh state at the reset values (its performances go: they would pull the
        rating back), keeping the match count and the time of the last match."""
        sigma = state.sigma if min_uncertainty is None else max(state.sigma, min_uncertainty)
        return MmrState(rating=rating, sigma=sigma, matches=state.matches, gauss_mu=rating, gauss_sigma=sigma,
                        last_time=state.last_time, sig_limit=state.sig_limit)

    # ---- the round ----

    def rate(self, match: Match, before: Sequence[MmrState]) -> list[RatingChange[MmrState]]:
        p = self.params
        n = len(before)
        ranks = np.fromiter(map(_RANK, match.participants), np.int64, n)
        if n < 2 or ranks.min() == ranks.max():
            # Outcome-free: the reference skips such a round; ratings stay as they
            # are, but the match still counts as played (events need matches >= 1).
            changes = []
            for x, s in zip(match.participants, before):
                after = replace(s, matches=s.matches + 1)
                changes.append(MmrChange(x.player, s, after, None))
            return changes
        lo = np.searchsorted(np.sort(ranks), ranks, side="left").astype(np.int64)  # 0-based place

        numbers = _gather(before, self._numbers)
        mu, sig = numbers[0], numbers[1]
        matches = numbers[2].astype(np.int64)
        days = np.zeros(n)
        if match.time is not None and p.drift_per_day > 0:
            last = np.fromiter((match.time if s.last_time is None else s.last_time for s in before), float, n)
            days = np.maximum(match.time - last, 0.0) / SECS_PER_DAY
        w = p.weights(matches)
        beta = p.perf_sigma(w)
        gamma2 = p.drift_variance(w, days)

        # Diffusion: the new deviations now; the rest of it (Elo-MMR's factors)
        # only _finish needs, so it is done while a helper thread starts on the
        # performances.
        diffused = np.hypot(sig, np.sqrt(gamma2))
        if self.teams and any(x.team is not None or x.weight != 1.0 for x in match.participants):
            return self._rate_teams(match, before, mu, diffused, beta, ranks)
        terms = Terms(mu, np.hypot(diffused, beta), lo, p.subsample_bucket)
        perf, post = self._performances(terms, mu, lo, partial(self._diffuse, before, mu, sig, diffused, numbers[3:]))
        return self._finish(match, before, post, mu, diffused, beta, perf)

    # ---- phase 0: diffusion ----

    def _diffuse(self, before: Sequence[MmrState], mu: np.ndarray, sig: np.ndarray, diffused: np.ndarray,
                 extra: np.ndarray) -> Any:
        """What _finish needs of the diffusion besides the new deviations
        `diffused`. `extra`: the numbers of the states named in _numbers after
        the first three."""
        raise NotImplementedError

    # ---- phase 1: performance ----

    def _bracket(self, terms: Terms) -> tuple[np.ndarray, np.ndarray, float]:
        # Beyond ~21 deviations every logistic term is saturated (f is flat).
        spread = 25.0 * terms.delta.max()
        n = terms.n
        lo_b = np.full(n, terms.mu.min() - spread)
        hi_b = np.full(n, terms.mu.max() + spread)
        return lo_b, hi_b, REL_TOL * terms.delta.min()

    def _performances(self, terms: Terms, mu: np.ndarray, lo: np.ndarray,
                      first: Callable[[], Any] = nothing) -> tuple[np.ndarray, Any]:
        """(the performances, first()): `first` may run while they are solved."""
        raise NotImplementedError

    def _window_matrix(self, terms: Terms, mu: np.ndarray, lo: np.ndarray):
        beg, end = terms.windows(mu, self.params.subsample_size)
        width = int((end - beg).max())
        cols = beg[:, None] + np.arange(width)[None, :]
        valid = cols < end[:, None]
        cols = np.minimum(cols, terms.m - 1)
        less, equal, greater = terms.counts(lo, cols)
        return cols, valid, less, equal, greater, beg, end

    # ---- phase 2 and the new states ----

    def _finish(self, match, before, post, mu, sig, beta, perf) -> list[RatingChange[MmrState]]:
        raise NotImplementedError

    def _rate_teams(self, match, before, mu, sig, beta, ranks) -> list[RatingChange[MmrState]]:
        raise NotImplementedError

    # ---- a match to come ----

    def _betas(self, side: Sequence[MmrState]) -> list[float]:
        """Each member's beta, from its weight in its next round (noob_delay), as rate() takes it."""
        if not side:
            raise ValueError("a side needs at least one player")
        if not self.teams and len(side) != 1:
            raise ValueError(f"the {self.name!r} system rates individuals: a side is one player (got {len(side)})")
        p = self.params
        return p.perf_sigma(p.weights(np.fromiter((s.matches for s in side), np.int64, len(side)))).tolist()

    def win_probability(self, side: Sequence[MmrState], other: Sequence[MmrState]) -> float:
        """P(side performs above other) in the round's own model: a player performs
        around mu with variance sigma^2 + beta^2, a team (elo-mmx) the sum of its
        members' performances (as _rate_teams, all full-time), so the difference
        has mean mu_a - mu_b and deviation delta = sqrt(sigma_a^2 + sigma_b^2 +
        beta_a^2 + beta_b^2). Elo-MMchi: Phi((mu_a - mu_b) / delta). Elo-MMR: the
        logistic of that deviation, 1 / (1 + exp(-pi (mu_a - mu_b) / (sqrt 3 delta))),
        the paper's own approximation of a sum by a logistic of the same
        variance (section 3.1). From the states as they stand: the round's
        diffusion (gamma) models the time a round takes, and is left out."""
        mu_a, var_a = self._performance(side)
        mu_b, var_b = self._performance(other)
        z = (mu_a - mu_b) / math.sqrt(var_a + var_b)
        if self.gaussian:
            return 0.5 * math.erfc(-z * INV_SQRT2)
        if z >= 0.0:
            return 1.0 / (1.0 + math.exp(-TANH_MULTIPLIER * z))
        e = math.exp(TANH_MULTIPLIER * z)  # no overflow however far behind
        return e / (1.0 + e)

    def _performance(self, side: Sequence[MmrState]) -> tuple[float, float]:
        """The mean and variance of a side's performance. fsum: the members' order
        does not change a bit."""
        betas = self._betas(side)
        return math.fsum(s.rating for s in side), math.fsum(s.sigma * s.sigma + b * b for s, b in zip(side, betas))

    def match_quality(self, sides: Sequence[Sequence[MmrState]]) -> float:
        """TrueSkill's quality (base.gaussian_quality) with each member's (mu, sigma)
        and beta. The members' betas differ only under noob_delay: beta is then the
        match's least, and a member's excess beta_i^2 - beta^2 joins its sigma^2, so
        that every performance keeps its variance sigma_i^2 + beta_i^2."""
        betas = [self._betas(side) for side in sides]
        beta = min(min(b) for b in betas)
        return gaussian_quality(
            [[(s.rating, s.sigma if b == beta else math.sqrt(s.sigma * s.sigma + b * b - beta * beta))
              for s, b in zip(side, bs)] for side, bs in zip(sides, betas)],
            beta,
        )

