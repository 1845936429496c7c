"""A small asyncio client for applications: publish match results (and voids
and corrections of them, and season starts), follow rating changes and dead
letters, and read leaderboards, players, their histories and seasons from any
worker's HTTP API (its ApiReader, api_reader.py; no broker needed).

    async with RatingsClient("kafka://127.0.0.1:9092") as client:
        await client.publish({"match_id": "m1", "league": "chess", "participants": [...]})
        async with contextlib.aclosing(client.changes(league="chess")) as changes:
            async for change in changes:
                print(change["player"], change["rating_after"])

Match results are validated before they are sent (`BadEvent` names the field
and the rule) and keyed by league, so the default partitioner (murmur2 of the
key, as in Java Kafka and Faust) keeps each league on one partition and its
matches in order.

Producer: acks="all", not idempotent (the embedded broker refuses
InitProducerId); a retried send can be duplicated, and the workers drop a
match_id already applied in its league.
"""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timezone
from typing import Any, AsyncIterable, AsyncIterator, Callable, Iterable

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .api_reader import MAX_HISTORY_PAGE, ApiError, ApiReader, ApiUnreachable, api_url
from .inputs import CORRECTED, SEASON_STARTED, VOIDED, BadEvent, format_time, parse_input
from .security import KafkaSecurity
from .settings import DEFAULTS, Settings, bootstrap_servers

__all__ = ["ApiError", "ApiUnreachable", "BadEvent", "RatingsClient", "bootstrap_servers", "season_time"]

log = logging.getLogger(__name__)

_IN_FLIGHT = 5_000  # publish_many waits for acknowledgements every this many sends


class RatingsClient:
    """A producer of results and commands, a follower of the events out, and a reader
    of the HTTP API (`reader`, an ApiReader), on one configuration."""

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
    ):
        self.broker = broker
        self.bootstrap = bootstrap_servers(broker)
        self.match_topic = match_topic
        self.changes_topic = changes_topic
        self.dlq_topic = dlq_topic
        self.partitions = partitions
        self.security = security or KafkaSecurity()
        self.client_id = client_id
        self.request_timeout = request_timeout
        self._producer: AIOKafkaProducer | None = None
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

    # -- reads: the reader's (api_reader.py has what each gives) ---------------------
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

    def __repr__(self) -> str:
        return (f"<RatingsClient {self.broker} match_topic={self.match_topic!r} api={self.api!r} "
                f"security={self.security!r}>")

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "request_timeout_ms": int(self.request_timeout * 1000),
            **self.security.aiokafka_kwargs(),
        }

    # -- life cycle --------------------------------------------------------------
    async def start(self, *, ensure_topics: bool = True) -> None:
        """Connect the producer (raises aiokafka's KafkaConnectionError if the broker is unreachable).

        With ensure_topics (the default) the three topics are created first if
        missing, with `partitions` partitions: otherwise the first send would
        auto-create the match topic with the broker's default count (Tansu: 4,
        Kafka: num.partitions). A failure to create them (no permission) is
        logged, not raised.
        """
        if self._producer is not None:
            return
        if ensure_topics:
            try:
                await self.ensure_topics()
            except Exception as exc:
                from aiokafka.errors import KafkaConnectionError

                if isinstance(exc, KafkaConnectionError):
                    raise
                log.warning("could not ensure the topics exist: %s", exc)
        producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=False,  # Tansu: InitProducerId fails (see the module docstring)
            linger_ms=0,  # an awaited publish() returns at once; pipelined sends batch anyway
            **self._common(),
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer

    async def stop(self) -> None:
        """Flush what is pending and disconnect; close the HTTP session of the reads."""
        producer, self._producer = self._producer, None
        try:
            if producer is not None:
                await producer.stop()
        finally:
            await self.reader.close()

    async def __aenter__(self) -> "RatingsClient":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- topics ------------------------------------------------------------------
    async def ensure_topics(
        self, partitions: int | None = None, *, replication_factor: int = 1, extra: Iterable[str] = (),
        compacted: Iterable[str] = (),
    ) -> dict[str, int]:
        """Create the match, rating-changes and dead-letter topics if they are missing
        (and `extra` ones, and `compacted` ones with cleanup.policy=compact).

        Idempotent. Returns {topic: partition count}; a topic that already exists
        keeps its partition count (a warning is logged if it differs).
        """
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        partitions = partitions or self.partitions
        compacted = list(compacted)
        names = [self.match_topic, self.changes_topic, self.dlq_topic, *extra, *compacted]
        admin = AIOKafkaAdminClient(**self._common())
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            missing = [name for name in names if name not in existing]
            if missing:
                response = await admin.create_topics(
                    [NewTopic(name, partitions, replication_factor,
                              topic_configs={"cleanup.policy": "compact"} if name in compacted else {})
                     for name in missing]
                )
                for name, code, message in _topic_errors(response):
                    if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS (a concurrent creator)
                        raise RuntimeError(f"cannot create topic {name!r}: error {code}: {message}")
            described = await admin.describe_topics(names)
        finally:
            await admin.close()
        counts = {entry["topic"]: len(entry["partitions"]) for entry in described}
        for name, count in counts.items():
            if count != partitions:
                log.warning("topic %r has %d partitions, not %d", name, count, partitions)
        return counts

    # -- publishing --------------------------------------------------------------
    def _prepare(self, event: dict[str, Any] | bytes | bytearray | str) -> tuple[bytes, bytes]:
        """Validate; return (key, value) or raise BadEvent."""
        if isinstance(event, dict):
            raw = orjson.dumps(event)
        elif isinstance(event, str):
            raw = event.encode("utf-8", "surrogatepass")
        elif isinstance(event, (bytes, bytearray, memoryview)):
            raw = bytes(event)
        else:
            raise BadEvent("not_an_object", f"event: must be a JSON object, bytes or text (got {type(event).__name__})")
        item = parse_input(raw)  # size, encoding, JSON, schema and cross-field rules
        return item.league.encode("utf-8"), raw

    async def send(self, event: dict[str, Any] | bytes | str) -> "asyncio.Future[Any]":
        """Validate and enqueue one match result; returns a future of its RecordMetadata.

        Raises BadEvent (nothing is sent) on an invalid event. Await the future
        to know it was acknowledged by the broker (acks="all").
        """
        if self._producer is None:
            raise RuntimeError("RatingsClient is not started (use 'async with' or await start())")
        key, value = self._prepare(event)
        return await self._producer.send(self.match_topic, value, key=key)

    async def publish(self, event: dict[str, Any] | bytes | str) -> Any:
        """Validate, send and wait for the acknowledgement; returns aiokafka's RecordMetadata
        (topic, partition, offset, timestamp). Raises BadEvent on an invalid event."""
        return await (await self.send(event))

    async def void(self, league: str, match_id: str, reason: str) -> Any:
        """Publish a match-voided.v1 command: the league is re-rated as if the result never counted."""
        return await self.publish({"schema": VOIDED, "league": league, "match_id": match_id, "reason": reason})

    async def correct(self, league: str, match_id: str, participants: list[dict[str, Any]], reason: str,
                      occurred_at: str | None = None) -> Any:
        """Publish a match-corrected.v1 command: the result with these standings (and time) instead."""
        time = {} if occurred_at is None else {"occurred_at": occurred_at}
        return await self.publish({"schema": CORRECTED, "league": league, "match_id": match_id,
                                   "participants": participants, **time, "reason": reason})

    async def start_season(self, league: str, season: str, at: str | datetime | None = None,
                           reason: str | None = None) -> Any:
        """Publish a season-started.v1 command: the league (season = "manual") ends the season
        in progress, keeps its final standings and starts `season` at `at` (RFC 3339 text or
        an aware datetime; None: now, see season_time). Raises BadEvent on an invalid command;
        the worker refuses the others with a dead letter (season_rule, season_exists,
        season_too_early, unknown_league)."""
        event = {"schema": SEASON_STARTED, "league": league, "season": season, "occurred_at": season_time(at, league)}
        if reason is not None:
            event["reason"] = reason
        return await self.publish(event)

    async def publish_many(
        self,
        events: Iterable[dict[str, Any] | bytes | str] | AsyncIterable[dict[str, Any] | bytes | str],
        on_progress: Callable[[int, int], None] | None = None,
        on_reject: Callable[[int, BadEvent], None] | None = None,
    ) -> tuple[int, list[tuple[int, BadEvent]]]:
        """Publish a sequence of match results, pipelined.

        Invalid events are skipped and returned as (index from 1, BadEvent), each
        also passed to on_reject as it is found; on_progress(acknowledged, rejected)
        is called after each event.
        Returns (number of events sent and acknowledged, rejected). A delivery
        failure (broker unreachable past the retries) raises aiokafka's error.
        """
        pending: list[asyncio.Future[Any]] = []
        sent = 0
        rejected: list[tuple[int, BadEvent]] = []
        index = 0

        async def drain() -> None:
            nonlocal sent, pending
            batch, pending = pending, []
            await asyncio.gather(*batch)
            sent += len(batch)

        async def one(event: Any) -> None:
            nonlocal index
            index += 1
            try:
                pending.append(await self.send(event))
            except BadEvent as exc:
                rejected.append((index, exc))
                if on_reject is not None:
                    on_reject(index, exc)
            if len(pending) >= _IN_FLIGHT:
                await drain()
            if on_progress is not None:
                on_progress(sent, len(rejected))

        try:
            if hasattr(events, "__aiter__"):
                async for event in events:  # type: ignore[union-attr]
                    await one(event)
            else:
                for event in events:  # type: ignore[union-attr]
                    await one(event)
        finally:
            if pending:
                await drain()
        return sent, rejected

    # -- following ---------------------------------------------------------------
    def changes(self, league: str | None = None, player: str | None = None, from_beginning: bool = False, *,
                on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Rating-changed events (dicts), optionally of one league and/or player.

        Group-less: reads every partition with a fresh consumer, from the
        beginning or from now on. Runs until the iterator is closed (use
        contextlib.aclosing, or break out of `async for` and let it be finalized).
        on_ready() is called once the consumer is positioned: events published
        after that are seen.
        """

        return self._follow(self.changes_topic, _having(league=league, player=player), from_beginning, on_ready)

    def dead_letters(self, league: str | None = None, reason: str | None = None, from_beginning: bool = False, *,
                     on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Dead-letter events (dicts) of the DLQ topic, optionally of one league and/or reason code."""

        return self._follow(self.dlq_topic, _having(league=league, reason=reason), from_beginning, on_ready)

    async def _follow(
        self,
        topic: str,
        keep: Callable[[dict[str, Any]], bool],
        from_beginning: bool,
        on_ready: Callable[[], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        consumer = AIOKafkaConsumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            **self._common(),
        )
        await consumer.start()
        try:
            partitions = await _partitions(consumer, topic, self)
            consumer.assign(partitions)
            if from_beginning:
                await consumer.seek_to_beginning(*partitions)
            else:
                await _seek_to_true_end(consumer, partitions)
            if on_ready is not None:
                on_ready()
            while True:
                batches = await consumer.getmany(timeout_ms=1000)
                for tp in sorted(batches):
                    for record in batches[tp]:
                        try:
                            event = orjson.loads(record.value)
                        except (orjson.JSONDecodeError, TypeError):
                            log.warning("%s[%d]@%d: not JSON, skipped", tp.topic, tp.partition, record.offset)
                            continue
                        if isinstance(event, dict) and keep(event):
                            yield event
        finally:
            await consumer.stop()


def season_time(at: str | datetime | None = None, league: str | None = None) -> str:
    """The occurred_at of a season start: RFC 3339 text as given; an aware datetime in UTC
    ("...Z"); None: now, in UTC, to the second, rounded up (a result that occurred
    earlier in the current second is then still before the start, not after it)."""
    if at is None:
        return format_time(float(math.ceil(datetime.now(timezone.utc).timestamp())))
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise BadEvent("invalid_time", "occurred_at: a datetime without a time zone is ambiguous (give tzinfo)",
                           "occurred_at", league)
        return format_time(at.timestamp())
    return at


def _having(**wanted: str | None) -> Callable[[dict[str, Any]], bool]:
    """Events whose fields have the wanted values (None: any)."""
    wanted = {name: value for name, value in wanted.items() if value is not None}
    return lambda event: all(event.get(name) == value for name, value in wanted.items())


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    out = []
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        out.append((name, code, entry[2] if len(entry) > 2 else None))
    return out


async def _partitions(consumer: AIOKafkaConsumer, topic: str, client: RatingsClient) -> list[TopicPartition]:
    """The topic's partitions; creates the project's topics if it is missing (best effort), then waits."""
    await consumer.topics()  # a metadata refresh
    found = consumer.partitions_for_topic(topic)
    if not found:
        try:
            await client.ensure_topics()
        except Exception as exc:  # no permission, say: wait for someone else to create it
            log.warning("cannot create topic %r (%s); waiting for it to appear", topic, exc)
    waited = 0.0
    while not found:
        await consumer.topics()
        found = consumer.partitions_for_topic(topic)
        if not found:
            if waited == 5.0:
                log.warning("topic %r does not exist yet; waiting", topic)
            await asyncio.sleep(0.5)
            waited += 0.5
    return [TopicPartition(topic, p) for p in sorted(found)]


async def _seek_to_true_end(consumer: AIOKafkaConsumer, partitions: list[TopicPartition], timeout: float = 10.0) -> None:
    """Position every partition at its real end. Tansu's ListOffsets(latest) says the base
    offset of the last record batch + 1, so seek_to_end() would replay that batch's tail; a
    fetch's high watermark is right. On Kafka the reported end is right already."""
    reported = await consumer.end_offsets(partitions)
    probe = [tp for tp in partitions if reported[tp] > 0]
    for tp in partitions:
        consumer.seek(tp, max(reported[tp] - 1, 0))
    if probe:
        deadline = asyncio.get_running_loop().time() + timeout
        seen: dict[TopicPartition, int] = {}
        while len(seen) < len(probe) and asyncio.get_running_loop().time() < deadline:
            await consumer.getmany(*[tp for tp in probe if tp not in seen], timeout_ms=200)
            for tp in probe:
                high = consumer.highwater(tp)
                if high is not None and tp not in seen:
                    seen[tp] = high
        for tp in probe:
            end = seen.get(tp)
            if end is None:
                log.warning("%s[%d]: no high watermark within %.0f s; starting at the reported end", tp.topic, tp.partition, timeout)
                end = reported[tp]
            consumer.seek(tp, end)
    for tp in partitions:
        if reported[tp] == 0:
            consumer.seek(tp, 0)
