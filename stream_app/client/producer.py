"""Publishing match results and commands (voids, corrections, season starts) to
the match topic: each validated before it is sent (`BadEvent` names the field
and the rule) and keyed by league, so the default partitioner (murmur2 of the
key, as in Java Kafka and Faust) keeps each league on one partition and its
inputs in order.

acks="all", not idempotent (the embedded broker refuses InitProducerId): a
retried send can be duplicated, and the workers drop a match_id already
applied in its league.
"""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timezone
from typing import Any, AsyncIterable, Callable, Iterable

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError

from ..engine import Match
from ..inputs import CORRECTED, SEASON_STARTED, VOIDED, BadEvent, Correction, SeasonStart, Void, format_time, parse_input
from ..leagues import LeagueConfig
from .kafka import KafkaConnection, NotAuthorized, start_client

log = logging.getLogger(__name__)

_IN_FLIGHT = 5_000  # publish_many waits for acknowledgements every this many sends

Input = dict[str, Any] | bytes | str  # a JSON object, or its text
Inputs = Iterable[Input] | AsyncIterable[Input]
Rejected = list[tuple[int, BadEvent]]  # (index from 1, why)


class InputProducer:
    """Sends inputs to the match topic of a connection (start it first). With the workers'
    league configuration (`config`), a result or correction its league's system cannot
    rate (three players in an `elo` league, teams where the system has none) is refused
    before it is sent, as BadEvent with the reason code and message of the dead letter the
    worker would publish."""

    def __init__(self, connection: KafkaConnection, config: LeagueConfig | None = None):
        self.connection = connection
        self.config = config
        self._producer: AIOKafkaProducer | None = None

    async def start(self, *, ensure_topics: bool = True) -> None:
        """Connect the producer (raises aiokafka's KafkaConnectionError if the broker is unreachable,
        KafkaSecurityError, one of those, if it refuses this client's TLS or SASL or this client
        its certificate).

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
                await self.connection.ensure_topics()
            except Exception as exc:
                from aiokafka.errors import KafkaConnectionError

                if isinstance(exc, KafkaConnectionError):
                    raise
                log.warning("could not ensure the topics exist: %s", exc)
        producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=False,  # Tansu: InitProducerId fails (see the module docstring)
            linger_ms=0,  # an awaited publish() returns at once; pipelined sends batch anyway
            **self.connection.options(),
        )
        try:
            await start_client(producer, self.connection.security)  # a refused TLS or SASL: KafkaSecurityError
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    def check(self, event: Input) -> Match | Void | Correction | SeasonStart:
        """Validate an input as send() does, sending nothing: the input parsed, or BadEvent."""
        return self._prepare(event)[2]

    def _prepare(self, event: Input) -> tuple[bytes, bytes, Match | Void | Correction | SeasonStart]:
        """Validate; return (key, value, the input parsed) or raise BadEvent."""
        if isinstance(event, dict):
            raw = orjson.dumps(event)
        elif isinstance(event, str):
            raw = event.encode("utf-8", "surrogatepass")
        elif isinstance(event, (bytes, bytearray, memoryview)):
            raw = bytes(event)
        else:
            raise BadEvent("not_an_object", f"event: must be a JSON object, bytes or text (got {type(event).__name__})")
        item = parse_input(raw)  # size, encoding, JSON, schema and cross-field rules
        if self.config is not None:
            self._check_ratable(item)
        return item.league.encode("utf-8"), raw, item

    def _check_ratable(self, item: Match | Void | Correction | SeasonStart) -> None:
        """BadEvent if the league's system cannot rate the result (or correction)."""
        # The worker's own check, so the refusal here is its dead letter, word for word.
        from ..apply import check_ratable

        match = item if isinstance(item, Match) else item.match if isinstance(item, Correction) else None
        if match is not None:
            check_ratable(self.config.rule_for(match.league).system, match)

    async def send(self, event: Input) -> "asyncio.Future[Any]":
        """Validate and enqueue one match result; returns a future of its RecordMetadata.

        Raises BadEvent (nothing is sent) on an invalid event, NotAuthorized if the
        principal may not describe the match topic. Await the future to know it was
        acknowledged by the broker (acks="all"); a principal that may not write there
        gets aiokafka's TopicAuthorizationFailedError from it (publish and publish_many
        raise NotAuthorized instead).
        """
        if self._producer is None:
            raise RuntimeError("the producer is not started (use 'async with' or await start())")
        key, value, _ = self._prepare(event)
        try:
            return await self._producer.send(self.connection.match_topic, value, key=key)
        except TopicAuthorizationFailedError:
            raise self._may_not_write() from None

    async def publish(self, event: Input) -> Any:
        """Validate, send and wait for the acknowledgement; returns aiokafka's RecordMetadata
        (topic, partition, offset, timestamp). Raises BadEvent on an invalid event, and
        NotAuthorized, at once, if the broker's ACLs do not let this principal write to the
        match topic."""
        sent = await self.send(event)
        try:
            return await sent
        except TopicAuthorizationFailedError as exc:
            if isinstance(exc, NotAuthorized):
                raise
            raise self._may_not_write() from None

    def _may_not_write(self) -> NotAuthorized:
        return NotAuthorized(f"{self.connection.security.principal} may not write to topic "
                             f"{self.connection.match_topic!r} (TOPIC_AUTHORIZATION_FAILED): it needs the ACLs WRITE "
                             f"and DESCRIBE on it (docs/operations.md, Access control)")

    async def void(self, league: str, match_id: str, reason: str) -> Any:
        """Publish a match-voided.v1 command: the league is re-rated as if the result never counted."""
        return await self.publish(void_command(league, match_id, reason))

    async def correct(self, league: str, match_id: str, participants: list[dict[str, Any]], reason: str,
                      occurred_at: str | None = None) -> Any:
        """Publish a match-corrected.v1 command: the result with these standings (and time) instead."""
        return await self.publish(correction_command(league, match_id, participants, reason, occurred_at))

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

    async def publish_many(self, events: Inputs, on_progress: Callable[[int, int], None] | None = None,
                           on_reject: Callable[[int, BadEvent], None] | None = None) -> tuple[int, Rejected]:
        """Publish a sequence of match results, pipelined.

        Invalid events are skipped and returned as (index from 1, BadEvent), each
        also passed to on_reject as it is found; on_progress(acknowledged, rejected)
        is called after each event.
        Returns (number of events sent and acknowledged, rejected). A delivery
        failure (broker unreachable past the retries) raises aiokafka's error;
        one the ACLs refuse, NotAuthorized.
        """
        pending: list[asyncio.Future[Any]] = []
        sent = 0
        rejected: Rejected = []
        index = 0

        async def drain() -> None:
            nonlocal sent, pending
            batch, pending = pending, []
            try:
                await asyncio.gather(*batch)
            except TopicAuthorizationFailedError as exc:
                if isinstance(exc, NotAuthorized):
                    raise
                raise self._may_not_write() from None
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


def void_command(league: str, match_id: str, reason: str) -> dict[str, Any]:
    """A match-voided.v1 command (not validated: check() or publish() does)."""
    return {"schema": VOIDED, "league": league, "match_id": match_id, "reason": reason}


def correction_command(league: str, match_id: str, participants: list[dict[str, Any]], reason: str,
                       occurred_at: str | None = None) -> dict[str, Any]:
    """A match-corrected.v1 command; without occurred_at the result keeps its time."""
    time = {} if occurred_at is None else {"occurred_at": occurred_at}
    return {"schema": CORRECTED, "league": league, "match_id": match_id, "participants": participants, **time,
            "reason": reason}


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
