"""A player's history: one row per rating change, as the stores keep it, and
as the API gives it."""

from __future__ import annotations

from typing import Any

from ..engine import Match, Participant, RatingChange
from ..inputs import format_time


CAUSE_MATCH = "match"  # a history entry written by a match applied


# A history entry's fields, in the order of its row: what the stores keep (a list,
# smaller than the object the API answers) and `history_entry` turns into that object.
HISTORY_FIELDS = ("seq", "match_id", "occurred_at", "rank", "rating_before", "rating_after", "uncertainty", "cause")


def history_row(match: Match, participant: Participant, change: RatingChange, cause: str = CAUSE_MATCH) -> list[Any]:
    """One rating change of a player's history, as kept. `seq` numbers a player's entries
    in the league from 1: a match's entry is the player's match count after it; the
    time is the match's seconds (None: it had no occurred_at)."""
    return [change.after.matches, match.match_id, match.time, participant.rank, change.before.rating,
            change.after.rating, change.after.uncertainty, cause]


def history_dropped(seq: int, history_max: int | None) -> int | None:
    """The seq of the entry that writing entry `seq` pushes out (None: none): a player
    keeps their last `history_max` entries (None: all)."""
    return seq - history_max if history_max is not None and seq > history_max else None


def history_entry(row: list[Any]) -> dict[str, Any]:
    """A history row as the API and `ratings replay --history` give it: `occurred_at` as
    text, no `uncertainty` for a system without one."""
    entry = dict(zip(HISTORY_FIELDS, row))
    if entry["occurred_at"] is not None:
        entry["occurred_at"] = format_time(entry["occurred_at"])
    if entry["uncertainty"] is None:
        del entry["uncertainty"]
    return entry
