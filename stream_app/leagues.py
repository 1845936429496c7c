"""League configuration: which rating system (and parameters) each league uses.

A TOML file:

    [default]                 # leagues that no pattern below matches
    algorithm = "elo"
    k = 24

    [leagues."chess-*"]       # glob on the league name; first match in file order wins
    algorithm = "elo"
    points_method = 2

    [leagues."codeforces"]
    algorithm = "elo-mmr"
    min_matches = 5           # what the service does with the ratings (LeagueOptions);
    max_uncertainty = 150     # every other key is a parameter of the rating system
    inactive_days = 180
    history_max = 1000
    late_results = "in_order"
    snapshot_every = 50

Without a file every league uses `elo` with its defaults. Every mistake
(unknown algorithm, unknown key, wrong type, value out of range) is an error
at start-up naming the file, the table and the key.
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engine import SYSTEMS, ParamError, RatingSystem, make_system


class ConfigError(ValueError):
    pass


APPEND = "append"
IN_ORDER = "in_order"
LATE_RESULTS = (APPEND, IN_ORDER)


@dataclass(frozen=True)
class LeagueOptions:
    """What the service does with a league's ratings, apart from the rating system.

    A player is provisional with fewer than `min_matches` matches or an
    uncertainty above `max_uncertainty`; inactive when their last match is more
    than `inactive_days` older than the league's latest match. Provisional and
    inactive players are not ranked. `history_max` bounds the rating changes
    kept per player (None: all; 0: none). A result that happened before the
    league's latest is applied when it arrives with `late_results = "append"`,
    at its place in time with "in_order" (the league is re-rated from there).
    The league's log opens a boundary every `snapshot_every` results: a re-rate
    starts from the last one before the first result it changes."""

    history_max: int | None = None
    min_matches: int = 0
    max_uncertainty: float | None = None
    inactive_days: float | None = None
    late_results: str = APPEND
    snapshot_every: int = 10_000

    @property
    def inactive_seconds(self) -> float | None:
        return None if self.inactive_days is None else self.inactive_days * 86400.0


OPTION_KEYS = ("history_max", "min_matches", "max_uncertainty", "inactive_days", "late_results", "snapshot_every")


@dataclass(frozen=True)
class LeagueRule:
    pattern: str  # "*" for [default]
    algorithm: str
    system: RatingSystem
    options: LeagueOptions = LeagueOptions()


class LeagueConfig:
    def __init__(self, rules: list[LeagueRule], default: LeagueRule, source: str = "<defaults>"):
        self.rules = rules
        self.default = default
        self.source = source
        self._cache: dict[str, LeagueRule] = {}

    @classmethod
    def defaults(cls) -> "LeagueConfig":
        return cls([], _rule("*", "[default]", {"algorithm": "elo"}, "<defaults>"))

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> "LeagueConfig":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        for key in doc:
            if key not in ("default", "leagues"):
                raise ConfigError(f"{source}: unknown table or key {key!r} (expected [default] and [leagues.\"<glob>\"])")
        default_table = doc.get("default", {"algorithm": "elo"})
        if not isinstance(default_table, dict):
            raise ConfigError(f"{source}: 'default' must be a table")
        default = _rule("*", "[default]", default_table, source)
        leagues = doc.get("leagues", {})
        if not isinstance(leagues, dict):
            raise ConfigError(f"{source}: 'leagues' must be a table of [leagues.\"<glob>\"] tables")
        rules = []
        for pattern, table in leagues.items():  # tomllib keeps file order
            name = f'[leagues."{pattern}"]'
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: {name} must be a table")
            rules.append(_rule(pattern, name, table, source))
        return cls(rules, default, source)

    @classmethod
    def load(cls, path: str | Path | None) -> "LeagueConfig":
        if path is None:
            return cls.defaults()
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read league configuration: {exc.strerror}") from None
        return cls.from_toml(text, str(path))

    def rule_for(self, league: str) -> LeagueRule:
        rule = self._cache.get(league)
        if rule is None:
            rule = next((r for r in self.rules if fnmatch.fnmatchcase(league, r.pattern)), self.default)
            if len(self._cache) < 100_000:
                self._cache[league] = rule
        return rule

    def system_for(self, league: str) -> RatingSystem:
        return self.rule_for(league).system

    def options_for(self, league: str) -> LeagueOptions:
        return self.rule_for(league).options


def _rule(pattern: str, table: str, values: dict[str, Any], source: str) -> LeagueRule:
    values = dict(values)
    algorithm = values.pop("algorithm", None)
    if algorithm is None:
        raise ConfigError(f"{source}: {table} key 'algorithm': required (one of {', '.join(sorted(SYSTEMS))})")
    if not isinstance(algorithm, str) or algorithm not in SYSTEMS:
        raise ConfigError(
            f"{source}: {table} key 'algorithm': unknown algorithm {algorithm!r} (known: {', '.join(sorted(SYSTEMS))})"
        )
    options = {key: values.pop(key) for key in OPTION_KEYS if key in values}
    try:
        system = make_system(algorithm, values)
        league_options = _options(options, algorithm, system)
    except ParamError as exc:
        raise ConfigError(f"{source}: {table} key {exc.key!r}: {exc.rule}") from None
    return LeagueRule(pattern, algorithm, system, league_options)


def _options(values: dict[str, Any], algorithm: str, system: RatingSystem) -> LeagueOptions:
    def integer(key: str) -> int | None:
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ParamError(key, f"must be an integer >= 0 (got {value!r})")
        return value

    def positive(key: str) -> float | None:
        value = values.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ParamError(key, f"must be a number > 0 (got {value!r})")
        return float(value)

    if "max_uncertainty" in values and not system.has_uncertainty:
        having = ", ".join(sorted(name for name, cls in SYSTEMS.items() if cls.has_uncertainty))
        raise ParamError("max_uncertainty", f"{algorithm!r} ratings have no uncertainty (systems with one: {having})")
    late = values.get("late_results", APPEND)
    if late not in LATE_RESULTS:
        raise ParamError("late_results", f"must be one of {', '.join(map(repr, LATE_RESULTS))} (got {late!r})")
    every = integer("snapshot_every")
    if every is not None and every < 1:
        raise ParamError("snapshot_every", f"must be an integer >= 1 (got {every!r})")
    return LeagueOptions(history_max=integer("history_max"), min_matches=integer("min_matches") or 0,
                         max_uncertainty=positive("max_uncertainty"), inactive_days=positive("inactive_days"),
                         late_results=late, snapshot_every=10_000 if every is None else every)
