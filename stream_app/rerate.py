"""Re-rating a league after its log changed before its end: a result voided,
corrected, or placed late in time order (rating.py decides which).

A league's ratings are a pure function of its log, so the exact fix is to
apply the log again from the first entry that changed. It starts from the
last boundary at or before that entry: each player's state at the boundary is
their first snapshot row at or after it (written when their state first
changed after it), else their current record (it has not changed since). The
entries from there on are applied again through `rating.apply_at`, the same
step as any match, and every snapshot row and boundary past the starting one
is written anew on the way. Then each player's record is replaced, and every
player whose rating state changed gets one correction: the state last
published for them, and the state now.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from typing import Any, Sequence

from .engine import Match, PlayerState, RatingSystem
from .leagues import LeagueConfig
from .rating import Applied, LeagueState, PlayerRecord, apply_at, needs_snapshot


@dataclass(slots=True)
class Edit:
    """What changed in the log: an entry that goes, an entry that comes (or both)."""

    removed: bytes | None = None  # order key
    added: tuple[bytes, Match] | None = None

    @property
    def start(self) -> bytes:
        return min(key for key in (self.removed, self.added and self.added[0]) if key is not None)


@dataclass(slots=True)
class RatingCorrection:
    player: str
    published: PlayerState | None  # the state last published (None: the player had none)
    now: PlayerState | None  # the corrected state (None: the player has no counted match left)


@dataclass(slots=True)
class Rerated:
    algorithm: str
    league: str
    match_id: str  # of the command, or of the late result
    revision: int  # the league's re-rates so far, this one included
    corrections: list[RatingCorrection]  # each player whose rating state changed
    record: dict[str, Any]  # the league's record after the re-rate
    reapplied: int  # log entries applied again


# The league record's counters that belong to arrival, not to the log's results:
# a re-rate carries them over instead of recomputing them.
_ARRIVAL = ("received", "order_time")


def rerate(config: LeagueConfig, state: LeagueState, league: str, record: dict[str, Any], edit: Edit,
           match_id: str) -> Rerated:
    """Apply the edit to the league's log and re-rate the league from it. `record`
    is the league's current record, with the arrival counters already moved on."""
    rule = config.rule_for(league)
    system = rule.system
    number, base_key, base = _start(state, league, record, edit.start)
    old = list(state.log(league, base_key))
    new = [(key, match) for key, match in old if key != edit.removed]
    if edit.removed is not None:
        state.put_log(league, edit.removed, None)
    if edit.added is not None:
        insort(new, edit.added, key=lambda item: item[0])
        state.put_log(league, *edit.added)
    names = list(dict.fromkeys(p.player for _, match in (*old, *new) for p in match.participants))
    current = dict(zip(names, state.player_records(league, names, system)))
    records = _at_boundary(state, league, number, system, current)
    state.forget_snapshots(league, number)

    working = base if base is not None else {"algorithm": rule.algorithm, "matches": 0, "players": 0}
    view = _Rerating(state, league, records)
    for key, match in new:
        working = apply_at(rule, view, working, match, key, new=False).record

    final = {key: value for key, value in working.items() if key not in _ARRIVAL}
    final.update((key, record[key]) for key in _ARRIVAL if key in record)
    final["revision"] = record.get("revision", 0) + 1
    state.put_league(league, final)
    corrections = []
    keeps_history = rule.options.history_max != 0
    for name in names:
        now, then = records[name], current[name]
        state.put_player(league, name, now)
        now_state = None if now is None else now.state
        then_state = None if then is None else then.state
        if now_state != then_state:
            corrections.append(RatingCorrection(name, then_state, now_state))
        if keeps_history:
            before = 0 if then_state is None else then_state.matches
            after = 0 if now_state is None else now_state.matches
            if after < before:
                state.forget_history(league, name, after + 1, before)
    return Rerated(rule.algorithm, league, match_id, final["revision"], corrections, final, len(new))


def _start(state: LeagueState, league: str, record: dict[str, Any], start: bytes) -> tuple[int, bytes, dict | None]:
    """The last boundary at or before the order key `start`: its number, key and the
    league's record before it (boundary 0, the league's start, has none)."""
    number = record.get("boundary", (0, 0))[0]
    while number > 0:
        found = state.boundary(league, number)
        if found is not None and found[0] <= start:
            return number, found[0], found[1]
        number -= 1
    return 0, b"", None


def _at_boundary(state: LeagueState, league: str, number: int, system: RatingSystem,
                 current: dict[str, PlayerRecord | None]) -> dict[str, PlayerRecord | None]:
    """Each player's record at boundary `number` (None: they had none)."""
    if number == 0:
        return dict.fromkeys(current)
    found: dict[str, PlayerRecord | None] = {}
    for _, name, row in state.snapshots(league, number, system):
        if name in current and name not in found:
            found[name] = row
    return {name: found[name] if name in found else record for name, record in current.items()}


class _Rerating:
    """The league as `apply_at` sees it during a re-rate: the players' records are
    the ones being rebuilt (in memory); snapshot rows, boundaries and history entries
    go to the state."""

    def __init__(self, state: LeagueState, league: str, records: dict[str, PlayerRecord | None]):
        self.state = state
        self.league = league
        self.records = records

    def players(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerState | None]:
        records = self.records
        return [None if (record := records[name]) is None else record.state for name in names]

    def save(self, applied: Applied) -> None:
        state, league, records = self.state, self.league, self.records
        match, place = applied.match, applied.place
        boundary = place.boundary
        for change in applied.changes:
            name = change.player
            record = records[name]
            if needs_snapshot(boundary, record):
                state.put_snapshot(league, boundary, name, record)
            last = match.time if match.time is not None else (None if record is None else record.last_time)
            records[name] = PlayerRecord(change.after, last, boundary)
        for change, entry in zip(applied.changes, applied.history):
            state.put_history(league, change.player, entry, match.time)
        if place.opened is not None:
            state.put_boundary(league, boundary, place.key, place.opened)

