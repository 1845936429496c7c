"""Seasons: a league's results in named periods, its ratings softened at each
season's start, its final standings kept, and tiers. The rules only; pure.

A league with `season` configured is in one season at a time (none before its
first). A scheduled season ("weekly", "monthly", "quarterly", "yearly") starts
with the first result whose occurred_at falls in a later UTC period than the
season in progress, before that result is rated. A "manual" one starts with a
season-started command. Either way the start is a place in the league's log:
a re-rate goes through it exactly as the first time (rating/season_step.py, rerate.py).

At a season's start (the first included) the season that ends, if any, is kept
as its final standings, and the league's `season_reset` (if any) moves every
player's rating toward a centre (`reset_rating`). Tiers name rating bands or
top shares of a leaderboard (`tier_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

WEEKLY, MONTHLY, QUARTERLY, YEARLY, MANUAL = "weekly", "monthly", "quarterly", "yearly", "manual"
SCHEDULES = (WEEKLY, MONTHLY, QUARTERLY, YEARLY)
KINDS = (*SCHEDULES, MANUAL)
TOWARD_INITIAL, TOWARD_MEAN = "initial", "mean"


def period(schedule: str, time: float) -> tuple[str, float]:
    """The UTC period of a scheduled season that `time` (seconds) falls in: its name
    (2026-W05, 2026-01, 2026-Q1, 2026) and the second it starts. Weeks are ISO weeks
    (Monday to Sunday, named by their ISO year)."""
    moment = datetime.fromtimestamp(time, timezone.utc)
    if schedule == WEEKLY:
        year, week, weekday = moment.isocalendar()
        start = datetime(moment.year, moment.month, moment.day, tzinfo=timezone.utc) - timedelta(days=weekday - 1)
        return f"{year}-W{week:02d}", start.timestamp()
    if schedule == MONTHLY:
        return f"{moment.year}-{moment.month:02d}", datetime(moment.year, moment.month, 1, tzinfo=timezone.utc).timestamp()
    if schedule == QUARTERLY:
        quarter = (moment.month - 1) // 3 + 1
        first = datetime(moment.year, 3 * quarter - 2, 1, tzinfo=timezone.utc)
        return f"{moment.year}-Q{quarter}", first.timestamp()
    if schedule == YEARLY:
        return f"{moment.year}", datetime(moment.year, 1, 1, tzinfo=timezone.utc).timestamp()
    raise ValueError(f"not a season schedule: {schedule!r}")


@dataclass(frozen=True)
class SeasonReset:
    """At a season's start each rating becomes toward + shrink * (rating - toward),
    `toward` being the system's initial rating or the mean rating of the league's
    players; an uncertainty is raised to at least `min_uncertainty`."""

    shrink: float = 0.5
    toward: str = TOWARD_INITIAL
    min_uncertainty: float | None = None


def reset_rating(reset: SeasonReset, rating: float, centre: float) -> float:
    return centre + reset.shrink * (rating - centre)


def mean_rating(ratings: Iterable[float]) -> float | None:
    """The centre of `toward = "mean"` (None: no players). fsum: exact whatever the order."""
    values = list(ratings)
    return math.fsum(values) / len(values) if values else None


@dataclass(frozen=True)
class Tier:
    """A tier's conditions; a player is in the last tier of the list whose conditions
    all hold (a tier with none holds for everyone)."""

    name: str
    min_rating: float | None = None
    top_percent: float | None = None  # among the ranked players


def tier_of(tiers: Sequence[Tier], rating: float, rank: int | None, ranked: int) -> str | None:
    """The tier of a player with this rating and leaderboard rank (None: not ranked)
    among `ranked` players. In the top p percent: fewer than p% of the ranked
    players are ahead (rank 1 always is, when p > 0)."""
    found = None
    for tier in tiers:
        if tier.min_rating is not None and rating < tier.min_rating:
            continue
        if tier.top_percent is not None and (rank is None or (rank - 1) * 100.0 >= tier.top_percent * ranked):
            continue
        found = tier.name
    return found


ARCHIVE_FIELDS = ("player", "rating", "uncertainty", "rank", "percentile", "tier", "matches")


def archive_row(player: str, rating: float, uncertainty: float | None, rank: int | None, percentile: float | None,
                tier: str | None, matches: int) -> list[Any]:
    """A player's final standing in a season, as kept (a list: ARCHIVE_FIELDS)."""
    return [player, rating, uncertainty, rank, percentile, tier, matches]


def sorted_final(rows: Iterable[list[Any]]) -> list[list[Any]]:
    """Final standings in leaderboard order: the ranked by rank, then the others by
    rating (highest first), ties by name."""
    return sorted(rows, key=lambda row: (row[3] is None, row[3] or 0, -row[1], row[0]))


def archive_entry(row: list[Any]) -> dict[str, Any]:
    """A kept final standing as the API and `ratings replay --seasons` give it: no
    uncertainty for a system without one, no tier without tiers."""
    entry = dict(zip(ARCHIVE_FIELDS, row))
    if entry["uncertainty"] is None:
        del entry["uncertainty"]
    if entry["tier"] is None:
        del entry["tier"]
    return entry
