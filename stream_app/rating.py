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
from .events import BadEvent, format_time
from .leagues import LeagueRule


@dataclass(slots=True)
class PlayerRecord:
    """A player's stored record: the rating state, the time of their last match with
    an occurred_at (inactivity is judged by it; the replay does not track it), the
    boundary of the interval in which the state was last written, and the boundary
    of the interval in which the player got their first state (before it they had
    none: no snapshot row needs to say so)."""

    state: PlayerState
    last_time: float | None = None
    snap: int = 0
    since: int = 0


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
    # replay without --history would build 3 million dicts for nothing).
    keeps_history: bool

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        """Each named player's record (None: not rated in the league yet)."""

    def save(self, applied: "Applied") -> None:
        """Store the match as applied, as `apply_at` decided it: the players' new
        records, the snapshot rows they take, the league's new record, each
        participant's history entry, and for a new entry its place and log row, and
        the boundary it opens."""


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

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Match]]:
        """The league's log from this order key on, in order (the first `limit` entries)."""

    def put_log(self, league: str, key: bytes, match: Match | None) -> None: ...

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
        """The records the league's re-rate rebuilds (rerate.WorkingRecords)."""

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


CAUSE_MATCH = "match"  # a history entry written by a match applied


# A history entry's fields, in the order of its row: what the stores keep (a list, half
# the bytes of the object the API answers) and `history_entry` turns into that object.
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


def log_entry(match: Match) -> list[Any]:
    """A log row: what re-applying the match needs."""
    return [match.match_id, match.time, [_log_person(p) for p in match.participants]]


def _log_person(p: Participant) -> list[Any]:
    # Positional, as Participant takes them; the trailing defaults are left out.
    if p.team is not None or p.weight != 1.0:
        return [p.player, p.rank, p.score, p.team, p.weight]
    return [p.player, p.rank] if p.score is None else [p.player, p.rank, p.score]


def match_from_log(league: str, entry: list[Any]) -> Match:
    match_id, time, people = entry
    return Match(league, match_id, tuple(Participant(*person) for person in people), time)


# -- rating a match as a log entry ------------------------------------------------------
def apply_at(rule: LeagueRule, state: ApplyTarget, record: dict[str, Any], match: Match, key: bytes,
             new: bool, received: dict[str, Any] | None = None,
             outcome: Sequence[PlayerState] | None = None) -> Applied:
    """Rate the match as the log's entry `key`, after the entries whose results made
    `record`, and save it. The one step that rates a match: appending a result and
    re-rating a league both come here. `received`: the arrival counters of a new
    entry, for the league's record after it. `outcome`: the participants' states
    after the match as recorded when it was rated (a restore saves it again
    without rating it again)."""
    system = rule.system
    found = state.player_records(match.league, [participant.player for participant in match.participants], system)
    prior = [None if player is None else player.state for player in found]
    newcomers = prior.count(None)
    before = [system.initial_state() if known is None else known for known in prior] if newcomers else prior
    if outcome is None:
        changes = system.rate(match, before)
    else:
        changes = [RatingChange(p.player, b, a) for p, b, a in zip(match.participants, before, outcome)]
    count = record["matches"]
    boundary, start = record.get("boundary", _NO_BOUNDARY)
    opened = None
    if count - start >= rule.options.snapshot_every:
        boundary, start, opened = boundary + 1, count, record
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
                      Place(key, boundary, opened, new))
    state.save(applied)
    return applied


_NO_BOUNDARY = (0, 0)  # no boundary opened yet: the league's start is boundary 0


def _records_after(time: float | None, boundary: int, changes: list[RatingChange], found: list[PlayerRecord | None]
                   ) -> tuple[list[PlayerRecord], list[tuple[str, PlayerRecord]]]:
    """Each participant's record after a match of interval `boundary` (at `time`), and
    the snapshot rows the match takes: a player's record as it was at the boundary,
    kept when their state first changes after it (needs_snapshot). A newcomer's
    record says since which boundary they exist: they need no row."""
    records = []
    snapshots = []
    for change, record in zip(changes, found):
        if record is None:
            records.append(PlayerRecord(change.after, time, boundary, boundary))
            continue
        if needs_snapshot(boundary, record.snap):
            snapshots.append((change.player, record))
        records.append(PlayerRecord(change.after, record.last_time if time is None else time, boundary, record.since))
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
