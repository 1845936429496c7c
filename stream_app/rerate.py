"""Re-rating a league after its log changed before its end: a result voided,
corrected, or placed late in time order (stream_app/rating/ decides which).

A league's ratings are a pure function of its log, so the exact fix is to
apply the log again from the first entry that changed. It starts from the
last boundary at or before that entry: each player's state at the boundary is
their first snapshot row at or after it (written when their state first
changed after it), else their current record (it has not changed since). The
entries from there on are applied again through `rating.match_step.apply_at`, the same
step as any match, and every snapshot row and boundary past the starting one
is written anew on the way. Then each player's record is replaced, and every
player whose rating state changed gets one correction: the state last
published for them, and the state now.

Meanwhile the players' records stay as they were (reads see the last published
ratings): the states being rebuilt are the league's working records. A re-rate
is a job, done in parts of about `budget` participant results each: between
two parts the job (where it is, the league's record so far) and the working
records are state like any other, so that the stream commits each part and a
worker that dies in the middle resumes at the last part committed. The replay
does a job in one part.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .engine import Match, PlayerState, RatingChange, RatingSystem
from .leagues import LeagueConfig, LeagueRule
from .rating.applied import Applied, SeasonStarted
from .rating.match_step import apply_entry
from .rating.ports import LeagueState, WorkingRecords
from .rating.records import NO_SNAPSHOT, Entry, PlayerRecord, Tiers
from .rating.season_step import store_seasons
from .rating.snapshots import at_boundary
from .rating.tiers import tier_in
from .runtime import no_cyclic_gc
from .standings import Standings

LOG_CHUNK = 512  # log entries read at a time by a job's later parts


@dataclass(slots=True)
class Edit:
    """What changed in the log: an entry that goes, an entry that comes (or both)."""

    removed: bytes | None = None  # order key
    added: tuple[bytes, Entry] | None = None

    @property
    def start(self) -> bytes:
        return min(key for key in (self.removed, self.added and self.added[0]) if key is not None)


@dataclass(slots=True)
class RatingCorrection:
    player: str
    published: PlayerState | None  # the state last published (None: the player had none)
    now: PlayerState | None  # the corrected state (None: the player has no counted match left)
    tiers: Tiers | None = None  # before and after (with the league's tiers)


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
           match_id: str, budget: int | None = None) -> Rerated | None:
    """Apply the edit to the league's log and re-rate the league from it. `record`
    is the league's current record, with the arrival counters already moved on.
    With a `budget`, the re-rate stops after about that many participant results,
    saves its job and returns None (`proceed` goes on)."""
    with no_cyclic_gc():  # millions of objects made and freed, none in a cycle
        return _rerate(config, state, league, record, edit, match_id, budget)


def _rerate(config: LeagueConfig, state: LeagueState, league: str, record: dict[str, Any], edit: Edit,
            match_id: str, budget: int | None) -> Rerated | None:
    system = config.system_for(league)
    number, base_key, base = _start(state, league, record, edit.start)
    old = list(state.log(league, base_key))
    new = [(key, match) for key, match in old if key != edit.removed]
    if edit.removed is not None:
        state.put_log(league, edit.removed, None)
    if edit.added is not None:
        insort(new, edit.added, key=lambda item: item[0])
        state.put_log(league, *edit.added)
    names = list(dict.fromkeys(p.player for _, entry in (*old, *new) if isinstance(entry, Match)
                               for p in entry.participants))
    if config.options_for(league).season is not None:  # a season's start changes every player
        names = list(dict.fromkeys([*names, *(name for name, _ in state.league_players(league, system))]))
    current = dict(zip(names, state.player_records(league, names, system)))
    working = state.working(league, system)
    for name, at_boundary in _at_boundary(state, league, number, system, current).items():
        working.set(name, at_boundary)
    state.forget_snapshots(league, number)
    _reopen_season(state, league, 0 if base is None or "season" not in base else base["season"][0])
    job = {"match_id": match_id, "record": record, "next": None, "reapplied": 0, "total": len(new),
           "working": base if base is not None else {"algorithm": config.rule_for(league).algorithm, "matches": 0,
                                                     "players": 0}}
    return _run(config, state, league, job, working, new, budget)


def proceed(config: LeagueConfig, state: LeagueState, league: str, budget: int | None = None) -> Rerated | None:
    """The next part of the league's re-rate job (LeagueState.job): the Rerated
    once it is done, else None."""
    job = dict(state.job(league))  # changed as the part goes: not the stored value itself
    working = state.working(league, config.system_for(league))
    with no_cyclic_gc():
        return _run(config, state, league, job, working, _entries(state, league, bytes.fromhex(job["next"])), budget)


def _entries(state: LeagueState, league: str, start: bytes) -> Iterable[tuple[bytes, Entry]]:
    while True:
        chunk = state.log(league, start, LOG_CHUNK)
        yield from chunk
        if len(chunk) < LOG_CHUNK:
            return
        start = chunk[-1][0] + b"\x00"


def _run(config: LeagueConfig, state: LeagueState, league: str, job: dict[str, Any], working: WorkingRecords,
         entries: Iterable[tuple[bytes, Entry]], budget: int | None) -> Rerated | None:
    rule = config.rule_for(league)
    view = _Rerating(state, league, working)
    spent = 0
    record = job["working"]
    job["next"] = None
    for key, match in entries:
        if budget is not None and spent >= budget:
            job["next"] = key.hex()
            break
        record = apply_entry(rule, view, record, match, key)
        spent += len(match.participants) if isinstance(match, Match) else 1
        job["reapplied"] += 1
    job["working"] = record
    working.flush()
    if job["next"] is not None:
        state.put_job(league, job)
        return None
    state.put_job(league, None)
    return _finish(config, state, league, job, working)


def _finish(config: LeagueConfig, state: LeagueState, league: str, job: dict[str, Any],
            working: WorkingRecords) -> Rerated:
    """Replace the players' records with the working ones; the corrections."""
    rule = config.rule_for(league)
    record = job["record"]
    final = {key: value for key, value in job["working"].items() if key not in _ARRIVAL}
    final.update((key, record[key]) for key in _ARRIVAL if key in record)
    final["revision"] = record.get("revision", 0) + 1
    state.put_league(league, final)
    names = working.names()
    corrections = []
    keeps_history = rule.options.history_max != 0
    tiers = rule.options.tiers
    board = state.standings(league, rule) if tiers else None  # the players as published
    tiers_then: dict[str, str | None] = {}
    for name, then in zip(names, state.player_records(league, names, rule.system)):
        now = working.get(name)
        state.put_player(league, name, now)
        now_state = None if now is None else now.state
        then_state = None if then is None else then.state
        if now_state != then_state:
            corrections.append(RatingCorrection(name, then_state, now_state))
            if board is not None:
                tiers_then[name] = tier_in(tiers, board, name, then_state)
        if keeps_history:
            before = 0 if then_state is None else then_state.matches
            after = 0 if now_state is None else now_state.matches
            if after < before:
                state.forget_history(league, name, after + 1, before)
    working.forget(names)
    if board is not None:  # the tiers after, among the players as they are now
        state.forget_standings(league)
        board = state.standings(league, rule)
        assert board is not None
        for correction in corrections:
            correction.tiers = (tiers_then[correction.player], tier_in(tiers, board, correction.player, correction.now))
    return Rerated(rule.algorithm, league, job["match_id"], final["revision"], corrections, final, job["reapplied"])


def _reopen_season(state: LeagueState, league: str, number: int) -> None:
    """The seasons as they were at the re-rate's start: season `number` in progress
    (0: none yet), none after it. The entries applied again start them anew."""
    seasons = state.seasons(league)
    state.forget_seasons(league, number)
    if number:
        row = {key: value for key, value in seasons[number - 1].items() if key not in ("end", "players")}
        state.put_season(league, number, row)


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
    found = state.snapshot_records(league, number, current.keys(), system)
    return {name: at_boundary(number, record, found.get(name, NO_SNAPSHOT)) for name, record in current.items()}


class _Rerating:
    """The league as `apply_at` sees it during a re-rate: the players' records are
    the working ones; snapshot rows, boundaries and history entries go to the state."""

    def __init__(self, state: LeagueState, league: str, working: WorkingRecords):
        self.state = state
        self.league = league
        self.working = working
        self.keeps_history = state.keeps_history

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        return [self.working.get(name) for name in names]

    def league_players(self, league: str, system: RatingSystem) -> list[tuple[str, PlayerRecord]]:
        working = self.working
        return [(name, record) for name in sorted(working.names()) if (record := working.get(name)) is not None]

    def seasons(self, league: str) -> list[dict[str, Any]]:
        return self.state.seasons(league)

    def standings(self, league: str, rule: LeagueRule) -> Standings | None:
        return None  # the entries applied again publish nothing: the corrections at the end do

    def save_season(self, started: SeasonStarted) -> None:
        self._keep(started.place.boundary, started.snapshots, started.changes, started.records)
        store_seasons(self.state, started)

    def save(self, applied: Applied) -> None:
        self._keep(applied.place.boundary, applied.snapshots, applied.changes, applied.records)
        state, league = self.state, self.league
        for change, row in zip(applied.changes, applied.history):
            state.put_history(league, change.player, row)
        place = applied.place
        if place.opened is not None:
            state.put_boundary(league, place.boundary, place.key, place.opened)

    def _keep(self, boundary: int, snapshots: list[tuple[str, PlayerRecord]], changes: list[RatingChange],
              records: list[PlayerRecord]) -> None:
        """The snapshot rows to the state; the players' records to the working ones."""
        for name, record in snapshots:
            self.state.put_snapshot(self.league, boundary, name, record)
        for change, record in zip(changes, records):
            self.working.set(change.player, record)
