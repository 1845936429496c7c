"""The service's two-player Elo job written as a Quix Streams (3.28) application,
for the comparison "service vs Quix Streams" on the same embedded broker.

Per match, exactly bench/elo_job.py's `rate`: its two rating-changed events go
out unchanged, keyed by the league. The players live in Quix's State, scoped by
the message key (the league): one state key per player, in RocksDB with its
changelog topic. The Application runs at-least-once (Tansu has no transactions)
from the earliest offset, in a consumer group of its own, and otherwise keeps
Quix's defaults: a checkpoint (producer flush, state write, offset commit)
every 5 s (commit_interval=5.0, commit_every=0), 1 s consumer polls, RocksDB
options, changelog topics created by the app (compacted, as many partitions as
the input), librdkafka defaults except for the producer's batching (see
PRODUCER). Both topics should exist before it starts (Quix creates a missing
one with a single partition).

    python -m bench.quix_app --broker HOST:PORT --input TOPIC --output TOPIC \\
        --state-dir DIR --matches N [--group G]

processes messages until N matches are done, stops, and prints one JSON line:
{"matches", "first_at", "last_at", "stopped_at", ...} (time.time() after the
first and the N-th match were processed, and after the final checkpoint; the
N-th match's events are then handed to the producer, flushed by the stop).
Quix's logs go to stderr. `run(...)` starts that command for the benchmark and
adds the process's peak RSS and wall time.

On Tansu, a new group's JoinGroup is answered after about half the session
timeout: with a 6 s one (librdkafka's default is 45 s) the first match comes
a few seconds after the start; rates are taken from `first_at` in any case. Quix writes the changelog at each
checkpoint, one record per state key changed since the last one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# The service sends its output in record batches of up to 512 KiB (stream_app/stream/app.py,
# producer_max_batch_size): the librdkafka equivalent is batch.size, with linger.ms at its
# librdkafka default (5 ms), written out so the comparison states what it ran with.
PRODUCER = {"batch.size": 512 * 1024, "linger.ms": 5}


def tolerate_missing_retention() -> None:
    """Tansu's DescribeConfigs answer has no `retention.ms`, and Quix Streams 3.28 reads
    it without a default when it derives the changelog topic's settings from the input
    topic's (TopicManager.derive_topic_config, from StreamingDataFrame.register_store):
    KeyError. A missing value counts as -1 (no time limit), as Quix already does for a
    missing `retention.bytes`. Only the changelog's settings depend on it."""
    from quixstreams.models.topics.manager import TopicManager

    derive = TopicManager.derive_topic_config.__func__
    if getattr(derive, "tolerates_missing_retention", False):
        return

    def derive_with_default(cls, topics):
        topics = list(topics)
        for topic in topics:
            topic.broker_config.extra_config.setdefault("retention.ms", "-1")
        return derive(cls, topics)

    derive_with_default.tolerates_missing_retention = True
    TopicManager.derive_topic_config = classmethod(derive_with_default)


class Players:
    """elo_job.rate's view of a league's players: Quix's State for the current message's
    key (the league), one state key per player."""

    __slots__ = ("state",)

    def __init__(self, state: Any):
        self.state = state

    def get(self, player: str) -> Any:
        return self.state.get(player)

    def __setitem__(self, player: str, value: Any) -> None:
        self.state.set(player, value)


def application(broker: str, input_topic: str, output_topic: str, state_dir: Path, group: str, matches: int,
                progress: dict[str, Any], guarantee: str = "at-least-once"):
    """The Quix Application of the job; it stops itself once `matches` input messages are
    processed, noting the times in `progress`."""
    from quixstreams import Application

    from bench.elo_job import rate

    tolerate_missing_retention()

    def processed(topic: str, partition: int, offset: int) -> None:
        # Called after a message went through the whole pipeline (its events produced).
        done = progress["matches"] = progress["matches"] + 1
        if done == 1:
            progress["first_at"] = time.time()
        if done % 20_000 == 0:
            print(f"quix_app: {done:,} matches", file=sys.stderr, flush=True)
        if done >= matches and progress["last_at"] is None:
            progress["last_at"] = time.time()
            app.stop()  # the run loop ends after this message, with a final checkpoint

    app = Application(
        broker_address=broker,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee=guarantee,  # exactly-once needs transactions: Kafka, not Tansu (InitProducerId fails)
        state_dir=str(state_dir),
        producer_extra_config=dict(PRODUCER),
        # Tansu answers a new member's JoinGroup after about half the session timeout
        # (librdkafka's default: 45 s); a shorter one only shortens the start.
        consumer_extra_config={"session.timeout.ms": 6000},
        on_message_processed=processed,
    )
    source = app.topic(input_topic, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(output_topic, key_serializer="bytes", value_serializer="bytes")
    sdf = app.dataframe(source)
    sdf = sdf.apply(lambda doc, state: rate(Players(state), doc), stateful=True, expand=True)
    sdf.to_topic(sink)  # keyed by the input message's key: the league
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quix_app", description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", required=True, help="bootstrap HOST:PORT")
    p.add_argument("--input", required=True, help="match-results topic (JSON values keyed by league)")
    p.add_argument("--output", required=True, help="topic of the rating-changed events")
    p.add_argument("--state-dir", required=True, type=Path, help="Quix's state directory (RocksDB)")
    p.add_argument("--matches", required=True, type=int, help="stop after processing this many matches")
    p.add_argument("--group", help="consumer group (default: a new one)")
    p.add_argument("--guarantee", choices=("at-least-once", "exactly-once"), default="at-least-once",
                   help="Quix's processing guarantee (exactly-once: one transaction per checkpoint; default %(default)s)")
    args = p.parse_args(argv)
    group = args.group or f"quix-elo-{uuid.uuid4().hex[:10]}"
    started_at = time.time()
    progress: dict[str, Any] = {"matches": 0, "first_at": None, "last_at": None}
    app = application(args.broker, args.input, args.output, args.state_dir, group, args.matches, progress,
                      args.guarantee)
    app.run()  # returns on app.stop(), SIGINT or SIGTERM
    stopped_at = time.time()
    if progress["matches"] < args.matches:
        print(f"quix_app: stopped after {progress['matches']:,} of {args.matches:,} matches", file=sys.stderr)
        return 1
    print(json.dumps({**progress, "stopped_at": stopped_at, "started_at": started_at, "group": group,
                      "producer": PRODUCER}), flush=True)
    return 0


# -- for the benchmark ------------------------------------------------------------------------


def run(bootstrap: str, input_topic: str, output_topic: str, matches: int, workdir: Path, timeout: float = 600.0,
        group: str | None = None, guarantee: str = "at-least-once") -> dict[str, Any]:
    """Run the application as a child process (bench/streamtools.run_peer) until it has
    processed `matches` matches; its JSON line plus `peak_rss_bytes`, `wall_s` and `log`."""
    from .streamtools import run_peer

    return run_peer("bench.quix_app", bootstrap, input_topic, output_topic, matches, workdir, timeout,
                    group or f"quix-elo-{uuid.uuid4().hex[:10]}", guarantee)


if __name__ == "__main__":
    sys.exit(main())
