"""Elo-MMR(rho) and Elo-MMchi (the Elo-MMR paper: Ebtekar and Liu, "An Elo-like System
for Massive Multiplayer Competitions"), checked against the authors' reference
(EbTech/Elo-MMR, multi-skill/src/systems/elo_mmr.rs, and its Python bindings
elo-mmr-py).

One round (Algorithm 1):

1. Diffusion (Algorithm 2). Each participant's skill drifts by gamma^2, the
   discrete drift of one round plus `drift_per_day` per day since their last
   match. Elo-MMR(rho) keeps the posterior as a Gaussian factor N(p0, beta0^2)
   and a list of logistic factors, one per past round: kappa = sigma^2 /
   (sigma^2 + gamma^2); a share 1 - kappa^rho of every weight is transferred
   to the Gaussian factor, centred at the current rating, and all weights
   decay by kappa. Elo-MMchi (and rho = infinity) collapses everything into
   one Gaussian N(mu, sigma^2 + gamma^2).
2. Performance. Each participant j is modelled as a performance distribution
   centred at mu_j with deviation delta_j = sqrt(sigma_j^2 + beta^2),
   logistic for Elo-MMR and Gaussian for Elo-MMchi. Participant i's
   performance p_i is the zero of the derivative of the log-likelihood of
   the observed standings (Algorithm 3); a tie counts as a full win plus a
   full loss (paper, section 3.1), or half of each with `split_ties`.
3. Belief update. Elo-MMR pushes a logistic factor (p_i, beta) and the new
   rating is the zero of
       w0 (x - p0) + sum_k (pi / (beta_k sqrt 3)) omega_k tanh((x - p_k) pi / (beta_k sqrt 12))
   (Equation 6); Elo-MMchi multiplies Gaussians. Either way the new
   uncertainty is 1 / sqrt(1/sigma^2 + 1/beta^2) (Equation 8).

Defaults are the reference's: newcomers N(1500, 350^2); `weight_limit` w = 0.2
and `sig_limit` 80 give beta^2 = (1 + 1/w) 80^2 (about 196) and the per-round
drift gamma^2 = w 80^2 (about 35.8), so that a player who plays often
converges to sigma = 80; rho = 1; no subsampling. `beta` and `gamma` override
the derived values.

Compression (section 5.3): at most `max_history` logistic factors are kept;
older ones are folded into the Gaussian factor (their weight has decayed
geometrically by then, by a factor of about 0.7 a round with the defaults).
Subsampling: with `subsample_size`, each participant's performance is
estimated against about that many opponent terms nearest in rating; terms
whose mu and delta fall in the same `subsample_bucket` are merged, as in the
reference (which also merges with the default bucket of 1e-5).

Differences from the reference, all below its own numerical noise for normal
data: the root brackets follow the data instead of being fixed at
(-6000, 9000), so ratings are translation invariant; the exact reference keeps
an unbounded history (ours is `max_history`, 100 by default, as its fast mode);
a match where every participant ties (or with one participant) changes no
rating, as in the reference, but is counted in `matches` (the reference does
not count it, which matters only for `noob_delay`).
"""

from __future__ import annotations

import gc
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .base import (Match, ParamError, Params, PlayerState, RatingChange, RatingSystem, gaussian_quality, require,
                   team_members)
from .mmr_math import TANH_MULTIPLIER, erfcx, inverse_mills, ranges, round_half_away, segment_sum, solve_decreasing

SECS_PER_DAY = 86400.0
# Cells (rows x terms) of one block of a dense evaluation: bounds temporaries.
BLOCK_CELLS = 1 << 18
# Above this many (participant, term) cells an exact round (no subsampling)
# takes the decomposed path: one shared function plus the ties.
DENSE_LIMIT = 1 << 18
# Root-finding tolerance, relative to the smallest performance deviation.
REL_TOL = 1e-7
# Rows of a window evaluation are taken by blocks of about this many cells
# (the work buffer then stays in the core's cache: a quarter faster).
WINDOW_BLOCK_CELLS = 1 << 15
# Rounds with at least this many window cells are solved in parts by this
# thread and a helper thread together: NumPy releases the GIL in its loops,
# and handing the work over costs about 0.1 ms.
SPLIT_CELLS = 1 << 16
# Cells of one such part (there are at least two). Whichever thread is free
# takes the next part, so that neither waits long for the other when other
# programs take a core away for a while.
PART_CELLS = 1 << 18


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_HELPER: ThreadPoolExecutor | None = None
_HELPER_LOCK = threading.Lock()


def _nothing() -> None:
    return None


def _split_rows(solve: Callable[[slice], np.ndarray], n: int, cells: int,
                first: Callable[[], Any] = _nothing) -> tuple[np.ndarray, Any]:
    """(solve(slice(0, n)), first()). For a big round the solve is computed by
    parts on this thread and a helper thread, and this thread runs `first`
    (other work of the round) while the helper starts on the parts. Rows are
    independent: the parts give the same bits."""
    global _HELPER
    if cells < SPLIT_CELLS or n < 2 or _CORES < 2:
        done = first()
        return solve(slice(0, n)), done
    with _HELPER_LOCK:
        if _HELPER is None:
            _HELPER = ThreadPoolExecutor(1, thread_name_prefix="elo-mmr")
    count = min(n, max(2, cells // PART_CELLS))
    bounds = [n * k // count for k in range(count + 1)]
    results: list[np.ndarray] = [np.empty(0)] * count
    parts = iter(range(count))  # shared: each next() hands a part to one thread

    def work(before: Callable[[], Any] = _nothing) -> Any:
        try:
            done = before()
            for k in parts:
                results[k] = solve(slice(bounds[k], bounds[k + 1]))
        except BaseException:
            for _ in parts:  # leave the other thread nothing more to start
                pass
            raise
        return done

    other = _HELPER.submit(work)
    try:
        done = work(first)
    finally:
        if not other.cancel():  # cancelled: it had not started, and has nothing left
            other.result()
    return np.concatenate(results), done


@dataclass(frozen=True)
class EloMmxParams(Params):
    initial: float = 1500.0  # mu of a newcomer
    initial_sigma: float = 350.0  # sigma of a newcomer
    weight_limit: float = 0.2
    sig_limit: float = 80.0
    beta: float | None = None  # None: sqrt((1 + 1/w) sig_limit^2 + drift_per_day / w)
    gamma: float | None = None  # None: sqrt(w) * sig_limit
    drift_per_day: float = 0.0  # extra drift variance per day since the last match
    noob_delay: tuple[float, ...] = ()  # weight multipliers for a player's first rounds
    split_ties: bool = False
    subsample_size: int | None = None  # None: every opponent
    subsample_bucket: float = 1e-5

    def __post_init__(self) -> None:
        delay = self.noob_delay
        if isinstance(delay, (str, bytes)) or not isinstance(delay, (list, tuple)):
            raise ParamError("noob_delay", f"must be a list of numbers (got {delay!r})")
        for x in delay:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise ParamError("noob_delay", f"must be a list of finite numbers (got {delay!r})")
        object.__setattr__(self, "noob_delay", tuple(float(x) for x in delay))

    def check(self) -> None:
        require(self.initial_sigma > 0, "initial_sigma", f"must be > 0 (got {self.initial_sigma})")
        require(self.weight_limit > 0, "weight_limit", f"must be > 0 (got {self.weight_limit})")
        require(self.sig_limit > 0, "sig_limit", f"must be > 0 (got {self.sig_limit})")
        require(self.beta is None or self.beta > 0, "beta", f"must be > 0 (got {self.beta})")
        require(self.gamma is None or self.gamma >= 0, "gamma", f"must be >= 0 (got {self.gamma})")
        require(self.drift_per_day >= 0, "drift_per_day", f"must be >= 0 (got {self.drift_per_day})")
        require(all(x > 0 for x in self.noob_delay), "noob_delay", f"every multiplier must be > 0 (got {list(self.noob_delay)})")
        require(
            self.subsample_size is None or self.subsample_size >= 1,
            "subsample_size",
            f"must be >= 1 (got {self.subsample_size})",
        )
        require(self.subsample_bucket > 0, "subsample_bucket", f"must be > 0 (got {self.subsample_bucket})")

    def weights(self, matches: np.ndarray) -> np.ndarray:
        """The update weight w of each player's next round (noob_delay applied)."""
        w = np.full(len(matches), self.weight_limit)
        if self.noob_delay:
            delay = np.array(self.noob_delay)
            early = matches < len(delay)
            w[early] *= delay[matches[early]]
        return w

    def perf_sigma(self, w: np.ndarray) -> np.ndarray:
        """beta: the deviation of one performance around the skill."""
        if self.beta is not None:
            return np.full(len(w), self.beta)
        return np.sqrt((1.0 + 1.0 / w) * self.sig_limit**2 + self.drift_per_day / w)

    def drift_variance(self, w: np.ndarray, days: np.ndarray) -> np.ndarray:
        """gamma^2 for this round: the discrete drift plus the time-based one."""
        base = w * self.sig_limit**2 if self.gamma is None else np.full(len(w), self.gamma**2)
        return base + self.drift_per_day * days


@dataclass(frozen=True)
class EloMmrParams(EloMmxParams):
    rho: float = 1.0  # transfer speed of the pseudodiffusion
    max_history: int = 100  # logistic factors kept per player

    def check(self) -> None:
        super().check()
        require(self.rho >= 0, "rho", f"must be >= 0 (got {self.rho})")
        require(self.max_history >= 1, "max_history", f"must be >= 1 (got {self.max_history})")


# One logistic factor in MmrState.history: (p_k, w_arg_k, w_out_k) as float64.
_FACTOR_BYTES = 24


def _pack_factors(perfs: Sequence[float], w_arg: Sequence[float], w_out: Sequence[float]) -> bytes:
    if not len(perfs) == len(w_arg) == len(w_out):
        raise ValueError("perfs, perf_w_arg and perf_w_out must have the same length")
    if not len(perfs):
        return b""
    return np.column_stack((np.asarray(perfs, float), np.asarray(w_arg, float), np.asarray(w_out, float))).tobytes()


# Not frozen: a round builds one state per participant, and a frozen dataclass
# stores each field through object.__setattr__ (a round of 16,000 took a fifth
# longer). States are never changed once built: RatingSystem.rate must not
# mutate its inputs.
@dataclass(slots=True)
class MmrState(PlayerState):
    rating: float  # mu: the maximum of the skill posterior
    sigma: float  # the uncertainty of Equation 8
    matches: int = 0
    gauss_mu: float = 0.0  # the Gaussian factor of the posterior (p_0, beta_0)
    gauss_sigma: float = 1.0
    # Logistic factors, oldest first, packed as float64 triples (centre p_k,
    # tanh argument weight pi / (sqrt 12 beta_k), output weight
    # omega_k pi / (sqrt 3 beta_k)) in one bytes object: a round gathers
    # every participant's history with one join and np.frombuffer, and a
    # state holds one object instead of three tuples of floats. `perfs`,
    # `perf_w_arg` and `perf_w_out` give them as tuples; to_dict/from_dict
    # store them as three lists (the stored form is unchanged).
    # The output weights are stored undecayed: the actual weight of factor k
    # is perf_w_out[k] * perf_scale, so that the diffusion, which decays
    # every weight by the same factor, changes one number instead of all.
    history: bytes = field(default=b"", repr=False)
    perf_scale: float = 1.0
    last_time: float | None = None  # time of the last rated match, if known
    sig_limit: float = 80.0  # for display_rating

    @classmethod
    def with_factors(
        cls,
        perfs: Sequence[float] = (),
        perf_w_arg: Sequence[float] = (),
        perf_w_out: Sequence[float] = (),
        **values: Any,
    ) -> "MmrState":
        """A state from its factors given as three sequences."""
        return cls(history=_pack_factors(perfs, perf_w_arg, perf_w_out), **values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MmrState":
        data = dict(data)
        if "history" in data:
            raise TypeError("MmrState.from_dict: unexpected key 'history'")
        return cls.with_factors(data.pop("perfs", ()), data.pop("perf_w_arg", ()), data.pop("perf_w_out", ()), **data)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _STORED}

    def _column(self, k: int) -> tuple[float, ...]:
        return tuple(memoryview(self.history).cast("d")[k::3].tolist())

    @property
    def perfs(self) -> tuple[float, ...]:
        return self._column(0)

    @property
    def perf_w_arg(self) -> tuple[float, ...]:
        return self._column(1)

    @property
    def perf_w_out(self) -> tuple[float, ...]:
        """The stored (undecayed) output weights."""
        return self._column(2)

    @property
    def perf_weights(self) -> tuple[float, ...]:
        """The actual output weights omega_k pi / (sqrt 3 beta_k) of the factors."""
        scale = self.perf_scale
        return tuple(w * scale for w in self.perf_w_out)

    @property
    def uncertainty(self) -> float:
        return self.sigma

    @property
    def display_rating(self) -> float:
        # The reference's conservative estimate: 3 deviations above the limit.
        return self.rating - 3.0 * (self.sigma - self.sig_limit)

    def public(self) -> dict[str, Any]:
        return {
            "rating": self.rating,
            "uncertainty": self.sigma,
            "display_rating": self.display_rating,
            "matches": self.matches,
        }


# MmrState as stored: the factors as three lists instead of `history`.
_STORED = ("rating", "sigma", "matches", "gauss_mu", "gauss_sigma", "perfs", "perf_w_arg", "perf_w_out",
           "perf_scale", "last_time", "sig_limit")


def _extras(before: MmrState, after: MmrState, performance: float | None) -> dict[str, Any]:
    extras = {"uncertainty": after.sigma, "uncertainty_before": before.sigma, "display_rating": after.display_rating}
    if performance is not None:
        extras["performance"] = performance
    return extras


class _Terms:
    """The round's performance terms, merged by bucket and sorted as in the reference."""

    def __init__(self, mu: np.ndarray, delta: np.ndarray, lo: np.ndarray, width: float):
        n = len(mu)
        bm = round_half_away(mu / width)
        bs = round_half_away(delta / width)
        order = np.lexsort((lo, bs, bm))
        bm_s, bs_s = bm[order], bs[order]
        new = np.ones(n, dtype=bool)
        new[1:] = (bm_s[1:] != bm_s[:-1]) | (bs_s[1:] != bs_s[:-1])
        self.start = np.flatnonzero(new)  # first member (in `order`) of each term
        self.count = np.diff(np.append(self.start, n))
        self.mu = np.add.reduceat(mu[order], self.start) / self.count
        self.delta = np.add.reduceat(delta[order], self.start) / self.count
        group = np.cumsum(new) - 1
        self.of_player = np.empty(n, dtype=np.int64)
        self.of_player[order] = group
        self.lo_sorted = lo[order]  # members' places, by term then place
        self.key_sorted = group * (n + 1) + self.lo_sorted
        self.n = n
        self.m = len(self.start)
        self.width = width
        # For net_counts: each term's members, best and worst places (the
        # worst as -1 for a lone member, which is level with nobody else)...
        first = self.lo_sorted[self.start]
        last = self.lo_sorted[self.start + self.count - 1]
        last_level = np.where(self.count > 1, last, -1)
        self.ends = tuple(v.astype(np.int32) for v in (self.count, first, last, last_level))
        # ...and key_sorted with a sentinel, with the length of the run of
        # equal keys starting at each index (at run starts: where searches land).
        self.keys = np.append(self.key_sorted, -1)
        run_start = np.flatnonzero(new | np.append(False, self.lo_sorted[1:] != self.lo_sorted[:-1]))
        self.runs = np.zeros(n + 1, dtype=np.int64)
        self.runs[run_start] = np.diff(np.append(run_start, n))

    def windows(self, player_mu: np.ndarray, size: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Each player's contiguous range of terms (the reference's subsample)."""
        m = self.m
        if size is None or size >= m:
            return np.zeros(self.n, dtype=np.int64), np.full(self.n, m, dtype=np.int64)
        buckets = round_half_away(self.mu / self.width)
        beg = np.searchsorted(buckets, round_half_away(player_mu / self.width), side="left").astype(np.int64)
        end = np.minimum(beg + 1, m)
        expand = (max(size - 1, 0) + 1) // 2
        beg = np.maximum(beg - expand, 0)
        end = np.minimum(end + expand, m)
        expand2 = np.maximum(size - (end - beg), 0)
        beg = np.maximum(beg - expand2, 0)
        end = np.minimum(end + expand2, m)
        return beg, end

    def counts(self, lo: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Members of term cols[i, k] placed ahead of, level with and behind player i."""
        # A term of one member (most of them): compare places. Others: count
        # the term's members (sorted by place) on each side by binary search.
        count = self.count[cols]
        place = self.lo_sorted[self.start][cols]  # the term's best place
        mine = lo[:, None]
        less = (place < mine).view(np.int8).astype(np.int64)
        equal = (place == mine).view(np.int8).astype(np.int64)
        greater = count - less - equal
        multi = np.flatnonzero(count > 1)
        if len(multi):
            c = cols.ravel()[multi]
            q = c * (self.n + 1) + lo[multi // cols.shape[1]]
            left = np.searchsorted(self.key_sorted, q, side="left")
            right = np.searchsorted(self.key_sorted, q, side="right")
            start = self.start[c]
            less.ravel()[multi] = left - start
            equal.ravel()[multi] = right - left
            greater.ravel()[multi] = start + self.count[c] - right
        return less, equal, greater

    def window(self, values: np.ndarray, beg: np.ndarray, width: int) -> np.ndarray:
        """values[min(beg_i + k, m - 1)] for k < width, row by row: rows of a
        sliding window (contiguous copies) instead of an index per cell."""
        padded = np.concatenate((values, np.repeat(values[-1:], width)))
        return sliding_window_view(padded, width)[beg]

    def net_counts(self, lo: np.ndarray, beg: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(behind - ahead, level, members) of term min(beg_i + k, m - 1)
        relative to the player placed lo_i, for k < width: what Elo-MMR needs
        of `counts`, cell by cell from the term's best and worst places
        (exact for a term of one or two members, or one wholly ahead of or
        behind the player); only the other cells search the term's places."""
        count, first, last, last_level = (self.window(v, beg, width) for v in self.ends)
        lo32 = lo.astype(np.int32)[:, None]
        first -= lo32
        last -= lo32
        equal = first == 0
        equal = equal.view(np.int8).astype(np.int32)
        equal += last_level == lo32
        between = first <= 0
        between &= last >= 0
        between &= count > 2
        np.sign(first, out=first)
        np.sign(last, out=last)
        net = first
        net += last
        # Both ends on one side give +-2, times members / 2; one or two members: exact.
        net *= count
        net >>= 1
        search = np.flatnonzero(between)
        if len(search):
            rows = search // width
            c = np.minimum(beg[rows] + search % width, self.m - 1)
            q = c * (self.n + 1) + lo[rows]
            left = np.searchsorted(self.key_sorted, q, side="left")
            # Members level with the player: the run of equal keys from `left`, if any.
            level = np.where(self.keys[left] == q, self.runs[left], 0)
            net.ravel()[search] = 2 * (self.start[c] - left) + self.count[c] - level
            equal.ravel()[search] = level
        return net, equal, count


def _tanh_sums(x: np.ndarray, mu: np.ndarray, a: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _hermite(grid_x0: float, h: float, f: np.ndarray, fp: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


class _EloMmrBase(RatingSystem[MmrState]):
    State = MmrState
    has_uncertainty = True
    gaussian: ClassVar[bool]
    params: EloMmxParams
    # The numbers a round reads from each state: rating, sigma and matches,
    # then what the system's _diffuse needs.
    _numbers: ClassVar[tuple[str, ...]] = ("rating", "sigma", "matches")

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
        # A round allocates a few objects per participant and frees none of
        # them cyclically; with hundreds of thousands of states alive, the
        # cyclic collector would rescan them many times a round. It runs once
        # afterwards instead (nothing here creates reference cycles).
        if not gc.isenabled():
            return self._rate(match, before)
        gc.disable()
        try:
            return self._rate(match, before)
        finally:
            gc.enable()

    def _rate(self, match: Match, before: Sequence[MmrState]) -> list[RatingChange[MmrState]]:
        p = self.params
        n = len(before)
        ranks = np.fromiter(map(_RANK, match.participants), np.int64, n)
        if n < 2 or ranks.min() == ranks.max():
            # Outcome-free: the reference skips such a round; ratings stay as they
            # are, but the match still counts as played (events need matches >= 1).
            changes = []
            for x, s in zip(match.participants, before):
                after = replace(s, matches=s.matches + 1)
                changes.append(RatingChange(x.player, s, after, _extras(s, after, None)))
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
        terms = _Terms(mu, np.hypot(diffused, beta), lo, p.subsample_bucket)
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

    def _bracket(self, terms: _Terms) -> tuple[np.ndarray, np.ndarray, float]:
        # Beyond ~21 deviations every logistic term is saturated (f is flat).
        spread = 25.0 * terms.delta.max()
        n = terms.n
        lo_b = np.full(n, terms.mu.min() - spread)
        hi_b = np.full(n, terms.mu.max() + spread)
        return lo_b, hi_b, REL_TOL * terms.delta.min()

    def _performances(self, terms: _Terms, mu: np.ndarray, lo: np.ndarray,
                      first: Callable[[], Any] = _nothing) -> tuple[np.ndarray, Any]:
        """(the performances, first()): `first` may run while they are solved."""
        raise NotImplementedError

    def _window_matrix(self, terms: _Terms, mu: np.ndarray, lo: np.ndarray):
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
            return 0.5 * math.erfc(-z * _INV_SQRT2)
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


class EloMmr(_EloMmrBase):
    """Elo-MMR(rho): logistic performances, pseudodiffusion, history compression."""

    name = "elo-mmr"
    Params = EloMmrParams
    gaussian = False
    params: EloMmrParams
    _numbers = ("rating", "sigma", "matches", "gauss_mu", "gauss_sigma", "perf_scale")

    def _diffuse(self, before, mu, sig, diffused, extra):
        n = len(before)
        hists = list(map(_HISTORY, before))
        lens = np.fromiter(map(len, hists), np.int64, n) // _FACTOR_BYTES
        flat = np.frombuffer(b"".join(hists), dtype=np.float64)
        hp, ha, hw = flat.reshape(-1, 3).T.copy()  # hw: undecayed
        owner = np.repeat(np.arange(n), lens)
        gmu, gsig, scale = extra

        decay = (sig / diffused) ** 2
        transfer = decay**self.params.rho
        wn_old = gsig**-2.0
        hist_weight = scale * segment_sum(ha * hw, owner, n) * (2.0 / TANH_MULTIPLIER**2)
        from_norm = transfer * wn_old
        from_transfers = (1.0 - transfer) * (wn_old + hist_weight)
        total_w = from_norm + from_transfers
        gmu = (from_norm * gmu + from_transfers * mu) / total_w
        gsig = 1.0 / np.sqrt(decay * total_w)
        # Every weight decays by transfer * decay: one factor per player.
        scale = scale * (transfer * decay)
        return {"gmu": gmu, "gsig": gsig, "lens": lens, "hp": hp, "ha": ha, "hw": hw, "owner": owner, "scale": scale}

    def _performances(self, terms, mu, lo, first=_nothing):
        split = self.params.split_ties
        w = TANH_MULTIPLIER / terms.delta  # w_out of each term
        a = 0.5 * w  # w_arg
        lo_b, hi_b, tol = self._bracket(terms)
        full = self.params.subsample_size is None or self.params.subsample_size >= terms.m
        if full and terms.n * terms.m > DENSE_LIMIT:
            done = first()
            return self._performances_exact(terms, mu, lo, w, a, lo_b, hi_b, tol), done

        beg, end = terms.windows(mu, self.params.subsample_size)
        width = int((end - beg).max())
        guess = _rank_guess(mu, lo)

        def solve(rows: slice) -> np.ndarray:
            # Rows are independent (each its own sums and Newton steps), so
            # any split of them gives the same bits.
            b = beg[rows]
            net, equal, count = terms.net_counts(lo[rows], b, width)
            wc = terms.window(w, b, width)
            invalid = np.arange(width)[None, :] >= (end[rows] - b)[:, None]
            if invalid.any():
                wc[invalid] = 0.0
            const = (wc * net).sum(axis=1)
            if not split:
                count += equal
            coef = np.multiply(wc, count, out=wc)
            arg = terms.window(a, b, width)
            carg = terms.window(terms.mu, b, width)
            carg *= arg
            evaluate = _WindowSlope(const, coef, arg, carg)
            return solve_decreasing(evaluate, guess[rows], lo_b[rows], hi_b[rows], tol)

        return _split_rows(solve, terms.n, terms.n * width, first)

    def _performances_exact(self, terms, mu, lo, w, a, lo_b, hi_b, tol):
        """Every opponent: f_i(x) = C_i - F(x) - E_i(x), F shared by all players,
        E_i the extra tie terms of i's place (absent with split ties)."""
        n, m = terms.n, terms.m
        split = self.params.split_ties
        c = w * terms.count
        # C_i: weights of the members placed behind i minus those ahead of i.
        member_w = w[terms.of_player]
        order = np.argsort(lo, kind="stable")
        lo_sorted = lo[order]
        cum = np.concatenate(([0.0], np.cumsum(member_w[order])))
        ahead = cum[np.searchsorted(lo_sorted, lo, side="left")]
        behind = cum[-1] - cum[np.searchsorted(lo_sorted, lo, side="right")]
        const = behind - ahead

        # Tie pairs (i, term j, number of j's members level with i).
        if split:
            pair_owner = np.zeros(0, dtype=np.int64)
            pair_c = pair_mu = pair_a = np.zeros(0)
        else:
            keys, key_counts = np.unique(lo * m + terms.of_player, return_counts=True)
            key_lo = keys // m
            key_term = keys % m
            first = np.searchsorted(key_lo, lo, side="left")
            count = np.searchsorted(key_lo, lo, side="right") - first
            pair_owner = np.repeat(np.arange(n), count)
            pair_key = ranges(first, count)
            pair_term = key_term[pair_key]
            pair_c = key_counts[pair_key] * w[pair_term]
            pair_mu = terms.mu[pair_term]
            pair_a = a[pair_term]

        def ties(idx, x):
            if len(pair_owner) == 0:
                return 0.0, 0.0
            xs = np.zeros(n)
            xs[idx] = x
            mask = np.zeros(n, dtype=bool)
            mask[idx] = True
            keep = mask[pair_owner]
            owner = pair_owner[keep]
            th = np.tanh((xs[owner] - pair_mu[keep]) * pair_a[keep])
            val = segment_sum(pair_c[keep] * th, owner, n)[idx]
            der = segment_sum(pair_c[keep] * pair_a[keep] * (1.0 - th * th), owner, n)[idx]
            return val, der

        def evaluate(idx, x):
            val, der = _tanh_sums(x, terms.mu, a, c)
            tv, td = ties(idx, x)
            return const[idx] - val - tv, -der - td

        # A first solution against a cubic interpolation of F on a grid with
        # a spacing of 1/16 of the narrowest term, then Newton on the exact F.
        h = terms.delta.min() / 16.0
        g_lo = terms.mu.min() - 8.0 * terms.delta.max()
        g_hi = terms.mu.max() + 8.0 * terms.delta.max()
        k = int(math.ceil((g_hi - g_lo) / h)) + 1
        guess = mu
        if k < n // 2:
            grid = g_lo + h * np.arange(k)
            gf, gfp = _tanh_sums(grid, terms.mu, a, c)

            def approx(idx, x):
                val, der = _hermite(g_lo, h, gf, gfp, x)
                tv, td = ties(idx, x)
                return const[idx] - val - tv, -der - td

            guess = solve_decreasing(approx, mu, lo_b, hi_b, tol)
        return solve_decreasing(evaluate, guess, lo_b, hi_b, tol)

    def _finish(self, match, before, post, mu, sig, beta, perf):
        p = self.params
        n = len(before)
        lens, hp, ha, hw_raw, owner, scale = post["lens"], post["hp"], post["ha"], post["hw"], post["owner"], post["scale"]
        gmu, gsig = post["gmu"], post["gsig"]
        hw = hw_raw * scale[owner]  # the actual, decayed weights
        new_a = (0.5 * TANH_MULTIPLIER) / beta
        new_w = TANH_MULTIPLIER / beta

        # History compression: fold the oldest factors into the Gaussian one.
        drop = np.maximum(lens + 1 - p.max_history, 0)
        if drop.any():
            starts = np.cumsum(lens) - lens
            dropped = (np.arange(len(hp)) - starts[owner]) < drop[owner]
            dw = ha[dropped] * hw[dropped] * (2.0 / TANH_MULTIPLIER**2)
            do = owner[dropped]
            wn = gsig**-2.0
            dsum = segment_sum(dw, do, n)
            gmu = (wn * gmu + segment_sum(dw * hp[dropped], do, n)) / (wn + dsum)
            gsig = 1.0 / np.sqrt(wn + dsum)
            kept = ~dropped
            k_owner, k_p, k_a, k_w = owner[kept], hp[kept], ha[kept], hw[kept]
        else:
            k_owner, k_p, k_a, k_w = owner, hp, ha, hw
        wn = gsig**-2.0

        # The zero lies between the smallest and largest factor centre.
        lo_b = np.minimum(gmu, perf)
        hi_b = np.maximum(gmu, perf)
        if len(k_p):
            counts = np.bincount(k_owner, minlength=n)
            has = counts > 0
            first = (np.cumsum(counts) - counts)[has]
            lo_b[has] = np.minimum(lo_b[has], np.minimum.reduceat(k_p, first))
            hi_b[has] = np.maximum(hi_b[has], np.maximum.reduceat(k_p, first))
        tol = REL_TOL * beta.min()

        def solve(rows: slice) -> np.ndarray:
            # The new rating: the zero of Equation 6 (increasing), by Newton on
            # its negation. Players are independent, and their factors are
            # grouped by player: any split gives the same bits.
            f = slice(*np.searchsorted(k_owner, (rows.start, rows.stop)))
            factors = (k_owner[f] - rows.start, k_p[f], k_a[f], k_w[f])
            player = (wn[rows], gmu[rows], perf[rows], new_a[rows], new_w[rows])
            evaluate = _PosteriorSlope(rows.stop - rows.start, *factors, *player)
            return solve_decreasing(evaluate, mu[rows], lo_b[rows], hi_b[rows], tol)

        new_sig = 1.0 / np.sqrt(sig**-2.0 + beta**-2.0)

        def histories() -> tuple[bytes, list[int], tuple[list[float], ...]]:
            # New histories, all in one buffer: the kept factors (a suffix of
            # the old ones) then the new factor, its weight stored undecayed
            # (/ scale). A scale this small (hundreds of rounds, or rho =
            # infinity) is folded into the stored weights, so that new ones
            # stay representable. With the numbers of the new states that do
            # not depend on the new ratings, as lists: all of it is done while
            # a helper thread starts on the ratings.
            small = scale < _MIN_SCALE
            new_len = lens - drop + 1
            new_end = np.cumsum(new_len)
            new_start = new_end - new_len
            out = np.empty((int(new_end[-1]), 3))
            if len(k_p):
                kept_w = hw_raw if not drop.any() else hw_raw[kept]
                if small.any():
                    kept_w = np.where(small[k_owner], k_w, kept_w)
                k_index = np.arange(len(hp)) if not drop.any() else np.flatnonzero(kept)
                dest = k_index + (new_start - (np.cumsum(lens) - lens) - drop)[k_owner]
                out[dest, 0] = k_p
                out[dest, 1] = k_a
                out[dest, 2] = kept_w
            last = new_end - 1
            out[last, 0] = perf
            out[last, 1] = new_a
            out[last, 2] = np.where(small, new_w, new_w / np.where(small, 1.0, scale))
            bounds = (new_start * _FACTOR_BYTES).tolist()
            bounds.append(int(new_end[-1]) * _FACTOR_BYTES)
            numbers = (new_sig.tolist(), gmu.tolist(), gsig.tolist(), np.where(small, 1.0, scale).tolist(), perf.tolist())
            return out.tobytes(), bounds, numbers

        new_mu, (buf, bounds, (sig_l, gmu_l, gsig_l, scale_l, perf_l)) = _split_rows(solve, n, len(k_p), histories)
        mu_l = new_mu.tolist()
        shown_l = (new_mu - 3.0 * (new_sig - p.sig_limit)).tolist()
        return _build_changes(
            match.participants, before, mu_l, sig_l, gmu_l, gsig_l, bounds, scale_l, shown_l, perf_l, buf, match.time, p.sig_limit
        )


def _rank_guess(mu: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """A starting point for the performances: the rating found at the player's
    place (the middle of a tie) when everyone is sorted by rating. Newton
    from there needs a few steps instead of a dozen from the player's own rating."""
    n = len(mu)
    desc = np.sort(mu)[::-1]
    ordered = np.sort(lo)
    hi = np.searchsorted(ordered, lo, side="right") - 1
    return np.interp(0.5 * (lo + hi), np.arange(n), desc)


class _WindowSlope:
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


class _PosteriorSlope:
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


_HISTORY = attrgetter("history")
_RANK = attrgetter("rank")
_WEIGHT = attrgetter("weight")
# Below this the scale is folded into the stored weights (after ~700 rounds
# with the defaults, where each round decays the weights by about 0.69).
_MIN_SCALE = 1e-100


def _gather(states: Sequence[Any], names: tuple[str, ...]) -> np.ndarray:
    """The named numbers (two names or more) of every state as float rows, one
    per name, read in one pass: most of a gather's time goes to fetching each
    state and its numbers from memory, which one pass does once."""
    n, k = len(states), len(names)
    flat = np.fromiter(chain.from_iterable(map(attrgetter(*names), states)), float, n * k)
    return flat.reshape(n, k).T.copy()


def _build_changes(parts, before, mu_l, sig_l, gmu_l, gsig_l, bounds, scale_l, shown_l, perf_l, buf, t, sig_limit):
    """The round's changes: each participant's new state, its history a slice of `buf`."""
    changes = []
    append = changes.append
    for x, s, r, sg, g1, g2, b0, b1, sc, shown, pf in zip(
        parts, before, mu_l, sig_l, gmu_l, gsig_l, bounds, bounds[1:], scale_l, shown_l, perf_l
    ):
        after = MmrState(r, sg, s.matches + 1, g1, g2, buf[b0:b1], sc, s.last_time if t is None else t, sig_limit)
        extras = {"uncertainty": sg, "uncertainty_before": s.sigma, "display_rating": shown, "performance": pf}
        append(RatingChange(x.player, s, after, extras))
    return changes


class EloMmx(_EloMmrBase):
    """Elo-MMchi: Gaussian performances; the posterior stays one Gaussian. Teams
    as the paper's section 7 proposes (see _rate_teams)."""

    name = "elo-mmx"
    Params = EloMmxParams
    gaussian = True
    teams = True
    partial_play = True

    def _diffuse(self, before, mu, sig, diffused, extra):
        return None  # the posterior stays one Gaussian: the new deviations are all

    def _performances(self, terms, mu, lo, first=_nothing):
        done = first()
        split = self.params.split_ties
        lo_b, hi_b, tol = self._bracket(terms)
        full = self.params.subsample_size is None or self.params.subsample_size >= terms.m
        if full and terms.n * terms.m > DENSE_LIMIT:
            return self._performances_exact(terms, mu, lo, lo_b, hi_b, tol), done
        cols, valid, less, equal, greater, _, _ = self._window_matrix(terms, mu, lo)
        zero = ~valid
        less = np.where(zero, 0, less).astype(float)
        greater = np.where(zero, 0, greater).astype(float)
        equal = np.where(zero, 0, equal).astype(float)
        centre = terms.mu[cols]
        inv = 1.0 / terms.delta[cols]

        def evaluate(idx, x):
            iv = inv[idx]
            z = (x[:, None] - centre[idx]) * iv
            lam_p = inverse_mills(z)  # I beat them
            lam_m = inverse_mills(-z)  # they beat me
            g_val = lam_p * iv
            g_der = -(z * lam_p + lam_p * lam_p) * iv * iv
            l_val = -lam_m * iv
            l_der = (z * lam_m - lam_m * lam_m) * iv * iv
            if split:
                e_val = 0.5 * (g_val + l_val)
                e_der = 0.5 * (g_der + l_der)
            else:
                e_val = -z * iv
                e_der = -iv * iv
            gi, li, ei = greater[idx], less[idx], equal[idx]
            f = (gi * g_val + li * l_val + ei * e_val).sum(axis=1)
            fp = (gi * g_der + li * l_der + ei * e_der).sum(axis=1)
            return f, fp

        return solve_decreasing(evaluate, mu, lo_b, hi_b, tol), done

    def _performances_exact(self, terms, mu, lo, lo_b, hi_b, tol):
        """Every opponent, one member at a time (merged terms only matter when
        subsampling): the member's side of i decides the kind of term."""
        split = self.params.split_ties
        n = terms.n
        m_mu = terms.mu[terms.of_player]
        m_inv = 1.0 / terms.delta[terms.of_player]
        inv2 = m_inv * m_inv

        def evaluate(idx, x):
            f = np.empty(len(idx))
            fp = np.empty(len(idx))
            block = max(1, BLOCK_CELLS // n)
            for s in range(0, len(idx), block):
                rows = idx[s : s + block]
                z = (x[s : s + block, None] - m_mu[None, :]) * m_inv[None, :]
                side = np.sign(lo[None, :] - lo[rows, None])  # +1: I beat them
                u = np.where(side == 0, z, side * z)
                lam = _SQRT_2_OVER_PI / erfcx(u * -_INV_SQRT2)
                val = side * lam * m_inv
                der = -(u * lam + lam * lam) * inv2
                tie = side == 0
                if split:
                    lam_m = inverse_mills(-z)
                    t_val = 0.5 * (lam - lam_m) * m_inv
                    t_der = 0.5 * (-(z * lam + lam * lam) + (z * lam_m - lam_m * lam_m)) * inv2
                else:
                    t_val = -z * m_inv
                    t_der = np.broadcast_to(-inv2, z.shape)
                val = np.where(tie, t_val, val)
                der = np.where(tie, t_der, der)
                f[s : s + block] = val.sum(axis=1)
                fp[s : s + block] = der.sum(axis=1)
            return f, fp

        return solve_decreasing(evaluate, mu, lo_b, hi_b, tol)

    def _rate_teams(self, match, before, mu, sig, beta, ranks):
        """A team's performance is the sum of its members' performances, each
        weighted by the member's share of play: P = sum w_i p_i, with p_i ~
        N(s_i, beta_i^2) and the skills s_i ~ N(mu_i, sigma_i^2) independent. So
        a team is one Gaussian competitor, N(sum w mu, sum w^2 sigma^2), with
        performance deviation sqrt(sum w^2 beta^2): the round is solved between
        teams with the Elo-MMchi equations. Conditioning the members' joint prior
        on the team's performance P is, for member i, observing s_i with
        p~_i = (P - (mu_T - w_i mu_i)) / w_i and variance b_i^2 = (everything in
        the team's variance but w_i^2 sigma_i^2) / w_i^2; _finish then multiplies
        Gaussians as for a player alone. Derivation: docs/algorithms.md."""
        members = team_members(match)
        n = len(before)
        sizes = np.fromiter(map(len, members), np.int64, len(members))
        grouped = np.fromiter(chain.from_iterable(members), np.int64, n)  # participants, team by team
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        team = np.empty(n, np.int64)
        team[grouped] = np.repeat(np.arange(len(members)), sizes)
        w = np.fromiter(map(_WEIGHT, match.participants), float, n)
        skill_var = np.add.reduceat((w * sig)[grouped] ** 2, starts)
        perf_var = np.add.reduceat((w * beta)[grouped] ** 2, starts)
        # A full-time team of one takes exactly the individual path's numbers (the
        # sums above would round differently), so it equals the individual case.
        first = grouped[starts]
        alone = (sizes == 1) & (w[first] == 1.0)
        mu_t = np.where(alone, mu[first], np.add.reduceat((w * mu)[grouped], starts))
        delta_t = np.where(alone, np.hypot(sig[first], beta[first]), np.sqrt(skill_var + perf_var))
        rank_t = ranks[first]
        lo_t = np.searchsorted(np.sort(rank_t), rank_t, side="left").astype(np.int64)
        perf_t, _ = self._performances(_Terms(mu_t, delta_t, lo_t, self.params.subsample_bucket), mu_t, lo_t)
        rest = (skill_var[team] - (w * sig) ** 2) + perf_var[team]
        seen_beta = np.where(alone[team], beta, np.sqrt(np.maximum(rest, 0.0)) / w)
        seen_perf = (perf_t[team] - (mu_t[team] - w * mu)) / w
        return self._finish(match, before, None, mu, sig, seen_beta, seen_perf)

    def _finish(self, match, before, post, mu, sig, beta, perf):
        p = self.params
        wn = sig**-2.0
        wp = beta**-2.0
        new_mu = (wn * mu + wp * perf) / (wn + wp)
        new_sig = 1.0 / np.sqrt(wn + wp)
        mu_l, sig_l, perf_l = new_mu.tolist(), new_sig.tolist(), perf.tolist()
        t = match.time
        changes = []
        for i, (x, s) in enumerate(zip(match.participants, before)):
            after = MmrState(
                rating=mu_l[i],
                sigma=sig_l[i],
                matches=s.matches + 1,
                gauss_mu=mu_l[i],
                gauss_sigma=sig_l[i],
                last_time=s.last_time if t is None else t,
                sig_limit=p.sig_limit,
            )
            changes.append(RatingChange(x.player, s, after, _extras(s, after, perf_l[i])))
        return changes


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
