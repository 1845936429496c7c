"""A player's record as the stores keep it, and the markers they keep beside it."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import Match, PlayerState
from ..inputs import SeasonStart


Entry = Match | SeasonStart  # an entry of a league's log: a result, or a season started by hand
Tiers = tuple[str | None, str | None]  # a player's tier before and after a change (None: none)


@dataclass(slots=True)
class PlayerRecord:
    """A player's stored record: the rating state, the time of their last match with
    an occurred_at (inactivity is judged by it), the
    boundary of the interval in which the state was last written, the boundary
    of the interval in which the player got their first state (before it they had
    none: no snapshot row needs to say so), and their match count when the league's
    season in progress started (0: they joined during it)."""

    state: PlayerState
    last_time: float | None = None
    snap: int = 0
    since: int = 0
    base: int = 0


ABSENT = 0
NO_SNAPSHOT = object()  # at_boundary: the player has no snapshot row at or after the boundary
VOIDED = {"voided": True}  # the place of a voided match: its match_id stays used
