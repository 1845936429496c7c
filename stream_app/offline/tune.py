"""`ratings tune`: choose a league's parameters from its own history without
fooling itself.

The league's results are split in time: a search (random or grid, seeded)
scores each candidate by pair inversion on the earlier part only (the first
`train_share` of the results, after the usual first tenth of rounds), and
the best candidate and the configured parameters are then both replayed over
the whole file and reported on the later part, which the search never saw.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..engine import Match, ParamError
from ..engine.base import coerce_param
from ..inputs import BadEvent, Correction, Void, parse_input
from ..leagues import LeagueConfig, LeagueRule
from .accuracy import Accuracy
from .ledger import Ledger
from .replay import open_lines

Item = Match | Void | Correction


@dataclass(frozen=True)
class Range:
    """--param NAME=LO:HI (a number drawn between), or NAME=A,B,C (one of these)."""

    name: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Range":
        name, sep, spec = text.partition("=")
        if not sep or not name or not spec:
            raise ValueError(f"--param {text!r}: expected NAME=LO:HI or NAME=A,B,C")
        if ":" in spec:
            low, _, high = spec.partition(":")
            try:
                lo, hi = float(low), float(high)
            except ValueError:
                raise ValueError(f"--param {text!r}: LO and HI must be numbers") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"--param {text!r}: needs finite LO < HI")
            return cls(name, lo, hi)
        return cls(name, choices=tuple(_value(part) for part in spec.split(",")))

    def grid(self, points: int) -> list[Any]:
        if self.choices:
            return list(self.choices)
        return [float(x) for x in np.linspace(self.low, self.high, points)]

    def draw(self, rng: np.random.Generator) -> Any:
        if self.choices:
            return self.choices[int(rng.integers(len(self.choices)))]
        return float(rng.uniform(self.low, self.high))


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def with_params(rule: LeagueRule, values: dict[str, Any]) -> LeagueConfig:
    """A configuration rating every league as `rule` does, with these parameters changed."""
    params = rule.system.params
    known = {f.name: f for f in dataclasses.fields(params)}
    coerced = {}
    for key, value in values.items():
        if key not in known:
            raise ParamError(key, f"not a parameter of {rule.algorithm!r} (known: {', '.join(sorted(known))})")
        if known[key].type.startswith("int") and isinstance(value, float) and value.is_integer():
            value = int(value)
        coerced[key] = coerce_param(key, value, known[key].type)
    changed = dataclasses.replace(params, **coerced)
    changed.check()
    system = type(rule.system)(changed)
    return LeagueConfig([], LeagueRule("*", rule.algorithm, system, rule.options), f"<tune {values}>")


def load_league(path: str | Path, league: str | None) -> tuple[str, list[Item], int]:
    """The league's results and commands in file order, and how many lines were invalid.
    Without a league, the file must hold one."""
    items: dict[str, list[Item]] = {}
    invalid = 0
    lines, raw, _ = open_lines(path)
    try:
        for line in lines:
            if not line.strip():
                continue
            try:
                item = parse_input(line.rstrip(b"\r\n"))
            except BadEvent:
                invalid += 1
                continue
            items.setdefault(item.league, []).append(item)
    finally:
        if raw is not None:
            raw.close()
    if league is None:
        if len(items) != 1:
            raise ValueError(f"the file holds {len(items)} leagues: choose one with --league "
                             f"({', '.join(sorted(items)[:10])}{', ...' if len(items) > 10 else ''})")
        league = next(iter(items))
    if league not in items:
        raise ValueError(f"league {league!r} has no results in the file")
    return league, items[league], invalid


@dataclass
class Trial:
    params: dict[str, Any]
    train: dict[str, Any]
    test: dict[str, Any] | None = None
    whole: dict[str, Any] | None = None


class Tuner:
    def __init__(self, rule: LeagueRule, items: Sequence[Item], train_share: float, skip_fraction: float = 0.1):
        if not 0 < train_share < 1:
            raise ValueError(f"--train-share: must be between 0 and 1 (got {train_share})")
        self.rule = rule
        self.items = items
        self.split = max(1, int(len(items) * train_share))
        self.skip_fraction = skip_fraction
        self.rounds: int | None = None  # rounds scored by the whole file
        self.train_rounds: int | None = None  # of which in the earlier part

    def _accuracy(self, values: dict[str, Any], items: Iterable[Item]) -> Accuracy:
        ledger = Ledger(with_params(self.rule, values))
        accuracy = Accuracy()
        ledger.observer = accuracy.observe
        for item in items:
            try:
                ledger.apply(item)
            except BadEvent:
                pass  # counted by load_league's caller as a rule of the system; the replay skips it too
        return accuracy

    def train(self, values: dict[str, Any]) -> Trial:
        accuracy = self._accuracy(values, self.items[: self.split])
        self.train_rounds = accuracy.rounds
        skip = self._skip()
        return Trial(values, accuracy.report_rounds(min(skip, accuracy.rounds), accuracy.rounds))

    def evaluate(self, trial: Trial) -> Trial:
        """The whole file: the later part (never trained on) and everything after
        the first tenth. Call after a train(), which counts the earlier part's rounds."""
        accuracy = self._accuracy(trial.params, self.items)
        self.rounds = accuracy.rounds
        assert self.train_rounds is not None
        trial.test = accuracy.report_rounds(self.train_rounds, accuracy.rounds)
        trial.whole = accuracy.report(self.skip_fraction)
        return trial

    def _skip(self) -> int:
        # The first tenth of the whole file's rounds, as `ratings replay` skips.
        total = sum(1 for item in self.items if isinstance(item, Match))
        return int(total * self.skip_fraction)


def candidates(ranges: Sequence[Range], trials: int | None, grid: int | None, seed: int) -> list[dict[str, Any]]:
    if grid is not None:
        axes = [r.grid(grid) for r in ranges]
        return [dict(zip((r.name for r in ranges), values)) for values in itertools.product(*axes)]
    rng = np.random.default_rng(seed)
    return [{r.name: r.draw(rng) for r in ranges} for _ in range(trials or 20)]


def score(trial: Trial) -> tuple[float, float]:
    """Higher pair inversion first, then lower rank deviation (experienced players)."""
    report = trial.train
    return (report["pair_inversion"] or 0.0, -(report["rank_deviation"] or 100.0))


def search(tuner: Tuner, options: list[dict[str, Any]], on_trial: Callable[[Trial], None] | None = None
           ) -> tuple[Trial, Trial, list[Trial]]:
    """(the configured parameters, the best candidate, every trial), the two
    named ones evaluated on the whole file."""
    configured = tuner.train({})
    done = []
    for values in options:
        trial = tuner.train(values)
        done.append(trial)
        if on_trial is not None:
            on_trial(trial)
    best = max(done, key=score)
    return tuner.evaluate(configured), tuner.evaluate(Trial(best.params, best.train)), done
