"""The numeric kernels of Elo-MMR and Elo-MMchi: ragged (per-player) sums, the
Gaussian inverse Mills ratio, sums of tanh terms and their interpolation, and
the two functions Elo-MMR's Newton solver evaluates (the performance slope
over a window of terms, and the slope of the posterior). NumPy only.

Everything here is deterministic: the same inputs give the same bits, so the
stream worker and an offline replay agree exactly.
"""

from __future__ import annotations

import math

import numpy as np

# pi / sqrt(3): a logistic distribution with standard deviation beta has scale
# beta / TANH_MULTIPLIER, i.e. density sech^2(TANH_MULTIPLIER * x / (2 beta)).
TANH_MULTIPLIER = math.pi / math.sqrt(3.0)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT2 = 1.0 / math.sqrt(2.0)

# Cells (rows x terms) of one block of a dense evaluation: bounds temporaries.
BLOCK_CELLS = 1 << 18
# Rows of a window evaluation are taken by blocks of about this many cells,
# so that the work buffer stays in the core's cache.
WINDOW_BLOCK_CELLS = 1 << 15


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


def inverse_mills(z: np.ndarray) -> np.ndarray:
    """pdf(z) / cdf(z) of the standard normal, stable for every z (0 for large z)."""
    return SQRT_2_OVER_PI / erfcx(-np.asarray(z, dtype=float) / math.sqrt(2.0))


def tanh_sums(x: np.ndarray, mu: np.ndarray, a: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum_j c_j tanh(a_j (x_i - mu_j)) and its derivative in x_i, for every i."""
    n, m = len(x), len(mu)
    ca = c * a
    value = np.empty(n)
    deriv = np.empty(n)
    block = max(1, BLOCK_CELLS // max(m, 1))
    mua = mu * a
    buf = np.empty((min(block, n), m))
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        b = buf[: hi - lo]
        np.multiply(x[lo:hi, None], a[None, :], out=b)
        b -= mua[None, :]
        np.tanh(b, out=b)
        value[lo:hi] = b @ c
        # 1 - tanh^2 term by term: never negative, unlike ca_total - sum(ca tanh^2).
        np.multiply(b, b, out=b)
        np.subtract(1.0, b, out=b)
        deriv[lo:hi] = b @ ca
    return value, deriv


def hermite(grid_x0: float, h: float, f: np.ndarray, fp: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cubic Hermite interpolation of (f, f') tabulated on a uniform grid; linear outside."""
    k_max = len(f) - 2
    t = (x - grid_x0) / h
    k = np.clip(np.floor(t), 0, k_max).astype(np.int64)
    u = np.clip(t - k, 0.0, 1.0)
    f0, f1, d0, d1 = f[k], f[k + 1], fp[k] * h, fp[k + 1] * h
    u2 = u * u
    c2 = 3.0 * (f1 - f0) - 2.0 * d0 - d1
    c3 = 2.0 * (f0 - f1) + d0 + d1
    val = f0 + u * d0 + u2 * c2 + u2 * u * c3
    der = (d0 + 2.0 * u * c2 + 3.0 * u2 * c3) / h
    # Beyond the grid: continue along the tangent at the end point.
    outside = (t < 0) | (t > k_max + 1)
    if outside.any():
        end_x = grid_x0 + (k + u) * h
        val = np.where(outside, val + der * (x - end_x), val)
    return val, der


class WindowSlope:
    """f_i(x) = const_i - sum_k coef_ik tanh(arg_ik x - carg_ik) and its
    derivative, row by row, over the players still being solved (copies of
    their rows are taken once they are fewer than half; until then every
    row is evaluated, which costs less than gathering the rows still needed).
    Rows go by blocks, so that the work buffer stays in cache."""

    def __init__(self, const, coef, arg, carg):
        self.rows = np.arange(len(const))
        self.data = (const, coef, arg, carg, coef * arg)
        self.step = max(1, WINDOW_BLOCK_CELLS // max(coef.shape[1], 1))
        self.buf = np.empty((min(self.step, len(const)), coef.shape[1]))
        self.x = np.zeros(len(const))

    def __call__(self, idx: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(idx) * 2 < len(self.rows):
            at = np.searchsorted(self.rows, idx)
            self.data = tuple(v[at] for v in self.data)
            self.rows = idx
            self.x = self.x[at]
        const, coef, arg, carg, coef_arg = self.data
        at = None
        if len(idx) != len(self.rows):
            at = np.searchsorted(self.rows, idx)
            self.x[at] = x
            x = self.x
        n = len(x)
        f = np.empty(n)
        fp = np.empty(n)
        for s in range(0, n, self.step):
            e = min(n, s + self.step)
            th = self.buf[: e - s]
            np.multiply(x[s:e, None], arg[s:e], out=th)
            th -= carg[s:e]
            np.tanh(th, out=th)
            f[s:e] = const[s:e] - np.einsum("ij,ij->i", coef[s:e], th)
            np.multiply(th, th, out=th)
            np.subtract(1.0, th, out=th)  # 1 - tanh^2 term by term: never negative
            fp[s:e] = np.einsum("ij,ij->i", coef_arg[s:e], th)
        np.negative(fp, out=fp)
        if at is not None:
            return f[at], fp[at]
        return f, fp


class PosteriorSlope:
    """Minus the slope of the log-posterior (Equation 6) for the Newton solver:
    w0 (x - p0) + sum_k w_k tanh(a_k (x - p_k)), the new factor included.
    Evaluations are restricted to the players still being solved once they
    are few, so converged players' factors are not evaluated again."""

    def __init__(self, n, owner, p, a, w, wn, gmu, perf, new_a, new_w):
        self.n = n
        self.full = (owner, p, a, w, w * a)
        self.wn, self.gmu, self.perf, self.new_a, self.new_w = wn, gmu, perf, new_a, new_w
        self.rows = np.arange(n)  # players whose factors `terms` holds
        self.terms = self.full  # owner numbered within `rows`

    def _restrict(self, idx: np.ndarray) -> None:
        owner, p, a, w, wa = self.full
        local = np.full(self.n, -1, dtype=np.int64)
        local[idx] = np.arange(len(idx))
        keep = local[owner] >= 0
        self.rows = idx
        self.terms = (local[owner[keep]], p[keep], a[keep], w[keep], wa[keep])

    def __call__(self, idx: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(idx) * 2 < len(self.rows):
            self._restrict(idx)
        rows = self.rows
        if len(rows) == len(idx):
            xr = x
        else:
            xr = np.zeros(len(rows))
            at = np.searchsorted(rows, idx)
            xr[at] = x
        owner, p, a, w, wa = self.terms
        m = len(rows)
        th = xr[owner]
        th -= p
        th *= a
        np.tanh(th, out=th)
        val = segment_sum(w * th, owner, m)
        np.multiply(th, th, out=th)
        np.subtract(1.0, th, out=th)
        th *= wa
        der = segment_sum(th, owner, m)
        if len(rows) != len(idx):
            val, der = val[at], der[at]
        na = self.new_a[idx]
        nth = np.tanh((x - self.perf[idx]) * na)
        wn = self.wn[idx]
        val += wn * (x - self.gmu[idx]) + self.new_w[idx] * nth
        der += wn + self.new_w[idx] * na * (1.0 - nth * nth)
        return -val, -der
