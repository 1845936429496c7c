"""Elo-MMR(rho) (EloMmr): logistic performances, a posterior of one Gaussian
factor and a bounded list of logistic ones, pseudodiffusion between them. A
round's performances and new ratings are solved row by row through
`split_rows` (EloMmrBase): its caller may hand it threads."""

from __future__ import annotations

import math
from itertools import repeat
from operator import attrgetter
from typing import Any, Callable, NamedTuple

import numpy as np

from ..numeric import solve_decreasing
from .kernels import TANH_MULTIPLIER, PosteriorSlope, WindowSlope, hermite, ranges, segment_sum, tanh_sums
from .params import EloMmrParams
from .state import FACTOR_BYTES, MmrState
from .system import DENSE_LIMIT, REL_TOL, EloMmrBase, MmrChange, nothing

_HISTORY = attrgetter("history")
_MATCHES = attrgetter("matches")
_LAST_TIME = attrgetter("last_time")
_PLAYER = attrgetter("player")
# Below this the scale is folded into the stored weights (after ~700 rounds
# with the defaults, where each round decays the weights by about 0.69).
_MIN_SCALE = 1e-100
# A factor's three floats as one record: copying factors by a mask, one record
# is one copy of 24 bytes, where rows of three floats take NumPy's slower path.
_FACTOR = np.dtype((np.void, FACTOR_BYTES))


class Diffused(NamedTuple):
    """What the belief update needs of Elo-MMR's diffusion and history
    compression, none of which depends on the performances (so all of it is
    done while a helper thread starts on them): the Gaussian factor (gmu,
    gsig) with the oldest factors folded in, the kept factors in one flat run
    by player (centres k_p, tanh argument weights k_a, decayed output weights
    k_w; `k_owner` the player of each), each player's weight scale after the
    decay (`small`: scales to fold into the stored weights) and the least and
    greatest kept centre of the players with factors (`has`); the new
    histories' buffer with the kept factors in place (`out`, one row a
    factor; `last`: the rows left for the new factors), where each history
    starts and ends in it (`bounds`, in bytes), and the numbers of the new
    states that are known already, as lists."""

    gmu: np.ndarray
    gsig: np.ndarray
    k_owner: np.ndarray
    k_p: np.ndarray
    k_a: np.ndarray
    k_w: np.ndarray
    scale: np.ndarray
    small: np.ndarray
    has: np.ndarray
    k_min: np.ndarray
    k_max: np.ndarray
    out: np.ndarray
    last: np.ndarray
    bounds: list[int]
    lists: tuple[list[float], list[float], list[float]]


class EloMmr(EloMmrBase):
    """Elo-MMR(rho): logistic performances, pseudodiffusion, history compression."""

    name = "elo-mmr"
    Params = EloMmrParams
    gaussian = False
    params: EloMmrParams
    _numbers = ("rating", "sigma", "matches", "gauss_mu", "gauss_sigma", "perf_scale")

    def _diffuse(self, before, mu, sig, diffused, extra):
        p = self.params
        n = len(before)
        hists = list(map(_HISTORY, before))
        lens = np.fromiter(map(len, hists), np.int64, n) // FACTOR_BYTES
        rows = np.frombuffer(b"".join(hists), dtype=np.float64).reshape(-1, 3)  # one row a factor
        hp, ha, hw_raw = rows.T.copy()  # hw_raw: undecayed
        owner = np.repeat(np.arange(n), lens)
        gmu, gsig, scale = extra

        decay = (sig / diffused) ** 2
        transfer = decay**p.rho
        wn_old = gsig**-2.0
        hist_weight = scale * segment_sum(ha * hw_raw, owner, n) * (2.0 / TANH_MULTIPLIER**2)
        from_norm = transfer * wn_old
        from_transfers = (1.0 - transfer) * (wn_old + hist_weight)
        total_w = from_norm + from_transfers
        gmu = (from_norm * gmu + from_transfers * mu) / total_w
        gsig = 1.0 / np.sqrt(decay * total_w)
        # Every weight decays by transfer * decay: one factor per player.
        scale = scale * (transfer * decay)
        hw = hw_raw * scale[owner]  # the actual, decayed weights

        # History compression: fold the oldest factors into the Gaussian one.
        drop = np.maximum(lens + 1 - p.max_history, 0)
        kept = None
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

        # The kept centres' range bounds the new rating (with gmu and the performance).
        counts = np.bincount(k_owner, minlength=n)
        has = counts > 0
        k_min = k_max = np.zeros(0)
        if len(k_p):
            first = (np.cumsum(counts) - counts)[has]
            k_min = np.minimum.reduceat(k_p, first)
            k_max = np.maximum.reduceat(k_p, first)

        # New histories, all in one buffer: the kept factors (a suffix of the
        # old ones, copied as whole records) then the new factor (_finish), its
        # weight stored undecayed (/ scale). A scale this small (hundreds of
        # rounds, or a large rho) is folded into the stored weights, so that
        # new ones stay representable.
        small = scale < _MIN_SCALE
        new_len = lens - drop + 1
        new_end = np.cumsum(new_len)
        last = new_end - 1
        out = np.empty((int(new_end[-1]), 3))
        if len(k_p):
            old = np.ones(len(out), dtype=bool)
            old[last] = False
            records = rows.view(_FACTOR).reshape(-1)
            out.view(_FACTOR).reshape(-1)[old] = records if kept is None else records[kept]
            if small.any():
                out[old, 2] = np.where(small[k_owner], k_w, out[old, 2])
        bounds = ((new_end - new_len) * FACTOR_BYTES).tolist()
        bounds.append(int(new_end[-1]) * FACTOR_BYTES)
        lists = (gmu.tolist(), gsig.tolist(), np.where(small, 1.0, scale).tolist())
        return Diffused(gmu, gsig, k_owner, k_p, k_a, k_w, scale, small, has, k_min, k_max, out, last, bounds, lists)

    def _performances(self, terms, mu, lo, first=nothing):
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
            evaluate = WindowSlope(const, coef, arg, carg)
            return solve_decreasing(evaluate, guess[rows], lo_b[rows], hi_b[rows], tol)

        return self.split_rows(solve, terms.n, terms.n * width, first)

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
            val, der = tanh_sums(x, terms.mu, a, c)
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
            gf, gfp = tanh_sums(grid, terms.mu, a, c)

            def approx(idx, x):
                val, der = hermite(g_lo, h, gf, gfp, x)
                tv, td = ties(idx, x)
                return const[idx] - val - tv, -der - td

            guess = solve_decreasing(approx, mu, lo_b, hi_b, tol)
        return solve_decreasing(evaluate, guess, lo_b, hi_b, tol)

    def _finish(self, match, before, post, mu, sig, beta, perf):
        p = self.params
        n = len(before)
        k_owner, k_p, k_a, k_w = post.k_owner, post.k_p, post.k_a, post.k_w
        gmu, scale, small = post.gmu, post.scale, post.small
        new_a = (0.5 * TANH_MULTIPLIER) / beta
        new_w = TANH_MULTIPLIER / beta
        wn = post.gsig**-2.0

        # The zero lies between the smallest and largest factor centre.
        lo_b = np.minimum(gmu, perf)
        hi_b = np.maximum(gmu, perf)
        if len(k_p):
            has = post.has
            lo_b[has] = np.minimum(lo_b[has], post.k_min)
            hi_b[has] = np.maximum(hi_b[has], post.k_max)
        tol = REL_TOL * beta.min()

        def solve(rows: slice) -> np.ndarray:
            # The new rating: the zero of Equation 6 (increasing), by Newton on
            # its negation. Players are independent, and their factors are
            # grouped by player: any split gives the same bits.
            f = slice(*np.searchsorted(k_owner, (rows.start, rows.stop)))
            factors = (k_owner[f] - rows.start, k_p[f], k_a[f], k_w[f])
            player = (wn[rows], gmu[rows], perf[rows], new_a[rows], new_w[rows])
            evaluate = PosteriorSlope(rows.stop - rows.start, *factors, *player)
            return solve_decreasing(evaluate, mu[rows], lo_b[rows], hi_b[rows], tol)

        new_sig = 1.0 / np.sqrt(sig**-2.0 + beta**-2.0)

        def histories() -> tuple[list[bytes], list[float], list[float]]:
            # The new factors into the histories' buffer, each player's history
            # copied out of it (a slice of the buffer's bytes), and the numbers
            # that do not depend on the new ratings, as lists: done while a
            # helper thread starts on the ratings.
            out, last = post.out, post.last
            out[last, 0] = perf
            out[last, 1] = new_a
            out[last, 2] = np.where(small, new_w, new_w / np.where(small, 1.0, scale))
            data = memoryview(out).cast("B")
            bounds = post.bounds
            return [bytes(data[b0:b1]) for b0, b1 in zip(bounds, bounds[1:])], new_sig.tolist(), perf.tolist()

        new_mu, (history, sig_l, perf_l) = self.split_rows(solve, n, len(k_p), histories)
        gmu_l, gsig_l, scale_l = post.lists
        mu_l = new_mu.tolist()
        return _build_changes(match.participants, before, mu_l, sig_l, gmu_l, gsig_l, history, scale_l, perf_l,
                              match.time, p.sig_limit)


def _rank_guess(mu: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """A starting point for the performances: the rating found at the player's
    place (the middle of a tie) when everyone is sorted by rating. Newton
    from there needs a few steps instead of a dozen from the player's own rating."""
    n = len(mu)
    desc = np.sort(mu)[::-1]
    ordered = np.sort(lo)
    hi = np.searchsorted(ordered, lo, side="right") - 1
    return np.interp(0.5 * (lo + hi), np.arange(n), desc)


def _build_changes(parts, before, mu_l, sig_l, gmu_l, gsig_l, histories, scale_l, perf_l, t, sig_limit):
    """The round's changes: each participant's new state, with its history (`histories`).
    Built a column at a time (map and comprehensions): a round of thousands spends
    less in the interpreter's loop than with one loop body per participant."""
    matches = [k + 1 for k in map(_MATCHES, before)]
    times = map(_LAST_TIME, before) if t is None else repeat(t)
    after = map(MmrState, mu_l, sig_l, matches, gmu_l, gsig_l, histories, scale_l, times, repeat(sig_limit))
    return list(map(MmrChange, map(_PLAYER, parts), before, after, perf_l))
