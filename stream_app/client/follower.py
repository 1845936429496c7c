"""Following what the workers publish: rating-changed events and dead letters,
group-less (every partition, from the beginning or from now on). A principal the
broker's ACLs do not let read the topic is refused at once (NotAuthorized); it
needs READ and DESCRIBE on the topic, and nothing else (no consumer group)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Callable

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from ..security import KafkaSecurity
from ..stream.kafka_io import named_topics, topic_partitions
from .kafka import KafkaConnection, NotAuthorized, start_client

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 100  # the followers' fetch.max.wait.ms: how long the broker holds an idle fetch


class EventFollower:
    """Iterators over the events out of a connection's topics."""

    def __init__(self, connection: KafkaConnection):
        self.connection = connection

    def changes(self, league: str | None = None, player: str | None = None, from_beginning: bool = False, *,
                on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Rating-changed events (dicts), optionally of one league and/or player.

        Group-less: reads every partition with a fresh consumer, from the
        beginning or from now on. Runs until the iterator is closed (use
        contextlib.aclosing, or break out of `async for` and let it be finalized).
        on_ready() is called once the consumer is positioned: events published
        after that are seen.
        """

        return self._follow(self.connection.changes_topic, _having(league=league, player=player), from_beginning, on_ready)

    def dead_letters(self, league: str | None = None, reason: str | None = None, from_beginning: bool = False, *,
                     on_ready: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Dead-letter events (dicts) of the DLQ topic, optionally of one league and/or reason code."""

        return self._follow(self.connection.dlq_topic, _having(league=league, reason=reason), from_beginning, on_ready)

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
            # An idle fetch answers after this long (Kafka answers at once when records come):
            # the first answer, before on_ready, says whether the principal may read the topic.
            fetch_max_wait_ms=FETCH_WAIT_MS,
            **self.connection.options(),
        )
        security = self.connection.security
        # aiokafka logs a warning per partition refused at each fetch; the NotAuthorized raised says it once.
        refusals = _ReadRefusals(topic)
        try:
            await start_client(consumer, security)
            partitions = await _partitions(consumer, topic, self.connection)
            consumer.assign(partitions)
            if from_beginning:
                await consumer.seek_to_beginning(*partitions)
            else:
                await _seek_to_true_end(consumer, partitions)
            # Fetched already (the end found), or fetched now: a principal that may not read
            # the topic is refused here, before on_ready says the topic is being read.
            first = {} if any(consumer.highwater(tp) is not None for tp in partitions) else \
                await _first_answer(consumer, partitions)
            if on_ready is not None:
                on_ready()
            while True:
                for tp in sorted(first):
                    for record in first[tp]:
                        try:
                            event = orjson.loads(record.value)
                        except (orjson.JSONDecodeError, TypeError):
                            log.warning("%s[%d]@%d: not JSON, skipped", tp.topic, tp.partition, record.offset)
                            continue
                        if isinstance(event, dict) and keep(event):
                            yield event
                first = await consumer.getmany(timeout_ms=1000)
        except TopicAuthorizationFailedError as exc:
            if isinstance(exc, NotAuthorized):
                raise
            raise _may_not_read(topic, security) from None
        finally:
            refusals.remove()
            await consumer.stop()


class _ReadRefusals(logging.Filter):
    """Drops aiokafka's 'Not authorized to read from topic T.' warnings for one topic
    while installed (from construction to remove())."""

    LOGGER = "aiokafka.consumer.fetcher"

    def __init__(self, topic: str):
        super().__init__()
        self.topic = topic
        logging.getLogger(self.LOGGER).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("Not authorized to read from topic") and record.args == (self.topic,))

    def remove(self) -> None:
        logging.getLogger(self.LOGGER).removeFilter(self)


def _may_not_read(topic: str, security: KafkaSecurity) -> NotAuthorized:
    return NotAuthorized(f"{security.principal} may not read topic {topic!r} (TOPIC_AUTHORIZATION_FAILED): it needs "
                         f"the ACLs READ and DESCRIBE on it (docs/operations.md, Access control)")


async def _first_answer(consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                        timeout: float = 5.0) -> dict[TopicPartition, list[Any]]:
    """The records of the first fetch answers, once one partition has been answered (its
    high watermark is known) or `timeout` seconds passed; raises the fetch's error
    (TopicAuthorizationFailedError for a principal that may not read)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    fetched: dict[TopicPartition, list[Any]] = {}
    while loop.time() < deadline and all(consumer.highwater(tp) is None for tp in partitions):
        for tp, records in (await consumer.getmany(timeout_ms=FETCH_WAIT_MS)).items():
            fetched.setdefault(tp, []).extend(records)
    return fetched


def _having(**wanted: str | None) -> Callable[[dict[str, Any]], bool]:
    """Events whose fields have the wanted values (None: any)."""
    wanted = {name: value for name, value in wanted.items() if value is not None}
    return lambda event: all(event.get(name) == value for name, value in wanted.items())


async def _partitions(consumer: AIOKafkaConsumer, topic: str, connection: KafkaConnection) -> list[TopicPartition]:
    """The topic's partitions; creates the project's topics if it is missing (best effort), then waits.
    NotAuthorized, at once, if the principal may not describe it: Kafka leaves such a topic
    out of the list of all topics, as if it were missing, and only a request naming it says
    the principal is not authorized."""
    found = (await topic_partitions(consumer)).get(topic)  # not partitions_for_topic: empty on Kafka (issue #43)
    if not found:
        found = await _named_partitions(consumer, topic, connection)
    if not found:
        try:
            await connection.ensure_topics()
        except Exception as exc:  # no permission, say: wait for someone else to create it
            log.warning("cannot create topic %r (%s); waiting for it to appear", topic, exc)
    waited = 0.0
    while not found:
        found = (await topic_partitions(consumer)).get(topic)
        if not found:
            if waited == 5.0:
                log.warning("topic %r does not exist yet; waiting", topic)
            await asyncio.sleep(0.5)
            waited += 0.5
    return [TopicPartition(topic, p) for p in sorted(found)]


async def _named_partitions(consumer: AIOKafkaConsumer, topic: str, connection: KafkaConnection) -> set[int]:
    """The topic's partitions from a metadata request naming it (never creating it): empty
    if it does not exist, NotAuthorized if the principal may not describe it."""
    for entry in await named_topics(consumer, [topic]):
        error, name, partitions = entry[0], entry[1], entry[-1]
        if name != topic:
            continue
        if error == TopicAuthorizationFailedError.errno:
            raise _may_not_read(topic, connection.security)
        if error == 0:
            return {partition[1] for partition in partitions}
    return set()


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
