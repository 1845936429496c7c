"""The pure rating engine: one module per rating system behind `RatingSystem`."""

from __future__ import annotations

from typing import Any

from .base import (InvalidMatch, Match, ParamError, Participant, PlayerState, RatingChange, RatingSystem, is_team_match,
                   team_members)
from .codeforces import Codeforces
from .elo import Elo
from .glicko import Glicko, Glicko2
from .mmr import EloMmr, EloMmx
from .pairwise import Pairwise
from .wenglin import WengLin

SYSTEMS: dict[str, type[RatingSystem]] = {
    cls.name: cls for cls in (Elo, Pairwise, EloMmr, EloMmx, WengLin, Glicko2, Glicko, Codeforces)
}


def make_system(algorithm: str, params: dict[str, Any] | None = None) -> RatingSystem:
    """Build a system from its configuration name and parameters (validated)."""
    try:
        cls = SYSTEMS[algorithm]
    except KeyError:
        raise ParamError("algorithm", f"unknown algorithm {algorithm!r} (known: {', '.join(sorted(SYSTEMS))})") from None
    return cls.from_mapping(dict(params or {}))


__all__ = [
    "SYSTEMS",
    "InvalidMatch",
    "Match",
    "ParamError",
    "Participant",
    "PlayerState",
    "RatingChange",
    "RatingSystem",
    "is_team_match",
    "make_system",
    "team_members",
]
