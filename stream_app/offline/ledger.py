"""Every league in memory: the `LeagueState` of `ratings replay` (replay.py)."""

from __future__ import annotations

import bisect
from itertools import repeat
from operator import attrgetter
from typing import AbstractSet, Any, Callable, Sequence

from ..engine import Match, PlayerState, RatingChange, RatingSystem
from ..inputs import Correction, SeasonStart, Void
from ..leagues import LeagueConfig, LeagueRule
from ..standings import Standings
from ..apply import apply
from ..rating.applied import Applied, SeasonStarted
from ..rating.errors import DuplicateMatch
from ..rating.history import history_dropped, history_entry
from ..rating.records import VOIDED, Entry, PlayerRecord
from ..rating.season_step import store_seasons
from ..rating.tiers import build_standings
from ..rerate import InMemoryWorkingRecords, Rerated
from ..seasons import archive_entry, sorted_final

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
        self.workings: dict[str, InMemoryWorkingRecords] = {}  # league -> a re-rate's working records
        self.jobs: dict[str, dict[str, Any]] = {}  # league -> a re-rate job stopped by a budget
        self.keeps_history = keep_history
        self.histories: dict[tuple[str, str], dict[int, list[Any]]] = {}  # (league, player) -> seq -> row
        # Leagues with seasons or tiers: each player's season base and last match time (inactivity ranks them).
        self.bases: dict[str, dict[str, int]] = {}
        self.last_times: dict[str, dict[str, float]] = {}
        self.season_rows: dict[str, list[dict[str, Any]]] = {}  # league -> its seasons, first to last
        self.finals: dict[tuple[str, int], list[list[Any]]] = {}  # (league, season number) -> final standings
        self.boards: dict[str, Standings] = {}  # leagues with tiers -> their standings (rating.build_standings)
        self.applied = 0
        self.duplicates = 0
        self.rerates = 0
        # Called with (match, prior states, None for newcomers) after each match applied at the end of its league.
        self.observer: Callable[[Match, list[PlayerState | None]], None] | None = None

    def apply(self, item: Match | Void | Correction | SeasonStart) -> list[RatingChange] | Rerated | SeasonStarted | None:
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
        if isinstance(done, SeasonStarted):
            return done
        assert done is not None  # (with no budget a re-rate is done in one part)
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
        if league in self.bases:
            bases, last_times = self.bases[league], self.last_times[league]
            return [None if (state := players.get(name)) is None
                    else PlayerRecord(state, last_times.get(name), snaps.get(name, 0), since.get(name, 0),
                                      bases.get(name, 0)) for name in names]
        return [None if (state := players.get(name)) is None
                else PlayerRecord(state, None, snaps.get(name, 0), since.get(name, 0)) for name in names]

    def league_players(self, league: str, system: RatingSystem) -> list[tuple[str, PlayerRecord]]:
        names = sorted(self.leagues.get(league, {}))
        return list(zip(names, self.player_records(league, names, system)))  # type: ignore[arg-type]

    def seasons(self, league: str) -> list[dict[str, Any]]:
        return list(self.season_rows.get(league, ()))

    def standings(self, league: str, rule: LeagueRule) -> Standings:
        board = self.boards.get(league)
        if board is None:
            board = self.boards[league] = build_standings(rule, self.records.get(league),
                                                          self.league_players(league, rule.system))
        return board

    def forget_standings(self, league: str) -> None:
        self.boards.pop(league, None)

    def save_season(self, started: SeasonStarted) -> None:
        league, place = started.league, started.place
        self._open(league)
        for name, record in started.snapshots:
            self.put_snapshot(league, place.boundary, name, record)
        for change, record in zip(started.changes, started.records):
            self.put_player(league, change.player, record)
        if place.new and started.entry is not None:
            self.logs[league].put(place.key, started.entry)
        self.records[league] = started.record
        store_seasons(self, started)

    def put_season(self, league: str, number: int, row: dict[str, Any]) -> None:
        rows = self.season_rows.setdefault(league, [])
        if number <= len(rows):
            rows[number - 1] = row
        else:
            rows.append(row)

    def put_final(self, league: str, number: int, rows: list[list[Any]]) -> None:
        self.finals[(league, number)] = rows

    def forget_seasons(self, league: str, after: int) -> None:
        rows = self.season_rows.get(league, [])
        for number in range(max(after, 1), len(rows) + 1):
            self.finals.pop((league, number), None)
        del rows[after:]

    def _open(self, league: str) -> None:
        """A league's first write: its tables."""
        if league not in self.leagues:
            self.leagues[league] = {}
            self.places[league] = {}
            self.logs[league] = _Log()
            options = self.config.options_for(league)
            if options.season is not None or options.tiers:
                self.bases[league] = {}
                self.last_times[league] = {}

    def save(self, applied: Applied) -> None:
        match, place = applied.match, applied.place
        league = match.league
        if league not in self.leagues:
            self._open(league)
        players = self.leagues[league]
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
        if league in self.last_times and match.time is not None:
            self.last_times[league].update(zip(map(_PLAYER, applied.changes), repeat(match.time)))
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

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Entry]]:
        log = self.logs.get(league)
        return [] if log is None else log.items(start, limit)

    def put_log(self, league: str, key: bytes, match: Entry | None) -> None:
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
        self._open(league)
        players = self.leagues[league]
        snaps = self.snaps.setdefault(league, {})
        since = self.since.setdefault(league, {})
        bases, last_times = self.bases.get(league), self.last_times.get(league)
        if record is None:
            players.pop(name, None)
            snaps.pop(name, None)
            since.pop(name, None)
            if bases is not None and last_times is not None:
                bases.pop(name, None)
                last_times.pop(name, None)
        else:
            players[name] = record.state
            snaps[name] = record.snap
            if record.since:
                since[name] = record.since
            else:
                since.pop(name, None)
            if bases is not None and last_times is not None:
                _keep(bases, name, record.base or None)
                _keep(last_times, name, record.last_time)

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

    def working(self, league: str, system: RatingSystem) -> InMemoryWorkingRecords:
        return self.workings.setdefault(league, InMemoryWorkingRecords())

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

    def final_standings(self) -> list[dict[str, Any]]:
        """Every ended season's final standings, by league, season and rank (`ratings
        replay --seasons`): each row with its league and season."""
        out = []
        for league in sorted(self.season_rows):
            for number, row in enumerate(self.season_rows[league], start=1):
                for final in sorted_final(self.finals.get((league, number), [])):
                    out.append({"league": league, "season": row["name"], **archive_entry(final)})
        return out

    @property
    def player_count(self) -> int:
        return sum(len(players) for players in self.leagues.values())


def _keep(values: dict[str, Any], name: str, value: Any) -> None:
    if value is None:
        values.pop(name, None)
    else:
        values[name] = value


class _Log:
    """One league's log in memory: order keys kept sorted (results mostly come at the end)."""

    __slots__ = ("keys", "matches")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.matches: dict[bytes, Entry] = {}

    def put(self, key: bytes, match: Entry) -> None:
        if key not in self.matches:
            if not self.keys or key > self.keys[-1]:
                self.keys.append(key)
            else:
                bisect.insort(self.keys, key)
        self.matches[key] = match

    def remove(self, key: bytes) -> None:
        if self.matches.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]

    def items(self, start: bytes, limit: int | None) -> list[tuple[bytes, Entry]]:
        first = bisect.bisect_left(self.keys, start)
        keys = self.keys[first:] if limit is None else self.keys[first:first + limit]
        return [(key, self.matches[key]) for key in keys]
