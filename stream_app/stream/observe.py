"""What the worker shows of itself: Prometheus metrics (prometheus-client,
default registry; served at /metrics next to Faust's own sensor metrics) and
the counts of /health."""

from __future__ import annotations

import functools
import logging
import sys
import time
from operator import attrgetter
from typing import Any, Callable

import numpy as np
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ..inputs import format_time
from ..leagues import LeagueConfig

log = logging.getLogger(__name__)


class BatchHistogram:
    """A labelled Prometheus histogram that takes a batch's values at once (NumPy
    counts the buckets). prometheus_client's Histogram takes one value per call, and
    the worker observes one to three values per match applied."""

    def __init__(self, name: str, documentation: str, labelnames: list[str], buckets: tuple[float, ...],
                 registry: Any = REGISTRY):
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.bounds = np.array([b for b in buckets if b != float("inf")])
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self._children: dict[tuple[str, ...], tuple[np.ndarray, list[float]]] = {}  # labels -> (counts, [sum])
        registry.register(self)

    def observe_many(self, labels: tuple[str, ...], values: list[float]) -> None:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = (np.zeros(len(self.bounds) + 1, dtype=np.int64), [0.0])
        array = np.asarray(values, dtype=float)
        # side="left": a value equal to a bound counts in that bound's bucket (le).
        child[0][:] += np.bincount(np.searchsorted(self.bounds, array, side="left"), minlength=len(self.bounds) + 1)
        total = child[1][0]
        for value in values:  # one by one, in order: the sum prometheus_client would show
            total += value
        child[1][0] = total

    def describe(self) -> list[Any]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Any:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, (counts, total) in self._children.items():
            cumulative = np.cumsum(counts).tolist()
            family.add_metric(list(labels), list(zip(self._les, cumulative)), total[0])
        yield family

_CHANGES = attrgetter("changes")  # of a rating.Applied

MATCHES_APPLIED = Counter(
    "ratings_matches_applied_total", "Matches applied to the rating state", ["league", "algorithm"]
)
DUPLICATES = Counter(
    "ratings_duplicate_matches_total",
    "Matches not applied because their match_id was already applied in the league",
    ["league", "algorithm"],
)
DEAD_LETTERS = Counter(
    "ratings_dead_letters_total", "Input events sent to the dead-letter topic", ["reason", "league", "algorithm"]
)
REDELIVERED = Counter(
    "ratings_redelivered_events_total", "Input events skipped because they were applied before a restart"
)
INPUT_GAPS = Counter(
    "ratings_input_gaps_total",
    "Times input arrived past the checkpoint (records skipped) and the skipped records were read directly",
)
INPUT_RECORDS = Counter("ratings_input_records_total", "Input records taken by the worker's consumer, per topic", ["topic"])
FORWARDED = Counter(
    "ratings_forwarded_events_total", "Input events on the wrong partition for their league, re-keyed by league"
)
RATING_CHANGES = Counter(
    "ratings_rating_changes_total", "rating-changed events published", ["league", "algorithm"]
)
LATENCY = BatchHistogram(
    "ratings_processing_latency_seconds",
    "From the match's occurred_at (or the input record's timestamp) to its rating changes being published",
    ["algorithm"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, float("inf")),
)
CHANGE_SIZE = BatchHistogram(
    "ratings_rating_change_size",
    "Absolute rating change per participant per match",
    ["algorithm"],
    buckets=(0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, float("inf")),
)
RERATES = Counter(
    "ratings_rerates_total", "Leagues re-rated: after a void, a correction, or a late result placed in time order",
    ["league", "algorithm"],
)
REAPPLIED = Counter(
    "ratings_rerate_matches_total", "Matches applied again by re-rates", ["league", "algorithm"]
)
RERATE_REMAINING = Gauge(
    "ratings_rerate_remaining_matches",
    "Matches a league's re-rate in progress has still to apply again (its partition's input waits meanwhile)", ["league"],
)
RERATE_SECONDS = Histogram(
    "ratings_rerate_seconds", "Time to re-rate a league (apply its log again from the change, diff the players)",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")),
)
PLAYERS = Gauge("ratings_league_players", "Players with a rating in the league (leagues owned by this worker)", ["league", "algorithm"])
LAG = Gauge("ratings_consumer_lag", "Input records not yet applied, per partition (high watermark - next offset)", ["topic", "partition"])
BATCH_SECONDS = Histogram(
    "ratings_batch_seconds", "Time to apply a batch and write its checkpoint",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")),
)
# Where a match's latency goes (docs/performance.md): each batch part's stages, in order.
# A result's rating-changed events are readable once its batch is published; the next
# batch is taken once this one is checkpointed.
BATCH_STAGE_SECONDS = Histogram(
    "ratings_batch_stage_seconds",
    "Stages of a batch: waiting (its oldest input record, from the record's timestamp to the batch being taken), "
    "applying, publishing (the commit's start to its outputs acknowledged) and checkpointing (the commit's start "
    "to its checkpoint in the local store)",
    ["stage"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, float("inf")),
)
REQUEST_SECONDS = Histogram(
    "ratings_http_request_seconds", "Time to answer an API request, per endpoint (forwarded ones included)",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, float("inf")),
)
CHECKPOINTS = Counter("ratings_checkpoints_total", "Checkpoints written (batches committed to the local state)")
BASES = Counter("ratings_changelog_bases_total", "Bases written: a partition's whole local state as changelog rows")
BASE_ROWS = Counter("ratings_changelog_base_rows_total", "Changelog rows written by bases")
CLEAN_FAILURES = Counter("ratings_changelog_clean_failures_total",
                         "Bases after which the broker did not delete the changelog records before them (the next base does)")
TAKE_UP_RECORDS = Counter("ratings_take_up_changelog_records_total", "Changelog records read while taking partitions up")
TAKE_UP_SECONDS = Histogram(
    "ratings_take_up_seconds", "Time to take a partition up: fence, read the changelog past the local checkpoint",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")),
)
STANDBY_PARTITIONS = Gauge("ratings_standby_partitions", "Partitions whose changelog this worker follows as their standby")
STANDBY_RECORDS = Counter("ratings_standby_changelog_records_total", "Changelog records of standby partitions followed")
STANDBY_BEHIND = Gauge("ratings_standby_behind_records",
                       "Changelog records of standby partitions past their local checkpoints: what taking them "
                       "over would read now (-1: not known yet)")
FENCED_RECORDS = Counter(
    "ratings_fenced_changelog_records_total",
    "Changelog records of replaced workers (late writes after another worker took their partition over)",
)
STARTED_OVER = Counter(
    "ratings_started_over_total",
    "Partitions found to have started over (the broker forgot records, the topic was recreated): log=input, "
    "read again from its beginning; log=changelog, the local state written back to it",
    ["log", "partition"],
)
BROKER_CONNECTED = Gauge("ratings_broker_connected", "1 while the broker answers the worker's requests, 0 while it does not")
BROKERS_ANSWERING = Gauge("ratings_brokers_answering",
                          "The cluster's brokers that answered the worker's last check (fewer than the changelog's "
                          "min.insync.replicas: no write can be accepted)")
WORKER_STATE = Gauge(
    "ratings_worker_state", "1 for the worker's current state", ["state"]
)
ASSIGNED_PARTITIONS = Gauge("ratings_assigned_partitions", "Input partitions assigned to this worker")
STORE_MEMORY = Gauge(
    "ratings_local_store_memory_bytes",
    "RocksDB's memory in the local state, by kind: memtables, table_readers (held by open table files outside "
    "the block cache), block_cache (data, index and filter blocks), block_cache_pinned (part of block_cache)",
    ["kind"],
)
STORE_MEMORY_KINDS = ("memtables", "table_readers", "block_cache", "block_cache_pinned")
COMPILED_MODULES = Gauge("ratings_compiled_modules", "Modules of the package running as C extensions (mypyc: "
                         "deploy/compile.py); 0: plain Python")

STATES = ("starting", "taking_up", "running", "stopping")


def watch_store(memory: Callable[[], dict[str, int]]) -> None:
    """Read the local store's memory (LocalStore.memory) at each scrape."""

    def read(kind: str) -> float:
        try:
            return memory()[kind]
        except Exception:  # a closed database: never fail the whole scrape
            return float("nan")

    for kind in STORE_MEMORY_KINDS:
        STORE_MEMORY.labels(kind).set_function(functools.partial(read, kind))


def compiled_modules() -> list[str]:
    """The package's modules loaded as C extensions (mypyc, deploy/compile.py), by name."""
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith("stream_app.") and (getattr(module, "__file__", None) or "").endswith(".so"))


def set_state(state: str) -> None:
    for name in STATES:
        WORKER_STATE.labels(name).set(1 if name == state else 0)


class Tally:
    """What the batches did: counts for /health, metrics once per batch."""

    def __init__(self, config: LeagueConfig):
        self.config = config
        self.started_at = time.time()
        self.first_applied_at: float | None = None
        self.applied = 0
        self.dead_letters = 0
        self.duplicates = 0
        self.forwarded = 0
        self.rerates = 0
        self.rerate_parts = 0  # parts after the first (each committed on its own)
        self.last_rerate: dict[str, Any] | None = None
        self.compiled = len(compiled_modules())  # (imports are done by the time a worker starts)
        COMPILED_MODULES.set(self.compiled)

    def input(self, records: list[Any]) -> None:
        topics: dict[str, int] = {}
        for record in records:
            topics[record.topic] = topics.get(record.topic, 0) + 1
        for topic, count in topics.items():
            INPUT_RECORDS.labels(topic).inc(count)

    def dead_letter(self, code: str, league: str | None, duplicate: bool) -> None:
        self.dead_letters += 1
        algorithm = self.config.rule_for(league).algorithm if league else ""
        DEAD_LETTERS.labels(code, league or "", algorithm).inc()
        if duplicate:
            self.duplicates += 1
            DUPLICATES.labels(league, algorithm).inc()

    def forward(self) -> None:
        self.forwarded += 1
        FORWARDED.inc()

    def applied_batch(self, applied: list[tuple[Any, int | None]], now: float) -> None:
        """Metrics of a batch's applied matches ((rating.Applied, record timestamp in ms)):
        counters once per league, not per match."""
        if not applied:
            return
        if self.first_applied_at is None:
            self.first_applied_at = now
            log.info("first match applied %.1f s after start", now - self.started_at)
            set_state("running")
        self.applied += len(applied)
        # One loop body a match with no call in it (the calls a match makes are counted):
        # the counts and the changes' sizes are taken after it, a group at a time.
        groups: dict[tuple[str, str], list[Any]] = {}  # (league, algorithm) -> its applied matches
        latencies: dict[str, list[float]] = {}
        changes: dict[str, list[Any]] = {}  # algorithm -> its rating changes, in order
        for item, timestamp in applied:
            algorithm = item.algorithm
            match = item.match
            group = (match.league, algorithm)
            if group in groups:
                groups[group] += (item,)
            else:
                groups[group] = [item]
            if algorithm in changes:
                changes[algorithm] += item.changes
            else:
                changes[algorithm] = list(item.changes)
            origin = match.time if match.time is not None else (timestamp / 1000 if timestamp else None)
            if origin is not None:
                latency = now - origin
                if algorithm not in latencies:
                    latencies[algorithm] = []
                latencies[algorithm] += (latency if latency > 0.0 else 0.0,)
        for (league, algorithm), items in groups.items():
            MATCHES_APPLIED.labels(league, algorithm).inc(len(items))
            RATING_CHANGES.labels(league, algorithm).inc(sum(map(len, map(_CHANGES, items))))
            PLAYERS.labels(league, algorithm).set(items[-1].record["players"])
        for algorithm, observed in latencies.items():
            LATENCY.observe_many((algorithm,), observed)
        for algorithm, made in changes.items():
            sizes = np.abs(np.array([c.after.rating - c.before.rating for c in made], dtype=float))
            CHANGE_SIZE.observe_many((algorithm,), sizes.tolist())

    def rerated(self, rerated: Any, seconds: float, elapsed: float, now: float) -> None:
        """A re-rate done (rerate.Rerated): `seconds` of work, `elapsed` from its start
        to now (its parts' commits included)."""
        self.rerates += 1
        league, algorithm = rerated.league, rerated.algorithm
        self.last_rerate = {"league": league, "match_id": rerated.match_id, "matches_reapplied": rerated.reapplied,
                            "corrections": len(rerated.corrections), "seconds": round(seconds, 6),
                            "elapsed_seconds": round(elapsed, 6), "at": now}
        RERATES.labels(league, algorithm).inc()
        REAPPLIED.labels(league, algorithm).inc(rerated.reapplied)
        RATING_CHANGES.labels(league, algorithm).inc(len(rerated.corrections))
        PLAYERS.labels(league, algorithm).set(rerated.record["players"])
        RERATE_SECONDS.observe(elapsed)
        log.info("league %s re-rated after %s: %d matches applied again, %d players corrected, %.3f s",
                 league, rerated.match_id, rerated.reapplied, len(rerated.corrections), seconds)

    def counts(self) -> dict[str, Any]:
        names = ("applied", "dead_letters", "duplicates", "forwarded", "rerates", "rerate_parts", "last_rerate",
                 "first_applied_at")
        # started_at is for people (RFC 3339, as every time the API gives); first_applied_at
        # stays a Unix time: the tests and benchmarks measure recovery with it.
        return {**{name: getattr(self, name) for name in names}, "started_at": format_time(float(int(self.started_at))),
                "compiled_modules": self.compiled}
