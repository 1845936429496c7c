"""Standings built from players' records, and the tiers a change moves a player
between (the rules are stream_app/seasons.py's and stream_app/standings.py's)."""

from __future__ import annotations

from typing import Any, Sequence

from ..engine import PlayerState, RatingChange
from ..leagues import LeagueRule
from ..seasons import Tier, tier_of
from ..standings import Standing, Standings
from .records import PlayerRecord, Tiers


def standing_of(record: PlayerRecord) -> Standing:
    state = record.state
    return Standing(state.rating, state.matches, state.uncertainty, record.last_time)


def build_standings(rule: LeagueRule, record: dict[str, Any] | None,
                    players: list[tuple[str, PlayerRecord]]) -> Standings:
    """A league's standings from its players' records."""
    board = Standings(rule.options, None if record is None else record.get("latest_time"))
    for name, found in players:
        board.set(name, standing_of(found))
    return board


def tier_in(tiers: Sequence[Tier], board: Standings, player: str, state: PlayerState | None) -> str | None:
    """The player's tier with this state, where they stand in `board` (None: no state)."""
    return None if state is None else tier_of(tiers, state.rating, board.rank(player), board.eligible_total)


def tier_changes(tiers: Sequence[Tier], board: Standings, changes: list[RatingChange], records: list[PlayerRecord],
                 latest: float | None) -> list[Tiers]:
    """Each changed player's tier before and after, the standings moved on between:
    a tier by rank is read where the player stands among the others."""
    before = [tier_in(tiers, board, change.player, change.before if change.player in board.players else None)
              for change in changes]
    for change, record in zip(changes, records):
        board.set(change.player, standing_of(record))
    board.advance(latest)
    return [(tier, tier_in(tiers, board, change.player, change.after)) for tier, change in zip(before, changes)]
