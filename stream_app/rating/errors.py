"""Inputs a league's log refuses: a match applied already, a void or correction of
a match never applied."""

from __future__ import annotations

from ..engine import Match
from ..inputs import BadEvent


class DuplicateMatch(BadEvent):
    """The match_id was already applied in its league (a producer's retry, or a replayed file)."""

    def __init__(self, match: Match, message: str | None = None):
        super().__init__("duplicate_match",
                         message or f"match_id: {match.match_id!r} was already applied in league {match.league!r}",
                         "match_id", match.league, match.match_id)


class UnknownMatch(BadEvent):
    def __init__(self, league: str, match_id: str, voided: bool):
        why = "was voided" if voided else "was never applied"
        super().__init__("unknown_match", f"match_id: {match_id!r} {why} in league {league!r} (only an applied result "
                         "can be voided or corrected)", "match_id", league, match_id)
