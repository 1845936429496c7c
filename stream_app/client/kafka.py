"""What the client's parts share: the broker, the service's topics and how to
reach them (security, timeouts), creating those topics when they are missing, and
starting a Kafka client so that a refused TLS or SASL says why in one line."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError

from ..security import KafkaSecurity
from ..settings import DEFAULTS, Settings, bootstrap_servers

log = logging.getLogger(__name__)
T = TypeVar("T")
ATTEMPT_SECONDS = 10.0  # the longest an admin request of ensure_topics waits for its answer
# The state's changelog as the service creates it: kept for ever (no retention by time or
# size), its records removed only by its owner, who deletes those before each base
# (DeleteRecords, which Kafka allows only where the policy includes "delete": docs/design.md).
CHANGELOG_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


class KafkaSecurityError(KafkaConnectionError):
    """The connection's TLS or SASL failed: a broker certificate this client does not
    trust, a client certificate the broker wants or refuses, a wrong user or password.
    Its text says which, and the RATINGS_KAFKA_* variable to check (never the password).
    Not retriable: trying again gives the same answer."""

    retriable = False

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "TLS or SASL failed"


class NotAuthorized(TopicAuthorizationFailedError):
    """The broker's ACLs do not let this client's principal use a topic as asked. Its
    text names the principal, the topic and the operations it needs."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not authorized"


class _RefusedConnections(logging.Filter):
    """Holds back what aiokafka logs of a broker it cannot connect to while a client
    starts in this task (other tasks' records pass): said again by the error raised, or
    logged after all if the start succeeds or fails for another reason."""

    LOGGER = "aiokafka"  # aiokafka/client.py logs as "aiokafka": 'Unable connect to "%s:%s": %s' (bootstrap)

    def __init__(self) -> None:
        super().__init__()
        self.task = asyncio.current_task()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            mine = asyncio.current_task() is self.task
        except RuntimeError:  # logged outside any event loop (another thread)
            mine = False
        if mine and str(record.msg).startswith("Unable connect to") and isinstance(record.args, tuple) \
                and len(record.args) == 3:
            self.records.append(record)
            return False
        return True

    def __enter__(self) -> "_RefusedConnections":
        # First: a filter before it (a worker's RepeatFilter, stream/broker_watch.py) could
        # drop a repeated refusal, and the error would then not say why.
        logging.getLogger(self.LOGGER).filters.insert(0, self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger(self.LOGGER).removeFilter(self)

    def explained(self, security: KafkaSecurity) -> str | None:
        """Why the first broker whose refusal was this client's TLS or SASL refused it."""
        for record in self.records:
            host, port, error = record.args  # type: ignore[misc]
            why = security.explain(error, f"{host}:{port}") if isinstance(error, BaseException) else None
            if why is not None:
                return why
        return None

    def unreachable(self) -> str | None:
        """Each broker that could not be reached and why, e.g. '127.0.0.1:1: Connection refused'."""
        said = []
        for record in self.records:
            host, port, error = record.args  # type: ignore[misc]
            errno = getattr(error, "errno", None)
            why = os.strerror(errno) if isinstance(errno, int) and errno > 0 else (
                getattr(error, "strerror", None) or str(error) or type(error).__name__)
            if f"{host}:{port}: {why}" not in said:
                said.append(f"{host}:{port}: {why}")
        return "; ".join(said) or None

    def release(self) -> None:
        """Log what was held back, as it would have been (no longer held back from then on)."""
        logging.getLogger(self.LOGGER).removeFilter(self)
        records, self.records = self.records, []
        for record in records:
            logging.getLogger(record.name).handle(record)


async def start_client(client: Any, security: KafkaSecurity) -> None:
    """`await client.start()` of an aiokafka producer, consumer or admin client. When its
    bootstrap fails, the error raised says why in one line, instead of aiokafka's "Unable
    to bootstrap from [...]" after a line logged per broker: KafkaSecurityError when the
    connection's security (TLS, SASL) was refused, else KafkaConnectionError naming each
    broker and why it could not be reached ('127.0.0.1:1: Connection refused'). Any other
    failure is raised, and logged, as before. The caller stops the client either way."""
    with _RefusedConnections() as refused:
        try:
            await client.start()
        except KafkaConnectionError:
            why = refused.explained(security)
            if why is not None:
                raise KafkaSecurityError(why) from None
            unreachable = refused.unreachable()
            if unreachable is not None:
                refused.records = []  # said by the error: not logged as well
                raise KafkaConnectionError(unreachable) from None
            refused.release()
            raise
    refused.release()  # started: another broker answered


@dataclass(frozen=True)
class KafkaConnection:
    """A broker and the service's three topics on it."""

    broker: str = DEFAULTS.broker
    match_topic: str = DEFAULTS.match_topic
    changes_topic: str = DEFAULTS.changes_topic
    dlq_topic: str = DEFAULTS.dlq_topic
    partitions: int = DEFAULTS.partitions
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    client_id: str = "ratings-client"
    request_timeout: float = 30.0

    @classmethod
    def of(cls, settings: Settings) -> "KafkaConnection":
        """The broker, topics and security of a worker's settings."""
        return cls(settings.broker, settings.match_topic, settings.changes_topic, settings.dlq_topic,
                   settings.partitions, settings.security or KafkaSecurity())

    @property
    def bootstrap(self) -> str:
        return bootstrap_servers(self.broker)

    def options(self) -> dict[str, Any]:
        """The keyword arguments every aiokafka client of this connection takes."""
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "request_timeout_ms": int(self.request_timeout * 1000),
            **self.security.aiokafka_kwargs(),
        }

    async def ensure_topics(
        self, partitions: int | None = None, *, replication_factor: int = -1, extra: Iterable[str] = (),
        changelogs: Iterable[str] = (), required: Iterable[str] = (), admin: Any = None,
    ) -> dict[str, int]:
        """Create the match, rating-changes and dead-letter topics if they are missing
        (and `extra` ones, and `changelogs` with the settings CHANGELOG_CONFIGS), with the
        broker's default replication (`replication_factor` -1, KIP-464: a cluster's
        `default.replication.factor`) unless told otherwise.

        Idempotent. Returns {topic: partition count}; a topic that already exists
        keeps its partition count (a warning is logged if it differs). Under ACLs: one of
        the three topics the principal may not describe is left out (a producer needs only
        the match topic) unless it is `required`; NotAuthorized if it may not describe a
        required, `extra` or `changelogs` one, or may describe but not create a missing one.
        `admin`: a started admin client of this connection (`admin()`) to ask with; else one
        is started for this call.
        """
        from aiokafka.admin import NewTopic

        partitions = partitions or self.partitions
        extra, changelogs = list(extra), list(changelogs)
        needed = {*extra, *changelogs, *required}
        names = [self.match_topic, self.changes_topic, self.dlq_topic, *extra, *changelogs]
        async with self.admin(admin) as admin:
            deadline = time.monotonic() + self.request_timeout
            existing = set(await _retried(admin.list_topics, deadline))
            missing = [name for name in names if name not in existing]
            if missing:
                # aiokafka's NewTopic takes -1 only beside a replica assignment, which may be empty.
                assignments = {} if replication_factor == -1 else None
                response = await _retried(lambda: admin.create_topics(
                    [NewTopic(name, partitions, replication_factor, replica_assignments=assignments,
                              topic_configs=CHANGELOG_CONFIGS if name in changelogs else {})
                     for name in missing]
                ), deadline)
                errors = _topic_errors(response)
                refused = [name for name, code, _ in errors if code == TopicAuthorizationFailedError.errno]
                # Kafka refuses to create a topic the principal may not describe, whether it exists
                # or not. Of the three topics, such a one is not this client's to use either (a
                # producer's rating-changes): left out. The `required` ones (a worker's three),
                # `extra` ones and `changelogs` it must use; and one it may describe but that
                # does not exist, it must be allowed to create.
                hidden = await _hidden(admin, refused) if refused else set()
                who = self.security.principal
                for name, code, message in errors:
                    if name in hidden and name not in needed:
                        log.debug("topic %r: this principal may not describe or create it; left out", name)
                    elif name in hidden:
                        raise NotAuthorized(f"{who} may not describe topic {name!r} (TOPIC_AUTHORIZATION_FAILED): "
                                            "a worker needs the ACLs of docs/operations.md, Access control")
                    elif code == TopicAuthorizationFailedError.errno:
                        raise NotAuthorized(f"topic {name!r} does not exist, and {who} may not create it "
                                            "(TOPIC_AUTHORIZATION_FAILED): create it beforehand, or allow this "
                                            "principal CREATE on it")
                    elif code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS (a concurrent creator)
                        raise RuntimeError(f"cannot create topic {name!r}: error {code}: {message}")
                names = [name for name in names if name not in hidden]
            described = await _described(admin, names, self.request_timeout)
        counts = {entry["topic"]: len(entry["partitions"]) for entry in described}
        for name, count in counts.items():
            if count != partitions:
                log.warning("topic %r has %d partitions, not %d", name, count, partitions)
        return counts

    async def topic_configs(self, topic: str, admin: Any = None) -> dict[str, str]:
        """The topic's settings as the broker describes them (Kafka: every one, defaults
        too; the embedded broker: those set at its creation); {} if it cannot say."""
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        async with self.admin(admin) as admin:
            deadline = time.monotonic() + self.request_timeout
            answers = await _retried(lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]),
                                     deadline)
        found: dict[str, str] = {}
        for answer in answers:
            for error, _, _, _, entries in answer.resources:
                if error == 0:
                    found.update((entry[0], entry[1]) for entry in entries)
        return found

    async def check_group(self, group: str, admin: Any = None) -> None:
        """NotAuthorized if the principal may not use consumer group `group`. Without an ACL
        on it, aiokafka's group member asks for its coordinator again and again and a worker
        waited silently, never given a partition (issue #44): asked once here, the broker says
        GROUP_AUTHORIZATION_FAILED. (READ on the group implies the DESCRIBE this needs.)"""
        from aiokafka.errors import GroupAuthorizationFailedError

        try:
            async with self.admin(admin) as admin:
                await _retried(lambda: admin.find_coordinator(group), time.monotonic() + self.request_timeout)
        except GroupAuthorizationFailedError:
            raise NotAuthorized(f"{self.security.principal} may not use consumer group {group!r} "
                                "(GROUP_AUTHORIZATION_FAILED): a worker needs the ACL READ on its group, named "
                                "by --app-id (docs/operations.md, Access control)") from None

    @asynccontextmanager
    async def admin(self, given: Any = None) -> AsyncIterator[Any]:
        """An aiokafka admin client of this connection, started, closed afterwards; or
        `given`, one already started, as it is (several calls asking through one). Each of
        its requests waits at most ATTEMPT_SECONDS: one sent to a broker that is dying (its
        port still takes connections) is then sent again to another before the caller's
        deadline (`_retried`)."""
        if given is not None:
            yield given
            return
        from aiokafka.admin import AIOKafkaAdminClient

        options = {**self.options(), "request_timeout_ms": int(min(self.request_timeout, ATTEMPT_SECONDS) * 1000)}
        admin = AIOKafkaAdminClient(**options)
        try:
            await start_client(admin, self.security)
            yield admin
        finally:
            await admin.close()


async def _hidden(admin: Any, names: list[str]) -> set[str]:
    """Those of the topics the principal may not describe (TOPIC_AUTHORIZATION_FAILED to a
    metadata request naming them; Kafka says the same whether or not they exist). The
    request never creates a topic, where the admin client's describe_topics would let the
    broker do it (auto.create.topics.enable)."""
    from ..stream.kafka_io import named_topics

    return {entry[1] for entry in await named_topics(admin, names) if entry[0] == TopicAuthorizationFailedError.errno}


async def _described(admin: Any, names: list[str], timeout: float) -> list[dict[str, Any]]:
    """The topics' metadata once it lists each one's partitions, or as it is after
    `timeout` seconds. Kafka answers CreateTopics before every broker's metadata has
    the new topic: a request right after can find it unknown, or with no partitions."""
    deadline = time.monotonic() + timeout
    while True:
        described = await _retried(lambda: admin.describe_topics(names), deadline)
        settled = all(entry["error_code"] == 0 and entry["partitions"] for entry in described)
        if settled or time.monotonic() > deadline:
            return described
        await asyncio.sleep(0.1)


async def _retried(request: Callable[[], Awaitable[T]], deadline: float) -> T:
    """An admin request, sent again while its error is retriable (or it timed out) and
    time is left: it goes to a broker picked at random, and one of a cluster's may be
    down (Kafka said NodeNotReadyError for it, and a worker started then exited) or
    dying (no answer until the request timed out, on a busy machine)."""
    while True:
        try:
            return await request()
        except (KafkaError, asyncio.TimeoutError) as exc:
            retriable = isinstance(exc, asyncio.TimeoutError) or exc.retriable
            if not retriable or time.monotonic() > deadline:
                raise
            log.info("retrying a request the broker refused or did not answer (%s)", exc)
            await asyncio.sleep(0.2)


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    out = []
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        out.append((name, code, entry[2] if len(entry) > 2 else None))
    return out
