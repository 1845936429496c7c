"""Reading the workers' HTTP API from Python (ApiReader), on its own or as the
reading part of RatingsClient (client/__init__.py); no broker needed.

    reader = ApiReader("http://127.0.0.1:6066")
    try:
        board = await reader.leaderboard("chess", limit=10)
        async for change in reader.all_history("chess", "ann", most=50):
            print(change["seq"], change["rating_after"])
    finally:
        await reader.close()

Each method returns the API's JSON document as a dict. A refused read raises
ApiError with the HTTP status and the API's "error" text; a worker that cannot
be reached raises ApiUnreachable (an ApiError whose status is None). A 503 (a
worker rebalancing or taking its partitions up) is retried with a doubling
back-off before it is raised.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, AsyncIterator
from urllib.parse import quote, urlencode

import aiohttp
import orjson
from yarl import URL

from ..settings import Settings

MAX_HISTORY_PAGE = 1_000  # the API's largest history page


class ApiError(Exception):
    """The API refused a read: `status` (400 bad parameter, 404 unknown league or
    player, 503 still rebalancing after the retries) and the API's message."""

    def __init__(self, status: int | None, message: str, url: str | None = None):
        super().__init__(message if status is None else f"{message} (HTTP {status})")
        self.status = status
        self.message = message
        self.url = url


class ApiUnreachable(ApiError):
    """No answer at all: the connection failed or timed out (status None)."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(None, message, url)


def api_url(settings: Settings) -> str:
    """The API of the worker these settings describe, as seen from this machine."""
    if settings.advertised_url:
        return settings.advertised_url
    host = settings.web_host if settings.web_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"http://{host}:{settings.web_port}"


def _base(api: str | None) -> str | None:
    if api is None:
        return None
    api = api.rstrip("/")
    if URL(api).scheme not in ("http", "https") or not URL(api).host:
        raise ValueError(f"API URL {api!r}: use http://HOST:PORT (any worker's web port)")
    return api


def _segment(text: str) -> str:
    return quote(text, safe="")


class ApiReader:
    """The reads of the HTTP API of any worker (`api`: its base URL, e.g.
    http://127.0.0.1:6066); one aiohttp session, opened at the first read and closed
    by close(). A 503 is retried `retries` times."""

    backoff = 0.2  # seconds before the first retry of a 503; doubled each time

    def __init__(self, api: str | None = None, retries: int = 5, timeout: float = 30.0):
        self.api = _base(api)
        self.retries = retries
        self.request_timeout = timeout
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def leagues(self) -> dict[str, Any]:
        """{"leagues": [{"league", "algorithm", "matches", "players", ...}, ...]}, by name."""
        return await self._read("/leagues")

    async def league(self, league: str) -> dict[str, Any]:
        return await self._read(f"/leagues/{_segment(league)}")

    async def leaderboard(self, league: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """The eligible players from rank offset + 1, highest rating first (ties by name)."""
        return await self._read(f"/leagues/{_segment(league)}/leaderboard", limit=limit, offset=offset)

    async def leaderboard_around(self, league: str, player: str, radius: int = 10) -> dict[str, Any]:
        """The `radius` eligible players above `player`, the player, and the `radius` below."""
        return await self._read(f"/leagues/{_segment(league)}/leaderboard", around=player, radius=radius)

    async def player(self, league: str, player: str) -> dict[str, Any]:
        """Rating, matches, the system's extras, rank, percentile, eligible, provisional."""
        return await self._read(f"/leagues/{_segment(league)}/players/{_segment(player)}")

    async def history(self, league: str, player: str, limit: int = 100, before: int | None = None) -> dict[str, Any]:
        """One page of the player's rating changes, newest first; pass its "next" as `before`
        for the older ones."""
        return await self._read(f"/leagues/{_segment(league)}/players/{_segment(player)}/history",
                                limit=limit, before=before)

    async def predict(self, league: str, sides: list[list[str]]) -> dict[str, Any]:
        """A match to come between `sides` (each a list of player ids): each side's win
        probability, predicted rank and rating at stake, the draw probability and the
        match quality (docs/algorithms.md)."""
        return await self._read(f"/leagues/{_segment(league)}/predict", team=[",".join(side) for side in sides])

    async def versus(self, league: str, player: str, opponent: str, limit: int = 10) -> dict[str, Any]:
        """The two players' record together: against each other (wins, draws, losses of
        `player`), on the same side, and their `limit` most recent shared matches."""
        return await self._read(f"/leagues/{_segment(league)}/players/{_segment(player)}/versus/{_segment(opponent)}",
                                limit=limit)

    async def seasons(self, league: str) -> dict[str, Any]:
        """The league's seasons, first to last: {"league", "algorithm", "schedule" (None: no
        seasons), "season" (the one in progress, or None), "seasons": [{"season", "number",
        "start", "end", "players", "reason"?}]}; "end" and "players" are None in progress."""
        return await self._read(f"/leagues/{_segment(league)}/seasons")

    async def season_leaderboard(self, league: str, season: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """An ended season's final standings from row offset + 1: the ranked by rank, then
        the others (rank None) by rating. ApiError 404 while the season is in progress."""
        return await self._read(f"/leagues/{_segment(league)}/seasons/{_segment(season)}/leaderboard",
                                limit=limit, offset=offset)

    async def player_seasons(self, league: str, player: str) -> dict[str, Any]:
        """The player's final standing in each ended season they played: {"league", "player",
        "algorithm", "seasons": [{"season", "start", "end", "rating", "rank", "percentile",
        "matches", ...}]}."""
        return await self._read(f"/leagues/{_segment(league)}/players/{_segment(player)}/seasons")

    async def all_history(self, league: str, player: str, most: int | None = None,
                          page_size: int = MAX_HISTORY_PAGE) -> AsyncIterator[dict[str, Any]]:
        """The player's rating changes, newest first, page after page (at most `most`)."""
        before, left = None, most
        while left is None or left > 0:
            page = await self.history(league, player, page_size if left is None else min(left, page_size), before)
            for change in page["changes"]:
                yield change
            if left is not None:
                left -= len(page["changes"])
            before = page["next"]
            if before is None:
                return

    def _why(self, exc: BaseException) -> str:
        """'Connection refused', 'Name or service not known', 'no answer within 30 s', ..."""
        if isinstance(exc, TimeoutError):
            return f"no answer within {self.request_timeout:g} s"
        error = getattr(exc, "os_error", None)  # a failed connection: the socket's own error
        if isinstance(error, OSError) and error.errno is not None and error.errno > 0:
            return os.strerror(error.errno)
        return (error.strerror if isinstance(error, OSError) else None) or str(exc) or type(exc).__name__

    async def _read(self, path: str, **query: Any) -> dict[str, Any]:
        if self.api is None:
            raise ValueError("no API URL: pass api='http://HOST:PORT' (any worker's web port)")
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.request_timeout))
        # (a list: the parameter repeated, one value each)
        params = urlencode({k: v for k, v in query.items() if v is not None}, doseq=True, quote_via=quote, safe="")
        url = self.api + path + (f"?{params}" if params else "")
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))  # a rebalance: partitions come back shortly
            try:
                # encoded=True: the path is quoted already; yarl must not unquote it.
                async with self._http.get(URL(url, encoded=True)) as reply:
                    status, body, reason = reply.status, await reply.read(), reply.reason
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiUnreachable(f"cannot reach the API at {self.api}: {self._why(exc)}", url) from None
            if status != 503:
                break
        if status != 200:
            raise ApiError(status, _error_text(body, reason), url)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ApiError(status, f"not the ratings API: the answer is not JSON ({body[:80]!r})", url) from None


def _error_text(body: bytes, reason: str | None) -> str:
    """The API's {"error": ...}; else the start of the body (a proxy's page) or the reason."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return doc["error"]
    text = body[:200].decode("utf-8", "replace").strip()
    return text or reason or "no message"
