"""The one step that rates a match as an entry of its league's log: appending a
result and re-rating a league both come here; and an entry applied again."""

from __future__ import annotations

from typing import Any, Sequence

from ..engine import Match, PlayerState, RatingChange
from ..inputs import SeasonStart
from ..leagues import LeagueRule
from ..runtime import LARGE_ROUND, no_cyclic_gc
from ..seasons import MANUAL, period
from .applied import Applied, Place
from .history import history_row
from .ports import ApplyTarget
from .records import Entry
from .season_step import start_season_at
from .snapshots import NO_BOUNDARY, records_after
from .tiers import tier_changes


def apply_at(rule: LeagueRule, state: ApplyTarget, record: dict[str, Any], match: Match, key: bytes,
             new: bool, received: dict[str, Any] | None = None,
             outcome: Sequence[PlayerState] | None = None) -> Applied:
    """Rate the match as the log's entry `key`, after the entries whose results made
    `record`, and save it. The one step that rates a match: appending a result and
    re-rating a league both come here. `received`: the arrival counters of a new
    entry, for the league's record after it. `outcome`: the participants' states
    after the match as recorded when it was rated (a take-up saves it again
    without rating it again)."""
    system = rule.system
    options = rule.options
    count = record["matches"]
    boundary, start = record["boundary"] if "boundary" in record else NO_BOUNDARY  # (`in`, not get: once a match)
    opened = None
    if count - start >= options.snapshot_every:
        boundary, start, opened = boundary + 1, count, record
    season = None
    if options.season is not None and options.season != MANUAL and match.time is not None:
        name, begins = period(options.season, match.time)
        current = record.get("season")
        if current is None or begins > current[2]:  # the first result of a later period starts its season
            season = start_season_at(rule, state, record, match.league, name, begins, key, boundary, new, None)
            record = season.record
    found = state.player_records(match.league, [participant.player for participant in match.participants], system)
    prior = [None if player is None else player.state for player in found]
    newcomers = prior.count(None)
    before = [system.initial_state() if known is None else known for known in prior] if newcomers else prior
    if outcome is None:
        if len(before) < LARGE_ROUND:
            changes = system.rate(match, before)
        else:
            with no_cyclic_gc():
                changes = system.rate(match, before)
        if options.floor is not None:
            for change in changes:
                change.after = system.floored(change.after, options.floor)
    else:
        changes = [RatingChange(p.player, b, a) for p, b, a in zip(match.participants, before, outcome)]
    after = {**record, "matches": count + 1, "players": record["players"] + newcomers}
    if received is not None:
        after |= received  # (an operator, not a call: once a match)
    if boundary:
        after["boundary"] = [boundary, start]
    latest = record["latest_time"] if "latest_time" in record else None
    if match.time is not None and (latest is None or match.time > latest):
        after["latest_time"] = match.time  # the league's latest occurred_at: inactivity counts from it
    history = []
    if rule.options.history_max != 0 and state.keeps_history:
        history = [history_row(match, participant, change) for participant, change in zip(match.participants, changes)]
    records, snapshots = records_after(match.time, boundary, changes, found)
    applied = Applied(rule.algorithm, match, prior, changes, records, snapshots, after, history,
                      Place(key, boundary, opened, new), season)
    # The standings as they were before the match (built from the records if not kept).
    board = state.standings(match.league, rule) if options.tiers and new else None
    state.save(applied)
    if board is not None:
        applied.tiers = tier_changes(options.tiers, board, changes, records, after.get("latest_time"))
    return applied


def apply_entry(rule: LeagueRule, state: ApplyTarget, record: dict[str, Any], entry: Entry, key: bytes) -> dict[str, Any]:
    """Apply a log entry again (a re-rate): the league's record after it."""
    if isinstance(entry, SeasonStart):
        boundary = record.get("boundary", NO_BOUNDARY)[0]
        return start_season_at(rule, state, record, entry.league, entry.season, entry.time, key, boundary, False,
                               entry).record
    return apply_at(rule, state, record, entry, key, new=False).record
