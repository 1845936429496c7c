"""Apply one input to its league: a match result, or a command that voids or
corrects one. The one path, used by `ratings replay` and by the stream worker
alike, which is why the two agree bit for bit.

A result goes at the end of its league's log (rating.match_step.apply_at rates it there),
unless its league has `late_results = "in_order"` and it happened before the
latest result: then it goes at its place in time. A void, a correction, or such
a late result changes the log before its end, and the league is re-rated from
there (rerate.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from .engine import InvalidMatch, Match, PlayerState, RatingSystem
from .inputs import BadEvent, Correction, SeasonStart, Void, format_time
from .leagues import IN_ORDER, LeagueConfig, LeagueRule
from .rating.applied import Applied, SeasonStarted
from .rating.errors import DuplicateMatch, UnknownMatch
from .rating.log_rows import order_key
from .rating.match_step import apply_at
from .rating.ports import LeagueState
from .rating.records import VOIDED
from .rating.season_step import start_season_at
from .rating.snapshots import NO_BOUNDARY
from .rerate import Edit, Rerated, rerate
from .seasons import MANUAL


def apply(config: LeagueConfig, state: LeagueState, item: Match | Void | Correction | SeasonStart,
          budget: int | None = None) -> Applied | Rerated | SeasonStarted | None:
    """Apply a match result or a command (what an input record holds). A re-rate
    with a `budget` (participant results per part) may stop after its first part:
    None comes back, and rerate.proceed goes on."""
    if type(item) is Match:  # (exact classes, not isinstance: once a match)
        return apply_match(config, state, item, budget)
    if isinstance(item, Void):
        return void_match(config, state, item, budget)
    if isinstance(item, SeasonStart):
        return start_season(config, state, item)
    assert isinstance(item, Correction)
    return correct_match(config, state, item, budget)


def apply_match(config: LeagueConfig, state: LeagueState, match: Match, budget: int | None = None,
                outcome: Sequence[PlayerState] | None = None) -> Applied | Rerated | None:
    """Rate the match with its league's system and save the result in `state`.

    Raises DuplicateMatch, or BadEvent (reason `system_rule`) when the league's
    system cannot rate the match or the league is rated with another one. Nothing
    is saved unless the whole match is rated. A late result in a league that keeps
    its results in time order re-rates the league (a Rerated comes back). With an
    `outcome` (the states after it, as recorded when the match was rated) nothing
    is rated again: the match is saved with them.
    """
    league = match.league
    rule, record = _league(config, state, league, match.match_id)
    if outcome is None:  # (a recorded outcome passed both checks when it was rated)
        if state.placed(league, match.match_id) is not None:
            raise DuplicateMatch(match)
        check_ratable(rule.system, match)
    # (`in`, not get: once a match)
    arrival = record["received"] if "received" in record else record["matches"]
    order_time = record["order_time"] if "order_time" in record else None
    time = match.time
    if time is None:
        place_time = order_time  # after every result received before it
    elif order_time is None or time >= order_time:
        place_time = order_time = time
    elif rule.options.late_results == IN_ORDER:
        place_time = time
    else:
        place_time = order_time
    received = {"received": arrival + 1} if order_time is None else {"received": arrival + 1, "order_time": order_time}
    key = order_key(place_time, arrival)
    if place_time is not None and order_time is not None and place_time < order_time:
        state.put_placed(league, match.match_id, {"key": key.hex()})
        return rerate(config, state, league, {**record, **received}, Edit(added=(key, match)), match.match_id, budget)
    return apply_at(rule, state, record, match, key, new=True, received=received, outcome=outcome)


def void_match(config: LeagueConfig, state: LeagueState, void: Void, budget: int | None = None) -> Rerated | None:
    rule, record = _league(config, state, void.league, void.match_id)
    key = _placed_key(state, void.league, void.match_id)
    state.put_placed(void.league, void.match_id, VOIDED)
    return rerate(config, state, void.league, record, Edit(removed=key), void.match_id, budget)


def correct_match(config: LeagueConfig, state: LeagueState, correction: Correction,
                  budget: int | None = None) -> Rerated | None:
    league, match_id = correction.league, correction.match_id
    rule, record = _league(config, state, league, match_id)
    key = _placed_key(state, league, match_id)
    check_ratable(rule.system, correction.match)
    old = state.log(league, key, 1)[0][1]
    match = correction.match
    if match.time is None:
        match = Match(league, match_id, match.participants, old.time)
    if match == old:
        raise DuplicateMatch(match, f"match_id: {match_id!r} already has these standings in league {league!r} "
                                    "(a correction changes nothing)")
    new_key = key
    if match.time != old.time and rule.options.late_results == IN_ORDER and match.time is not None:
        # Moved to its new place in time; its arrival still orders it among equal times.
        new_key = order_key(match.time, int.from_bytes(key[8:], "big"))
        if record.get("order_time") is None or match.time > record["order_time"]:
            record = {**record, "order_time": match.time}
        state.put_placed(league, match_id, {"key": new_key.hex()})
    return rerate(config, state, league, record, Edit(removed=key, added=(new_key, match)), match_id, budget)


def start_season(config: LeagueConfig, state: LeagueState, command: SeasonStart) -> SeasonStarted:
    """A season-started command: the league's next season, at the end of its log."""
    league = command.league
    if state.league(league) is None:
        raise BadEvent("unknown_league", f"league: {league!r} has no results yet (a season starts in a league that has)",
                       "league", league)
    rule, record = _league(config, state, league, None)
    kind = rule.options.season
    if kind != MANUAL:
        having = "no seasons" if kind is None else f"{kind} seasons, started by its results' times"
        raise BadEvent("season_rule", f"league: {league!r} has {having} (season-started needs season = \"manual\")",
                       "league", league)
    if any(row["name"] == command.season for row in state.seasons(league)):
        raise BadEvent("season_exists", f"season: {command.season!r} was already used in league {league!r}",
                       "season", league)
    order_time = record.get("order_time")
    if order_time is not None and command.time < order_time:
        raise BadEvent("season_too_early", f"occurred_at: {format_time(command.time)} is before the league's latest "
                       f"result ({format_time(order_time)}); a season starts after the results it follows",
                       "occurred_at", league)
    arrival = record.get("received", record["matches"])
    record = {**record, "received": arrival + 1, "order_time": command.time}
    boundary = record.get("boundary", NO_BOUNDARY)[0]
    return start_season_at(rule, state, record, league, command.season, command.time, order_key(command.time, arrival),
                           boundary, True, command)


def _league(config: LeagueConfig, state: LeagueState, league: str, match_id: str | None
            ) -> tuple[LeagueRule, dict[str, Any]]:
    rule = config.rule_for(league)
    record = state.league(league)
    if record is None:
        return rule, {"algorithm": rule.algorithm, "matches": 0, "players": 0}
    if record["algorithm"] != rule.algorithm:
        raise BadEvent("system_rule",
                       f"league: {league!r} is rated with {record['algorithm']!r} but the configuration now says {rule.algorithm!r}",
                       "league", league, match_id)
    return rule, record


def check_ratable(system: RatingSystem, match: Match) -> None:
    """BadEvent, as the worker dead-letters it, if the league's system cannot rate the
    match (three players in an `elo` league, a team where the system rates
    individuals, ...); `ratings produce --config` refuses with it before sending."""
    try:
        system.check(match)
    except InvalidMatch as exc:
        raise BadEvent(exc.code, exc.message, exc.field, match.league, match.match_id) from None


def _placed_key(state: LeagueState, league: str, match_id: str) -> bytes:
    place = state.placed(league, match_id)
    if place is None or "key" not in place:
        raise UnknownMatch(league, match_id, place is not None and place.get("voided", False))
    return bytes.fromhex(place["key"])
