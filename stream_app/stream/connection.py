"""Whether the broker answers, said once: a gauge, /health, and a log line when the
connection is lost and one when it is back, instead of the Kafka clients' line per
attempt (many a second from aiokafka while the broker is down).

`BrokerWatch.check` runs every second (a task of the worker's app): one metadata
request for no topic, with a short timeout. `RepeatFilter` sits on the Kafka clients' loggers: each of their
warnings and errors is logged the first time in a minute, the repeats are counted,
and the watch logs how many were left out at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

from . import observe

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
    def __init__(self, options: dict[str, Any], timeout: float = 3.0):
        self.options = options  # aiokafka connection options
        self.timeout = timeout
        self.connected = True
        self.since = time.time()  # of the current state
        self.repeats = RepeatFilter()
        self._summary_at = time.monotonic()
        self._client: AIOKafkaClient | None = None
        self.on_back: Callable[[], Awaitable[None]] | None = None  # run when the broker answers again
        self._back: asyncio.Future | None = None  # the on_back run in progress (a reference keeps it alive)

    async def check(self) -> bool:
        """Ask the broker for its metadata (no topics); record and log a change."""
        try:
            await asyncio.wait_for(self._ask(), self.timeout)
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
        if self._client is None:
            client = AIOKafkaClient(**self.options)
            try:
                await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._client = client
        node = self._client.get_random_node()
        if node is None:
            raise ConnectionError("no broker known")
        await self._client.send(node, MetadataRequest([]))

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
        return "connected" if self.connected else f"unreachable since {_when(self.since)}"

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")
