"""Prometheus metrics of the worker (prometheus-client, default registry;
served at /metrics next to Faust's own sensor metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
LATENCY = Histogram(
    "ratings_processing_latency_seconds",
    "From the match's occurred_at (or the input record's timestamp) to its rating changes being published",
    ["algorithm"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, float("inf")),
)
CHANGE_SIZE = Histogram(
    "ratings_rating_change_size",
    "Absolute rating change per participant per match",
    ["algorithm"],
    buckets=(0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, float("inf")),
)
PLAYERS = Gauge("ratings_league_players", "Players with a rating in the league (leagues owned by this worker)", ["league", "algorithm"])
LAG = Gauge("ratings_consumer_lag", "Input records not yet applied, per partition (high watermark - next offset)", ["topic", "partition"])
BATCH_SECONDS = Histogram(
    "ratings_batch_seconds", "Time to apply a batch and write its checkpoint",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")),
)
CHECKPOINTS = Counter("ratings_checkpoints_total", "Checkpoints written (batches committed to the tables)")
WORKER_STATE = Gauge(
    "ratings_worker_state", "1 for the worker's current state", ["state"]
)
ASSIGNED_PARTITIONS = Gauge("ratings_assigned_partitions", "Input partitions assigned to this worker")

STATES = ("starting", "recovering", "running", "stopping")


def set_state(state: str) -> None:
    for name in STATES:
        WORKER_STATE.labels(name).set(1 if name == state else 0)
