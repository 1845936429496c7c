"""A small asyncio client for applications, composed of three parts on one
configuration: an InputProducer (producer.py) publishes match results and
commands, an EventFollower (follower.py) follows rating changes and dead
letters, and an ApiReader (reader.py) reads leaderboards, players, histories and
seasons from any worker's HTTP API (no broker needed). Each part works alone too.

    async with RatingsClient("kafka://127.0.0.1:9092") as client:
        await client.publish({"match_id": "m1", "league": "chess", "participants": [...]})
        async with contextlib.aclosing(client.changes(league="chess")) as changes:
            async for change in changes:
                print(change["player"], change["rating_after"])
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, AsyncIterator, Callable, Iterable

from ..engine import Match
from ..inputs import BadEvent, Correction, SeasonStart, Void
from ..leagues import LeagueConfig
from ..security import KafkaSecurity
from ..settings import DEFAULTS, Settings, bootstrap_servers
from .kafka import KafkaConnection
from .follower import EventFollower
from .producer import Input, InputProducer, Inputs, Rejected, correction_command, season_time, void_command
from .reader import MAX_HISTORY_PAGE, ApiError, ApiReader, ApiUnreachable, api_url

__all__ = ["ApiError", "ApiReader", "ApiUnreachable", "BadEvent", "EventFollower", "InputProducer", "KafkaConnection",
           "RatingsClient", "bootstrap_servers", "correction_command", "season_time", "void_command"]


class RatingsClient:
    """A producer of results and commands (`producer`), a follower of the events out
    (`follower`) and a reader of the HTTP API (`reader`), on one configuration. Its
    methods are theirs; each part's module says what they do."""

    def __init__(
        self,
        broker: str = DEFAULTS.broker,
        *,
        match_topic: str = DEFAULTS.match_topic,
        changes_topic: str = DEFAULTS.changes_topic,
        dlq_topic: str = DEFAULTS.dlq_topic,
        partitions: int = DEFAULTS.partitions,
        security: KafkaSecurity | None = None,
        client_id: str = "ratings-client",
        request_timeout: float = 30.0,
        api: str | None = None,
        api_retries: int = 5,
        config: LeagueConfig | None = None,
    ):
        self.connection = KafkaConnection(broker, match_topic, changes_topic, dlq_topic, partitions,
                                          security or KafkaSecurity(), client_id, request_timeout)
        # config: the workers' league configuration; with it, what a league's system cannot rate is not sent
        self.producer = InputProducer(self.connection, config)
        self.follower = EventFollower(self.connection)
        self.reader = ApiReader(api, api_retries, request_timeout)  # api: any worker's base URL, e.g. http://127.0.0.1:6066

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> "RatingsClient":
        """A client of the same broker, topics and security as a worker's settings, reading
        that worker's API unless `api` is given."""
        options.setdefault("api", api_url(settings))
        return cls(settings.broker, match_topic=settings.match_topic, changes_topic=settings.changes_topic,
                   dlq_topic=settings.dlq_topic, partitions=settings.partitions, security=settings.security, **options)

    @property
    def api(self) -> str | None:
        return self.reader.api

    def __repr__(self) -> str:
        c = self.connection
        return f"<RatingsClient {c.broker} match_topic={c.match_topic!r} api={self.api!r} security={c.security!r}>"

    # -- life cycle --------------------------------------------------------------
    async def start(self, *, ensure_topics: bool = True) -> None:
        await self.producer.start(ensure_topics=ensure_topics)

    async def stop(self) -> None:
        """Stop the producer (flushing what is pending) and close the reader's HTTP session."""
        try:
            await self.producer.stop()
        finally:
            await self.reader.close()

    async def __aenter__(self) -> "RatingsClient":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def ensure_topics(self, partitions: int | None = None, *, replication_factor: int = -1,
                            extra: Iterable[str] = (), changelogs: Iterable[str] = (),
                            required: Iterable[str] = ()) -> dict[str, int]:
        return await self.connection.ensure_topics(partitions, replication_factor=replication_factor, extra=extra,
                                                   changelogs=changelogs, required=required)

    # -- publishing: the producer's ------------------------------------------------
    def check(self, event: Input) -> Match | Void | Correction | SeasonStart:
        return self.producer.check(event)

    async def send(self, event: Input) -> Any:
        return await self.producer.send(event)

    async def publish(self, event: Input) -> Any:
        return await self.producer.publish(event)

    async def void(self, league: str, match_id: str, reason: str) -> Any:
        return await self.producer.void(league, match_id, reason)

    async def correct(self, league: str, match_id: str, participants: list[dict[str, Any]], reason: str,
                      occurred_at: str | None = None) -> Any:
        return await self.producer.correct(league, match_id, participants, reason, occurred_at)

    async def start_season(self, league: str, season: str, at: str | datetime | None = None,
                           reason: str | None = None) -> Any:
        return await self.producer.start_season(league, season, at, reason)

    async def publish_many(self, events: Inputs, on_progress: Callable[[int, int], None] | None = None,
                           on_reject: Callable[[int, BadEvent], None] | None = None) -> tuple[int, Rejected]:
        return await self.producer.publish_many(events, on_progress, on_reject)

    # -- following: the follower's -------------------------------------------------
    def changes(self, league: str | None = None, player: str | None = None, from_beginning: bool = False, *,
                on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self.follower.changes(league, player, from_beginning, on_ready=on_ready)

    def dead_letters(self, league: str | None = None, reason: str | None = None, from_beginning: bool = False, *,
                     on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self.follower.dead_letters(league, reason, from_beginning, on_ready=on_ready)

    # -- reads: the reader's ---------------------------------------------------------
    async def leagues(self) -> dict[str, Any]:
        return await self.reader.leagues()

    async def league(self, league: str) -> dict[str, Any]:
        return await self.reader.league(league)

    async def leaderboard(self, league: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        return await self.reader.leaderboard(league, limit, offset)

    async def leaderboard_around(self, league: str, player: str, radius: int = 10) -> dict[str, Any]:
        return await self.reader.leaderboard_around(league, player, radius)

    async def player(self, league: str, player: str) -> dict[str, Any]:
        return await self.reader.player(league, player)

    async def history(self, league: str, player: str, limit: int = 100, before: int | None = None) -> dict[str, Any]:
        return await self.reader.history(league, player, limit, before)

    def all_history(self, league: str, player: str, most: int | None = None,
                    page_size: int = MAX_HISTORY_PAGE) -> AsyncIterator[dict[str, Any]]:
        return self.reader.all_history(league, player, most, page_size)

    async def predict(self, league: str, sides: list[list[str]]) -> dict[str, Any]:
        return await self.reader.predict(league, sides)

    async def versus(self, league: str, player: str, opponent: str, limit: int = 10) -> dict[str, Any]:
        return await self.reader.versus(league, player, opponent, limit)

    async def seasons(self, league: str) -> dict[str, Any]:
        return await self.reader.seasons(league)

    async def season_leaderboard(self, league: str, season: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        return await self.reader.season_leaderboard(league, season, limit, offset)

    async def player_seasons(self, league: str, player: str) -> dict[str, Any]:
        return await self.reader.player_seasons(league, player)
