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

The package, in the order of a round: params.py (the parameters), state.py
(a player's state), system.py (the round's skeleton, shared), terms.py (the
performance terms), kernels.py (the numeric kernels), elo_mmr.py and
elo_mmx.py (the two systems, each phase in turn).
"""

from __future__ import annotations

from .elo_mmr import EloMmr
from .elo_mmx import EloMmx
from .params import EloMmrParams, EloMmxParams
from .state import MmrState

__all__ = ["EloMmr", "EloMmrParams", "EloMmx", "EloMmxParams", "MmrState"]
