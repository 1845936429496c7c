"""Vectorised numerics for Elo-MMR (the Elo-MMR paper): root finding, the Gaussian
inverse Mills ratio and ragged (per-player) sums. NumPy only.

Everything here is deterministic: the same inputs give the same bits, so the
stream worker and an offline replay agree exactly.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

# pi / sqrt(3): a logistic distribution with standard deviation beta has scale
# beta / TANH_MULTIPLIER, i.e. density sech^2(TANH_MULTIPLIER * x / (2 beta)).
TANH_MULTIPLIER = math.pi / math.sqrt(3.0)

Evaluate = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, halves away from zero (C's round(), Rust's f64::round;
    Python's round() goes to even)."""
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5))


def solve_decreasing(
    evaluate: Evaluate,
    guess: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    tol: np.ndarray | float,
    max_iter: int = 100,
) -> np.ndarray:
    """Zeros of many strictly decreasing functions at once, by safeguarded Newton.

    `evaluate(idx, x)` returns (f, f') of the functions numbered `idx` at `x`.
    Each root must lie in [lo, hi]; a Newton step that would leave the current
    bracket is clamped to 3/4 of it, so the iteration always converges. A
    function stops once its step is <= tol (the step is still applied: the
    error left is then of the order of tol**2 / scale) or its bracket is empty.
    """
    x = np.clip(np.asarray(guess, dtype=float), lo, hi).copy()
    lo = np.array(lo, dtype=float, copy=True)
    hi = np.array(hi, dtype=float, copy=True)
    tol_all = np.broadcast_to(np.asarray(tol, dtype=float), x.shape)
    active = np.arange(len(x))
    for _ in range(max_iter):
        if len(active) == 0:
            break
        xa, la, ha = x[active], lo[active], hi[active]
        f, fp = evaluate(active, xa)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ext = xa - f / fp
        # A flat spot (f' = 0 where every term saturates, or a rounding-level
        # f' of the wrong sign): head for the bracket
        # end on the side of the root; the clamp below makes it a 3/4 step.
        flat = ~np.isfinite(ext) | ~(fp < 0)
        if flat.any():
            ext = np.where(flat, np.where(f > 0, ha, la), ext)
        down = ext < xa  # f(xa) < 0: the root is below xa
        ha = np.where(down, xa, ha)
        la = np.where(down, la, xa)
        width = ha - la
        new = np.where(down, np.clip(ext, ha - 0.75 * width, ha), np.clip(ext, la, la + 0.75 * width))
        done = (np.abs(new - xa) <= tol_all[active]) | (new <= la) | (new >= ha) | (f == 0.0)
        new = np.where(f == 0.0, xa, new)
        x[active], lo[active], hi[active] = new, la, ha
        active = active[~done]
    return x


def segment_sum(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Per-owner sums of a flat array (owner ids in 0..n-1)."""
    if len(values) == 0:
        return np.zeros(n)
    return np.bincount(owner, weights=values, minlength=n)


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + c) for each (s, c), vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(starts - (ends - counts), counts)
    return offsets + np.arange(total)


# ---- the scaled complementary error function and the inverse Mills ratio ----
#
# erfcx(t) = exp(t^2) erfc(t). NumPy has no erfc, so for 0 <= t <= _ERFCX_TMAX
# we interpolate a table built from math.erfc with cubic Hermite polynomials
# (exact derivatives erfcx' = 2 t erfcx - 2/sqrt(pi)); the relative error is
# below 1e-12. Beyond, the asymptotic series is accurate to ~1e-17. For t < 0,
# erfcx(t) = 2 exp(t^2) - erfcx(-t), which has no cancellation.

_ERFCX_STEPS = 256  # table points per unit of t
_ERFCX_TMAX = 12.0
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfcx_table() -> tuple[np.ndarray, np.ndarray]:
    count = int(_ERFCX_TMAX * _ERFCX_STEPS) + 2
    t = [k / _ERFCX_STEPS for k in range(count)]
    values = np.array([math.exp(s * s) * math.erfc(s) for s in t])
    derivs = 2.0 * np.array(t) * values - _TWO_OVER_SQRT_PI
    return values, derivs


_ERFCX_VALUES, _ERFCX_DERIVS = _erfcx_table()


def _erfcx_asymptotic(t: np.ndarray) -> np.ndarray:
    inv = 1.0 / (2.0 * t * t)
    total = np.ones_like(t)
    term = np.ones_like(t)
    for k in range(1, 16):
        term = term * (-(2 * k - 1) * inv)
        total = total + term
    return total / (t * math.sqrt(math.pi))


def erfcx_nonneg(t: np.ndarray) -> np.ndarray:
    """erfcx(t) for t >= 0 (vectorised)."""
    t = np.asarray(t, dtype=float)
    inside = t <= _ERFCX_TMAX
    ti = np.where(inside, t, 0.0) * _ERFCX_STEPS
    k = np.minimum(ti.astype(np.int64), len(_ERFCX_VALUES) - 2)
    u = ti - k
    h = 1.0 / _ERFCX_STEPS
    f0, f1 = _ERFCX_VALUES[k], _ERFCX_VALUES[k + 1]
    d0, d1 = _ERFCX_DERIVS[k] * h, _ERFCX_DERIVS[k + 1] * h
    u2 = u * u
    u3 = u2 * u
    table = f0 + u * d0 + u2 * (3.0 * (f1 - f0) - 2.0 * d0 - d1) + u3 * (2.0 * (f0 - f1) + d0 + d1)
    if inside.all():
        return table
    return np.where(inside, table, _erfcx_asymptotic(np.where(inside, _ERFCX_TMAX + 1.0, t)))


def erfcx(t: np.ndarray) -> np.ndarray:
    """exp(t^2) erfc(t) for any real t; +inf once exp(t^2) overflows."""
    t = np.asarray(t, dtype=float)
    pos = erfcx_nonneg(np.abs(t))
    with np.errstate(over="ignore"):
        neg = 2.0 * np.exp(t * t) - pos
    return np.where(t >= 0, pos, neg)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def inverse_mills(z: np.ndarray) -> np.ndarray:
    """pdf(z) / cdf(z) of the standard normal, stable for every z (0 for large z)."""
    return _SQRT_2_OVER_PI / erfcx(-np.asarray(z, dtype=float) / math.sqrt(2.0))
