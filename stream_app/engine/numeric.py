"""Numerics shared by the systems: a vectorised root finder (Elo-MMR,
Codeforces) and rounding as C and Rust round (Elo-MMR, Pairwise). NumPy only.

Everything here is deterministic: the same inputs give the same bits, so the
stream worker and an offline replay agree exactly.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

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

