"""Order keys, and the rows of a league's log (a result, or a season started by
hand), as the stores keep them."""

from __future__ import annotations

import math
import struct
from typing import Any

from ..engine import Match, Participant
from ..inputs import SeasonStart
from .records import Entry


_SIGN = 1 << 63
_ALL = (1 << 64) - 1
_DOUBLE = struct.Struct(">d")
_WORD = struct.Struct(">Q")
_KEY = struct.Struct(">QQ")


def order_key(time: float | None, arrival: int) -> bytes:
    """16 bytes that sort as (time, arrival): the float's bits made to sort as
    unsigned integers (None sorts first), then the arrival count."""
    bits = _WORD.unpack(_DOUBLE.pack(-math.inf if time is None else time))[0]
    bits = bits ^ _ALL if bits & _SIGN else bits | _SIGN
    return _KEY.pack(bits, arrival)


def log_entry(entry: Entry) -> list[Any] | dict[str, Any]:
    """A log row: what re-applying the entry needs (a season's start is an object)."""
    if type(entry) is Match:  # (exact classes: once a match)
        # Each participant positional, as Participant takes them; the trailing defaults are left out.
        return [entry.match_id, entry.time,
                [[p.player, p.rank, p.score, p.team, p.weight] if p.team is not None or p.weight != 1.0
                 else [p.player, p.rank] if p.score is None else [p.player, p.rank, p.score]
                 for p in entry.participants]]
    assert isinstance(entry, SeasonStart)
    return {"season": entry.season, "time": entry.time, "reason": entry.reason}


def entry_from_log(league: str, row: list[Any] | dict[str, Any]) -> Entry:
    if isinstance(row, dict):
        return SeasonStart(league, row["season"], row["time"], row["reason"])
    return match_from_log(league, row)


def match_from_log(league: str, row: list[Any]) -> Match:
    match_id, time, people = row
    return Match(league, match_id, tuple(Participant(*person) for person in people), time)
