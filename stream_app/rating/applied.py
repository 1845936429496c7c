"""What a step decided: a match applied (`Applied`) or a season started
(`SeasonStarted`), with where its entry is in the log (`Place`); the stores save
it (ports.py) and stream_app/published.py makes its events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine import Match, PlayerState, RatingChange
from ..inputs import SeasonStart
from .records import PlayerRecord, Tiers


@dataclass(slots=True)
class Place:
    key: bytes  # the order key of the match's entry in the log
    boundary: int  # the interval the entry is in
    opened: dict[str, Any] | None  # the league's record before the entry, if it opens that boundary
    new: bool  # a new entry of the log (False: re-applied by a re-rate)


@dataclass(slots=True)
class Applied:
    algorithm: str
    match: Match
    prior: list[PlayerState | None]  # each participant's state before the match (None: a newcomer)
    changes: list[RatingChange]  # in participant order
    records: list[PlayerRecord]  # each participant's record after the match, in participant order
    snapshots: list[tuple[str, PlayerRecord]]  # the snapshot rows the match takes: (player, record at the boundary)
    record: dict[str, Any]  # the league's record after the match
    history: list[list[Any]]  # each participant's history row (history_row), in participant order (or none)
    place: Place
    season: "SeasonStarted | None" = None  # the season the match started (a scheduled one), saved before it
    tiers: list[Tiers] | None = None  # each participant's, with the league's tiers (a new entry only)


@dataclass(slots=True)
class SeasonStarted:
    algorithm: str
    league: str
    number: int  # the new season's
    season: dict[str, Any]  # its row (season_row)
    ended: dict[str, Any] | None  # the row of the season that ended, closed (None: the league's first season)
    final: list[list[Any]]  # the ended season's final standings (seasons.archive_row), by player
    changes: list[RatingChange]  # every player's, by name (after == before: no reset)
    records: list[PlayerRecord]  # every player's record after the start, in the order of `changes`
    snapshots: list[tuple[str, PlayerRecord]]
    record: dict[str, Any]  # the league's record after the start
    place: Place  # the log entry that starts it: a season-started command, or the result a schedule starts it with
    entry: SeasonStart | None  # the command (None: a scheduled season)
    tiers: list[Tiers] | None = None  # each player's, in the order of `changes` (with the league's tiers)

    def reset(self) -> list[tuple[RatingChange, Tiers | None]]:
        """The players whose rating state the start changed, with their tiers."""
        tiers: list[Tiers | None] = list(self.tiers) if self.tiers is not None else [None] * len(self.changes)
        return [(change, tier) for change, tier in zip(self.changes, tiers) if change.after != change.before]
