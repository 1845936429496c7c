"""One partition's leagues in the domain's tables (state/tables.py), as apply.apply
reads and writes them (the `LeagueState` port of rating/ports.py), over either
backend of the storage port (state/base.py `Storage`): the stream's transaction
(the committed records plus the batch in progress) or the replay's memory.
"""

from __future__ import annotations

from itertools import repeat
from typing import AbstractSet, Any, Sequence

import orjson

from ..engine import RatingSystem
from ..leagues import LeagueConfig, LeagueRule
from ..standings import Standings
from ..rating.applied import Applied, SeasonStarted
from ..rating.history import history_dropped
from ..rating.records import ABSENT, VOIDED, Entry, PlayerRecord
from ..rating.season_step import store_seasons
from ..rating.tiers import build_standings
from .tables import (BOUNDARIES, FINALS, HISTORY, JOBS, LEAGUES, LOG, MATCHES, PLAYERS, SEASONS, SNAPSHOTS, WORKING,
                     boundary_key, final_key, history_key, history_keys, league_prefix, log_key, match_key, player_key,
                     record_of, prefix_end, season_key, snapshot_key)
from .base import Storage


class PartitionLeagues:
    """The leagues of one partition, as apply.apply reads and writes them, over the
    storage port (the stream's transaction, the replay's memory)."""

    def __init__(self, state: Storage, config: LeagueConfig, standings: dict[str, Standings] | None = None,
                 keeps_history: bool = True):
        self.state = state
        self.config = config
        # Whether history entries are kept: the worker's API serves them; a replay keeps
        # them with --history only (apply then builds none).
        self.keeps_history = keeps_history
        # Built once: each league's record key, key prefix and history_max; the keys of the
        # match and the players read last (`save` writes them next).
        self.league_keys: dict[str, tuple[bytes, bytes, int | None]] = {}
        self.match_read: tuple[str, str, bytes] = ("", "", b"")
        self.players_read: tuple[str, Sequence[str], list[bytes]] = ("", (), [])  # league, names, keys
        # The standings of the partition's leagues with tiers, kept between batches by the
        # record handler (None: nothing published from here: a take-up, a standby).
        self.standings_by_league = standings
        self.rerating: set[str] = set()  # leagues whose re-rate is in progress (put_job keeps it)

    # -- applying at the end of the log ----------------------------------------------------
    def _league_keys(self, league: str) -> tuple[bytes, bytes, int | None]:
        keys = self.league_keys[league] = (league.encode(), league_prefix(league),
                                           self.config.rule_for(league).options.history_max)
        return keys

    def league(self, league: str) -> dict[str, Any] | None:
        known = self.league_keys
        return self.state.get(LEAGUES, (known[league] if league in known else self._league_keys(league))[0])

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        key = match_key(league, match_id)
        self.match_read = (league, match_id, key)
        place = self.state.get(MATCHES, key)  # (an order key, or VOIDED: tables.PlaceCodec)
        return place if place is None or type(place) is not bytes else {"key": place.hex()}

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        known = self.league_keys
        prefix = (known[league] if league in known else self._league_keys(league))[1]
        keys = [prefix + name.encode() for name in names]
        self.players_read = (league, names, keys)
        return self.state.get_many(PLAYERS, keys)

    def save(self, applied: Applied) -> None:
        """The match's writes, in one `put_many` (a boundary's between them, in their order)."""
        match, place = applied.match, applied.place
        league = match.league
        for name, record in applied.snapshots:
            self.put_snapshot(league, place.boundary, name, record)
        names = [change.player for change in applied.changes]
        read_league, read_names, read_keys = self.players_read
        # The keys of the players read last, if these are they (the changes come in their order).
        players = read_keys if read_league == league and read_names == names else [
            player_key(league, name) for name in names]
        writes: list[tuple[str, bytes, Any]] = list(zip(repeat(PLAYERS), players, applied.records))
        known = self.league_keys
        league_key, prefix, history_max = known[league] if league in known else self._league_keys(league)
        if place.new:
            read = self.match_read
            same = read[0] == league and read[1] == match.match_id
            writes += ((MATCHES, read[2] if same else match_key(league, match.match_id), place.key),
                       (LOG, prefix + place.key, match))
        if place.opened is not None:
            self.state.put_many(writes)
            writes = []
            self.put_boundary(league, place.boundary, place.key, place.opened)
        writes += ((LEAGUES, league_key, applied.record),)
        if applied.history:
            seqs = [row[0] for row in applied.history]
            history = history_keys(players, seqs)
            if history_max is None:  # every entry kept (the default): none to drop
                writes += zip(repeat(HISTORY), history, applied.history)
            else:
                for player, key, seq, row in zip(players, history, seqs, applied.history):
                    writes += ((HISTORY, key, row),)
                    dropped = history_dropped(seq, history_max)
                    if dropped is not None:
                        writes += ((HISTORY, history_keys([player], [dropped])[0], None),)
        self.state.put_many(writes)

    def league_players(self, league: str, system: RatingSystem) -> list[tuple[str, PlayerRecord]]:
        prefix = league_prefix(league)
        return [(key[len(prefix):].decode(), record) for key, record in self.state.scan(PLAYERS, prefix, prefix_end(prefix))]

    def standings(self, league: str, rule: LeagueRule) -> Standings | None:
        by_league = self.standings_by_league
        if by_league is None:
            return None
        found = by_league.get(league)
        if found is None:
            found = by_league[league] = build_standings(rule, self.league(league), self.league_players(league, rule.system))
        return found

    def forget_standings(self, league: str) -> None:
        if self.standings_by_league is not None:
            self.standings_by_league.pop(league, None)

    def forget_all_standings(self) -> None:
        """A record failed half way: any league's standings may be off; built again when asked."""
        if self.standings_by_league is not None:
            self.standings_by_league.clear()

    def seasons(self, league: str) -> list[dict[str, Any]]:
        prefix = league_prefix(league)
        return [row for _, row in self.state.scan(SEASONS, prefix, prefix_end(prefix))]

    def save_season(self, started: SeasonStarted) -> None:
        league, place = started.league, started.place
        put = self.state.put
        for name, record in started.snapshots:
            self.put_snapshot(league, place.boundary, name, record)
        for change, record in zip(started.changes, started.records):
            put(PLAYERS, player_key(league, change.player), record)
        if place.new and started.entry is not None:
            put(LOG, log_key(league, place.key), started.entry)
        put(LEAGUES, league.encode(), started.record)
        store_seasons(self, started)

    def put_season(self, league: str, number: int, row: dict[str, Any]) -> None:
        self.state.put(SEASONS, season_key(league, number), row)

    def put_final(self, league: str, number: int, rows: list[list[Any]]) -> None:
        for row in rows:
            self.state.put(FINALS, final_key(league, number, row[0]), row)

    def forget_seasons(self, league: str, after: int) -> None:
        end = prefix_end(league_prefix(league))
        for table, first in ((SEASONS, after + 1), (FINALS, max(after, 1))):
            for key, _ in self.state.scan(table, season_key(league, first), end, raw=True):
                self.state.put(table, key, None)

    def put_history(self, league: str, player: str, row: list[Any]) -> None:
        self._put_history(league, player, row, self.config.options_for(league).history_max)

    def _put_history(self, league: str, player: str, row: list[Any], history_max: int | None) -> None:
        seq = row[0]
        self.state.put(HISTORY, history_key(league, player, seq), row)
        dropped = history_dropped(seq, history_max)
        if dropped is not None:
            self.state.put(HISTORY, history_key(league, player, dropped), None)

    # -- re-rates (rerate.py) -----------------------------------------------------------------
    def put_league(self, league: str, record: dict[str, Any]) -> None:
        self.state.put(LEAGUES, league.encode(), record)

    def put_placed(self, league: str, match_id: str, place: dict[str, Any]) -> None:
        self.state.put(MATCHES, match_key(league, match_id), bytes.fromhex(place["key"]) if "key" in place else VOIDED)

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Entry]]:
        prefix = league_prefix(league)
        return [(key[len(prefix):], entry) for key, entry in self.state.scan(LOG, prefix + start, prefix_end(prefix), limit)]

    def put_log(self, league: str, key: bytes, match: Entry | None) -> None:
        self.state.put(LOG, log_key(league, key), match)

    def boundary(self, league: str, number: int) -> tuple[bytes, dict[str, Any]] | None:
        value = self.state.get(BOUNDARIES, boundary_key(league, number))
        return None if value is None else (bytes.fromhex(value["key"]), value["record"])

    def put_boundary(self, league: str, number: int, key: bytes | None, record: dict[str, Any] | None) -> None:
        value = None if key is None else {"key": key.hex(), "record": record}
        self.state.put(BOUNDARIES, boundary_key(league, number), value)

    def snapshot_records(self, league: str, first: int, names: AbstractSet[str],
                         system: RatingSystem) -> dict[str, PlayerRecord | None]:
        at = len(league_prefix(league)) + 8
        found: dict[str, PlayerRecord | None] = {}
        for key, raw in self.state.scan(SNAPSHOTS, boundary_key(league, first), prefix_end(league_prefix(league)), raw=True):
            name = key[at:].decode()
            if name in names and name not in found:
                # Stored bytes (decoded only for these players) or a value written in the batch.
                value = orjson.loads(raw) if type(raw) is bytes else raw
                found[name] = value if type(value) is PlayerRecord else None if value == ABSENT else record_of(value, system)
        return found

    def put_snapshot(self, league: str, number: int, player: str, record: PlayerRecord | None) -> None:
        self.state.put(SNAPSHOTS, snapshot_key(league, number, player), ABSENT if record is None else record)

    def forget_snapshots(self, league: str, after: int) -> None:
        end = prefix_end(league_prefix(league))
        for table in (SNAPSHOTS, BOUNDARIES):
            for key, _ in self.state.scan(table, boundary_key(league, after + 1), end, raw=True):
                self.state.put(table, key, None)

    def put_player(self, league: str, name: str, record: PlayerRecord | None) -> None:
        self.state.put(PLAYERS, player_key(league, name), record)

    def forget_history(self, league: str, player: str, first: int, last: int) -> None:
        for seq in range(first, last + 1):
            self.state.put(HISTORY, history_key(league, player, seq), None)

    def working(self, league: str, system: RatingSystem) -> "StoredWorkingRecords":
        return StoredWorkingRecords(self.state, league, system)

    def job(self, league: str) -> dict[str, Any]:
        return self.state.get(JOBS, league.encode())

    def put_job(self, league: str, job: dict[str, Any] | None) -> None:
        self.state.put(JOBS, league.encode(), job)
        if job is None:
            self.rerating.discard(league)
        else:
            self.rerating.add(league)

    def jobs(self) -> list[str]:
        """The leagues with a re-rate in progress."""
        return [key.decode() for key, _ in self.state.scan(JOBS, b"", b"\xff")]


class StoredWorkingRecords:
    """A re-rate's working records in the WORKING table, read once and kept in memory
    for the part in progress; `flush` writes the ones set."""

    def __init__(self, state: Storage, league: str, system: RatingSystem):
        self.state = state
        self.league = league
        self.records: dict[str, PlayerRecord | None] = {}
        self.changed: set[str] = set()

    def get(self, name: str) -> PlayerRecord | None:
        if name in self.records:
            return self.records[name]
        value = self.state.get(WORKING, player_key(self.league, name))
        record = self.records[name] = value if type(value) is PlayerRecord else None  # (None or ABSENT: none)
        return record

    def set(self, name: str, record: PlayerRecord | None) -> None:
        self.records[name] = record
        self.changed.add(name)

    def flush(self) -> None:
        for name in self.changed:
            record = self.records[name]
            self.state.put(WORKING, player_key(self.league, name), ABSENT if record is None else record)
        self.changed.clear()

    def names(self) -> list[str]:
        """Every player of the re-rate: those flushed by its parts so far, and those set since."""
        prefix = league_prefix(self.league)
        flushed = [key[len(prefix):].decode() for key, _ in self.state.scan(WORKING, prefix, prefix_end(prefix), raw=True)]
        return list(dict.fromkeys([*flushed, *self.records]))

    def forget(self, names: list[str]) -> None:
        for name in names:
            self.state.put(WORKING, player_key(self.league, name), None)
        self.records.clear()
