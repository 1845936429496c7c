"""What the API reads: committed records, a player's history, and each league's
standings (stream_app/standings.py), brought up to date as batches commit.

Reads see committed state only: the local store holds each partition's last
checkpoint (stream/store.py), never a batch in progress.

A league's standings are built on the first request that needs them, from the
store, a few thousand players at a time so that the event loop keeps serving
requests and applying batches meanwhile. The build reads a RocksDB iterator,
which sees the store as it was when the build began; the commits made while it
runs are queued and applied after it, in order. From then on every commit of
the league's partition moves its changed players (`committed`). A take-up of
the partition (its state may have been replaced from the changelog) forgets them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Callable

import orjson

from ..leagues import LeagueConfig
from ..rating.history import history_entry
from ..runtime import keep_survivors
from ..standings import Standing, Standings
from .partitioner import league_partition
from ..state.tables import (FINALS, HISTORY, KEY_SEP, LAST_TIME, LEAGUES, LOG, MATCHES, PLAYERS, SEASONS, final_key,
                     history_prefix, league_prefix, log_key, match_key, player_key, player_state, season_key, seq_of,
                     store_key)
from .store import LocalStore

STANDINGS_HELD = 64  # leagues whose standings are held (the least recently read forgotten first)
BUILD_CHUNK = 2_000  # players read between two yields to the event loop while standings are built
_TOP = b"\xff" * 8  # above every history key's seq


class StandingsForgotten(Exception):
    """The standings were forgotten while being built (a take-up of their partition)."""


class _HeldStandings:
    """One league's standings, or their build in progress."""

    __slots__ = ("partition", "standings", "pending", "ready", "revision")

    def __init__(self, partition: int, standings: Standings, revision: int):
        self.partition = partition
        self.standings = standings
        self.revision = revision  # the league's re-rates when the build began: a re-rate forgets them
        self.pending: list[tuple[str, Any]] | None = []  # commits during the build: ("player", (name, standing)) or ("latest", t)
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()


class Reads:
    """Committed league and player records of the partitions this worker owns."""

    def __init__(self, store: LocalStore, partitions: int, config: LeagueConfig):
        self.store = store
        self.partitions = partitions
        self.config = config
        self._held: OrderedDict[str, _HeldStandings] = OrderedDict()
        self.builds = 0  # standings built (shown by /health)

    def _committed(self, table: str, league: str, key: bytes) -> dict[str, Any] | None:
        raw = self.store.get(league_partition(league, self.partitions), store_key(table, key))
        return None if raw is None else orjson.loads(raw)

    def league(self, league: str) -> dict[str, Any] | None:
        return self._committed(LEAGUES, league, league.encode())

    def player(self, league: str, player: str) -> dict[str, Any] | None:
        """The player's stored record: the rating state plus `last_time` (stream/tables.py)."""
        return self._committed(PLAYERS, league, player_key(league, player))

    def leagues(self, partition: int) -> list[tuple[str, dict[str, Any]]]:
        """Every league record of a partition."""
        prefix = store_key(LEAGUES, b"")
        return [(key[len(prefix):].decode(), orjson.loads(value)) for key, value in self.store.scan(partition, prefix)]

    def history(self, league: str, player: str, limit: int, before: int | None) -> tuple[list[dict[str, Any]], int | None]:
        """Up to `limit` of the player's history entries with seq below `before`, newest
        first, and the seq to ask below for the next page (None: no more)."""
        prefix = store_key(HISTORY, history_prefix(league, player))
        below = prefix + (_TOP if before is None else before.to_bytes(8, "big"))
        rows = self.store.scan_back(league_partition(league, self.partitions), prefix, below, limit + 1)
        entries = [history_entry(orjson.loads(value)) for _, value in rows[:limit]]
        return entries, (seq_of(rows[limit - 1][0]) if len(rows) > limit else None)

    def history_rows(self, league: str, player: str) -> list[list[Any]]:
        """Every history row the player keeps (rating.history_row), oldest first."""
        prefix = store_key(HISTORY, history_prefix(league, player))
        return [orjson.loads(value) for _, value in self.store.scan(league_partition(league, self.partitions), prefix)]

    def seasons(self, league: str) -> list[dict[str, Any]]:
        """The league's seasons, first to last (rating.season_row)."""
        partition = league_partition(league, self.partitions)
        return [orjson.loads(value) for _, value in self.store.scan(partition, store_key(SEASONS, league_prefix(league)))]

    def final_standings(self, league: str, number: int) -> list[list[Any]]:
        """Season `number`'s final standings (seasons.archive_row each), by player."""
        partition = league_partition(league, self.partitions)
        return [orjson.loads(value) for _, value in self.store.scan(partition, store_key(FINALS, season_key(league, number)))]

    def final_standing(self, league: str, number: int, player: str) -> list[Any] | None:
        return self._committed(FINALS, league, final_key(league, number, player))

    def teammates(self, league: str, match_id: str, player: str, other: str) -> bool:
        """Whether the two were on the same side of the match (its log row's teams)."""
        place = self._committed(MATCHES, league, match_key(league, match_id))
        if place is None or "key" not in place:
            return False
        logged = self._committed(LOG, league, log_key(league, bytes.fromhex(place["key"])))
        teams = {} if logged is None else {person[0]: person[3] if len(person) > 3 else None for person in logged[2]}
        team = teams.get(player)
        return team is not None and team == teams.get(other)

    # -- standings -----------------------------------------------------------------------
    async def standings(self, league: str) -> Standings:
        """The league's standings as of the last commit (built if not held)."""
        while True:
            held = self._held.get(league)
            if held is None:
                held = self._start(league)
            else:
                self._held.move_to_end(league)
            if not held.ready.done():
                try:
                    await asyncio.shield(held.ready)
                except StandingsForgotten:
                    continue  # build them again from the store as it is now
            return held.ready.result()

    def _start(self, league: str) -> _HeldStandings:
        # One step, with no await: the league record and the iterator see the same state.
        partition = league_partition(league, self.partitions)
        record = self.league(league) or {}
        standings = Standings(self.config.options_for(league), record.get("latest_time"))
        held = self._held[league] = _HeldStandings(partition, standings, record.get("revision", 0))
        scan = self.store.scan(partition, store_key(PLAYERS, league_prefix(league)))
        while len(self._held) > STANDINGS_HELD:
            self._forget(next(iter(self._held)))
        asyncio.create_task(self._build(league, held, scan), name=f"standings-{league}")
        return held

    async def _build(self, league: str, held: _HeldStandings, scan: Any) -> None:
        standing = self._standing_reader(league)
        skip = len(store_key(PLAYERS, league_prefix(league)))
        standings = held.standings
        try:
            for count, (key, value) in enumerate(scan, start=1):
                standings.set(key[skip:].decode(), standing(orjson.loads(value)))
                if count % BUILD_CHUNK == 0:
                    await asyncio.sleep(0)
                    if held.ready.done():  # forgotten meanwhile
                        return
            for kind, item in held.pending or ():
                if kind == "player":
                    standings.set(*item)
                else:
                    standings.advance(item)
            held.pending = None
            self.builds += 1
            # Hundreds of thousands of long-lived standings: out of the cyclic collector's
            # reach, or each full collection scans them all, a pause every request then
            # waits for.
            keep_survivors()
            held.ready.set_result(standings)
        except Exception as exc:  # the store closed under it (stopping), say: the next request builds again
            if self._held.get(league) is held:
                del self._held[league]
            if not held.ready.done():
                held.ready.set_exception(exc)
                held.ready.exception()  # retrieved: waiting requests get it, nobody else must

    def _standing_reader(self, league: str) -> Callable[[dict[str, Any]], Standing]:
        system = self.config.system_for(league)
        if not system.has_uncertainty:
            return lambda record: Standing(record["rating"], record["matches"], None, record.get(LAST_TIME))

        def read(record: dict[str, Any]) -> Standing:
            data, last = player_state(record)
            return Standing(record["rating"], record["matches"], system.state_from_dict(data).uncertainty, last)

        return read

    def _forget(self, league: str) -> None:
        held = self._held.pop(league)
        if not held.ready.done():
            held.ready.set_exception(StandingsForgotten(league))
            held.ready.exception()

    # -- up to date with each commit ------------------------------------------------------------
    def committed(self, partition: int, overlay: dict[tuple[str, bytes], Any]) -> None:
        """A batch's writes to a partition are committed (called right after the local
        write, with no await between): move its leagues' held standings."""
        if not self._held:
            return
        for (table, key), value in overlay.items():
            if table == PLAYERS:  # (a PlayerRecord: state/tables.py PlayerCodec)
                league_key, _, name = key.partition(KEY_SEP)
                held = self._held.get(league_key.decode())
                if held is None or value is None:
                    continue
                state = value.state
                self._apply(held, "player", (name.decode(), Standing(state.rating, state.matches, state.uncertainty,
                                                                     value.last_time)))
            elif table == LEAGUES and value is not None:
                held = self._held.get(key.decode())
                if held is None:
                    continue
                if value.get("revision", 0) != held.revision:
                    # Re-rated: players may have lost their rating and the latest time gone back; built anew when read.
                    self._forget(key.decode())
                else:
                    self._apply(held, "latest", value.get("latest_time"))

    @staticmethod
    def _apply(held: _HeldStandings, kind: str, item: Any) -> None:
        if held.pending is not None:
            held.pending.append((kind, item))
        elif kind == "player":
            held.standings.set(*item)
        else:
            held.standings.advance(item)

    def taken_up(self, partition: int) -> None:
        """The partition was taken up: its state may come from another worker's batches."""
        for league in [league for league, held in self._held.items() if held.partition == partition]:
            self._forget(league)

    def forget(self) -> None:
        for league in list(self._held):
            self._forget(league)
