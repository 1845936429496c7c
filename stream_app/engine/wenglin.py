"""Weng-Lin Bayesian approximation (Weng and Lin, JMLR 12, 2011) as openskill 6.2.0
computes it: five models, teams, partial-play weights, ties and score margins.

A player is N(mu, sigma^2); sigma^2 grows by tau^2 before each match. A team sums
its members' mu and sigma^2 (s_i^2). The model gives each team a mean step Omega_i
and a variance factor Delta_i; a member with share r = sigma^2 / s_i^2 gets
mu += r Omega_i and sigma *= sqrt(max(1 - r Delta_i, kappa)). With c_iq =
sqrt(s_i^2 + s_q^2 + 2 beta^2): plackett-luce ranks all teams at once
(P = exp(mu_i/c) over the sum of exp(mu/c) of the teams ranked at or below,
c^2 = sum (s^2 + beta^2)); bradley-terry-full compares every pair with a logistic
in (mu_i - mu_q) / c_iq, thurstone-mosteller-full with a Gaussian (the paper's v, w;
v~, w~ for ties, draw margin epsilon); the -part models only compare teams at most
`window_size` places apart in the standings and average (thurstone-mosteller-part
also doubles c_iq).

openskill's own details are kept, being what its users get: weights multiply a
member's step and shrink when Omega >= 0 and divide them when Omega < 0, after a
per-team min-max rescaling onto `weight_bounds` (a team of one gets the upper
bound); its averaging of tied teams' mu changes is a no-op; with `margin` > 0 a
score gap d > margin rescales the pair by log1p(d / margin); Phi is
0.5 (1 + erf(x / sqrt 2)), whose rounding far left decides its cut-offs.

A match to come is predicted as openskill's predict_win, predict_draw and
predict_rank (the same in all five models): a side is its members' summed mu
and sigma^2 (balance-weighted with `balance`), with no tau; pairs compare by
Phi((mu_a - mu_b) / sqrt(2 beta^2 + s_a^2 + s_b^2)).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise
from statistics import NormalDist
from typing import Any

import numpy as np

from .base import (InvalidMatch, Match, Params, PlayerState, RatingChange, RatingSystem, gaussian_quality,
                   is_team_match, require, team_members)

MODELS = ("plackett-luce", "bradley-terry-full", "bradley-terry-part", "thurstone-mosteller-full",
          "thurstone-mosteller-part")
PART_MODELS = ("bradley-terry-part", "thurstone-mosteller-part")
TM_MODELS = ("thurstone-mosteller-full", "thurstone-mosteller-part")
DEFAULT_WINDOW = 4  # openskill's window_size
DEFAULT_EPSILON = 0.1  # openskill's draw margin
# Pairs go by tiles of rows x columns, with buffers under 128 KiB (see _Work).
TILE_ROWS, TILE_COLS = 64, 128
BLOCK_CELLS = TILE_ROWS * TILE_COLS
_EPS = sys.float_info.epsilon
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_TAU = 1.0 / math.sqrt(math.tau)


@dataclass(frozen=True)
class WengLinParams(Params):
    model: str = "plackett-luce"
    mu: float = 25.0  # a newcomer's mu
    sigma: float = 25.0 / 3.0  # a newcomer's sigma
    beta: float = 25.0 / 6.0  # performance noise
    kappa: float = 0.0001  # floor of the variance shrink factor
    tau: float = 25.0 / 300.0  # added to sigma (in quadrature) before every match
    limit_sigma: bool = False  # a match never raises sigma above its value before
    balance: bool = False  # weigh team members below the team's best ordinal more
    margin: float = 0.0  # > 0: score gaps above it count more (needs every score)
    window_size: int | None = None  # -part models; None: openskill's 4
    epsilon: float | None = None  # thurstone-mosteller draw margin; None: openskill's 0.1
    weight_bounds: tuple[float, float] | None = (1.0, 2.0)  # TOML false: weights as given

    def __post_init__(self) -> None:
        bounds: Any = self.weight_bounds  # TOML gives an array or false
        if bounds is False:
            object.__setattr__(self, "weight_bounds", None)
        elif isinstance(bounds, (list, tuple)) and len(bounds) == 2 and all(type(b) in (int, float) for b in bounds):
            object.__setattr__(self, "weight_bounds", (float(bounds[0]), float(bounds[1])))

    def check(self) -> None:
        require(self.model in MODELS, "model", f"must be one of {', '.join(MODELS)} (got {self.model!r})")
        for key in ("sigma", "beta"):
            require(getattr(self, key) > 0, key, f"must be > 0 (got {getattr(self, key)})")
        require(0 < self.kappa < 1, "kappa", f"must be > 0 and < 1 (got {self.kappa})")
        for key in ("tau", "margin"):
            require(getattr(self, key) >= 0, key, f"must be >= 0 (got {getattr(self, key)})")
        for key, models, what in (("window_size", PART_MODELS, "a window"), ("epsilon", TM_MODELS, "a draw margin")):
            value = getattr(self, key)
            if value is not None:
                require(self.model in models, key,
                        f"only the {' and '.join(models)} models have {what} (model is {self.model!r})")
                require(value > 0, key, f"must be > 0 (got {value})")
        bounds = self.weight_bounds
        require(bounds is None or (isinstance(bounds, tuple) and len(bounds) == 2 and 0 < bounds[0] <= bounds[1]
                                   and all(type(b) is float and math.isfinite(b) for b in bounds)),
                "weight_bounds", f"must be [low, high] with 0 < low <= high, or false (got {bounds!r})")


@dataclass(slots=True)
class WengLinState(PlayerState):
    rating: float  # mu
    sigma: float
    matches: int = 0

    @property
    def uncertainty(self) -> float:
        return self.sigma

    @property
    def display_rating(self) -> float:
        return self.rating - 3.0 * self.sigma  # openskill's ordinal()

    def public(self) -> dict[str, Any]:
        return {"rating": self.rating, "uncertainty": self.sigma, "display_rating": self.display_rating,
                "matches": self.matches}


# ---- the Gaussian functions, rounded as openskill's ----

# erfcx(y) = exp(y^2) erfc(y) on [0, 12]: cubic Hermite pieces (exact slopes
# erfcx' = 2 y erfcx - 2 / sqrt(pi)) as polynomial coefficients; relative error
# under 1e-11. Past 12 only tininess matters (Phi rounds to 0 or 1 there).
_STEPS, _YMAX = 256, 12.0


def _erfcx_coefficients() -> tuple[np.ndarray, ...]:
    y = np.arange(int(_YMAX * _STEPS) + 2) / _STEPS
    f = np.array([math.exp(v * v) * math.erfc(v) for v in y.tolist()])
    d = (2.0 * y * f - 2.0 / math.sqrt(math.pi)) / _STEPS
    f0, f1, d0, d1 = f[:-1], f[1:], d[:-1], d[1:]
    return f0, d0, 3.0 * (f1 - f0) - 2.0 * d0 - d1, 2.0 * (f0 - f1) + d0 + d1


_C0, _C1, _C2, _C3 = _erfcx_coefficients()


class _Work:
    """Buffers for one tile shape, reused tile after tile: fresh temporaries get
    handed back to the system on free (glibc trims the top of its heap) and
    fault their pages in again, a large part of a big round's time."""

    __slots__ = ("f", "index", "mask")

    def __init__(self, shape: tuple[int, ...]):
        self.f = [np.empty(shape) for _ in range(8)]
        self.index = np.empty(shape, dtype=np.intp)
        self.mask = np.empty(shape, dtype=bool)


def _cdf_pdf(z: np.ndarray, w: _Work) -> tuple[np.ndarray, np.ndarray]:
    """openskill's Phi(z) = 0.5 (1 + erf(z / sqrt 2)) and phi(z), into w.f[5] and
    w.f[3]. libm's erf is +-(1 - erfc) rounded to the doubles near 1, so far left
    Phi is a multiple of 2^-54; openskill's cut-off Phi < epsilon and its v there
    follow that rounding, which 0.5 (1 + (erfc - 1)) reproduces."""
    e, s, erfc, term = w.f[3], w.f[4], w.f[5], w.f[6]
    np.exp(np.multiply(np.multiply(z, z, out=e), -0.5, out=e), out=e)
    # erfc(|z| / sqrt 2) = erfcx(...) exp(-z^2 / 2), erfcx from the table
    np.minimum(np.abs(z, out=s), _YMAX * _SQRT2, out=s)
    s *= _STEPS / _SQRT2
    np.copyto(w.index, s, casting="unsafe")  # floor, as s >= 0
    s -= w.index
    np.take(_C3, w.index, out=erfc, mode="clip")
    for table in (_C2, _C1, _C0):
        erfc *= s
        erfc += np.take(table, w.index, out=term, mode="clip")
    erfc *= e
    np.subtract(erfc, 1.0, out=term)
    np.subtract(1.0, erfc, out=erfc)
    np.copyto(erfc, term, where=np.less(z, 0.0, out=w.mask))
    erfc += 1.0
    erfc *= 0.5
    e *= _INV_SQRT_TAU
    return erfc, e


def _v_w(x: np.ndarray, t: np.ndarray, w: _Work) -> tuple[np.ndarray, np.ndarray]:
    """The paper's V(x, t), W(x, t) of a win with openskill's cut-off, into w.f[3], w.f[2]."""
    xt = np.subtract(x, t, out=w.f[2])
    cdf, v = _cdf_pdf(xt, w)
    v /= cdf
    tiny = np.flatnonzero(cdf < _EPS)
    v.flat[tiny] = -xt.flat[tiny]
    xt += v
    xt *= v  # W = v (v + xt)
    xt.flat[tiny] = np.where(x.flat[tiny] < 0, 1.0, 0.0)
    return v, xt


def _vt_wt(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The paper's V~ and W~ of a tie, with openskill's cut-offs (1e-5 and epsilon)."""
    xx = np.abs(x)
    hi_cdf, hi_pdf = _cdf_pdf(t - xx, _Work(x.shape))
    lo_cdf, lo_pdf = _cdf_pdf(-t - xx, _Work(x.shape))
    b = hi_cdf - lo_cdf
    neg = x < 0
    ratio = (lo_pdf - hi_pdf) / b
    vt = np.where(b < 1e-5, np.where(neg, -x - t, -x + t), np.where(neg, -ratio, ratio))
    wt = np.where(b < _EPS, 1.0, ((t - xx) * hi_pdf + (t + xx) * lo_pdf) / b + vt * vt)
    return vt, wt


# ---- pair kernels: (mu_i - mu_q, c_iq, tie, score divisor, epsilon, work) -> (A, B) ----
# i is ahead of or tied with q. Omega_i gains s_i^2/c A and Omega_q loses s_q^2/c A
# (the loser's v, and v~, are the winner's with the sign flipped); both Deltas
# gain s^3/c^3 B (gamma = s/c times s^2/c^2).

Kernel = Callable[[np.ndarray, np.ndarray, Any, Any, float, _Work], tuple[np.ndarray, np.ndarray]]


def _bradley_terry(dmu: np.ndarray, c: np.ndarray, tie: np.ndarray | None, div: np.ndarray | None,
                   epsilon: float, w: _Work) -> tuple[np.ndarray, np.ndarray]:
    p, a, b = w.f[1], w.f[2], w.f[3]
    if div is not None:
        dmu /= div
    np.exp(np.negative(np.divide(dmu, c, out=p), out=p), out=p)
    np.divide(1.0, np.add(p, 1.0, out=p), out=p)  # P(i beats q)
    np.subtract(1.0, p, out=a)
    np.multiply(p, a, out=b)
    if tie is not None:
        np.subtract(a, 0.5, out=a, where=tie)  # a tie scores 1/2, not 1
    return a, b


def _thurstone_mosteller(dmu: np.ndarray, c: np.ndarray, tie: np.ndarray | None, div: np.ndarray | None,
                         epsilon: float, w: _Work) -> tuple[np.ndarray, np.ndarray]:
    x = np.divide(dmu, c, out=dmu)
    if div is not None:
        x /= div
    t = np.divide(epsilon, c, out=w.f[1])
    a, b = _v_w(x, t, w)
    if tie is not None and tie.any():
        where = np.nonzero(tie)
        a[where], b[where] = _vt_wt(x[where], t[where])
    return a, b


def _divisor(gap: np.ndarray, margin: float) -> np.ndarray:
    return np.where(gap > margin, np.log1p(gap / margin), 1.0)


def _terms(kernel: Kernel, w: _Work, c: np.ndarray, tie: Any, div: Any,
           p: WengLinParams) -> tuple[np.ndarray, np.ndarray]:
    """A / c and B / c^3 of the pairs whose mu_i - mu_q is in w.f[0]."""
    a, b = kernel(w.f[0], c, tie, div, DEFAULT_EPSILON if p.epsilon is None else p.epsilon, w)
    np.divide(1.0, c, out=c)
    a *= c
    for _ in range(3):
        b *= c
    return a, b


def _full(kernel: Kernel, mu: np.ndarray, s2: np.ndarray, rank: np.ndarray, score: np.ndarray | None,
          p: WengLinParams) -> tuple[np.ndarray, np.ndarray]:
    """Every pair once, by tiles of the upper triangle of the standings."""
    k = len(mu)
    omega, delta = np.zeros(k), np.zeros(k)
    half, s3 = s2 + p.beta ** 2, s2 * np.sqrt(s2)  # c^2 = half_i + half_q
    ties = bool((rank[1:] == rank[:-1]).any())
    works: dict[tuple[int, int], _Work] = {}  # by tile shape
    for a in range(0, k - 1, TILE_ROWS):
        i = slice(a, min(k, a + TILE_ROWS))
        for start in range(a + 1, k, TILE_COLS):
            q = slice(start, min(k, start + TILE_COLS))
            shape = (i.stop - i.start, q.stop - q.start)
            w = works.get(shape) or works.setdefault(shape, _Work(shape))
            c = np.sqrt(np.add(half[i, None], half[None, q], out=w.f[7]), out=w.f[7])
            np.subtract(mu[i, None], mu[None, q], out=w.f[0])
            # A tile across the diagonal keeps q > i only.
            lower = np.arange(start, q.stop)[None, :] <= np.arange(a, i.stop)[:, None] if start < i.stop else None
            tie = (rank[i, None] == rank[None, q]) if ties else None
            if tie is not None and lower is not None:
                tie &= ~lower
            div = None if score is None else _divisor(np.abs(score[i, None] - score[None, q]), p.margin)
            ak, bk = _terms(kernel, w, c, tie, div, p)
            if lower is not None:
                np.copyto(ak, 0.0, where=lower)
                np.copyto(bk, 0.0, where=lower)
            omega[i] += s2[i] * ak.sum(axis=1)
            omega[q] -= s2[q] * ak.sum(axis=0)
            delta[i] += s3[i] * bk.sum(axis=1)
            delta[q] += s3[q] * bk.sum(axis=0)
    return omega, delta


def _part(kernel: Kernel, mu: np.ndarray, s2: np.ndarray, rank: np.ndarray, score: np.ndarray | None,
          p: WengLinParams, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i, i + d), d = 1..window, as one list: O(k window); each team's
    sums are averaged over its comparisons."""
    k = len(mu)
    window = min(k - 1, DEFAULT_WINDOW if p.window_size is None else p.window_size)
    omega, delta = np.zeros(k), np.zeros(k)
    half, s3 = s2 + p.beta ** 2, s2 * np.sqrt(s2)
    first = np.concatenate([np.arange(k - d) for d in range(1, window + 1)])
    second = first + np.repeat(np.arange(1, window + 1), np.arange(k - 1, k - 1 - window, -1))
    for a in range(0, len(first), BLOCK_CELLS):
        i, q = first[a:a + BLOCK_CELLS], second[a:a + BLOCK_CELLS]
        w = _Work(i.shape)
        np.subtract(mu[i], mu[q], out=w.f[0])
        div = None if score is None else _divisor(np.abs(score[i] - score[q]), p.margin)
        ak, bk = _terms(kernel, w, scale * np.sqrt(half[i] + half[q]), rank[i] == rank[q], div, p)
        omega += np.bincount(i, s2[i] * ak, k) - np.bincount(q, s2[q] * ak, k)
        delta += np.bincount(i, s3[i] * bk, k) + np.bincount(q, s3[q] * bk, k)
    place = np.arange(k)
    count = np.minimum(place, window) + np.minimum(k - 1 - place, window)
    return omega / count, delta / count


def _plackett_luce(mu: np.ndarray, s2: np.ndarray, rank: np.ndarray, score: np.ndarray | None,
                   p: WengLinParams) -> tuple[np.ndarray, np.ndarray]:
    """O(k) once sorted. With A_q the number of teams tied at q's rank and the sums
    over the q ranked at or above i, Omega_i = s_i^2/c (1/A_i - sum_q P_iq) and
    Delta_i = gamma_i s_i^2/c^2 sum_q P_iq (1 - P_iq): P_iq's denominators are
    suffix sums over the rank groups, and the sums over q prefix sums of those."""
    c = math.sqrt(float(np.sum(s2 + p.beta ** 2)))
    if score is not None:
        mu = mu + _luce_margin_shift(mu, score, p.margin)
    e = np.exp((mu - mu.max()) / c)  # shifted: the same ratios, and nothing overflows
    group = np.cumsum(np.concatenate(([True], rank[1:] != rank[:-1]))) - 1  # rank groups, 0, 1, ...
    at_or_below = np.cumsum(np.bincount(group, weights=e)[::-1])[::-1]
    share = e * np.cumsum(1.0 / at_or_below)[group]
    omega = (1.0 / np.bincount(group)[group] - share) * s2 / c
    delta = (share - e * e * np.cumsum(1.0 / (at_or_below * at_or_below))[group]) * (s2 / (c * c)) * (np.sqrt(s2) / c)
    return omega, delta


def _luce_margin_shift(mu: np.ndarray, score: np.ndarray, margin: float) -> np.ndarray:
    """openskill's margin for Plackett-Luce: mu_i moves by the mean, over the teams
    with another score, of -(mu_i - mu_j) (divisor - 1)."""
    k = len(mu)
    shift = np.empty(k)
    rows = max(1, BLOCK_CELLS // k)
    for a in range(0, k, rows):
        i = slice(a, min(k, a + rows))
        gap = np.abs(score[i, None] - score[None, :])
        total = -((mu[i, None] - mu[None, :]) * (_divisor(gap, margin) - 1.0)).sum(axis=1)
        shift[i] = total / np.maximum(np.count_nonzero(gap > 0, axis=1), 1)
    return shift


_COMPUTE: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "plackett-luce": _plackett_luce,
    "bradley-terry-full": lambda *a: _full(_bradley_terry, *a),
    "bradley-terry-part": lambda *a: _part(_bradley_terry, *a, scale=1.0),
    "thurstone-mosteller-full": lambda *a: _full(_thurstone_mosteller, *a),
    "thurstone-mosteller-part": lambda *a: _part(_thurstone_mosteller, *a, scale=2.0),
}


# ---- a match to come ----

def _side(members: Sequence[WengLinState], p: WengLinParams) -> tuple[float, float]:
    """A side's mu and sigma^2 as openskill sums them for a prediction: members by
    ordinal, best first (that order fixes the rounding, so equal sides tie exactly,
    as openskill's ranks need), each counted 1 + (best - own) / (best + kappa)
    times with `balance` (once when best + kappa is 0, where openskill divides by zero)."""
    ordered = sorted(members, key=lambda s: s.display_rating, reverse=True)
    best = ordered[0].display_rating
    balance = p.balance and best + p.kappa != 0.0
    mu = var = 0.0
    for s in ordered:
        factor = 1.0 + (best - s.display_rating) / (best + p.kappa) if balance else 1.0
        mu += s.rating * factor
        var += (s.sigma * factor) ** 2
    return mu, var


def _phi(x: float) -> float:
    """Phi as openskill's predictions take it (statistics.NormalDist), not the
    table `_cdf_pdf` that follows its rating code's vectorised rounding."""
    return 0.5 * (1.0 + math.erf(x / _SQRT2))


def _draw_quantile(players: int) -> float:
    """Phi^-1((1 + 1/n) / 2): the half-width, in standard deviations, of the
    central interval holding probability 1/n."""
    return NormalDist().inv_cdf((1 + 1 / players) / 2)


class WengLin(RatingSystem[WengLinState]):
    name = "weng-lin"
    Params = WengLinParams
    State = WengLinState
    has_uncertainty = True
    teams = True
    partial_play = True
    params: WengLinParams

    def initial_state(self) -> WengLinState:
        return WengLinState(self.params.mu, self.params.sigma)

    def reset(self, state: WengLinState, rating: float, min_uncertainty: float | None) -> WengLinState:
        sigma = state.sigma if min_uncertainty is None else max(state.sigma, min_uncertainty)
        return WengLinState(rating, sigma, state.matches)

    def check(self, match: Match) -> None:
        super().check(match)
        self._layout(match)

    def _layout(self, match: Match) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
        """Each participant's team (None: all teams of one), the teams' ranks, and
        their scores if the margin applies (else None)."""
        parts = match.participants
        groups = team_members(match) if is_team_match(match) else None
        leaders = [g[0] for g in groups] if groups else range(len(parts))
        if len(leaders) < 2:  # openskill raises too; the events already need two teams
            raise InvalidMatch("system_rule", f"participants: the 'weng-lin' system needs at least 2 teams"
                               f" (got {len(leaders)})", "participants")
        tid = None
        if groups:
            tid = np.empty(len(parts), dtype=np.intp)
            for t, members in enumerate(groups):
                tid[members] = t
        rank = np.fromiter((parts[i].rank for i in leaders), np.int64, len(leaders))
        if self.params.margin <= 0 or any(x.score is None for x in parts):
            return tid, rank, None
        # openskill orders by score when it has scores, so the scores must agree with
        # the ranks: equal ranks (teammates too) share a score, better ranks score more.
        by_rank = sorted(range(len(parts)), key=lambda i: parts[i].rank)
        for j, i in pairwise(by_rank):
            a, b = parts[j], parts[i]
            if (a.rank == b.rank) != (a.score == b.score) or a.score < b.score:  # type: ignore[operator]
                raise InvalidMatch("system_rule", f"participants[{i}].score: with a margin the scores must agree"
                                   f" with the ranks (equal ranks, equal scores; a better rank, a higher score):"
                                   f" rank {b.rank} with score {b.score}, but rank {a.rank} with score {a.score}"
                                   f" at participants[{j}]", f"participants[{i}].score")
        return tid, rank, np.fromiter((parts[i].score for i in leaders), float, len(leaders))

    def rate(self, match: Match, before: Sequence[WengLinState]) -> list[RatingChange[WengLinState]]:
        p = self.params
        parts = match.participants
        tid, rank, score = self._layout(match)
        k = len(rank)
        mu = np.fromiter((s.rating for s in before), float, len(parts))
        sigma0 = np.fromiter((s.sigma for s in before), float, len(parts))
        sigma = np.sqrt(sigma0 * sigma0 + p.tau * p.tau)
        var = team_var = sigma * sigma
        team_mu = mu
        if p.balance:  # a member counts 1 + (best ordinal - own) / (best ordinal + kappa) times
            ordinal = best = mu - 3.0 * sigma
            if tid is not None:
                best = np.full(k, -np.inf)
                np.maximum.at(best, tid, ordinal)
                best = best[tid]
            factor = 1.0 + (best - ordinal) / (best + p.kappa)
            team_mu, team_var = mu * factor, (sigma * factor) ** 2
        if tid is not None:
            team_mu, team_var = np.bincount(tid, team_mu, k), np.bincount(tid, team_var, k)
        order = np.argsort(rank, kind="stable")  # the standings; ties in input order, as openskill's sort
        omega, delta = np.empty(k), np.empty(k)
        with np.errstate(all="ignore"):  # overflows and 0/0 only reach openskill's own cut-offs
            omega[order], delta[order] = _COMPUTE[p.model](team_mu[order], team_var[order], rank[order],
                                                           None if score is None else score[order], p)
        if tid is not None:
            omega, delta, team_var = omega[tid], delta[tid], team_var[tid]
        share = var / team_var
        step, shrink = share * omega, share * delta
        weight = self._weights(parts, tid, k)
        if weight is not None:  # thurstone-mosteller-part gains only for Omega > 0, as openskill's
            gain = omega > 0 if p.model == "thurstone-mosteller-part" else omega >= 0
            step = np.where(gain, step * weight, step / weight)
            shrink = np.where(gain, shrink * weight, shrink / weight)
        new_mu = mu + step
        new_sigma = sigma * np.sqrt(np.maximum(1.0 - shrink, p.kappa))
        if p.limit_sigma:
            new_sigma = np.minimum(new_sigma, sigma0)
        return [RatingChange(x.player, old, WengLinState(m, s, old.matches + 1),
                             {"uncertainty": s, "uncertainty_before": old.sigma, "display_rating": m - 3.0 * s})
                for x, old, m, s in zip(parts, before, new_mu.tolist(), new_sigma.tolist())]

    def _weights(self, parts: Sequence[Any], tid: np.ndarray | None, k: int) -> np.ndarray | None:
        """openskill's weights, or None when every weight is 1 (openskill then gets none)."""
        if all(x.weight == 1.0 for x in parts):
            return None
        weight = np.fromiter((x.weight for x in parts), float, len(parts))
        if self.params.weight_bounds is None:
            return weight
        low, high = self.params.weight_bounds
        if tid is None:  # teams of one: openskill rescales a lone weight to the upper bound
            return np.full(len(parts), high)
        least, most = np.full(k, np.inf), np.full(k, -np.inf)
        np.minimum.at(least, tid, weight)
        np.maximum.at(most, tid, weight)
        spread = most - least
        spread[spread == 0] = 0.0001  # openskill's guard: equal weights all go to the lower bound
        scaled = (weight - least[tid]) / spread[tid] * (high - low) + low
        return np.where(np.bincount(tid, minlength=k)[tid] == 1, high, scaled)

    # -- a match to come, as openskill's predict_win / predict_draw / predict_rank ----------
    # Every model predicts alike (openskill 6.2 shares the code), so the base class's
    # predict_win is openskill's: two sides [p, 1 - p], more the normalised mean of
    # each side's pairwise probabilities.

    def win_probability(self, side: Sequence[WengLinState], other: Sequence[WengLinState]) -> float:
        """Phi of the sides' mu gap over the spread of two performances, each side's
        own sigma^2 plus beta^2 per side (no tau: nothing has been played yet)."""
        mu_a, var_a = _side(side, self.params)
        mu_b, var_b = _side(other, self.params)
        return _phi((mu_a - mu_b) / math.sqrt(2 * self.params.beta ** 2 + var_a + var_b))

    def predict_draw(self, sides: Sequence[Sequence[WengLinState]]) -> float:
        """The mean over the pairs of sides of P(|performance gap| < margin), the draw
        margin being the one at which n players' summed noise draws with probability 1/n."""
        p = self.params
        players = sum(len(side) for side in sides)
        margin = math.sqrt(players) * p.beta * _draw_quantile(players)
        teams = [_side(side, p) for side in sides]
        draws = []
        for (mu_a, var_a), (mu_b, var_b) in combinations(teams, 2):
            c = math.sqrt(2 * p.beta ** 2 + var_a + var_b)
            draws.append(_phi((margin - mu_a + mu_b) / c) - _phi((mu_b - mu_a - margin) / c))
        return sum(draws) / len(draws)

    def match_quality(self, sides: Sequence[Sequence[WengLinState]]) -> float:
        """TrueSkill's quality: a Weng-Lin player is the same Gaussian N(mu, sigma^2)
        with performance noise beta."""
        return gaussian_quality([[(s.rating, s.sigma) for s in side] for side in sides], self.params.beta)
