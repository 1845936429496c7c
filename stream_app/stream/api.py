"""The HTTP API: committed reads of the tables, the standings cache, and the
views, each answering for its own leagues and forwarding the rest to the
worker that owns them.

Reads see committed state only: the local store holds each partition's last
checkpoint (stream/store.py), never a batch in progress.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout
from faust.web import Request, Response, View

from ..events import ID_RULE, is_id
from ..leagues import LeagueConfig
from .changelog import Checkpoint
from .records import league_partition
from .state import LEAGUES, PLAYERS, league_prefix, player_key, store_key
from .store import LocalStore

MAX_LEADERBOARD_LIMIT = 100_000
STANDINGS_CACHED = 64  # leagues whose sorted standings are kept (see `standings`)
ROUTED_HEADER = "X-Ratings-Routed"  # a request forwarded by another worker: answer it here


class Reads:
    """Committed league and player records of the partitions this worker owns."""

    def __init__(self, store: LocalStore, partitions: int, checkpoint: Callable[[int], Checkpoint]):
        self.store = store
        self.partitions = partitions
        self.checkpoint = checkpoint  # partition -> its last checkpoint
        # league -> ((epoch, batch), rows)
        self._standings: dict[str, tuple[tuple[int, int], list[tuple[str, float, int]]]] = {}

    def _committed(self, table: str, league: str, key: bytes) -> dict[str, Any] | None:
        raw = self.store.get(league_partition(league, self.partitions), store_key(table, key))
        return None if raw is None else orjson.loads(raw)

    def league(self, league: str) -> dict[str, Any] | None:
        return self._committed(LEAGUES, league, league.encode())

    def player(self, league: str, player: str) -> dict[str, Any] | None:
        return self._committed(PLAYERS, league, player_key(league, player))

    def league_players(self, league: str) -> list[tuple[str, dict[str, Any]]]:
        prefix = store_key(PLAYERS, league_prefix(league))
        records = self.store.scan(league_partition(league, self.partitions), prefix)
        return [(key[len(prefix):].decode(), orjson.loads(value)) for key, value in records]

    def leagues(self, partition: int) -> list[tuple[str, dict[str, Any]]]:
        """Every league record of a partition."""
        prefix = store_key(LEAGUES, b"")
        return [(key[len(prefix):].decode(), orjson.loads(value)) for key, value in self.store.scan(partition, prefix)]

    def standings(self, league: str) -> list[tuple[str, float, int]]:
        """(player, rating, matches) by rating, highest first. Kept until the league's
        partition commits its next batch: reading and decoding every player of a big
        league takes seconds (docs/performance.md)."""
        checkpoint = self.checkpoint(league_partition(league, self.partitions))
        version = (checkpoint.epoch, checkpoint.batch)
        cached = self._standings.get(league)
        if cached is not None and cached[0] == version:
            return cached[1]
        rows = sorted(((name, state["rating"], state["matches"]) for name, state in self.league_players(league)),
                      key=lambda row: (-row[1], row[0]))
        if len(self._standings) >= STANDINGS_CACHED:
            self._standings.clear()
        self._standings[league] = (version, rows)
        return rows


class Api:
    """The views. `owner` says which worker's URL owns a partition (None: this one
    or nobody, see `owns`); `ready` whether this worker may answer now."""

    def __init__(self, reads: Reads, config: LeagueConfig, owns: Callable[[int], bool],
                 owner_url: Callable[[int], str | None], ready: Callable[[], bool], health: Callable[[], dict]):
        self.reads = reads
        self.config = config
        self.owns = owns
        self.owner_url = owner_url
        self.ready = ready
        self.health = health
        self._http: ClientSession | None = None

    def routes(self, app: Any) -> None:
        api = self

        @app.page("/health")
        class Health(View):
            async def get(self, request: Request) -> Response:
                return self.json(api.health())

        @app.page("/ready")
        class Ready(View):
            async def get(self, request: Request) -> Response:
                ready = api.ready()
                return _json(self, {"ready": ready}, 200 if ready else 503)

        @app.page("/leagues/{league}")
        class League(View):
            async def get(self, request: Request, league: str) -> Response:
                return await api.serve(self, request, league, lambda: api.league(self, league))

        @app.page("/leagues/{league}/leaderboard")
        class Leaderboard(View):
            async def get(self, request: Request, league: str) -> Response:
                return await api.serve(self, request, league, lambda: api.leaderboard(self, request, league))

        @app.page("/leagues/{league}/players/{player}")
        class Player(View):
            async def get(self, request: Request, league: str, player: str) -> Response:
                if not is_id(player):
                    return _error(self, 400, f"player: {ID_RULE}")
                return await api.serve(self, request, league, lambda: api.player(self, league, player))

    async def serve(self, view: View, request: Request, league: str, local: Callable[[], Response]) -> Response:
        if not is_id(league):
            return _error(view, 400, f"league: {ID_RULE}")
        partition = league_partition(league, self.reads.partitions)
        if self.owns(partition) or request.headers.get(ROUTED_HEADER):
            if not self.ready():
                return _error(view, 503, "the worker is rebalancing or restoring its tables; retry shortly")
            return local()
        url = self.owner_url(partition)
        if url is None:
            return _error(view, 503, f"no worker owns partition {partition} of league {league!r} right now")
        if self._http is None:
            self._http = ClientSession(timeout=ClientTimeout(total=30))
        target = url.rstrip("/") + str(request.rel_url)
        try:
            async with self._http.get(target, headers={ROUTED_HEADER: "1"}) as reply:
                body = await reply.read()
                return view.bytes(body, content_type="application/json", status=reply.status)
        except (ClientError, asyncio.TimeoutError) as exc:
            # The owner is gone or moving (a rebalance is coming): the client retries.
            return _error(view, 503, f"the worker owning league {league!r} ({url}) is not reachable: {type(exc).__name__}; retry")

    def leaderboard(self, view: View, request: Request, league: str) -> Response:
        try:
            limit = int(request.query.get("limit", "100"))
            offset = int(request.query.get("offset", "0"))
        except ValueError:
            return _error(view, 400, "limit and offset must be integers")
        if not (1 <= limit <= MAX_LEADERBOARD_LIMIT) or offset < 0:
            return _error(view, 400, f"limit must be 1 to {MAX_LEADERBOARD_LIMIT} and offset >= 0")
        if self.reads.league(league) is None:
            return _error(view, 404, f"league {league!r} not found")
        players = self.reads.standings(league)
        rows = [
            {"rank": offset + i + 1, "player": name, "rating": rating, "matches": matches}
            for i, (name, rating, matches) in enumerate(players[offset : offset + limit])
        ]
        return _json(view, {"league": league, "players_total": len(players), "offset": offset, "players": rows})

    def league(self, view: View, league: str) -> Response:
        record = self.reads.league(league)
        if record is None:
            return _error(view, 404, f"league {league!r} not found")
        return _json(view, {"league": league, **record})

    def player(self, view: View, league: str, player: str) -> Response:
        record = self.reads.league(league)
        if record is None:
            return _error(view, 404, f"league {league!r} not found")
        state = self.reads.player(league, player)
        if state is None:
            return _error(view, 404, f"player {player!r} not found in league {league!r}")
        public = self.config.system_for(league).state_from_dict(state).public()
        return _json(view, {"league": league, "player": player, "algorithm": record["algorithm"], **public})

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def _json(view: View, doc: dict[str, Any], status: int = 200) -> Response:
    return view.bytes(orjson.dumps(doc), content_type="application/json", status=status)


def _error(view: View, status: int, message: str) -> Response:
    return _json(view, {"error": message}, status)
