"""Rating a match as an entry of its league's log, and the records that takes
(`LeagueState`, the storage port). apply.py decides where an input goes;
`apply_at` is the one step that rates a match, for a result at the end of the
log and for each entry a re-rate applies again (rerate.py).

Each league keeps its log: the results it counts, in order, each under an
order key (its place in time, then its arrival). A result goes at the end of
the log, unless its league has `late_results = "in_order"` and it happened
before the latest result: then it goes at its place in time. A void, a
correction, or such a late result changes the log before its end, and the
league is re-rated from there (rerate.py). Every `snapshot_every` results
the log opens a boundary; the states a player had at each boundary are kept,
written once per player and boundary (when the player's state first changes
after it), so that a re-rate starts at the last boundary before the first
result it changes.

Where the league's records live is up to the caller (`LeagueState`): the
replay keeps every league in memory (stream_app/offline/replay.py), the
worker keeps one partition's leagues in its tables (stream_app/stream/).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import AbstractSet as Set, Any, Protocol, Sequence

from .engine import Match, Participant, PlayerState, RatingChange, RatingSystem
from .inputs import BadEvent, SeasonStart, format_time
from .leagues import LeagueOptions, LeagueRule
from .seasons import MANUAL, TOWARD_MEAN, Tier, archive_row, mean_rating, period, reset_rating, tier_of
from .runtime import LARGE_ROUND, no_cyclic_gc
from .standings import Standing, Standings


Entry = Match | SeasonStart  # an entry of a league's log: a result, or a season started by hand
Tiers = tuple[str | None, str | None]  # a player's tier before and after a change (None: none)


@dataclass(slots=True)
class PlayerRecord:
    """A player's stored record: the rating state, the time of their last match with
    an occurred_at (inactivity is judged by it; the replay does not track it), the
    boundary of the interval in which the state was last written, the boundary
    of the interval in which the player got their first state (before it they had
    none: no snapshot row needs to say so), and their match count when the league's
    season in progress started (0: they joined during it)."""

    state: PlayerState
    last_time: float | None = None
    snap: int = 0
    since: int = 0
    base: int = 0


# A snapshot row of a player who had no state at that boundary (written before records
# said since when a player exists: still read).
ABSENT = 0
NO_SNAPSHOT = object()  # at_boundary: the player has no snapshot row at or after the boundary
VOIDED = {"voided": True}  # the place of a voided match: its match_id stays used


class WorkingRecords(Protocol):
    """The records a re-rate rebuilds, by player (LeagueState.working): a re-rate's, rerate.py."""

    def get(self, name: str) -> PlayerRecord | None: ...

    def set(self, name: str, record: PlayerRecord | None) -> None: ...

    def flush(self) -> None:
        """Keep what was set (the end of a part)."""

    def names(self) -> list[str]:
        """Every player of the re-rate."""

    def forget(self, names: list[str]) -> None:
        """The re-rate is over: forget them (`names`: what `names` gave)."""


class ApplyTarget(Protocol):
    """What `apply_at` reads and writes: a LeagueState, or a re-rate's view of one."""

    # Whether `save` stores history entries: `apply` builds them only then (a
    # replay without --history would build a dict per participant for nothing).
    keeps_history: bool

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        """Each named player's record (None: not rated in the league yet)."""

    def save(self, applied: "Applied") -> None:
        """Store the match as applied, as `apply_at` decided it: the players' new
        records, the snapshot rows they take, the league's new record, each
        participant's history entry, and for a new entry its place and log row, and
        the boundary it opens."""

    def league_players(self, league: str, system: RatingSystem) -> list[tuple[str, PlayerRecord]]:
        """Every player of the league with a record, by name (a season's start reads them all)."""

    def standings(self, league: str, rule: LeagueRule) -> Standings | None:
        """The league's standings as its players' records are (`build_standings`), which
        the steps that apply keep up to date: a tier can need a rank. None: no tiers are
        published from here (a re-rate's entries, a take-up)."""

    def seasons(self, league: str) -> list[dict[str, Any]]:
        """The league's seasons, first to last: season number n is item n - 1 (season_row)."""

    def save_season(self, started: "SeasonStarted") -> None:
        """Store a season's start as `start_season_at` decided it: the players' new
        records, their snapshot rows, the league's new record, the season that ended
        (closed) with its final standings, the new season, and for a new entry (a
        season-started command) its log row."""


class LeagueState(ApplyTarget, Protocol):
    """The records `apply` reads and writes."""

    # -- what applying a match at the end of the log needs (and ApplyTarget's) ----------
    def league(self, league: str) -> dict[str, Any] | None:
        """The league's record {"algorithm", "matches", "players", ...}; None before its first match."""

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        """The match's place: {"key": hex of its order key}, VOIDED, or None (never applied)."""

    # -- what a re-rate needs (rerate.py) -------------------------------------------------
    def put_league(self, league: str, record: dict[str, Any]) -> None: ...

    def put_placed(self, league: str, match_id: str, place: dict[str, Any]) -> None: ...

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Entry]]:
        """The league's log from this order key on, in order (the first `limit` entries)."""

    def put_log(self, league: str, key: bytes, match: Entry | None) -> None: ...

    def put_season(self, league: str, number: int, row: dict[str, Any]) -> None: ...

    def put_final(self, league: str, number: int, rows: list[list[Any]]) -> None:
        """Keep season `number`'s final standings (seasons.archive_row each)."""

    def forget_seasons(self, league: str, after: int) -> None:
        """Delete the seasons above `after` and the final standings of those from `after` on."""

    def forget_standings(self, league: str) -> None:
        """The league's players were replaced (a re-rate): its standings are built again when asked."""

    def boundary(self, league: str, number: int) -> tuple[bytes, dict[str, Any]] | None:
        """Boundary `number`'s order key and the league's record before it (None: none)."""

    def put_boundary(self, league: str, number: int, key: bytes | None, record: dict[str, Any] | None) -> None: ...

    def snapshot_records(self, league: str, first: int, names: Set[str],
                         system: RatingSystem) -> dict[str, PlayerRecord | None]:
        """For each of these players with a snapshot row at a boundary >= first, the
        first such row's record (None: ABSENT)."""

    def put_snapshot(self, league: str, number: int, player: str, record: PlayerRecord | None) -> None:
        """Write a snapshot row (None: ABSENT)."""

    def forget_snapshots(self, league: str, after: int) -> None:
        """Delete the snapshot rows and boundaries above `after`."""

    def put_player(self, league: str, name: str, record: PlayerRecord | None) -> None: ...

    def put_history(self, league: str, player: str, row: list[Any]) -> None:
        """Write a history row (and drop the one history_max pushes out)."""

    def forget_history(self, league: str, player: str, first: int, last: int) -> None:
        """Delete the player's history entries first..last (seq)."""

    def working(self, league: str, system: RatingSystem) -> WorkingRecords:
        """The working records of the league's re-rate."""

    def job(self, league: str) -> dict[str, Any]:
        """The league's re-rate job in progress."""

    def put_job(self, league: str, job: dict[str, Any] | None) -> None: ...


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


@dataclass(slots=True)
class Place:
    key: bytes  # the order key of the match's entry in the log
    boundary: int  # the interval the entry is in
    opened: dict[str, Any] | None  # the league's record before the entry, if it opens that boundary
    new: bool  # a new entry of the log (False: re-applied by a re-rate)


@dataclass(slots=True)
class Applied:
    algorithm: str
    match: Match
    prior: list[PlayerState | None]  # each participant's state before the match (None: a newcomer)
    changes: list[RatingChange]  # in participant order
    records: list[PlayerRecord]  # each participant's record after the match, in participant order
    snapshots: list[tuple[str, PlayerRecord]]  # the snapshot rows the match takes: (player, record at the boundary)
    record: dict[str, Any]  # the league's record after the match
    history: list[list[Any]]  # each participant's history row (history_row), in participant order (or none)
    place: Place
    season: "SeasonStarted | None" = None  # the season the match started (a scheduled one), saved before it
    tiers: list[Tiers] | None = None  # each participant's, with the league's tiers (a new entry only)


CAUSE_MATCH = "match"  # a history entry written by a match applied


# A history entry's fields, in the order of its row: what the stores keep (a list,
# smaller than the object the API answers) and `history_entry` turns into that object.
HISTORY_FIELDS = ("seq", "match_id", "occurred_at", "rank", "rating_before", "rating_after", "uncertainty", "cause")


def history_row(match: Match, participant: Participant, change: RatingChange, cause: str = CAUSE_MATCH) -> list[Any]:
    """One rating change of a player's history, as kept. `seq` numbers a player's entries
    in the league from 1: a match's entry is the player's match count after it; the
    time is the match's seconds (None: it had no occurred_at)."""
    return [change.after.matches, match.match_id, match.time, participant.rank, change.before.rating,
            change.after.rating, change.after.uncertainty, cause]


def history_dropped(seq: int, history_max: int | None) -> int | None:
    """The seq of the entry that writing entry `seq` pushes out (None: none): a player
    keeps their last `history_max` entries (None: all)."""
    return seq - history_max if history_max is not None and seq > history_max else None


def history_entry(row: list[Any]) -> dict[str, Any]:
    """A history row as the API and `ratings replay --history` give it: `occurred_at` as
    text, no `uncertainty` for a system without one."""
    entry = dict(zip(HISTORY_FIELDS, row))
    if entry["occurred_at"] is not None:
        entry["occurred_at"] = format_time(entry["occurred_at"])
    if entry["uncertainty"] is None:
        del entry["uncertainty"]
    return entry


# -- order keys and log entries -------------------------------------------------------------
_SIGN = 1 << 63
_ALL = (1 << 64) - 1
_DOUBLE = struct.Struct(">d")
_WORD = struct.Struct(">Q")


def order_key(time: float | None, arrival: int) -> bytes:
    """16 bytes that sort as (time, arrival): the float's bits made to sort as
    unsigned integers (None sorts first), then the arrival count."""
    bits = _WORD.unpack(_DOUBLE.pack(-math.inf if time is None else time))[0]
    bits = bits ^ _ALL if bits & _SIGN else bits | _SIGN
    return _WORD.pack(bits) + _WORD.pack(arrival)


def log_entry(entry: Entry) -> list[Any] | dict[str, Any]:
    """A log row: what re-applying the entry needs (a season's start is an object)."""
    if isinstance(entry, SeasonStart):
        return {"season": entry.season, "time": entry.time, "reason": entry.reason}
    return [entry.match_id, entry.time, [_log_person(p) for p in entry.participants]]


def _log_person(p: Participant) -> list[Any]:
    # Positional, as Participant takes them; the trailing defaults are left out.
    if p.team is not None or p.weight != 1.0:
        return [p.player, p.rank, p.score, p.team, p.weight]
    return [p.player, p.rank] if p.score is None else [p.player, p.rank, p.score]


def entry_from_log(league: str, row: list[Any] | dict[str, Any]) -> Entry:
    if isinstance(row, dict):
        return SeasonStart(league, row["season"], row["time"], row["reason"])
    return match_from_log(league, row)


def match_from_log(league: str, row: list[Any]) -> Match:
    match_id, time, people = row
    return Match(league, match_id, tuple(Participant(*person) for person in people), time)


# -- rating a match as a log entry ------------------------------------------------------
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
    boundary, start = record.get("boundary", _NO_BOUNDARY)
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
        after.update(received)
    if boundary:
        after["boundary"] = [boundary, start]
    latest = record.get("latest_time")
    if match.time is not None and (latest is None or match.time > latest):
        after["latest_time"] = match.time  # the league's latest occurred_at: inactivity counts from it
    history = []
    if rule.options.history_max != 0 and state.keeps_history:
        history = [history_row(match, participant, change) for participant, change in zip(match.participants, changes)]
    records, snapshots = _records_after(match.time, boundary, changes, found)
    applied = Applied(rule.algorithm, match, prior, changes, records, snapshots, after, history,
                      Place(key, boundary, opened, new), season)
    # The standings as they were before the match (built from the records if not kept).
    board = state.standings(match.league, rule) if options.tiers and new else None
    state.save(applied)
    if board is not None:
        applied.tiers = tier_changes(options.tiers, board, changes, records, after.get("latest_time"))
    return applied


_NO_BOUNDARY = (0, 0)  # no boundary opened yet: the league's start is boundary 0


def _records_after(time: float | None, boundary: int, changes: list[RatingChange], found: Sequence[PlayerRecord | None],
                   season_start: bool = False) -> tuple[list[PlayerRecord], list[tuple[str, PlayerRecord]]]:
    """Each participant's record after a match of interval `boundary` (at `time`), and
    the snapshot rows the match takes: a player's record as it was at the boundary,
    kept when their state first changes after it (needs_snapshot). A newcomer's
    record says since which boundary they exist: they need no row. At a season's
    start (`season_start`: every player's change) each record's base becomes the
    player's match count."""
    records = []
    snapshots = []
    for change, record in zip(changes, found):
        if record is None:
            records.append(PlayerRecord(change.after, time, boundary, boundary))
            continue
        if needs_snapshot(boundary, record.snap):
            snapshots.append((change.player, record))
        records.append(PlayerRecord(change.after, record.last_time if time is None else time, boundary, record.since,
                                    change.after.matches if season_start else record.base))
    return records, snapshots


def needs_snapshot(boundary: int, snap: int | None) -> bool:
    """Whether writing a player's new state in interval `boundary` first keeps their
    state at the boundary (a snapshot row): the first write after a boundary does,
    unless it is the player's first (a newcomer's record says since when it exists).
    `snap`: the boundary of their record's interval (PlayerRecord.snap; None: no record)."""
    return boundary > 0 and snap is not None and snap < boundary


def at_boundary(number: int, current: PlayerRecord | None, snapshot: Any) -> PlayerRecord | None:
    """A player's record at boundary `number`: none if they got their first state after
    it, else their first snapshot row at or after it (`snapshot`: its record, None for
    an ABSENT row, NO_SNAPSHOT for no row), else their current record (unchanged since)."""
    if current is not None and current.since >= number:
        return None
    if snapshot is not NO_SNAPSHOT:
        return snapshot
    return current


# -- seasons (stream_app/seasons.py has the rules) -------------------------------------------
@dataclass(slots=True)
class SeasonStarted:
    algorithm: str
    league: str
    number: int  # the new season's
    season: dict[str, Any]  # its row (season_row)
    ended: dict[str, Any] | None  # the row of the season that ended, closed (None: the league's first season)
    final: list[list[Any]]  # the ended season's final standings (seasons.archive_row), by player
    changes: list[RatingChange]  # every player's, by name (after == before: no reset)
    records: list[PlayerRecord]  # every player's record after the start, in the order of `changes`
    snapshots: list[tuple[str, PlayerRecord]]
    record: dict[str, Any]  # the league's record after the start
    place: Place  # the log entry that starts it: a season-started command, or the result a schedule starts it with
    entry: SeasonStart | None  # the command (None: a scheduled season)
    tiers: list[Tiers] | None = None  # each player's, in the order of `changes` (with the league's tiers)

    def reset(self) -> list[tuple[RatingChange, Tiers | None]]:
        """The players whose rating state the start changed, with their tiers."""
        tiers: list[Tiers | None] = list(self.tiers) if self.tiers is not None else [None] * len(self.changes)
        return [(change, tier) for change, tier in zip(self.changes, tiers) if change.after != change.before]


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
    records, snapshots = _records_after(None, boundary, changes, [found for _, found in players], season_start=True)
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


def apply_entry(rule: LeagueRule, state: ApplyTarget, record: dict[str, Any], entry: Entry, key: bytes) -> dict[str, Any]:
    """Apply a log entry again (a re-rate): the league's record after it."""
    if isinstance(entry, SeasonStart):
        boundary = record.get("boundary", _NO_BOUNDARY)[0]
        return start_season_at(rule, state, record, entry.league, entry.season, entry.time, key, boundary, False,
                               entry).record
    return apply_at(rule, state, record, entry, key, new=False).record


# -- tiers -------------------------------------------------------------------------------
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
