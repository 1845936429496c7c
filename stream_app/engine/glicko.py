"""Glicko-2 (Glickman, "Example of the Glicko-2 system", 2013) and Glicko-1
(Glickman, "The Glicko system", 1995).

Both systems run on an internal scale mu = (r - 1500) / s, phi = RD / s, with
s = 173.7178 for Glicko-2 (the paper's constant) and s = 1/q = 400 / ln 10 for
Glicko-1. On that scale they share, for the opponents j of one rating period,

    g(phi)  = 1 / sqrt(1 + 3 phi^2 / pi^2)
    E_j     = 1 / (1 + exp(-g(phi_j) (mu - mu_j)))        (= 1 / (1 + 10^(-g (r - r_j) / 400)))
    v       = 1 / sum_j g(phi_j)^2 E_j (1 - E_j)           (Glicko-1's d^2, on this scale)
    gain    = sum_j g(phi_j) (s_j - E_j),   Delta = v gain

Glicko-1: phi'^2 = 1 / (1/phi^2 + 1/v) and mu' = mu + phi'^2 gain, where phi is
the RD after Step 1, RD = min(sqrt(RD^2 + c^2 t), initial RD).
Glicko-2: the new volatility sigma' = exp(A / 2), A the zero of
    f(x) = e^x (Delta^2 - phi^2 - v - e^x) / (2 (phi^2 + v + e^x)^2) - (x - ln sigma^2) / tau^2
found by the Illinois algorithm to within epsilon (Step 5); then
phi* = sqrt(phi^2 + sigma'^2), phi' = 1 / sqrt(1/phi*^2 + 1/v), mu' = mu + phi'^2 gain.

A match is one rating period: each participant plays one game against every
other participant (score 1 if their rank is better, 0.5 if equal, 0 if worse),
against the opponents' ratings and deviations from before the match.

Inactivity: with `period_days` P, a player whose last match was `elapsed`
seconds earlier has idle = max(elapsed / (P * 86400) - 1, 0) idle periods: the
elapsed periods minus the match's own one (continuous; a late result, elapsed
< 0, counts as 0). Before the match phi^2 grows by idle * sigma^2 (Glicko-2) or
the RD^2 by c^2 * idle (Glicko-1), capped at the initial deviation (a deviation
already above the cap is left as it is). The match's own period then adds one
more period of drift: Glicko-2's phi* step above, Glicko-1's Step 1 with t = 1
(so Glicko-1's t is 1 + idle, as in Glickman's "t = 1 if the player competed in
the previous period"). Without times (a state's or the match's) idle is 0.
Unlike the paper, rate() also caps Glicko-2's phi* at the initial deviation
(see _phi_star2): after an extreme result sigma' can exceed 1 and an
uncapped phi* lets the next game move a rating by any amount.

Known properties (tests/engine/test_glicko.py, docs/algorithms.md): within
one match a better rank never lowers the new rating, but across matches
Glicko-2's volatility breaks aligned incentives (the Elo-MMR paper, 5.1), and
both systems' one-step update is not monotone in the prior rating when a
period holds many surprising games.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .base import Match, Params, PlayerState, RatingChange, RatingSystem, gaussian_quality, require

CENTRE = 1500.0  # the rating at mu = 0 (the papers'); the results do not depend on it
G2_SCALE = 173.7178  # Glicko-2's conversion constant, as printed in the paper
G1_SCALE = 400.0 / math.log(10.0)  # 1/q of Glicko-1
SECS_PER_DAY = 86400.0
PI2 = math.pi**2
# From this many participants the opponent sums go through NumPy: below it
# NumPy's fixed cost per call outweighs the loop it saves.
NUMPY_FROM = 12
BLOCK_CELLS = 1 << 18  # (rows x opponents) per NumPy block: bounds temporaries
# sum g^2 E (1 - E) below this means v > 1e100: the games carry no information
# at float precision (E is 0 or 1), and Delta^2 would overflow. Such a period is
# rated as one without games.
MIN_INFO = 1e-100
MAX_ITERATIONS = 200  # the Illinois loop converges in ~5-10; this only stops a float cycle


def _g(phi: float) -> float:
    return 1.0 / math.sqrt(1.0 + 3.0 * phi * phi / PI2)


def _sums(mu: float, games: Iterable[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(sum g^2 E(1-E), sum g (s - E), sum E) over games of (mu_j, g_j, s_j)."""
    info = gain = esum = 0.0
    for mu_j, g_j, s in games:
        z = g_j * (mu_j - mu)
        e = 1.0 / (1.0 + math.exp(z)) if z < 700.0 else 0.0  # math.exp overflows past ~709
        info += g_j * g_j * e * (1.0 - e)
        gain += g_j * (s - e)
        esum += e
    return info, gain, esum


def _sums_numpy(mu: np.ndarray, g: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_sums for every participant against all the others at once, O(n^2) by blocks."""
    n = len(mu)
    # sum_j g_j s_ij needs no matrix: the g of the worse-ranked plus half the g
    # of the tied ones (less the player's own g), from a sort by rank.
    order = np.argsort(ranks, kind="stable")
    sorted_ranks, sorted_g = ranks[order], g[order]
    cum = np.concatenate(([0.0], np.cumsum(sorted_g)))
    lo = np.searchsorted(sorted_ranks, ranks, "left")
    hi = np.searchsorted(sorted_ranks, ranks, "right")
    won = (cum[n] - cum[hi]) + 0.5 * (cum[hi] - cum[lo] - g)
    info, ge, esum = np.empty(n), np.empty(n), np.empty(n)
    g2 = g * g
    rows = max(1, BLOCK_CELLS // n)
    for a in range(0, n, rows):
        b = min(n, a + rows)
        e = np.subtract.outer(mu[a:b], mu)
        e *= g
        np.negative(e, out=e)
        with np.errstate(over="ignore"):  # exp -> inf gives E = 0, as it should
            np.exp(e, out=e)
        e += 1.0
        np.reciprocal(e, out=e)
        k = np.arange(b - a)
        e[k, a + k] = 0.0  # no game against oneself
        esum[a:b] = e.sum(axis=1)
        ge[a:b] = e @ g
        info[a:b] = (e * (1.0 - e)) @ g2
    return info, won - ge, esum


def _volatility(phi2: float, sigma: float, v: float, delta: float, tau: float, eps: float) -> float:
    """Glicko-2 Step 5: the new volatility, by the Illinois algorithm."""
    a = math.log(sigma * sigma)
    d2 = delta * delta
    tau2 = tau * tau

    def f(x: float) -> float:
        ex = math.exp(x)
        den = phi2 + v + ex
        return ex * (d2 - phi2 - v - ex) / (2.0 * den * den) - (x - a) / tau2

    big_a = a
    if d2 > phi2 + v:
        big_b = math.log(d2 - phi2 - v)
    else:
        k = 1
        while f(a - k * tau) < 0.0:
            k += 1
        big_b = a - k * tau
    fa, fb = f(big_a), f(big_b)
    for _ in range(MAX_ITERATIONS):
        if abs(big_b - big_a) <= eps or fb == fa:  # converged (fb == fa: no secant left)
            break
        c = big_a + (big_a - big_b) * fa / (fb - fa)
        fc = f(c)
        if fc * fb <= 0.0:  # Step 5.4(b): the root lies between B and C
            big_a, fa = big_b, fb
        else:
            fa /= 2.0  # Illinois: halve the retained end's value
        big_b, fb = c, fc
    return math.exp(big_a / 2.0)


def _glicko2_step(mu: float, phi2: float, sigma: float, info: float, gain: float,
                  tau: float, eps: float, cap2: float = math.inf) -> tuple[float, float, float]:
    """Steps 5-7 from the sums of Steps 3-4; phi2 is the pre-period phi^2, cap2
    the largest phi*^2 (see _phi_star2)."""
    if info < MIN_INFO:  # no games: Glickman's "did not compete", phi' = phi*
        return mu, math.sqrt(_phi_star2(phi2, sigma, cap2)), sigma
    v = 1.0 / info
    sigma_new = _volatility(phi2, sigma, v, v * gain, tau, eps)
    phi_new2 = 1.0 / (1.0 / _phi_star2(phi2, sigma_new, cap2) + info)
    return mu + phi_new2 * gain, math.sqrt(phi_new2), sigma_new


def _phi_star2(phi2: float, sigma: float, cap2: float) -> float:
    """Step 6, phi*^2 = phi^2 + sigma'^2, at most cap2 (but never below phi^2).
    The paper has no cap; rate() caps at the initial deviation, as Glicko-1's
    Step 1 does, because after an extreme result sigma' can reach 1 and more
    (Delta^2 >> v), and an uncapped phi* then lets the next game move the
    rating by any amount (a test history reached a rating of 10^12)."""
    star2 = phi2 + sigma * sigma
    return star2 if star2 <= cap2 else max(cap2, phi2)


def _glicko1_step(mu: float, phi2: float, info: float, gain: float) -> tuple[float, float]:
    """Glicko-1 Step 2 from the sums; phi2 is the RD^2 after Step 1."""
    if info < MIN_INFO:
        return mu, math.sqrt(phi2)
    phi_new2 = 1.0 / (1.0 / phi2 + info)
    return mu + phi_new2 * gain, math.sqrt(phi_new2)


def latest(last_time: float | None, now: float | None) -> float | None:
    """The player's last match time after this one: a late result (older than
    the last match) leaves it, so the idle time is not counted twice."""
    if now is None or (last_time is not None and last_time > now):
        return last_time
    return now


def idle_periods(last_time: float | None, now: float | None, period_days: float) -> float:
    """Whole and fractional rating periods between two matches, less the
    match's own period; 0 without both times or when time goes backwards."""
    if last_time is None or now is None:
        return 0.0
    return max((now - last_time) / (period_days * SECS_PER_DAY) - 1.0, 0.0)


def _alone(side: Sequence[Any], system: str) -> Any:
    """The one player of a side: these systems rate individuals."""
    if len(side) != 1:
        raise ValueError(f"the {system!r} system rates individuals: a side is one player (got {len(side)})")
    return side[0]


@dataclass(frozen=True)
class Glicko2Params(Params):
    initial: float = 1500.0  # rating of a newcomer
    deviation: float = 350.0  # RD of a newcomer, and the cap of the RD's growth
    volatility: float = 0.06  # sigma of a newcomer
    tau: float = 0.5  # constrains the change of the volatility
    period_days: float = 1.0  # length of one rating period, for inactivity
    epsilon: float = 1e-6  # convergence tolerance of the volatility iteration

    def check(self) -> None:
        for key in ("deviation", "volatility", "tau", "period_days", "epsilon"):
            value = getattr(self, key)
            require(value > 0, key, f"must be > 0 (got {value})")
        require(self.epsilon < 1, "epsilon", f"must be < 1 (got {self.epsilon})")


@dataclass(frozen=True)
class GlickoParams(Params):
    initial: float = 1500.0
    deviation: float = 350.0
    # RD growth per period. Glickman's example: a typical RD of 50 back to 350
    # after 30 idle periods, c = sqrt((350^2 - 50^2) / 30) = 63.2.
    c: float = 63.2
    period_days: float = 1.0
    # Floor of the RD after a match (Glickman suggests about 30 in practice); 0: none.
    min_deviation: float = 0.0

    def check(self) -> None:
        require(self.deviation > 0, "deviation", f"must be > 0 (got {self.deviation})")
        require(self.c >= 0, "c", f"must be >= 0 (got {self.c})")
        require(self.period_days > 0, "period_days", f"must be > 0 (got {self.period_days})")
        require(0 <= self.min_deviation <= self.deviation, "min_deviation",
                f"must be >= 0 and <= deviation ({self.deviation}) (got {self.min_deviation})")


# Not frozen, as MmrState: a round builds one state per participant; never
# changed once built.
@dataclass(slots=True)
class Glicko2State(PlayerState):
    rating: float
    deviation: float
    volatility: float
    matches: int = 0
    last_time: float | None = None  # time of the last rated match, if known

    @property
    def uncertainty(self) -> float:
        return self.deviation

    def public(self) -> dict[str, Any]:
        return {"rating": self.rating, "uncertainty": self.deviation, "volatility": self.volatility,
                "matches": self.matches}


@dataclass(slots=True)
class GlickoState(PlayerState):
    rating: float
    deviation: float
    matches: int = 0
    last_time: float | None = None

    @property
    def uncertainty(self) -> float:
        return self.deviation

    def public(self) -> dict[str, Any]:
        return {"rating": self.rating, "uncertainty": self.deviation, "matches": self.matches}


class _GlickoFamily(RatingSystem):
    """The shared round: pre-period deviations, the opponent sums, then one
    update per participant (`_after`)."""

    has_uncertainty = True
    SCALE: ClassVar[float]
    params: Glicko2Params | GlickoParams

    # The state's fields a newcomer takes from the parameters of the same name, beside `initial`.
    NEWCOMER: ClassVar[tuple[str, ...]]

    def initial_state(self) -> Any:
        p = self.params
        return self.State(rating=p.initial, **{name: getattr(p, name) for name in self.NEWCOMER})  # type: ignore[call-arg]

    def _pre_phi2(self, state: Any, now: float | None) -> float:
        """phi^2 as the match's period starts: the deviation's phi^2 plus `_growth2` over
        the idle periods, at most the initial deviation's (_capped)."""
        phi = state.deviation / self.SCALE
        growth2 = self._growth2(state, idle_periods(state.last_time, now, self.params.period_days))
        if growth2 == 0.0:
            return phi * phi
        return self._capped(phi * phi, phi * phi + growth2)

    def _growth2(self, state: Any, idle: float) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def _after(self, state: Any, mu: float, phi2: float, info: float, gain: float, now: float | None) -> Any:
        raise NotImplementedError  # pragma: no cover - overridden

    def rate(self, match: Match, before: Sequence[Any]) -> list[RatingChange]:
        now = match.time
        scale = self.SCALE
        n = len(before)
        mus = [(s.rating - CENTRE) / scale for s in before]
        phi2s = [self._pre_phi2(s, now) for s in before]
        ranks = [x.rank for x in match.participants]
        if n == 2:  # the common case, without lists of games
            g0, g1 = _g(math.sqrt(phi2s[0])), _g(math.sqrt(phi2s[1]))
            s0 = 1.0 if ranks[0] < ranks[1] else 0.0 if ranks[0] > ranks[1] else 0.5
            sums = [_sums(mus[0], ((mus[1], g1, s0),)), _sums(mus[1], ((mus[0], g0, 1.0 - s0),))]
        elif n < NUMPY_FROM:
            gs = [_g(math.sqrt(x)) for x in phi2s]
            sums = [
                _sums(mus[i], ((mus[j], gs[j], 1.0 if ranks[i] < ranks[j] else 0.0 if ranks[i] > ranks[j] else 0.5)
                               for j in range(n) if j != i))
                for i in range(n)
            ]
        else:
            mu_arr = np.array(mus)
            g_arr = 1.0 / np.sqrt(1.0 + 3.0 * np.array(phi2s) / PI2)
            info, gain, esum = _sums_numpy(mu_arr, g_arr, np.array(ranks, dtype=np.float64))
            sums = list(zip(info.tolist(), gain.tolist(), esum.tolist()))
        changes = []
        opponents = max(n - 1, 1)
        for x, state, mu, phi2, (info, gain, esum) in zip(match.participants, before, mus, phi2s, sums):
            after = self._after(state, mu, phi2, info, gain, now)
            extras = {"uncertainty": after.deviation, "uncertainty_before": state.deviation,
                      "expected_score": esum / opponents if n > 1 else 0.5}
            changes.append(RatingChange(x.player, state, after, extras))
        return changes

    def period_deviation(self, state: Any, time: float | None) -> float:
        """The deviation `state` enters a match at `time` with: the idle growth
        (and, for Glicko-1, the match's own Step 1)."""
        return self.SCALE * math.sqrt(self._pre_phi2(state, time))

    def _capped(self, phi2: float, grown2: float) -> float:
        cap = self.params.deviation / self.SCALE
        return grown2 if grown2 <= cap * cap else max(cap * cap, phi2)

    # ---- a match to come ----

    def win_probability(self, side: Sequence[Any], other: Sequence[Any]) -> float:
        """Glickman's expected score of one game between the two, with g of their
        combined deviation: E = 1 / (1 + exp(-g(sqrt(phi_a^2 + phi_b^2)) (mu_a - mu_b)))
        on the internal scale, i.e. 1 / (1 + 10^(-g(sqrt(RD_a^2 + RD_b^2)) (r_a - r_b) / 400))
        for Glicko-1: his formula for the chance that a is the stronger when both
        ratings are uncertain. From the states as they stand: the growth rate()
        applies first (idle periods, Glicko-1's Step 1, Glicko-2's phi*) models
        the time a rating period takes, not what is known of the players now, so
        it is left out. E counts a draw as half a win, as the update does."""
        a, b = _alone(side, self.name), _alone(other, self.name)
        phi = math.hypot(a.deviation, b.deviation) / self.SCALE
        # _sums' E of the one game. Only the rating difference matters: it is taken
        # as mu against an opponent at 0 (a difference negates exactly when swapped).
        _, _, e = _sums((a.rating - b.rating) / self.SCALE, ((0.0, _g(phi), 0.0),))
        return e

    def match_quality(self, sides: Sequence[Sequence[Any]]) -> float:
        """TrueSkill's quality (base.gaussian_quality) with each player's (rating, RD)
        and the performance spread `performance_beta`."""
        players = [_alone(side, self.name) for side in sides]
        return gaussian_quality([[(x.rating, x.deviation)] for x in players], self.performance_beta)

    @property
    def performance_beta(self) -> float:
        """beta = 2 s / sqrt(pi) (about 196; s the scale constant): Glicko's model is
        logistic, gaussian_quality's normal, and this normal spread gives two
        certain players Phi(d / (sqrt 2 beta)), with the logistic E's slope 1 / (4 s)
        at an even match (d = 0), where the quality matters most."""
        return 2.0 * self.SCALE / math.sqrt(math.pi)

    def reset(self, state: Any, rating: float, min_uncertainty: float | None) -> Any:
        deviation = state.deviation if min_uncertainty is None else max(state.deviation, min_uncertainty)
        return dataclasses.replace(state, rating=rating, deviation=deviation)


class Glicko2(_GlickoFamily):
    name = "glicko2"
    Params = Glicko2Params
    State = Glicko2State
    SCALE = G2_SCALE
    NEWCOMER = ("deviation", "volatility")
    params: Glicko2Params

    def _after(self, state: Glicko2State, mu: float, phi2: float, info: float, gain: float,
               now: float | None) -> Glicko2State:
        """Steps 5-8: the new volatility, phi* (capped), the new deviation and rating."""
        p = self.params
        cap = p.deviation / G2_SCALE
        mu1, phi1, sigma1 = _glicko2_step(mu, phi2, state.volatility, info, gain, p.tau, p.epsilon, cap * cap)
        return Glicko2State(CENTRE + G2_SCALE * mu1, G2_SCALE * phi1, sigma1, state.matches + 1,
                            latest(state.last_time, now))

    def _growth2(self, state: Glicko2State, idle: float) -> float:
        """Step 6's phi* for each idle period: sigma^2 a period."""
        return idle * state.volatility * state.volatility


class Glicko(_GlickoFamily):
    name = "glicko"
    Params = GlickoParams
    State = GlickoState
    SCALE = G1_SCALE
    NEWCOMER = ("deviation",)
    params: GlickoParams

    def _growth2(self, state: GlickoState, idle: float) -> float:
        """Step 1, c^2 t, with t = 1 + the idle periods (the match's own period and the idle ones)."""
        c = self.params.c / G1_SCALE
        return c * c * (1.0 + idle)

    def _after(self, state: GlickoState, mu: float, phi2: float, info: float, gain: float,
               now: float | None) -> GlickoState:
        """Step 2, and the floor `min_deviation` of the new RD."""
        mu1, phi1 = _glicko1_step(mu, phi2, info, gain)
        rd = max(G1_SCALE * phi1, self.params.min_deviation)
        return GlickoState(CENTRE + G1_SCALE * mu1, rd, state.matches + 1, latest(state.last_time, now))
