"""Every league in memory: the `LeagueState` of `ratings replay` (replay.py)."""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import AbstractSet, Any, Callable, Sequence

from ..engine import Match, PlayerState, RatingChange, RatingSystem
from ..events import Correction, Void
from ..leagues import LeagueConfig
from ..apply import apply
from ..rating import VOIDED, Applied, DuplicateMatch, PlayerRecord, history_dropped, history_entry
from ..rerate import MemoryRecords, Rerated

_PLAYER = attrgetter("player")
_AFTER = attrgetter("after")


class Ledger:
    """Every league's ratings, in memory (a `LeagueState` for apply.apply): the
    players' states, each league's record, log, boundaries and snapshot rows, and
    (with `keep_history`) every player's history."""

    def __init__(self, config: LeagueConfig | None = None, keep_history: bool = False):
        self.config = config or LeagueConfig.defaults()
        self.leagues: dict[str, dict[str, PlayerState]] = {}
        self.records: dict[str, dict[str, Any]] = {}  # league -> its record (algorithm, matches, players, ...)
        self.places: dict[str, dict[str, bytes | None]] = {}  # league -> match_id -> order key (None: voided)
        self.logs: dict[str, _Log] = {}
        self.snaps: dict[str, dict[str, int]] = {}  # league -> player -> boundary of their last write (absent: 0)
        self.since: dict[str, dict[str, int]] = {}  # league -> player -> boundary they joined after (absent: 0)
        self.boundaries: dict[str, dict[int, tuple[bytes, dict[str, Any]]]] = {}
        self.snapshot_rows: dict[str, dict[int, dict[str, PlayerRecord | None]]] = {}  # league -> boundary -> player -> record
        self.workings: dict[str, MemoryRecords] = {}  # league -> a re-rate's working records
        self.jobs: dict[str, dict[str, Any]] = {}  # league -> a re-rate job stopped by a budget
        self.keeps_history = keep_history
        self.histories: dict[tuple[str, str], dict[int, list[Any]]] = {}  # (league, player) -> seq -> row
        self.applied = 0
        self.duplicates = 0
        self.rerates = 0
        # Called with (match, prior states, None for newcomers) after each match applied at the end of its league.
        self.observer: Callable[[Match, list[PlayerState | None]], None] | None = None

    def apply(self, item: Match | Void | Correction) -> list[RatingChange] | Rerated | None:
        """Apply a result or a command: the result's changes, a re-rate's outcome, or
        None if the result's match_id was already applied in its league."""
        try:
            done = apply(self.config, self, item)
        except DuplicateMatch:
            self.duplicates += 1
            return None
        if isinstance(done, Rerated):
            self.rerates += 1
            if isinstance(item, Match):
                self.applied += 1
            return done
        self.applied += 1
        if self.observer is not None:
            self.observer(done.match, done.prior)
        return done.changes

    # -- LeagueState: applying at the end of the log --------------------------------------
    def league(self, league: str) -> dict[str, Any] | None:
        return self.records.get(league)

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        places = self.places.get(league)
        if places is None or match_id not in places:
            return None
        key = places[match_id]
        return VOIDED if key is None else {"key": key.hex()}

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        players = self.leagues.get(league, {})
        snaps = self.snaps.get(league, {})
        since = self.since.get(league, {})
        return [None if (state := players.get(name)) is None
                else PlayerRecord(state, None, snaps.get(name, 0), since.get(name, 0)) for name in names]

    def save(self, applied: Applied) -> None:
        match, place = applied.match, applied.place
        league = match.league
        players = self.leagues.get(league)
        if players is None:
            players = self.leagues[league] = {}
            self.places[league] = {}
            self.logs[league] = _Log()
        for name, record in applied.snapshots:
            self.put_snapshot(league, place.boundary, name, record)
        if place.boundary:  # (records of boundary 0 say nothing a missing entry does not)
            snaps = self.snaps.setdefault(league, {})
            since = self.since.setdefault(league, {})
            for change, record in zip(applied.changes, applied.records):
                snaps[change.player] = record.snap
                if record.since:
                    since[change.player] = record.since
        players.update(zip(map(_PLAYER, applied.changes), map(_AFTER, applied.changes)))
        if place.new:
            self.places[league][match.match_id] = place.key
            self.logs[league].put(place.key, match)
        if place.opened is not None:
            self.put_boundary(league, place.boundary, place.key, place.opened)
        self.records[league] = applied.record
        if self.keeps_history:
            for change, row in zip(applied.changes, applied.history):
                self.put_history(league, change.player, row)

    # -- LeagueState: re-rates ------------------------------------------------------------
    def put_league(self, league: str, record: dict[str, Any]) -> None:
        self.records[league] = record

    def put_placed(self, league: str, match_id: str, place: dict[str, Any]) -> None:
        self.places.setdefault(league, {})[match_id] = bytes.fromhex(place["key"]) if "key" in place else None

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Match]]:
        log = self.logs.get(league)
        return [] if log is None else log.items(start, limit)

    def put_log(self, league: str, key: bytes, match: Match | None) -> None:
        log = self.logs.setdefault(league, _Log())
        if match is None:
            log.remove(key)
        else:
            log.put(key, match)

    def boundary(self, league: str, number: int) -> tuple[bytes, dict[str, Any]] | None:
        return self.boundaries.get(league, {}).get(number)

    def put_boundary(self, league: str, number: int, key: bytes | None, record: dict[str, Any] | None) -> None:
        self.boundaries.setdefault(league, {})[number] = (key, record)  # type: ignore[assignment]

    def snapshot_records(self, league: str, first: int, names: AbstractSet[str],
                         system: RatingSystem) -> dict[str, PlayerRecord | None]:
        rows = self.snapshot_rows.get(league, {})
        found: dict[str, PlayerRecord | None] = {}
        for number in sorted(n for n in rows if n >= first):
            for name, record in rows[number].items():
                if name in names and name not in found:
                    found[name] = record
        return found

    def put_snapshot(self, league: str, number: int, player: str, record: PlayerRecord | None) -> None:
        self.snapshot_rows.setdefault(league, {}).setdefault(number, {})[player] = record

    def forget_snapshots(self, league: str, after: int) -> None:
        for table in (self.snapshot_rows.get(league, {}), self.boundaries.get(league, {})):
            for number in [n for n in table if n > after]:
                del table[number]

    def put_player(self, league: str, name: str, record: PlayerRecord | None) -> None:
        players = self.leagues.setdefault(league, {})
        snaps = self.snaps.setdefault(league, {})
        since = self.since.setdefault(league, {})
        if record is None:
            players.pop(name, None)
            snaps.pop(name, None)
            since.pop(name, None)
        else:
            players[name] = record.state
            snaps[name] = record.snap
            if record.since:
                since[name] = record.since
            else:
                since.pop(name, None)

    def put_history(self, league: str, player: str, row: list[Any]) -> None:
        if not self.keeps_history:
            return
        entries = self.histories.setdefault((league, player), {})
        seq = row[0]
        entries[seq] = row
        dropped = history_dropped(seq, self.config.options_for(league).history_max)
        if dropped is not None:
            entries.pop(dropped, None)

    def forget_history(self, league: str, player: str, first: int, last: int) -> None:
        entries = self.histories.get((league, player))
        if entries is None:
            return
        for seq in range(first, last + 1):
            entries.pop(seq, None)
        if not entries:
            del self.histories[(league, player)]

    def working(self, league: str, system: RatingSystem) -> MemoryRecords:
        return self.workings.setdefault(league, MemoryRecords())

    def job(self, league: str) -> dict[str, Any]:
        return self.jobs[league]

    def put_job(self, league: str, job: dict[str, Any] | None) -> None:
        if job is None:
            self.jobs.pop(league, None)
        else:
            self.jobs[league] = job

    # -- reading -------------------------------------------------------------------
    def state(self, league: str, player: str) -> PlayerState | None:
        return self.leagues.get(league, {}).get(player)

    def history(self, league: str, player: str) -> list[dict[str, Any]]:
        """The player's history entries, oldest first (`keep_history` only)."""
        rows = self.histories.get((league, player), {})
        return [history_entry(rows[seq]) for seq in sorted(rows)]

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{league: {player: {rating, matches, ...extras}}}: the replay output."""
        return {
            league: {player: state.public() for player, state in players.items()}
            for league, players in self.leagues.items()
        }

    @property
    def player_count(self) -> int:
        return sum(len(players) for players in self.leagues.values())


class _Log:
    """One league's log in memory: order keys kept sorted (results mostly come at the end)."""

    __slots__ = ("keys", "matches")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.matches: dict[bytes, Match] = {}

    def put(self, key: bytes, match: Match) -> None:
        if key not in self.matches:
            if not self.keys or key > self.keys[-1]:
                self.keys.append(key)
            else:
                bisect.insort(self.keys, key)
        self.matches[key] = match

    def remove(self, key: bytes) -> None:
        if self.matches.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]

    def items(self, start: bytes, limit: int | None) -> list[tuple[bytes, Match]]:
        first = bisect.bisect_left(self.keys, start)
        keys = self.keys[first:] if limit is None else self.keys[first:first + limit]
        return [(key, self.matches[key]) for key in keys]
