"""Head to head: the matches two players of a league played together, from the
history each keeps (rating.history_row; a player keeps their last
`history_max`), so a match counts when both still hold its entry. Pure: the
caller reads the rows and says who was on which side of a team match.

Opposite sides: the player's wins, draws and losses against the opponent
(ahead of, level with, or behind them). The same side (teammates): the
matches played together and how many of them their side won. The recent
matches, newest first, give both players' ratings before and after.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .inputs import format_time

MAX_RECENT = 1_000  # recent shared matches in one answer
_SEQ, _MATCH_ID, _TIME, _RANK, _BEFORE, _AFTER = range(6)  # rating.HISTORY_FIELDS' first six


def head_to_head(league: str, player: str, opponent: str, rows: Sequence[list[Any]],
                 opponent_rows: Sequence[list[Any]], teammates: Callable[[str], bool], recent: int = 10
                 ) -> dict[str, Any]:
    """The record of `player` against `opponent` from their history rows (any order).
    `teammates(match_id)`: whether the two were on the same side of that match
    (only asked of the matches both played)."""
    theirs = {row[_MATCH_ID]: row for row in opponent_rows}
    shared = sorted((row for row in rows if row[_MATCH_ID] in theirs), key=lambda row: row[_SEQ], reverse=True)
    against = {"matches": 0, "wins": 0, "draws": 0, "losses": 0}
    together = {"matches": 0, "wins": 0}
    matches = []
    for row in shared:
        other = theirs[row[_MATCH_ID]]
        same = teammates(row[_MATCH_ID])
        if same:
            together["matches"] += 1
            together["wins"] += row[_RANK] == 1
        else:
            against["matches"] += 1
            key = "wins" if row[_RANK] < other[_RANK] else "losses" if row[_RANK] > other[_RANK] else "draws"
            against[key] += 1
        if len(matches) < recent:
            matches.append({
                "match_id": row[_MATCH_ID],
                "occurred_at": None if row[_TIME] is None else format_time(row[_TIME]),
                "side": "same" if same else "opposite",
                "rank": row[_RANK], "opponent_rank": other[_RANK],
                "rating_before": row[_BEFORE], "rating_after": row[_AFTER],
                "opponent_rating_before": other[_BEFORE], "opponent_rating_after": other[_AFTER],
            })
    return {"league": league, "player": player, "opponent": opponent, "matches": len(shared),
            "against": against, "together": together, "recent": matches}
