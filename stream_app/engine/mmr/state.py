"""A player's Elo-MMR state (MmrState): the rating and its uncertainty, the
Gaussian factor of the posterior and the logistic factors packed in one bytes
object, and the stored form (the factors as three lists)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..base import PlayerState


# One logistic factor in MmrState.history: (p_k, w_arg_k, w_out_k) as float64.
FACTOR_BYTES = 24


def _pack_factors(perfs: Sequence[float], w_arg: Sequence[float], w_out: Sequence[float]) -> bytes:
    if not len(perfs) == len(w_arg) == len(w_out):
        raise ValueError("perfs, perf_w_arg and perf_w_out must have the same length")
    if not len(perfs):
        return b""
    return np.column_stack((np.asarray(perfs, float), np.asarray(w_arg, float), np.asarray(w_out, float))).tobytes()


# Not frozen: a round builds one state per participant, and a frozen dataclass
# stores each field through object.__setattr__, which big rounds feel. States
# are never changed once built: RatingSystem.rate must not mutate its inputs.
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
