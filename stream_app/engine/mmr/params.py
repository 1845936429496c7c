"""The parameters of Elo-MMchi (EloMmxParams) and Elo-MMR (EloMmrParams, which
adds the pseudodiffusion's rho and the history bound), and what a round derives
from them: each player's update weight, performance deviation beta and drift."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..base import ParamError, Params, require


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
