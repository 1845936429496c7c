"""Every league in memory, for `ratings replay` (replay.py): the worker's tables and
their rules (state/league_tables.py `PartitionLeagues`) over the memory backend
(state/memory.py), one partition holding every league."""

from __future__ import annotations

from typing import Any, Callable

from ..engine import Match, PlayerState, RatingChange
from ..inputs import SEP, Correction, SeasonStart, Void
from ..leagues import LeagueConfig
from ..apply import apply
from ..rating.applied import SeasonStarted
from ..rating.errors import DuplicateMatch
from ..rating.history import history_entry
from ..rating.records import Entry, PlayerRecord
from ..rerate import Rerated
from ..seasons import archive_entry, sorted_final
from ..state.league_tables import PartitionLeagues
from ..state.memory import MemoryPartition
from ..state.tables import (BOUNDARIES, FINALS, HISTORY, LEAGUES, PLAYERS, SNAPSHOTS, history_prefix,
                            prefix_end, season_key, seq_of, tables_for)

_SEP = SEP.encode()


class Ledger:
    """Every league's ratings, in memory: the players' records, each league's record,
    log, boundaries, snapshot rows and seasons, and (with `keep_history`) every
    player's history, in the worker's tables; what `ratings replay` counts and writes."""

    def __init__(self, config: LeagueConfig | None = None, keep_history: bool = False):
        self.config = config or LeagueConfig.defaults()
        self.memory = MemoryPartition(tables_for(self.config))
        # The standings of leagues with tiers are kept up to date, as the worker does.
        self.tables = PartitionLeagues(self.memory, self.config, standings={}, keeps_history=keep_history)
        self.keeps_history = keep_history
        self.views: dict[str, tuple[int, Any]] = {}  # name -> (the tables' writes then, the view)
        self.applied = 0
        self.duplicates = 0
        self.rerates = 0
        # Called with (match, prior states, None for newcomers) after each match applied at the end of its league.
        self.observer: Callable[[Match, list[PlayerState | None]], None] | None = None

    def apply(self, item: Match | Void | Correction | SeasonStart) -> list[RatingChange] | Rerated | SeasonStarted | None:
        """Apply a result or a command: the result's changes, a re-rate's outcome, or
        None if the result's match_id was already applied in its league."""
        try:
            done = apply(self.config, self.tables, item)
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

    # -- reading ---------------------------------------------------------------------------
    def league(self, league: str) -> dict[str, Any] | None:
        return self.tables.league(league)

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        return self.tables.placed(league, match_id)

    def log(self, league: str, start: bytes = b"") -> list[tuple[bytes, Entry]]:
        return self.tables.log(league, start)

    def seasons(self, league: str) -> list[dict[str, Any]]:
        return self.tables.seasons(league)

    def state(self, league: str, player: str) -> PlayerState | None:
        record = self.record(league, player)
        return None if record is None else record.state

    def record(self, league: str, player: str) -> PlayerRecord | None:
        return self.memory.get(PLAYERS, f"{league}{SEP}{player}".encode())

    def league_names(self) -> list[str]:
        """Every league, in the order of its first write."""
        return [key.decode() for key, _ in self.memory.items(LEAGUES)]

    def records_by_league(self) -> dict[str, dict[str, PlayerRecord]]:
        """{league: {player: record}}: every league (in the order of its first write), its
        players in the order they were first rated."""
        return self._view("records_by_league", self._records_by_league)

    def _records_by_league(self) -> dict[str, dict[str, PlayerRecord]]:
        found: dict[str, dict[str, PlayerRecord]] = {league: {} for league in self.league_names()}
        for key, record in self.memory.items(PLAYERS):
            league, _, player = key.partition(_SEP)
            found[league.decode()][player.decode()] = record
        return found

    def _view(self, name: str, build: Callable[[], Any]) -> Any:
        """What `build` makes of the tables, made again only after a write (the views below
        are read in loops, player by player)."""
        kept = self.views.get(name)
        if kept is None or kept[0] != self.memory.writes:
            kept = self.views[name] = (self.memory.writes, build())
        return kept[1]

    def history(self, league: str, player: str) -> list[dict[str, Any]]:
        """The player's history entries, oldest first (`keep_history` only)."""
        return [history_entry(row) for _, row in self._history_rows(league, player)]

    def _history_rows(self, league: str, player: str) -> list[tuple[bytes, list[Any]]]:
        prefix = history_prefix(league, player)
        return self.memory.scan(HISTORY, prefix, prefix_end(prefix))

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{league: {player: {rating, matches, ...extras}}}: the replay output."""
        return {league: {player: record.state.public() for player, record in players.items()}
                for league, players in self.records_by_league().items()}

    def final_standings(self) -> list[dict[str, Any]]:
        """Every ended season's final standings, by league, season and rank (`ratings
        replay --seasons`): each row with its league and season."""
        out = []
        for league in sorted(self.league_names()):
            for number, row in enumerate(self.seasons(league), start=1):
                for final in sorted_final(self._finals(league, number)):
                    out.append({"league": league, "season": row["name"], **archive_entry(final)})
        return out

    def _finals(self, league: str, number: int) -> list[list[Any]]:
        prefix = season_key(league, number)
        return [row for _, row in self.memory.scan(FINALS, prefix, prefix_end(prefix))]

    @property
    def player_count(self) -> int:
        return len(self.memory.values[PLAYERS])

    # -- views of the tables by league, built when asked (tests, the demo) ---------------------
    @property
    def leagues(self) -> dict[str, dict[str, PlayerState]]:
        return self._view("leagues", self._leagues)

    def _leagues(self) -> dict[str, dict[str, PlayerState]]:
        return {league: {player: record.state for player, record in players.items()}
                for league, players in self.records_by_league().items()}

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        return self._view("records", self._records)

    def _records(self) -> dict[str, dict[str, Any]]:
        return {key.decode(): record for key, record in self.memory.items(LEAGUES)}

    @property
    def season_rows(self) -> dict[str, list[dict[str, Any]]]:
        return self._view("season_rows", self._season_rows)

    def _season_rows(self) -> dict[str, list[dict[str, Any]]]:
        return {league: rows for league in self.league_names() if (rows := self.seasons(league))}

    @property
    def last_times(self) -> dict[str, dict[str, float]]:
        return self._view("last_times", self._last_times)

    def _last_times(self) -> dict[str, dict[str, float]]:
        return {league: {player: record.last_time for player, record in players.items() if record.last_time is not None}
                for league, players in self.records_by_league().items()}

    @property
    def since(self) -> dict[str, dict[str, int]]:
        return self._view("since", self._since)

    def _since(self) -> dict[str, dict[str, int]]:
        return {league: {player: record.since for player, record in players.items() if record.since}
                for league, players in self.records_by_league().items()}

    @property
    def histories(self) -> dict[tuple[str, str], dict[int, list[Any]]]:
        return self._view("histories", self._histories)

    def _histories(self) -> dict[tuple[str, str], dict[int, list[Any]]]:
        """{(league, player): {seq: row}}: players in the order first rated."""
        found = {}
        for league, players in self.records_by_league().items():
            for player in players:
                rows = self._history_rows(league, player)
                if rows:
                    found[(league, player)] = {seq_of(key): row for key, row in rows}
        return found

    @property
    def finals(self) -> dict[tuple[str, int], list[list[Any]]]:
        return self._view("finals", self._all_finals)

    def _all_finals(self) -> dict[tuple[str, int], list[list[Any]]]:
        return {(league, number): rows for league in self.league_names()
                for number in range(1, len(self.seasons(league)) + 1) if (rows := self._finals(league, number))}

    @property
    def boundaries(self) -> dict[str, dict[int, tuple[bytes, dict[str, Any]]]]:
        return self._view("boundaries", self._boundaries)

    def _boundaries(self) -> dict[str, dict[int, tuple[bytes, dict[str, Any]]]]:
        found: dict[str, dict[int, tuple[bytes, dict[str, Any]]]] = {}
        for key, value in self.memory.items(BOUNDARIES):
            league, _, number = key.partition(_SEP)
            found.setdefault(league.decode(), {})[int.from_bytes(number, "big")] = (bytes.fromhex(value["key"]),
                                                                                   value["record"])
        return found

    @property
    def snapshot_rows(self) -> dict[str, dict[int, dict[str, PlayerRecord | None]]]:
        return self._view("snapshot_rows", self._snapshot_rows)

    def _snapshot_rows(self) -> dict[str, dict[int, dict[str, PlayerRecord | None]]]:
        found: dict[str, dict[int, dict[str, PlayerRecord | None]]] = {}
        for key, value in self.memory.scan(SNAPSHOTS, b"", b"\xff"):
            league, _, rest = key.partition(_SEP)
            rows = found.setdefault(league.decode(), {}).setdefault(int.from_bytes(rest[:8], "big"), {})
            rows[rest[8:].decode()] = value if isinstance(value, PlayerRecord) else None
        return found
