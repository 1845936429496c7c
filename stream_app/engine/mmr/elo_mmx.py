"""Elo-MMchi (EloMmx): Gaussian performances, a posterior of one Gaussian, and
teams and partial play as the paper's section 7 proposes."""

from __future__ import annotations

from itertools import chain
from operator import attrgetter

import numpy as np

from ..base import team_members
from ..numeric import solve_decreasing
from .kernels import BLOCK_CELLS, INV_SQRT2, SQRT_2_OVER_PI, erfcx, inverse_mills
from .params import EloMmxParams
from .state import MmrState
from .system import DENSE_LIMIT, EloMmrBase, MmrChange, nothing
from .terms import Terms

_WEIGHT = attrgetter("weight")


class EloMmx(EloMmrBase):
    """Elo-MMchi: Gaussian performances; the posterior stays one Gaussian. Teams
    as the paper's section 7 proposes (see _rate_teams)."""

    name = "elo-mmx"
    Params = EloMmxParams
    gaussian = True
    teams = True
    partial_play = True

    def _diffuse(self, before, mu, sig, diffused, extra):
        return None  # the posterior stays one Gaussian: the new deviations are all

    def _performances(self, terms, mu, lo, first=nothing):
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
                lam = SQRT_2_OVER_PI / erfcx(u * -INV_SQRT2)
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
            changes.append(MmrChange(x.player, s, after, perf_l[i]))
        return changes

    # ---- a round between teams ----

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
        perf_t, _ = self._performances(Terms(mu_t, delta_t, lo_t, self.params.subsample_bucket), mu_t, lo_t)
        rest = (skill_var[team] - (w * sig) ** 2) + perf_var[team]
        seen_beta = np.where(alone[team], beta, np.sqrt(np.maximum(rest, 0.0)) / w)
        seen_perf = (perf_t[team] - (mu_t[team] - w * mu)) / w
        return self._finish(match, before, None, mu, sig, seen_beta, seen_perf)
