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
    season = "monthly"        # seasons (stream_app/seasons.py)
    season_reset = {shrink = 0.5, toward = "initial", min_uncertainty = 200}
    tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1600}, {name = "Top 1%", top_percent = 1}]
    floor = 400

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
from .seasons import KINDS, TOWARD_INITIAL, TOWARD_MEAN, SeasonReset, Tier


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
    starts from the last one before the first result it changes.

    Seasons (stream_app/seasons.py): `season` is a schedule or "manual" (None:
    one endless season), `season_reset` the soft reset at each season's start,
    `tiers` the tiers shown, and every update and reset keeps a rating at or
    above `floor`."""

    history_max: int | None = None
    min_matches: int = 0
    max_uncertainty: float | None = None
    inactive_days: float | None = None
    late_results: str = APPEND
    snapshot_every: int = 10_000
    season: str | None = None
    season_reset: SeasonReset | None = None
    tiers: tuple[Tier, ...] = ()
    floor: float | None = None

    @property
    def inactive_seconds(self) -> float | None:
        return None if self.inactive_days is None else self.inactive_days * 86400.0


OPTION_KEYS = ("history_max", "min_matches", "max_uncertainty", "inactive_days", "late_results", "snapshot_every",
               "season", "season_reset", "tiers", "floor")


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
        cache = self._cache
        if league in cache:  # (`in`, not a call: the calls a match makes are counted)
            return cache[league]
        rule = next((r for r in self.rules if fnmatch.fnmatchcase(league, r.pattern)), self.default)
        if len(cache) < 100_000:
            cache[league] = rule
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
    season = values.get("season")
    if season is not None and season not in KINDS:
        raise ParamError("season", f"must be one of {', '.join(map(repr, KINDS))} (got {season!r})")
    reset = _season_reset(values.get("season_reset"), system)
    if reset is not None and season is None:
        raise ParamError("season_reset", "needs `season` (a league without seasons never resets)")
    floor = values.get("floor")
    if floor is not None:
        floor = _number("floor", floor)
    return LeagueOptions(history_max=integer("history_max"), min_matches=integer("min_matches") or 0,
                         max_uncertainty=positive("max_uncertainty"), inactive_days=positive("inactive_days"),
                         late_results=late, snapshot_every=10_000 if every is None else every,
                         season=season, season_reset=reset, tiers=_tiers(values.get("tiers")), floor=floor)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ParamError(key, f"must be a number (got {value!r})")
    return float(value)


def _season_reset(table: Any, system: RatingSystem) -> SeasonReset | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ParamError("season_reset", f"must be a table {{shrink, toward, min_uncertainty}} (got {table!r})")
    for key in table:
        if key not in ("shrink", "toward", "min_uncertainty"):
            raise ParamError(f"season_reset.{key}", "unknown key (known: min_uncertainty, shrink, toward)")
    shrink = _number("season_reset.shrink", table.get("shrink", 0.5))
    if not 0.0 <= shrink <= 1.0:
        raise ParamError("season_reset.shrink", f"must be between 0 and 1 (got {shrink!r})")
    toward = table.get("toward", TOWARD_INITIAL)
    if toward not in (TOWARD_INITIAL, TOWARD_MEAN):
        raise ParamError("season_reset.toward", f"must be {TOWARD_INITIAL!r} or {TOWARD_MEAN!r} (got {toward!r})")
    least = table.get("min_uncertainty")
    if least is not None:
        if not system.has_uncertainty:
            raise ParamError("season_reset.min_uncertainty", f"{system.name!r} ratings have no uncertainty")
        least = _number("season_reset.min_uncertainty", least)
        if least <= 0:
            raise ParamError("season_reset.min_uncertainty", f"must be a number > 0 (got {least!r})")
    return SeasonReset(shrink, toward, least)


def _tiers(items: Any) -> tuple[Tier, ...]:
    if items is None:
        return ()
    if not isinstance(items, list) or not items:
        raise ParamError("tiers", f"must be a non-empty array of tables {{name, min_rating?, top_percent?}} (got {items!r})")
    tiers = []
    names: set[str] = set()
    for i, item in enumerate(items):
        where = f"tiers[{i}]"
        if not isinstance(item, dict):
            raise ParamError(where, f"must be a table {{name, min_rating?, top_percent?}} (got {item!r})")
        for key in item:
            if key not in ("name", "min_rating", "top_percent"):
                raise ParamError(f"{where}.{key}", "unknown key (known: min_rating, name, top_percent)")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ParamError(f"{where}.name", f"required: a non-empty string (got {name!r})")
        if name in names:
            raise ParamError(f"{where}.name", f"{name!r} names two tiers")
        names.add(name)
        least = item.get("min_rating")
        top = item.get("top_percent")
        if top is not None:
            top = _number(f"{where}.top_percent", top)
            if not 0.0 < top <= 100.0:
                raise ParamError(f"{where}.top_percent", f"must be in (0, 100] (got {top!r})")
        tiers.append(Tier(name, None if least is None else _number(f"{where}.min_rating", least), top))
    return tuple(tiers)
