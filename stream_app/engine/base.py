"""The one small interface every rating system implements.

A rating system is a pure function of (the match, each participant's state
before it) to (each participant's state after it). No I/O, no clocks, no
asyncio: the stream worker and `ratings replay` call exactly the same code,
which is why they agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, Generic, Sequence, TypeVar

import numpy as np


class InvalidMatch(ValueError):
    """A match that cannot be rated. `code` is the dead-letter reason code."""

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field  # the offending field as a path, e.g. "participants[1].score"


class ParamError(ValueError):
    """A league parameter that is unknown, of the wrong type or out of range."""

    def __init__(self, key: str, rule: str):
        super().__init__(f"{key!r}: {rule}")
        self.key = key
        self.rule = rule


# Participant and Match are not frozen: inputs.py builds millions of them (a large
# file), and a frozen dataclass stores each field through object.__setattr__, far
# slower than a plain store. Nothing changes them once built.
@dataclass(slots=True)
class Participant:
    player: str
    rank: int  # 1 is best; equal ranks tie (members of one team share their team's rank)
    score: float | None = None
    team: str | None = None  # the team's id within the match; None: the participant plays alone
    weight: float = 1.0  # partial play: the share of the match the participant played, in (0, 1]


@dataclass(slots=True)
class Match:
    league: str
    match_id: str
    participants: tuple[Participant, ...]
    time: float | None = None  # seconds since the epoch (occurred_at), if given


class PlayerState(ABC):
    """A participant's rating state in one league. Small and JSON-serialisable."""

    rating: float
    matches: int

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to restore the state (what the tables store)."""
        # dataclasses.asdict walks every value recursively, a large share of the
        # stream's time per match; a state of plain values gives the same dict read
        # field by field. Anything else (a list, say) still gets asdict's deep copy, so
        # no caller can alias the state.
        data = {name: getattr(self, name) for name in _field_names(type(self))}
        if not _PLAIN_TYPES.issuperset(map(type, data.values())):
            return dataclasses.asdict(self)  # type: ignore[call-overload]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PlayerState":
        return cls(**data)  # type: ignore[call-arg]

    def public(self) -> dict[str, Any]:
        """What users see: rating, matches and the system's extras."""
        return {"rating": self.rating, "matches": self.matches}

    @property
    def uncertainty(self) -> float | None:
        """How unsure the rating is, on the rating's scale (None: the system has no such figure)."""
        return None


# Values dataclasses.asdict returns as they are (it copies everything else).
_PLAIN_TYPES = frozenset({int, float, str, bool, type(None)})


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


S = TypeVar("S", bound=PlayerState)


@dataclass(slots=True)
class RatingChange(Generic[S]):
    player: str
    before: S
    after: S
    # Per-match figures that are not part of the state, e.g. expected_rank.
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def delta(self) -> float:
        return self.after.rating - self.before.rating


@dataclass(frozen=True)
class Params:
    """Base of each system's parameters; subclasses add fields and `check`."""

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> "Params":
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise ParamError(key, f"unknown parameter (known: {', '.join(sorted(known))})")
        coerced = {}
        for key, value in values.items():
            coerced[key] = coerce_param(key, value, known[key].type)
        params = cls(**coerced)
        params.check()
        return params

    def check(self) -> None:  # pragma: no cover - overridden
        pass

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def coerce_param(key: str, value: Any, annotation: Any) -> Any:
    """Type-check a TOML value against a dataclass field annotation (a string)."""
    # Annotations are strings under `from __future__ import annotations`.
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    if kind.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(key, f"must be a number (got {value!r})")
        value = float(value)
        if not math.isfinite(value):
            raise ParamError(key, f"must be finite (got {value!r})")
        return value
    if kind.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamError(key, f"must be an integer (got {value!r})")
        return value
    if kind.startswith("bool"):
        if not isinstance(value, bool):
            raise ParamError(key, f"must be true or false (got {value!r})")
        return value
    if kind.startswith("str"):
        if not isinstance(value, str):
            raise ParamError(key, f"must be a string (got {value!r})")
        return value
    return value


def require(condition: bool, key: str, rule: str) -> None:
    if not condition:
        raise ParamError(key, rule)


_DEFINED: list[type["RatingSystem"]] = []  # every system class, as its module defines it


class RatingSystem(ABC, Generic[S]):
    """One rating system with its league's parameters bound."""

    name: ClassVar[str]
    Params: ClassVar[type[Params]]
    State: ClassVar[type[PlayerState]]
    has_uncertainty: ClassVar[bool] = False  # its states' `uncertainty` is a number
    teams: ClassVar[bool] = False  # rates matches between teams
    partial_play: ClassVar[bool] = False  # uses the participants' weights

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _DEFINED.append(cls)

    def __init__(self, params: Params | None = None):
        self.params = params if params is not None else self.Params()

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> "RatingSystem":
        return cls(cls.Params.from_mapping(values))

    def initial_state(self) -> S:
        """The state of a player before their first match in the league: by default
        the parameters' `initial` rating and nothing else."""
        return self.State(rating=self.params.initial)  # type: ignore[attr-defined, call-arg, return-value]

    def check(self, match: Match) -> None:
        """Raise InvalidMatch if this system cannot rate the match. Systems that
        add rules call this first: it rejects teams and partial play where the
        system has none."""
        # Plain loops, not any() over a generator: this runs once per match applied.
        if not self.teams:
            for i, x in enumerate(match.participants):
                if x.team is not None:
                    raise InvalidMatch(
                        "system_rule",
                        f"participants[{i}].team: the {self.name!r} system rates individuals, not teams"
                        f" (systems with teams: {', '.join(team_systems())})",
                        f"participants[{i}].team",
                    )
        if not self.partial_play:
            for i, x in enumerate(match.participants):
                if x.weight != 1.0:
                    raise InvalidMatch(
                        "system_rule",
                        f"participants[{i}].weight: the {self.name!r} system has no partial play (weight must be 1)",
                        f"participants[{i}].weight",
                    )

    @abstractmethod
    def rate(self, match: Match, before: Sequence[S]) -> list[RatingChange[S]]:
        """Rate one match that `check` has accepted (apply.apply_match checks
        every match first). `before[i]` is the state of match.participants[i].

        Must not mutate `before`; returns one change per participant, in order.
        """

    def state_from_dict(self, data: dict[str, Any]) -> S:
        return self.State.from_dict(data)  # type: ignore[return-value]

    # -- seasons: what a league does to its ratings outside matches ------------------------
    def reset(self, state: S, rating: float, min_uncertainty: float | None) -> S:
        """A season's soft reset of `state`: this rating, and an uncertainty of at least
        `min_uncertainty` (None: as it is) for a system with one. The match count stays
        (a player's history goes on numbering their matches)."""
        return dataclasses.replace(state, rating=rating)  # type: ignore[type-var]

    def floored(self, state: S, floor: float) -> S:
        """The state with its rating raised to `floor` if below it (a league's rating
        floor; a departure from every system's formulas, docs/algorithms.md)."""
        if state.rating >= floor:
            return state
        return dataclasses.replace(state, rating=floor)  # type: ignore[type-var]

    # -- a match to come: the system's own model of its outcome -------------------------
    def win_probability(self, side: Sequence[S], other: Sequence[S]) -> float:
        """The probability that `side` finishes ahead of `other` (each: its members'
        states, one member unless the system rates teams), by the system's model."""
        raise NotImplementedError(f"the {self.name!r} system has no model of a match's outcome")

    def predict_win(self, sides: Sequence[Sequence[S]]) -> list[float]:
        """Each side's probability of finishing first, summing to 1. Two sides: the
        model's; more: each side's mean probability of beating each other side,
        normalised (openskill's generalisation of the two-side case)."""
        if len(sides) == 2:
            p = self.win_probability(sides[0], sides[1])
            return [p, 1.0 - p]
        n = len(sides)
        wins = [sum(self.win_probability(side, other) for j, other in enumerate(sides) if j != i) / (n - 1)
                for i, side in enumerate(sides)]
        total = sum(wins)
        return [win / total for win in wins]

    def predict_draw(self, sides: Sequence[Sequence[S]]) -> float | None:
        """The probability that the match is drawn (None: the system's model has no draws)."""
        return None

    def match_quality(self, sides: Sequence[Sequence[S]]) -> float:
        """How even the match is, in [0, 1], 1 when every side is as likely to win: for a
        system without an uncertainty, the least win probability against an even
        match's (n times it). Systems with one override it (gaussian_quality)."""
        p = self.predict_win(sides)
        return min(1.0, len(p) * min(p))


class RoundSystem(RatingSystem[S]):
    """A system that rates a match as one round, all at once, from two arrays: the
    participants' ratings before it and their ranks (pairwise Elo, Codeforces). Its
    model of a pair is the logistic of the params' `scale`:
    P(i beats j) = 1 / (1 + 10 ** ((r_j - r_i) / scale))."""

    @abstractmethod
    def rate_round(self, ratings: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The new ratings, and the extras of the changes (e.g. expected_rank) as
        one array each, in the participants' order."""

    def after(self, state: S, rating: float) -> S:
        """The state after the round at its new rating: by default a state of
        (rating, matches) with one more match."""
        return self.State(rating, state.matches + 1)  # type: ignore[call-arg, return-value]

    def rate(self, match: Match, before: Sequence[S]) -> list[RatingChange[S]]:
        n = len(before)
        ratings = np.fromiter((s.rating for s in before), float, n)
        ranks = np.fromiter((x.rank for x in match.participants), np.int64, n)
        new, extras = self.rate_round(ratings, ranks)
        rows: list[dict[str, Any]] = [{} for _ in range(n)]  # the extras, participant by participant
        for key, column in extras.items():
            for row, value in zip(rows, column.tolist()):
                row[key] = value
        after = self.after
        return [RatingChange(x.player, s, after(s, r), row)
                for x, s, r, row in zip(match.participants, before, new.tolist(), rows)]

    def win_probability(self, side: Sequence[S], other: Sequence[S]) -> float:
        """P(i beats j) of the round's model (above), from one player of each side."""
        scale: float = self.params.scale  # type: ignore[attr-defined]
        return 1.0 / (1.0 + 10.0 ** ((other[0].rating - side[0].rating) / scale))


def gaussian_quality(sides: Sequence[Sequence[tuple[float, float]]], beta: float) -> float:
    """TrueSkill's match quality (Herbrich, Minka and Graepel 2007, eq. 4.1, for any
    number of sides): the chance of a draw relative to the most even match
    possible, when each player's performance is normal around their skill `mu`
    with variance sigma**2 + beta**2 and a side's performance is its members' sum.
    `sides`: each side's members as (mu, sigma). In (0, 1]; 1 when the sides'
    skills are equal and nothing is uncertain beyond beta."""
    players = [player for side in sides for player in side]
    mu = np.array([m for m, _ in players])
    variance = np.diag([sigma * sigma for _, sigma in players])
    # A: one column per neighbouring pair of sides, +1 for the first's members, -1 for the second's.
    a = np.zeros((len(players), len(sides) - 1))
    first = 0
    for k, side in enumerate(sides):
        if k < len(sides) - 1:
            a[first:first + len(side), k] = 1.0
        if k > 0:
            a[first:first + len(side), k - 1] = -1.0
        first += len(side)
    spread = beta * beta * (a.T @ a)
    total = spread + a.T @ variance @ a
    difference = a.T @ mu
    exponent = -0.5 * float(difference @ np.linalg.solve(total, difference))
    return math.sqrt(np.linalg.det(spread) / np.linalg.det(total)) * math.exp(exponent)


def is_team_match(match: Match) -> bool:
    return any(x.team is not None for x in match.participants)


def team_members(match: Match) -> list[list[int]]:
    """The participants' indices grouped by team, teams in order of first
    appearance. A participant without a team is a team of one (inputs.py lets
    a match have teams for all its participants or for none)."""
    groups: dict[object, list[int]] = {}
    for i, x in enumerate(match.participants):
        groups.setdefault(i if x.team is None else x.team, []).append(i)
    return list(groups.values())


def team_systems() -> list[str]:
    """The systems that rate teams (every system module is imported by the time a match is checked)."""
    return sorted({cls.name for cls in _DEFINED if cls.teams and "name" in vars(cls)})
