"""The Faust app of a worker: the consumer group, the rebalance hooks that
pause the batch loop and take the new partitions up, the timers, and
`run_worker`.

Input: `match-results` (key = league) and `<match-results>-by-league` (records
found on the wrong partition, re-keyed). Faust's consumer group decides which
worker owns which partitions; the worker keeps their state itself (stream/store.py,
stream/changelog.py), reads their records with its own consumer (stream/intake.py)
and applies them in the batch loop (stream/batch_loop.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from pathlib import Path
from typing import Any, Awaitable, Callable

import faust
from aiokafka.errors import KafkaError
from faust.types import TP

from .. import runtime
from ..client import bootstrap_servers
from ..client.kafka import NotAuthorized
from ..processes import exit_unless_done
from ..inputs import MAX_EVENT_BYTES
from ..leagues import LeagueConfig
from ..settings import Settings
from . import kafka_io, membership, observe
from .api import Api, json_errors
from .broker_watch import BrokerWatch
from .intake import Intake, KafkaChangelog
from .reads import Reads
from .standby import Standby
from .store import LocalStore
from .topics import TopicsMismatch, check_start, ensure_topics
from .tasks import cancel
from .batch_loop import BatchLoop

log = logging.getLogger(__name__)

# glibc keeps what the worker frees in the middle of its heaps (RocksDB's memtables
# and blocks between Python's buffers) and does not give it back: the RSS creeps up
# at a steady rate. Every TRIM_SECONDS the pages go back (runtime.trim_malloc).
TRIM_SECONDS = 30.0

_FAUST_SENSORS = False
WATCH_SECONDS = 1.0  # between two checks that the broker answers


METADATA_MAX_AGE_MS = 10_000


class _App(faust.App):
    """Faust's app with two hooks: after it starts (its consumer exists, not yet in
    the group) and before it stops its consumer and tables."""

    after_start: Any = None  # () -> None
    before_stop: Any = None  # async () -> None

    async def on_start(self) -> None:
        await super().on_start()
        if self.after_start is not None:
            self.after_start()

    async def on_stop(self) -> None:
        if self.before_stop is not None:
            await self.before_stop()
        await super().on_stop()


class WorkerApp:
    """A worker: the Faust app around the batch loop and the API."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.config = LeagueConfig.load(settings.config_path)
        runtime.use_threads(self.config)
        self.data_dir = Path(settings.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.app = self._build_app()
        self.store = LocalStore(self.data_dir / "state")
        observe.watch_store(self.store.memory)
        intake = Intake(self.kafka_options(), settings.batch_max, wait_ms=int(settings.batch_wait * 1000),
                        fetch_wait_ms=int(settings.fetch_wait * 1000))
        self.batches = BatchLoop(settings, self.config, self.store, kafka_io.ProducerSender(self.app),
                                 KafkaChangelog(self.kafka_options()), intake)
        self.batches.ensure_topics = lambda: ensure_topics(settings)
        self.standby = Standby(self.store, self.kafka_options(), settings.changelog_topic, *self.batches.deriving)
        self.broker_watch = BrokerWatch(self.kafka_options(), topic=settings.changelog_topic)
        self.broker_watch.repeats.install()
        self.broker_watch.on_back = self._broker_back
        self.broker_watch.on_more = self.batches.wake.set
        observe.BROKER_CONNECTED.set(1)
        self.reads = Reads(self.store, settings.partitions, self.config)
        self.batches.committer.on_take_up = self.reads.taken_up
        self.batches.committer.on_commit = self.reads.committed
        self.api = Api(self.reads, self.config, self.owns, self.owner_url, self.ready, self.health)
        self.api.routes(self.app)
        self._resuming: asyncio.Future | None = None  # taking the assigned partitions up
        self._group_commit: asyncio.Future | None = None
        self.exit_after: float | None = None  # a process of its own: exit if stopping takes longer (s)
        self.previous_member: str | None = None  # removed from the group at start (stream/membership.py)

    # -- the Faust app ------------------------------------------------------------------
    def _build_app(self) -> faust.App:
        s = self.settings
        options: dict[str, Any] = dict(
            broker=s.broker,
            store="memory://",  # Faust keeps no table: the worker's state is stream/store.py's
            datadir=str(self.data_dir),
            topic_partitions=s.partitions,
            topic_replication_factor=1,
            # No leader election: nothing here runs on one worker only. Faust's leader topic
            # (<app id>-__assignor-__leader) would be one more topic and ACL, created at each
            # start, and a group formed before its metadata knew the topic rebalanced again
            # once it did (a 503 window seconds after the start).
            topic_disable_leader=True,
            key_serializer="raw",
            value_serializer="raw",
            web_enabled=True,
            web_port=s.web_port,
            web_bind=s.web_host,
            web_host=s.web_host,
            web_tables_enabled=False,  # never serve raw tables
            web_application_options={"middlewares": [json_errors]},  # an unknown path answers JSON too
            broker_session_timeout=s.session_timeout,
            broker_heartbeat_interval=s.heartbeat_interval,
            consumer_auto_offset_reset="earliest",
            # The group learns of an input topic created again only from its consumer's metadata:
            # aiokafka's default refresh (5 min) left it assigning none of its partitions that long.
            consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
            producer_acks=-1,
            producer_request_timeout=s.request_timeout,
            # Faust's default (1,000,000) is below the largest valid event, which the
            # worker may have to forward; dead letters stay under MAX_DEAD_LETTER_BYTES.
            producer_max_request_size=MAX_EVENT_BYTES + 64 * 1024,
            # Faust's default record batch (16 KiB), with aiokafka's one pending batch per
            # partition, split a batch's outputs into hundreds of produce requests in a row.
            producer_max_batch_size=512 * 1024,
            stream_wait_empty=True,
            # Faust's assignor (not round robin) keeps both input topics' partition P on one
            # worker, and places each partition's standby on another (stream/standby.py).
            table_standby_replicas=1,
            autodiscover=False,
        )
        if s.advertised_url:
            options["canonical_url"] = s.advertised_url
        if s.security is not None:
            options.update(s.security.faust_settings())
        app = _App(s.app_id, **options)
        app.after_start = self._after_start
        app.before_stop = self._stop_input
        topic = dict(partitions=s.partitions, key_serializer="raw", value_serializer="raw", internal=False)
        # The agent subscribes the group to the input topics: that is how Faust assigns
        # partitions. Its records are read by the intake instead.
        app.agent(app.topic(*s.input_topics, acks=False, **topic), name="apply")(self._agent)
        app.on_partitions_revoked.connect(self._on_revoked)
        app.on_partitions_assigned.connect(self._on_assigned)
        for seconds, timer in self.timers():
            app.timer(seconds)(timer)
        app.task(self._install_task_dump)
        app.task(self._watch_broker)
        global _FAUST_SENSORS
        if not _FAUST_SENSORS:  # they register process-wide metrics: once per process (tests build several apps)
            from faust.sensors.prometheus import setup_prometheus_sensors

            setup_prometheus_sensors(app, name_prefix="faust")
            _FAUST_SENSORS = True
        observe.set_state("starting")
        return app

    def _after_start(self) -> None:
        kafka_io.keep_input_from_faust(self.app.consumer, self.settings.input_topics)
        self.broker_watch.repeats.install()  # again: loggers made since
        if self.previous_member is not None:  # logged now: Faust has set logging up
            log.info("removed this data directory's previous member %s from the group %s", self.previous_member,
                     self.settings.app_id)

    async def _agent(self, stream: Any) -> None:
        # Input partitions are never active in Faust's consumer (kafka_io.keep_input_from_faust).
        async for event in stream.events():
            log.error("input record %s[%d]@%d reached the Faust agent: ignored (the batch loop applies input)",
                      event.message.topic, event.message.partition, event.message.offset)

    def kafka_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"bootstrap_servers": bootstrap_servers(self.settings.broker),
                                   "request_timeout_ms": int(self.settings.request_timeout * 1000)}
        if self.settings.security is not None:
            options.update(self.settings.security.aiokafka_kwargs())
        return options

    # -- rebalances ---------------------------------------------------------------------
    async def _stop_resuming(self) -> None:
        task, self._resuming = self._resuming, None
        await cancel(task)

    async def _on_revoked(self, app: Any, revoked: set[TP], **_: Any) -> None:
        # Faust waits for this before the group moves on, so the next owner of a
        # partition cannot start before this worker's batch in progress is done.
        await self._stop_resuming()
        await self.standby.stop()
        await self.batches.pause()
        observe.set_state("taking_up")
        # Gauges of partitions and leagues this worker may no longer own: the
        # timer sets them again for what it owns after the rebalance.
        observe.LAG.clear()
        observe.PLAYERS.clear()

    async def _on_assigned(self, app: Any, assigned: set[TP], **_: Any) -> None:
        observe.ASSIGNED_PARTITIONS.set(sum(tp.topic == self.settings.match_topic for tp in assigned))
        try:
            membership.remember(self.data_dir, kafka_io.group_member_id(self.app.consumer))
        except Exception as exc:  # only a restart's speed depends on it
            log.warning("keeping the group member id failed: %s", exc)
        await self._take_up_assigned()

    async def _broker_back(self) -> None:
        """It may have forgotten its topics: taking the partitions up again checks both logs."""
        try:
            if self.batches.resumed:
                log.warning("the broker is back: taking the partitions up again, which checks what it holds")
                await self._take_up_assigned()
        except Exception:
            log.exception("taking the partitions up again after the broker came back failed")

    async def _take_up_assigned(self) -> None:
        await self._stop_resuming()
        await self.standby.stop()
        await self.batches.pause()
        # Every input partition owned now (the assignor has the whole assignment).
        # Taking them up reads their changelogs, which can take seconds: not inside
        # Faust's callback. Input resumes only if no pause (a newer rebalance) comes first.
        owned = [(tp.topic, tp.partition) for tp in self.app.assignor.assigned_actives()
                 if tp.topic in self.settings.input_topics]
        standby = {tp.partition for tp in self.app.assignor.assigned_standbys() if tp.topic == self.settings.match_topic}
        self._resuming = asyncio.ensure_future(self._resume(owned, standby, self.batches.intake.generation))

    async def _resume(self, owned: list[tuple[str, int]], standby: set[int], generation: int | None) -> None:
        delay = 1.0
        while True:
            try:
                if await self.batches.resume(owned, generation):
                    log.info("taking input from %d partitions after their checkpoints", len(owned))
                    self.standby.follow(standby - {partition for _, partition in owned})
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker went away while reading: the partitions' stores keep what was read
                log.warning("taking partitions up failed (%s): trying again in %.0f s", exc, delay)
                self.batches.trouble = f"taking partitions up failed: {exc}"
                self.batches.forget()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _stop_input(self) -> None:
        observe.set_state("stopping")
        if self.exit_after is not None:
            exit_unless_done(self.exit_after, "stopping did not finish in %.0f s (is the broker unreachable?): exiting")
        await self._stop_resuming()
        await self.standby.stop()
        await self.batches.stop()
        await self.api.close()
        await self.broker_watch.close()
        self.store.close()

    # -- what this worker owns ----------------------------------------------------------
    def _owned(self) -> list[int]:
        topic = self.settings.match_topic
        return sorted(tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic)

    def owns(self, partition: int) -> bool:
        return partition in self._owned()

    def owner_url(self, partition: int) -> str | None:
        topic = self.settings.match_topic
        for url, tps in self.app.assignor.external_topic_distribution.items():
            if partition in tps.get(topic, ()):
                return url
        return None

    def ready(self) -> bool:
        """Serving is safe: no rebalance under way and every owned partition taken up."""
        return not self.app.rebalancing and self.batches.resumed

    def health(self) -> dict[str, Any]:
        trouble = self.broker_watch.trouble or self.batches.trouble
        status = "ok" if self.broker_watch.connected and trouble is None else "degraded"
        return {"status": status, "broker": self.broker_watch.health(), "trouble": trouble, "ready": self.ready(),
                **self.batches.tally.counts(), "assigned_partitions": self._owned(),
                "standby_partitions": self.standby.partitions, "standby_behind": self.standby.behind,
                "take_up_records": self.batches.committer.take_up_records,
                "take_up_seconds": self.batches.take_up_seconds, "fenced_records": self.batches.committer.fenced,
                "found_replaced": self.batches.committer.replaced, "standings_built": self.reads.builds,
                "phase": self.batches.phase, "rerating": self.batches.rerates.health(),
                "started_over": sorted(self.batches.started_over + self.batches.committer.started_over,
                                       key=lambda found: found["at"])}

    # -- timers -------------------------------------------------------------------------
    def timers(self) -> list[tuple[float, Callable[[], Awaitable[None]]]]:
        """What the app runs every so many seconds."""
        found = [(2.0, self._refresh_gauges), (5.0, self._commit_group_offsets)]
        if runtime.can_trim_malloc():
            found.append((TRIM_SECONDS, self._release_memory))
        return found

    async def _refresh_gauges(self) -> None:
        try:
            ready = self.ready()
            observe.set_state("running" if ready else "taking_up")
            if ready:
                self._set_gauges()
        except Exception:  # a metrics refresh must never take the worker down
            log.exception("refreshing gauges failed")

    def _set_gauges(self) -> None:
        owned = self._owned()
        for partition in owned:
            for league, record in self.reads.leagues(partition):
                observe.PLAYERS.labels(league, record["algorithm"]).set(record["players"])
        consumer = self.app.consumer
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if tp.topic in self.settings.input_topics and highwater is not None:
                done = self.batches.checkpoint(tp.partition).offsets.get(tp.topic, -1)
                observe.LAG.labels(tp.topic, str(tp.partition)).set(max(0, highwater - (done + 1)))

    async def _watch_broker(self) -> None:
        """Whether the broker answers, every second (a task, not a timer: a check that
        waits for its timeout must not overlap the next)."""
        while True:
            try:
                await self.broker_watch.check()
            except Exception:  # never take the worker down over it
                log.exception("checking the broker failed")
            await asyncio.sleep(WATCH_SECONDS)

    async def _release_memory(self) -> None:
        try:
            runtime.trim_malloc()
        except Exception:  # never take the worker down over it
            log.exception("malloc_trim failed")

    async def _commit_group_offsets(self) -> None:
        """Commit each owned input partition's checkpoint to the consumer group, so
        Kafka's own tools show the group's position and lag (the worker itself
        resumes from its checkpoints, never from these). A commit still waiting
        (the broker is away) is not joined by another."""
        partitions = self.batches.partitions
        if not self.ready() or not partitions or (self._group_commit is not None and not self._group_commit.done()):
            return
        offsets = {(topic, partition): done + 1 for partition, state in list(partitions.items())
                   for topic, done in state.checkpoint.offsets.items()}

        async def commit() -> None:
            try:
                await kafka_io.commit_group_offsets(self.app.consumer, offsets)
            except Exception as exc:  # visibility only: never worth failing for
                log.debug("committing input offsets to the group failed: %s", exc)

        self._group_commit = asyncio.ensure_future(commit())

    async def _install_task_dump(self) -> None:
        """SIGUSR1 logs every asyncio task's stack: for diagnosing a stuck worker."""
        loop = asyncio.get_running_loop()

        def awaiting(task: asyncio.Task) -> list[str]:
            """Where the task waits: its coroutine and each one it awaits, outermost first
            (Task.get_stack shows only the outermost frame of a suspended task)."""
            where, step = [], task.get_coro()
            while step is not None:
                frame = next(filter(None, (getattr(step, name, None) for name in ("cr_frame", "ag_frame", "gi_frame"))),
                             None)
                if frame is not None:
                    where.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
                # an async generator (an asynccontextmanager's) is awaited through its anext()
                step = next(filter(None, (getattr(step, name, None) for name in ("cr_await", "ag_await", "gi_yieldfrom"))),
                            None)
            return where

        def dump() -> None:
            log.warning("batch phase: %s; intake: %s", self.batches.phase, self.batches.intake.describe())
            for task in asyncio.all_tasks(loop):
                log.warning("task %s:\n%s", task.get_name(), "\n".join(awaiting(task)))

        loop.add_signal_handler(signal.SIGUSR1, dump)


def run_worker(settings: Settings, loglevel: str = "info") -> int:
    """Run one worker in the foreground until SIGINT/SIGTERM."""
    _check_web_port(settings.web_host, settings.web_port)
    RebalanceLines.install()
    runtime.collect_for_batches()
    kafka_io.no_topics_created_by_metadata()
    kafka_io.silent_brokers_avoided()
    try:
        asyncio.run(check_start(settings))
    except (TopicsMismatch, NotAuthorized) as exc:
        raise SystemExit(f"ratings worker: {exc}") from None
    except (KafkaError, OSError) as exc:
        protocol = settings.security.protocol if settings.security is not None else "PLAINTEXT"
        raise SystemExit(f"ratings worker: cannot connect to {settings.broker} ({protocol}): {exc}. Is the broker "
                         "running there, and does it take this security protocol (RATINGS_KAFKA_*)?") from None
    worker = WorkerApp(settings)
    worker.previous_member = asyncio.run(membership.leave_previous(worker.data_dir, settings.app_id,
                                                                   worker.kafka_options()))
    worker.exit_after = settings.stop_timeout + 5.0
    faust_worker = faust.Worker(worker.app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    try:
        faust_worker.execute_from_commandline()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


class RebalanceLines(logging.Filter):
    """aiokafka's INFO lines at a rebalance, which Faust's log formatter draws as tables
    (faust.worker.format_log_arguments: a set of partitions or topics, ten lines or
    more each): the new assignment is kept as one line, its partitions compact
    ("match-results 4-7, ..."); the revoked set and the subscriptions (every consumer
    the worker starts for a changelog logs one) are dropped."""

    LOGGERS = ("aiokafka.consumer.group_coordinator", "aiokafka.consumer.subscription_state",
               "aiokafka.consumer.consumer")
    DROPPED = ("Revoking previously assigned partitions", "Updating subscribed topics", "Subscribed to topic")
    ASSIGNED = "Setting newly assigned partitions"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or not isinstance(record.msg, str):
            return True
        if record.msg.startswith(self.DROPPED):
            return False
        if record.msg.startswith(self.ASSIGNED) and record.args:
            record.args = (compact_partitions(record.args[0]), *record.args[1:])
        return True

    @classmethod
    def install(cls) -> None:
        for name in cls.LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(found, cls) for found in logger.filters):
                logger.addFilter(cls())


def compact_partitions(partitions: Any) -> str:
    """{TP("t", 4), TP("t", 5), TP("u", 0)} -> "t 4-5, u 0" (runs of partitions joined);
    "none" for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    said = []
    for topic, numbers in sorted(by_topic.items()):
        runs: list[list[int]] = []
        for number in sorted(numbers):
            if runs and number == runs[-1][1] + 1:
                runs[-1][1] = number
            else:
                runs.append([number, number])
        said.append(f"{topic} " + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return ", ".join(said) or "none"


def _check_web_port(host: str, port: int) -> None:
    """Stop with one line if the API cannot listen on host:port. Faust binds it only
    once the worker is starting, and a port in use then ends in a 70-line traceback.
    Bound as aiohttp binds (SO_REUSEADDR: a stopped worker's TIME_WAIT connections
    do not count); a program taking the port in between still reaches Faust's error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(f"ratings worker: web port {port} on {host} is already in use (another worker?): "
                             "choose another with --web-port (RATINGS_WEB_PORT)") from None
        raise SystemExit(f"ratings worker: cannot serve the API on {host}:{port}: "
                         f"{exc.strerror or exc} (--web-host, --web-port)") from None
