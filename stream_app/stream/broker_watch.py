"""Whether the broker answers, said once: a gauge, /health, and a log line when the
connection is lost and one when it is back, instead of the Kafka clients' line per
attempt (many a second from aiokafka while the broker is down).

`BrokerWatch.check` runs every second (a task of the worker's app): a metadata
request for no topic to every broker the cluster's metadata names, at once, with a
short timeout. The cluster answers while one of its brokers does: with one broker
of three down the others lead its partitions within the broker session timeout,
and the worker goes on (a take-up "because the broker is back" would check logs
that never went away). The brokers that do not answer are named in /health, and
every other Kafka client of the process avoids them meanwhile (stream/kafka_io.py
`silent_brokers_avoided`). `RepeatFilter` sits on the Kafka clients' loggers: each
of their warnings and errors is logged the first time in a minute, the repeats are
counted, and the watch logs how many were left out at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

from . import kafka_io, observe

log = logging.getLogger(__name__)

REPEAT_SECONDS = 60.0  # a client's message is logged once in this long; a summary of the rest as often
CLIENT_LOGGERS = ("aiokafka", "faust.transport")


class RepeatFilter(logging.Filter):
    """Passes a warning or error the first time its logger logs its message (the
    format string, before its arguments) in REPEAT_SECONDS; counts the others."""

    def __init__(self, clock: Any = time.monotonic):
        super().__init__()
        self.clock = clock
        self.last: dict[tuple[str, Any], float] = {}
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.msg)
        now = self.clock()
        if now - self.last.get(key, -REPEAT_SECONDS) < REPEAT_SECONDS:
            self.dropped += 1
            return False
        self.last[key] = now
        return True

    def take_dropped(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped

    def install(self) -> None:
        """On every Kafka client logger that exists (a filter applies only to records
        logged through its own logger, not a child's)."""
        for name in [n for n in logging.root.manager.loggerDict if n.startswith(CLIENT_LOGGERS)] + list(CLIENT_LOGGERS):
            logger = logging.getLogger(name)
            if self not in logger.filters:
                logger.addFilter(self)


class BrokerWatch:
    """`topic`: the topic whose min.insync.replicas says how many brokers must answer
    for a write to be accepted (the changelog's: every batch writes it)."""

    def __init__(self, options: dict[str, Any], timeout: float = 3.0, topic: str | None = None):
        self.options = options  # aiokafka connection options
        self.timeout = timeout
        self.topic = topic
        self.min_isr = 1  # the topic's min.insync.replicas, once learnt
        self._min_isr_known = False
        self.connected = True
        self.since = time.time()  # of the current state
        self.repeats = RepeatFilter()
        self._summary_at = time.monotonic()
        self._client: AIOKafkaClient | None = None
        self._known: dict[int, tuple[str, int]] = {}  # the cluster's brokers ever seen: node id -> (host, port)
        self.silent: list[int] = []  # node ids of the cluster's brokers that did not answer the last check
        self.answering = self.brokers = 0  # of the known brokers, at the last check
        self.on_back: Callable[[], Awaitable[None]] | None = None  # run when the broker answers again
        self.on_more: Callable[[], None] | None = None  # called when more brokers answer than at the last check
        self._back: asyncio.Future | None = None  # the on_back run in progress (a reference keeps it alive)

    async def check(self) -> bool:
        """Ask the brokers for their metadata (no topics); record and log a change."""
        try:
            await self._ask()
            answered = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answered = False
            reason = str(exc) or type(exc).__name__
        if answered != self.connected:
            self.connected, self.since = answered, time.time()
            observe.BROKER_CONNECTED.set(int(answered))
            if answered:
                log.warning("the broker answers again (the Kafka clients' repeated messages meanwhile: %d)",
                            self.repeats.take_dropped())
                self._summary_at = time.monotonic()
                if self.on_back is not None:  # not awaited: the checks go on meanwhile
                    self._back = asyncio.ensure_future(self.on_back())
            else:
                log.warning("the broker does not answer (%s): local state is still served; input waits", reason)
        self._summarise()
        return answered

    async def _ask(self) -> None:
        """Every known broker at once; returns when all have answered or timed out,
        and raises the first's error if none answered."""
        if self._client is None:
            client = kafka_io.asks_every_broker(AIOKafkaClient(**self.options))
            try:
                await asyncio.wait_for(client.bootstrap(), self.timeout)
            except BaseException:
                await client.close()
                raise
            self._client = client
        # Every node seen, not only those of the latest metadata: a broker that stopped
        # is left out of the cluster's metadata once fenced, but it is still down.
        self._known.update({broker.nodeId: (broker.host, broker.port) for broker in self._client.cluster.brokers()})
        nodes = sorted(self._known)
        if not nodes:
            raise ConnectionError("no broker known")
        answers = await asyncio.gather(*(asyncio.wait_for(self._client.send(node, MetadataRequest([])), self.timeout)
                                         for node in nodes), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, asyncio.CancelledError):
                raise answer
        silent = [node for node, answer in zip(nodes, answers) if isinstance(answer, BaseException)]
        for answer in answers:
            if not isinstance(answer, BaseException):
                self._known.update({broker[0]: (broker[1], broker[2]) for broker in answer.brokers})
        if silent != self.silent:
            if silent and len(silent) < len(nodes):
                log.warning("broker %s of %d does not answer: the others are asked meanwhile",
                            ", ".join(map(str, silent)), len(nodes))
            elif self.silent and not silent and self.connected:  # not after none answered: check() says so
                log.warning("every broker answers again (%d)", len(nodes))
        self.silent = silent
        # Every other client avoids them while others answer (none answering: nothing to prefer).
        kafka_io.avoid_brokers([self._known[node] for node in silent] if len(silent) < len(nodes) else ())
        more = len(nodes) - len(silent) > self.answering
        self.answering, self.brokers = len(nodes) - len(silent), len(nodes)
        if more and self.on_more is not None:
            self.on_more()
        observe.BROKERS_ANSWERING.set(self.answering)
        if not self._min_isr_known and self.answering:
            await self._learn_min_isr()
        if len(silent) == len(nodes):
            first = answers[0]
            raise first if isinstance(first, Exception) else ConnectionError(repr(first))

    async def _learn_min_isr(self) -> None:
        """The topic's min.insync.replicas (the cluster's default unless the topic sets
        it); tried again at the next check until the topic exists and may be described."""
        if self.topic is None:
            self._min_isr_known = True
            return
        admin = AIOKafkaAdminClient(**self.options)
        try:
            await asyncio.wait_for(admin.start(), self.timeout)
            [answer] = await asyncio.wait_for(admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, self.topic, {"min.insync.replicas": None})]), self.timeout)
            [(error, _, _, _, entries)] = answer.resources
            if error == 0:
                self.min_isr = next(int(entry[1]) for entry in entries if entry[0] == "min.insync.replicas")
                self._min_isr_known = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # asked again at the next check
            log.debug("min.insync.replicas of %s not learnt yet: %s", self.topic, exc)
        finally:
            await admin.close()

    @property
    def trouble(self) -> str | None:
        """Why a write cannot be accepted now, as far as the brokers that answer tell."""
        if not self.connected:
            return None  # said by `health` already
        if self.answering < self.min_isr:
            return (f"{self.answering} of {self.brokers} brokers answer; a write to {self.topic} needs "
                    f"{self.min_isr} (its min.insync.replicas): nothing is applied until one more is back")
        return None

    def _summarise(self) -> None:
        if time.monotonic() - self._summary_at < REPEAT_SECONDS:
            return
        self._summary_at = time.monotonic()
        dropped = self.repeats.take_dropped()
        if dropped:
            state = "" if self.connected else f" (the broker does not answer since {_when(self.since)})"
            log.warning("%d repeated messages of the Kafka clients were left out of the log in the last %.0f s%s",
                        dropped, REPEAT_SECONDS, state)

    def health(self) -> str:
        if not self.connected:
            return f"unreachable since {_when(self.since)}"
        if self.silent:
            return f"connected; broker {', '.join(map(str, self.silent))} does not answer"
        return "connected"

    async def close(self) -> None:
        kafka_io.avoid_brokers(())
        client, self._client = self._client, None
        if client is not None:
            await client.close()


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")
