"""The one step that starts a season, scheduled or by hand, at the end of the log
or in a re-rate (stream_app/seasons.py has the rules)."""

from __future__ import annotations

from typing import Any

from ..engine import RatingChange
from ..inputs import SeasonStart
from ..leagues import LeagueOptions, LeagueRule
from ..seasons import TOWARD_MEAN, archive_row, mean_rating, reset_rating, tier_of
from ..standings import Standing, Standings
from .applied import Place, SeasonStarted
from .ports import ApplyTarget, LeagueState
from .records import PlayerRecord
from .snapshots import records_after
from .tiers import tier_changes


def season_row(name: str, start: float, key: bytes, reason: str | None) -> dict[str, Any]:
    """A season as the league keeps it: name, start (seconds), the order key of the
    log entry that starts it, and once it has ended its end and player count."""
    row: dict[str, Any] = {"name": name, "start": start, "key": key.hex()}
    if reason is not None:
        row["reason"] = reason
    return row


def start_season_at(rule: LeagueRule, state: ApplyTarget, record: dict[str, Any], league: str, name: str,
                    start: float, key: bytes, boundary: int, new: bool, entry: SeasonStart | None) -> SeasonStarted:
    """Start season `name` at `start` as the log's entry `key` (in interval `boundary`),
    after the entries whose results made `record`, and save it: the season in
    progress ends with its final standings kept, every player is reset (the
    league's season_reset and floor), and each player's season base is their match
    count. The one step that starts a season, scheduled or by hand, at the end of
    the log or in a re-rate."""
    system, options = rule.system, rule.options
    players = state.league_players(league, system)
    current = record.get("season")
    number = 1 if current is None else current[0] + 1
    ended = None
    final: list[list[Any]] = []
    if current is not None:
        seasons = state.seasons(league)
        final = final_standings(options, record.get("latest_time"), players)
        ended = {**seasons[current[0] - 1], "end": start, "players": len(final)}
    reset = options.season_reset
    centre = 0.0
    if reset is not None:
        mean = mean_rating(found.state.rating for _, found in players) if reset.toward == TOWARD_MEAN else None
        centre = system.initial_state().rating if mean is None else mean
    changes = []
    for player, found in players:
        before = after = found.state
        if reset is not None:
            after = system.reset(before, reset_rating(reset, before.rating, centre), reset.min_uncertainty)
        if options.floor is not None:
            after = system.floored(after, options.floor)
        changes.append(RatingChange(player, before, after))
    records, snapshots = records_after(None, boundary, changes, [found for _, found in players], season_start=True)
    after_record = {**record, "season": [number, name, start]}
    started = SeasonStarted(rule.algorithm, league, number, season_row(name, start, key, None if entry is None else entry.reason),
                            ended, final, changes, records, snapshots, after_record, Place(key, boundary, None, new),
                            entry)
    board = state.standings(league, rule) if options.tiers and new else None
    state.save_season(started)
    if board is not None:
        started.tiers = tier_changes(options.tiers, board, changes, records, None)
    return started


def final_standings(options: LeagueOptions, latest: float | None, players: list[tuple[str, PlayerRecord]]
                    ) -> list[list[Any]]:
    """The final standings of a season that ends: each player who played in it, with
    their rank, percentile and tier by the leaderboard's rules at its end."""
    standings = Standings(options, latest)
    played = []
    for name, found in players:
        state = found.state
        if state.matches > found.base:
            standings.set(name, Standing(state.rating, state.matches, state.uncertainty, found.last_time))
            played.append((name, found))
    ranked = standings.eligible_total
    rows = []
    for name, found in played:
        state = found.state
        rank = standings.rank(name)
        tier = tier_of(options.tiers, state.rating, rank, ranked) if options.tiers else None
        rows.append(archive_row(name, state.rating, state.uncertainty, rank, standings.percentile(name), tier,
                                state.matches - found.base))
    return rows


def store_seasons(state: LeagueState, started: SeasonStarted) -> None:
    """What every store keeps of a season's start besides its players: the season
    that ended, closed, with its final standings, and the new one."""
    if started.ended is not None:
        state.put_season(started.league, started.number - 1, started.ended)
        state.put_final(started.league, started.number - 1, started.final)
    state.put_season(started.league, started.number, started.season)
