"""Apply one match to its league: the one path, used by `ratings replay` and
by the stream worker alike, which is why the two agree bit for bit.

Where the league's records live is up to the caller (`LeagueState`): the
replay keeps every league in memory (stream_app/offline/replay.py), the
worker keeps one partition's leagues in its tables (stream_app/stream/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from .engine import InvalidMatch, Match, Participant, PlayerState, RatingChange, RatingSystem
from .events import BadEvent, format_time
from .leagues import LeagueConfig


class LeagueState(Protocol):
    """The records `apply_match` reads and writes."""

    def league(self, league: str) -> dict[str, Any] | None:
        """The league's record {"algorithm", "matches", "players"}; None before its first match."""

    def has_match(self, league: str, match_id: str) -> bool:
        """Whether a match with this id was applied in the league."""

    def players(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerState | None]:
        """Each named player's state (None: not rated in the league yet)."""

    def save(self, match: Match, changes: list[RatingChange], record: dict[str, Any], history: list[dict[str, Any]]) -> None:
        """Store the match as applied: the players' new states, the league's new record
        and each participant's history entry (none when the league keeps no history)."""


class DuplicateMatch(BadEvent):
    """The match_id was already applied in its league (a producer's retry, or a replayed file)."""

    def __init__(self, match: Match):
        super().__init__("duplicate_match", f"match_id: {match.match_id!r} was already applied in league {match.league!r}",
                         "match_id", match.league, match.match_id)


@dataclass(slots=True)
class Applied:
    algorithm: str
    match: Match
    prior: list[PlayerState | None]  # each participant's state before the match (None: a newcomer)
    changes: list[RatingChange]  # in participant order
    record: dict[str, Any]  # the league's record after the match
    history: list[dict[str, Any]]  # each participant's history entry, in participant order (or none)


CAUSE_MATCH = "match"  # a history entry written by a match applied


def history_entry(match: Match, participant: Participant, change: RatingChange, occurred_at: str | None,
                  cause: str = CAUSE_MATCH) -> dict[str, Any]:
    """One rating change of a player's history. `seq` numbers a player's entries in
    the league from 1: a match's entry is the player's match count after it."""
    entry = {"seq": change.after.matches, "match_id": match.match_id, "occurred_at": occurred_at,
             "rank": participant.rank, "rating_before": change.before.rating, "rating_after": change.after.rating}
    uncertainty = change.after.uncertainty
    if uncertainty is not None:
        entry["uncertainty"] = uncertainty
    entry["cause"] = cause
    return entry


def apply_match(config: LeagueConfig, state: LeagueState, match: Match) -> Applied:
    """Rate the match with its league's system and save the result in `state`.

    Raises DuplicateMatch, or BadEvent (reason `system_rule`) when the league's
    system cannot rate the match or the league is rated with another one. Nothing
    is saved unless the whole match is rated.
    """
    league = match.league
    rule = config.rule_for(league)
    record = state.league(league)
    if record is None:
        record = {"algorithm": rule.algorithm, "matches": 0, "players": 0}
    elif record["algorithm"] != rule.algorithm:
        raise BadEvent("system_rule",
                       f"league: {league!r} is rated with {record['algorithm']!r} but the configuration now says {rule.algorithm!r}",
                       "league", league, match.match_id)
    if state.has_match(league, match.match_id):
        raise DuplicateMatch(match)
    system = rule.system
    try:
        system.check(match)
    except InvalidMatch as exc:
        raise BadEvent(exc.code, exc.message, exc.field, league, match.match_id) from None
    prior = state.players(league, [participant.player for participant in match.participants], system)
    newcomers = prior.count(None)
    before = [system.initial_state() if found is None else found for found in prior] if newcomers else prior
    changes = system.rate(match, before)
    after = {"algorithm": rule.algorithm, "matches": record["matches"] + 1, "players": record["players"] + newcomers}
    latest = record.get("latest_time")
    if match.time is not None and (latest is None or match.time > latest):
        latest = match.time
    if latest is not None:  # the league's latest occurred_at: inactivity counts from it
        after["latest_time"] = latest
    history = []
    if rule.options.history_max != 0:
        occurred_at = None if match.time is None else format_time(match.time)
        history = [history_entry(match, participant, change, occurred_at)
                   for participant, change in zip(match.participants, changes)]
    state.save(match, changes, after, history)
    return Applied(rule.algorithm, match, prior, changes, after, history)
