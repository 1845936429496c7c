"""Boundaries and snapshot rows: a player's record as it was at a boundary, kept
when their state first changes after it, so that a re-rate starts at the last
boundary before the first result it changes."""

from __future__ import annotations

from typing import Any, Sequence

from ..engine import RatingChange
from .records import NO_SNAPSHOT, PlayerRecord


NO_BOUNDARY = (0, 0)  # no boundary opened yet: the league's start is boundary 0


def records_after(time: float | None, boundary: int, changes: list[RatingChange], found: Sequence[PlayerRecord | None],
                   season_start: bool = False) -> tuple[list[PlayerRecord], list[tuple[str, PlayerRecord]]]:
    """Each participant's record after a match of interval `boundary` (at `time`), and
    the snapshot rows the match takes: a player's record as it was at the boundary,
    kept when their state first changes after it (needs_snapshot). A newcomer's
    record says since which boundary they exist: they need no row. At a season's
    start (`season_start`: every player's change) each record's base becomes the
    player's match count."""
    records = []
    snapshots = []
    for change, record in zip(changes, found):
        if record is None:
            records.append(PlayerRecord(change.after, time, boundary, boundary))
            continue
        # (`boundary and`: before the first boundary no row is kept, and the call is skipped,
        # once a participant)
        if boundary and needs_snapshot(boundary, record.snap):
            snapshots.append((change.player, record))
        records.append(PlayerRecord(change.after, record.last_time if time is None else time, boundary, record.since,
                                    change.after.matches if season_start else record.base))
    return records, snapshots


def needs_snapshot(boundary: int, snap: int | None) -> bool:
    """Whether writing a player's new state in interval `boundary` first keeps their
    state at the boundary (a snapshot row): the first write after a boundary does,
    unless it is the player's first (a newcomer's record says since when it exists).
    `snap`: the boundary of their record's interval (PlayerRecord.snap; None: no record)."""
    return boundary > 0 and snap is not None and snap < boundary


def at_boundary(number: int, current: PlayerRecord | None, snapshot: Any) -> PlayerRecord | None:
    """A player's record at boundary `number`: none if they got their first state after
    it, else their first snapshot row at or after it (`snapshot`: its record, None for
    an ABSENT row, NO_SNAPSHOT for no row), else their current record (unchanged since)."""
    if current is not None and current.since >= number:
        return None
    if snapshot is not NO_SNAPSHOT:
        return snapshot
    return current
