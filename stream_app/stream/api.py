"""The HTTP API: the views, each answering for its own leagues and forwarding
the rest to the worker that owns them. What they read is in stream/reads.py.

Every parameter is checked before anything is read: a bad one is a 400 whose
message names it and its rule.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, web
from faust.web import Request, Response, View

from ..inputs import ID_RULE, format_time, is_id
from ..leagues import LeagueConfig
from ..predict import PredictionError, parse_sides, predict
from ..versus import MAX_RECENT, head_to_head
from ..seasons import Tier, archive_entry, sorted_final, tier_of
from ..standings import Standing, Standings
from . import observe
from .openapi import served as openapi_document
from .reads import Reads
from .partitioner import league_partition
from ..state.tables import player_state
from .ui import ui_routes

MAX_LEADERBOARD_LIMIT = 100_000
MAX_RADIUS = 1_000
MAX_HISTORY_LIMIT = 1_000
# Past the last ranked player a page is empty, so any bound above a league's
# players would do: this one is far above and keeps the message readable.
MAX_OFFSET = 10_000_000
# A history seq counts the player's own changes: no player comes near it.
MAX_SEQ = 1_000_000_000
ROUTED_HEADER = "X-Ratings-Routed"  # a request forwarded by another worker: answer it here


class Refused(Exception):
    """An answer other than 200: the status and the message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def int_param(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    text = request.query.get(name)
    if text is None:
        return default
    # ASCII digits only: int() also takes a sign, spaces, '_' and other scripts' digits.
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None
    if value is None or not low <= value <= high:
        raise Refused(400, f"{name}: must be an integer from {low} to {high} (got {text[:40]!r})")
    return value


def id_param(name: str, value: str) -> str:
    if not is_id(value):
        raise Refused(400, f"{name}: {ID_RULE}")
    return value


class Api:
    """The views. `owner_url` says which worker's URL owns a partition; `owns` whether
    this worker does; `ready` whether this worker may answer now."""

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
        ui_routes(app)
        openapi = openapi_document()

        @app.page("/openapi.json")
        class OpenApi(View):
            async def get(self, request: Request) -> Response:
                # The same on every worker: answered here, never forwarded.
                return self.bytes(openapi, content_type="application/json")

        @app.page("/health")
        class Health(View):
            async def get(self, request: Request) -> Response:
                return self.json(api.health())

        @app.page("/ready")
        class Ready(View):
            async def get(self, request: Request) -> Response:
                ready = api.ready()
                return _json(self, {"ready": ready}, 200 if ready else 503)

        @app.page("/leagues")
        class Leagues(View):
            async def get(self, request: Request) -> Response:
                return await api.answer(self, "leagues", lambda: api.all_leagues(request))

        # The routes of one league, each answered by the worker that owns the league
        # (serve): (path, the method of Api that answers, whether it reads the query).
        # The method's name is the endpoint; it gets the path's parameters by name.
        for path, read, query in (
            ("/leagues/{league}", Api.league, False),
            ("/leagues/{league}/leaderboard", Api.leaderboard, True),
            ("/leagues/{league}/players/{player}", Api.player, False),
            ("/leagues/{league}/players/{player}/history", Api.history, True),
            ("/leagues/{league}/players/{player}/versus/{opponent}", Api.versus, True),
            ("/leagues/{league}/seasons", Api.seasons, False),
            ("/leagues/{league}/seasons/{season}/leaderboard", Api.season_leaderboard, True),
            ("/leagues/{league}/players/{player}/seasons", Api.player_seasons, False),
            ("/leagues/{league}/predict", Api.predict, True),
        ):
            app.page(path)(self._league_view(read, query))

    def _league_view(self, read: Callable[..., Any], query: bool) -> type[View]:
        """The view of one of a league's routes (routes): `read(api, [request,] league, **names)`
        answers where the league is owned; a {player} in the path is checked as an id first."""
        api = self
        endpoint = read.__name__

        async def get(view: View, request: Request, league: str, **names: str) -> Response:
            def local() -> Any:
                return read(api, request, league, **names) if query else read(api, league, **names)

            return await api.serve(view, request, endpoint, league, local, player=names.get("player"))

        # Named as the endpoint: Leaderboard, SeasonLeaderboard, ... (Faust's name of the route).
        return type(endpoint.title().replace("_", ""), (View,), {"get": get})

    # -- answering and forwarding ------------------------------------------------------
    async def answer(self, view: View, endpoint: str, local: Callable[[], Any]) -> Response:
        """The local answer (a document, or Refused), timed per endpoint."""
        started = time.perf_counter()
        try:
            doc = await _maybe_await(local())
            response = _json(view, doc) if isinstance(doc, dict) else doc  # else: a forwarded answer
        except Refused as exc:
            response = _error(view, exc.status, exc.message)
        observe.REQUEST_SECONDS.labels(endpoint).observe(time.perf_counter() - started)
        return response

    async def serve(self, view: View, request: Request, endpoint: str, league: str, local: Callable[[], Any],
                    player: str | None = None) -> Response:
        """Answer here if this worker owns the league, else forward to its owner."""
        async def here_or_there() -> Any:
            id_param("league", league)
            if player is not None:
                id_param("player", player)
            partition = league_partition(league, self.reads.partitions)
            if self.owns(partition) or request.headers.get(ROUTED_HEADER):
                self._check_ready()
                return await _maybe_await(local())
            url = self.owner_url(partition)
            if url is None:
                raise Refused(503, f"no worker owns partition {partition} of league {league!r} right now")
            status, body = await self._forward(url, str(request.rel_url), f"league {league!r}")
            return view.bytes(body, content_type="application/json", status=status)

        return await self.answer(view, endpoint, here_or_there)

    def _check_ready(self) -> None:
        if not self.ready():
            raise Refused(503, "the worker is rebalancing or taking its partitions up; retry shortly")

    async def _forward(self, url: str, path: str, what: str) -> tuple[int, bytes]:
        if self._http is None:
            self._http = ClientSession(timeout=ClientTimeout(total=30))
        target = url.rstrip("/") + path
        try:
            async with self._http.get(target, headers={ROUTED_HEADER: "1"}) as reply:
                return reply.status, await reply.read()
        except (ClientError, asyncio.TimeoutError) as exc:
            # The owner is gone or moving (a rebalance is coming): the client retries.
            raise Refused(503, f"the worker owning {what} ({url}) is not reachable: {type(exc).__name__}; retry") from None

    # -- the endpoints -----------------------------------------------------------------
    async def all_leagues(self, request: Request) -> dict[str, Any]:
        """Every league: this worker's, and (unless asked by another worker) each owner's."""
        self._check_ready()
        found: dict[str, dict[str, Any]] = {}
        others: set[str] = set()
        for partition in range(self.reads.partitions):
            if self.owns(partition):
                for league, record in self.reads.leagues(partition):
                    found[league] = _league_doc(league, record)
            elif not request.headers.get(ROUTED_HEADER):
                url = self.owner_url(partition)
                if url is None:
                    raise Refused(503, f"no worker owns partition {partition} right now")
                others.add(url)
        for status, body in await asyncio.gather(*(self._forward(url, "/leagues", "some leagues") for url in sorted(others))):
            if status != 200:
                raise Refused(503, f"a worker could not list its leagues: {body[:200]!r}; retry")
            for doc in orjson.loads(body)["leagues"]:
                found[doc["league"]] = doc
        return {"leagues": [found[league] for league in sorted(found)]}

    def _league_record(self, league: str) -> dict[str, Any]:
        record = self.reads.league(league)
        if record is None:
            raise Refused(404, f"league {league!r} not found")
        return record

    def league(self, league: str) -> dict[str, Any]:
        return _league_doc(league, self._league_record(league))

    async def leaderboard(self, request: Request, league: str) -> dict[str, Any]:
        around = request.query.get("around")
        if around is not None:
            id_param("around", around)
            radius = int_param(request, "radius", 10, 0, MAX_RADIUS)
        else:
            limit = int_param(request, "limit", 100, 1, MAX_LEADERBOARD_LIMIT)
            offset = int_param(request, "offset", 0, 0, MAX_OFFSET)
        record = self._league_record(league)
        standings = await self.reads.standings(league)
        if around is not None:
            rows = standings.around(around, radius)
            if rows is None:
                if around not in standings.players:
                    raise Refused(404, f"player {around!r} not found in league {league!r}")
                raise Refused(404, f"player {around!r} is not ranked in league {league!r}: "
                                   f"{_why_unranked(standings, standings.players[around])}")
            offset = rows[0][0] - 1
        else:
            rows = standings.page(offset, limit)
        doc = {"league": league, "algorithm": record["algorithm"], "players_total": standings.players_total,
               "eligible_total": standings.eligible_total, "offset": offset}
        if around is not None:
            doc["around"] = around
        tiers = self.config.options_for(league).tiers
        doc["players"] = [_row(rank, name, standing, tiers, standings.eligible_total) for rank, name, standing in rows]
        return doc

    async def player(self, league: str, player: str) -> dict[str, Any]:
        record = self._league_record(league)
        stored = self.reads.player(league, player)
        if stored is None:
            raise Refused(404, f"player {player!r} not found in league {league!r}")
        data, last = player_state(stored)
        public = self.config.system_for(league).state_from_dict(data).public()
        standings = await self.reads.standings(league)
        standing = standings.players.get(player)
        # The store and the standings are at the same commit (both move at the local write).
        provisional = standing is not None and standings.provisional(standing)
        eligible = standing is not None and standings.eligible(standing)
        rank = standings.rank(player)
        doc = {"league": league, "player": player, "algorithm": record["algorithm"], **public,
               "rank": rank, "percentile": standings.percentile(player),
               "eligible": eligible, "provisional": provisional,
               "last_occurred_at": None if last is None else format_time(last)}
        tiers = self.config.options_for(league).tiers
        if tiers:
            doc["tier"] = tier_of(tiers, public["rating"], rank, standings.eligible_total)
        if "season" in record:
            doc["season"] = record["season"][1]
        return doc

    # -- seasons -------------------------------------------------------------------------
    def seasons(self, league: str) -> dict[str, Any]:
        record = self._league_record(league)
        current = record.get("season")
        return {"league": league, "algorithm": record["algorithm"], "schedule": self.config.options_for(league).season,
                "season": None if current is None else current[1],
                "seasons": [_season_doc(number, row) for number, row in enumerate(self.reads.seasons(league), start=1)]}

    def _season(self, league: str, name: str) -> tuple[int, dict[str, Any]]:
        for number, row in enumerate(self.reads.seasons(league), start=1):
            if row["name"] == name:
                return number, row
        raise Refused(404, f"season {name!r} not found in league {league!r}")

    def season_leaderboard(self, request: Request, league: str, season: str) -> dict[str, Any]:
        id_param("season", season)
        limit = int_param(request, "limit", 100, 1, MAX_LEADERBOARD_LIMIT)
        offset = int_param(request, "offset", 0, 0, MAX_OFFSET)
        record = self._league_record(league)
        number, row = self._season(league, season)
        if "end" not in row:
            raise Refused(404, f"season {season!r} of league {league!r} is in progress: its standings are the "
                               "league's leaderboard until it ends")
        final = sorted_final(self.reads.final_standings(league, number))
        return {"league": league, "algorithm": record["algorithm"], **_season_doc(number, row),
                "players_total": len(final), "eligible_total": sum(1 for kept in final if kept[3] is not None),
                "offset": offset, "players": [archive_entry(kept) for kept in final[offset:offset + limit]]}

    def player_seasons(self, league: str, player: str) -> dict[str, Any]:
        record = self._league_record(league)
        found = []
        for number, row in enumerate(self.reads.seasons(league), start=1):
            kept = self.reads.final_standing(league, number, player) if "end" in row else None
            if kept is not None:
                entry = archive_entry(kept)
                del entry["player"]
                found.append({"season": row["name"], "start": format_time(row["start"]),
                              "end": format_time(row["end"]), **entry})
        if not found and self.reads.player(league, player) is None:
            raise Refused(404, f"player {player!r} not found in league {league!r}")
        return {"league": league, "player": player, "algorithm": record["algorithm"], "seasons": found}

    def history(self, request: Request, league: str, player: str) -> dict[str, Any]:
        limit = int_param(request, "limit", 100, 1, MAX_HISTORY_LIMIT)
        before = int_param(request, "before", None, 1, MAX_SEQ)
        self._league_record(league)
        if self.reads.player(league, player) is None:
            raise Refused(404, f"player {player!r} not found in league {league!r}")
        changes, after = self.reads.history(league, player, limit, before)
        return {"league": league, "player": player, "changes": changes, "next": after}

    def predict(self, request: Request, league: str) -> dict[str, Any]:
        """A match to come between the `team` parameters' sides (stream_app/predict.py)."""
        try:
            sides = parse_sides(request.query.getall("team", []))
            self._league_record(league)
            system = self.config.system_for(league)
            states = {}
            for side in sides:
                for player in side:
                    stored = self.reads.player(league, player)
                    states[player] = None if stored is None else system.state_from_dict(player_state(stored)[0])
            return predict(system, league, sides, states)
        except PredictionError as exc:
            raise Refused(400, str(exc)) from None

    def versus(self, request: Request, league: str, player: str, opponent: str) -> dict[str, Any]:
        """The two players' matches together, from the history each keeps (stream_app/versus.py)."""
        id_param("opponent", opponent)
        if opponent == player:
            raise Refused(400, f"opponent: must be another player than {player!r}")
        recent = int_param(request, "limit", 10, 0, MAX_RECENT)
        record = self._league_record(league)
        for name in (player, opponent):
            if self.reads.player(league, name) is None:
                raise Refused(404, f"player {name!r} not found in league {league!r}")
        teams = self.config.system_for(league).teams  # (otherwise no log row need be read: never teammates)
        doc = head_to_head(league, player, opponent, self.reads.history_rows(league, player),
                           self.reads.history_rows(league, opponent),
                           lambda match_id: teams and self.reads.teammates(league, match_id, player, opponent), recent)
        return {**doc, "algorithm": record["algorithm"]}

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def _league_doc(league: str, record: dict[str, Any]) -> dict[str, Any]:
    latest = record.get("latest_time")
    doc = {"league": league, "algorithm": record["algorithm"], "matches": record["matches"], "players": record["players"],
           "latest_occurred_at": None if latest is None else format_time(latest),
           "rerates": record.get("revision", 0)}
    if "season" in record:
        doc["season"] = record["season"][1]
    return doc


def _row(rank: int, player: str, standing: Standing, tiers: tuple[Tier, ...], ranked: int) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "player": player, "rating": standing.rating, "matches": standing.matches}
    if standing.uncertainty is not None:
        row["uncertainty"] = standing.uncertainty
    if tiers:
        row["tier"] = tier_of(tiers, standing.rating, rank, ranked)
    return row


def _season_doc(number: int, row: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"season": row["name"], "number": number, "start": format_time(row["start"]),
                           "end": format_time(row["end"]) if "end" in row else None, "players": row.get("players")}
    if "reason" in row:
        doc["reason"] = row["reason"]
    return doc


def _why_unranked(standings: Standings, standing: Standing) -> str:
    options = standings.options
    if standing.matches < options.min_matches:
        return f"provisional ({standing.matches} of the {options.min_matches} matches needed)"
    if standings.provisional(standing):
        return f"provisional (uncertainty {standing.uncertainty:.1f} above {options.max_uncertainty:g})"
    return f"inactive (no match in the last {options.inactive_days:g} days of the league)"


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@web.middleware
async def json_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """aiohttp's own refusals (no such path, a method no view answers) as JSON
    `{"error": ...}`, like every other error of the API, not as text/plain."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            message = f"no such path: {request.path[:200]} (GET /openapi.json lists the API's paths)"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path[:200]}: the API is read-only (GET)"
        else:
            message = exc.reason
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.Response(body=orjson.dumps({"error": message}), status=exc.status,
                            content_type="application/json", headers=headers)


def _json(view: View, doc: dict[str, Any], status: int = 200) -> Response:
    return view.bytes(orjson.dumps(doc), content_type="application/json", status=status)


def _error(view: View, status: int, message: str) -> Response:
    return _json(view, {"error": message}, status)
