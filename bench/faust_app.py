"""The service's two-player Elo job written as a plain Faust application
(faust-streaming 0.15) with processing_guarantee="exactly_once", for the
comparison "service vs Faust" next to bench/quix_app.py, on Apache Kafka
(exactly_once needs transactions: Tansu, the embedded broker, has none).

Per match, exactly bench/elo_job.py's `rate`: its two rating-changed events go
out unchanged to the output topic, keyed by the input message's key (the
league), sent one after the other by the one agent, so in order per league.
The players live in a Faust Table, one key per (league, player)
(`league NUL player`, the value [rating, matches] packed as float64 + int64:
exact), in the RocksDB store (`store="rocksdb://"`: faust/stores/rocksdb.py
runs on `rocksdict`, installed here; python-rocksdb is not) with Faust's
default RocksDB options, one database per partition under the state
directory, and its changelog topic `<group>-players-changelog` (created by the
app: compacted, as many partitions as the input). The App's id is the consumer
group (a new one by default); otherwise: web server off, topic_partitions =
the input's partitions (asked from the broker at start; the table's changelog
must match), table_standby_replicas=0, consumer_auto_offset_reset="earliest",
Faust's default commits (every 2.8 s, broker_commit_interval, or every 10,000
acked messages, broker_commit_every), and the service's producer batching
(PRODUCER). Both topics should exist before it starts.

    python -m bench.faust_app --broker HOST:PORT --input TOPIC --output TOPIC \\
        --state-dir DIR --matches N [--group G] [--guarantee exactly-once|at-least-once]

processes messages until N matches are done, stops (the worker's own SIGTERM
path: agents stopped, a last commit, the producers flushed and closed) and
prints one JSON line: {"matches", "first_at", "last_at", "stopped_at",
"started_at", "group", "output_transactional", ...} (time.time() after the
first and the N-th match were processed, and after the stop). Faust's logs go
to stderr. `run(...)` starts that command for the benchmark and adds the
process's peak RSS and wall time.

What exactly_once does here (faust/transport/consumer.py TransactionManager,
faust/transport/drivers/aiokafka.py Producer, faust/app/base.py App.on_stop),
measured on Kafka 4.1.2 (the transaction log's replication factor is 1 on one
node, stream_app/kafka_broker.py):

1. The output topic is NOT written in transactions. On assignment Faust starts
   one transactional aiokafka producer per assigned partition number of each
   topic group (transactional.id `<app id>-<group>-<partition>`: here 8 for the
   input and its changelog, plus 1 for the assignor's leader topic). A record
   goes into a transaction only if `TransactionManager.send` finds it a
   transactional id: `consumer.key_partition(topic, key)` reads the partitions
   from the consumer's cluster metadata, which holds only the topics the app
   consumes, so for the output topic it returns None, the id stays None and
   `Producer.send` hands the record to the plain (idempotent, acks=all)
   producer. Only the changelog records and the input offsets
   (send_offsets_to_transaction) are transactional: one transaction per input
   partition per commit (every 2.8 s or 10,000 acks), committed partition after
   partition (offsets, commit, begin the next: a few round trips each, while
   the table's writes wait: "producer buffer full" warnings, none at-least-once).
   The changelog carries one commit marker per transaction, the output topic
   none (its end offsets equal its record counts): a read_committed consumer
   sees the events at once, and a restart after a crash re-publishes those of
   the matches after the last commit, as at-least-once. (An app that also
   consumes its output topic gets it into the transactions: then it is in the
   metadata and co-partitioned with the input.) `output_transactional` in the
   JSON line is that decision of Faust's for the output topic.

2. The stop can crash and lose table writes (2 of 17 runs here, of 2,000
   and of 100,000 matches): IllegalOperation("Can't send messages while not in
   transaction") from aiokafka, in Faust's ProducerBuffer. The table sends its
   changelog records with send_soon, through that buffer (drained by a
   background task), and no commit on the exactly_once path flushes it
   (Consumer._commit_offsets flushes the producer only without transactions).
   App.on_stop runs Consumer.wait_empty, whose commit_and_end_transactions
   commits every transaction without beginning new ones, and only then
   `_producer_flush`: a changelog record still in the buffer reaches a
   transactional producer outside a transaction, the buffer crashes, the rest
   is never written, while the offsets of their matches are committed (16
   changelog records missing in one such run). The worker re-raises it: exit
   status 1, no result line, `run` raises with the log's tail. Restarted, the
   app would recover a table without those writes and not redo their matches.
   From the source, the same missing flush mid-run lets a match's changelog
   records fall into the transaction after the one that commits its offset.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# The service sends its output in record batches of up to 512 KiB (stream_app/stream/app.py,
# producer_max_batch_size), as bench/quix_app.py's PRODUCER does for librdkafka; Faust's
# producer (aiokafka) lingers 5 ms like librdkafka's default. The transactional producers
# get the same settings.
PRODUCER: dict[str, Any] = {"producer_max_batch_size": 512 * 1024, "producer_linger": 0.005}

# Faust's defaults, written out so the comparison states what it ran with.
COMMIT: dict[str, Any] = {"broker_commit_interval": 2.8, "broker_commit_every": 10_000}

# A player's [rating, matches] as the table's value: float64 and int64, exact both ways.
RATING = struct.Struct("<dq")


class Players:
    """elo_job.rate's view of a league's players: the Faust table, one key per
    (league, player)."""

    __slots__ = ("table", "prefix")

    def __init__(self, table: Any, league: bytes):
        self.table, self.prefix = table, league + b"\0"

    def get(self, player: str) -> Any:
        value = self.table.get(self.prefix + player.encode())
        return None if value is None else RATING.unpack(value)

    def __setitem__(self, player: str, value: Any) -> None:
        # One changelog record per write, sent by Faust right away (in the open transaction).
        self.table[self.prefix + player.encode()] = RATING.pack(*value)


def input_partitions(broker: str, topic: str, timeout: float = 30.0) -> int:
    """How many partitions `topic` has (waiting up to `timeout` s for it to exist)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    from stream_app.stream.kafka_io import topic_partitions  # one metadata request for every topic

    async def ask() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
        await consumer.start()
        try:
            deadline = time.monotonic() + timeout
            while not (partitions := (await topic_partitions(consumer)).get(topic)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no topic {topic} on {broker}")
                await asyncio.sleep(0.2)
            return len(partitions)
        finally:
            await consumer.stop()

    return asyncio.run(ask())


def sends_in_transaction(app: Any, topic: str, key: bytes) -> bool:
    """Whether Faust writes a record of `topic` keyed `key` in a transaction: what
    TransactionManager.send decides (a transactional id only for a partition the
    consumer's metadata knows; None sends it with the plain producer)."""
    return bool(app.in_transaction) and app.consumer.key_partition(topic, key) is not None


def application(broker: str, input_topic: str, output_topic: str, state_dir: Path, group: str, matches: int,
                progress: dict[str, Any], guarantee: str = "exactly-once", partitions: int = 8,
                on_done: Any = None):
    """The Faust App of the job (its id, hence its consumer group, is `group`); once
    `matches` input messages are processed it notes the time in `progress` and calls
    `on_done()`."""
    import faust

    from bench.elo_job import rate

    app = faust.App(
        group,
        broker=f"kafka://{broker}",
        processing_guarantee="exactly_once" if guarantee == "exactly-once" else "at_least_once",
        store="rocksdb://",
        datadir=str(state_dir),
        web_enabled=False,
        topic_partitions=partitions,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        **COMMIT,
        **PRODUCER,
    )
    source = app.topic(input_topic, key_type=bytes, key_serializer="raw", value_serializer="json")
    sink = app.topic(output_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    # key_type and value_type bytes: the table's serializers are "raw" (faust/tables/base.py).
    table = app.Table("players", key_type=bytes, value_type=bytes, partitions=partitions)

    @app.agent(source)
    async def elo(stream):
        async for event in stream.events():
            done = progress["matches"]
            if done >= matches:
                continue  # beyond the run: left alone (the benchmark's topic has exactly N)
            league = event.key
            if done == 0:
                progress["output_transactional"] = sends_in_transaction(app, output_topic, league)
            for value in rate(Players(table, league), event.value):
                await sink.send(key=league, value=value)  # queued with the producer, in order
            done = progress["matches"] = done + 1
            if done == 1:
                progress["first_at"] = time.time()
            if done % 20_000 == 0:
                print(f"faust_app: {done:,} matches", file=sys.stderr, flush=True)
            if done == matches:
                progress["last_at"] = time.time()
                progress["transactional_producers"] = len(getattr(app.producer, "_transaction_producers", ()))
                if on_done is not None:
                    on_done()

    return app


def serve(worker: Any) -> None:
    """mode's Worker.execute_from_commandline without its exit: that one ends the process
    with status 1 and not a word when the start fails (mode/worker.py `exiting`). Returns
    once the worker has stopped; raises what crashed it."""
    import asyncio

    worker._starting_fut = asyncio.ensure_future(worker.start(), loop=worker.loop)  # a stop cancels it
    try:
        worker.loop.run_until_complete(worker._starting_fut)
    except asyncio.CancelledError:
        pass
    finally:
        worker._starting_fut.cancel()
        worker.stop_and_shutdown()  # stops the app, closes the loop; re-raises a crash's exception


def main(argv: list[str] | None = None) -> int:
    import faust

    p = argparse.ArgumentParser(prog="python -m bench.faust_app", description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", required=True, help="bootstrap HOST:PORT (Apache Kafka for exactly-once)")
    p.add_argument("--input", required=True, help="match-results topic (JSON values keyed by league)")
    p.add_argument("--output", required=True, help="topic of the rating-changed events")
    p.add_argument("--state-dir", required=True, type=Path, help="Faust's data directory (RocksDB tables)")
    p.add_argument("--matches", required=True, type=int, help="stop after processing this many matches")
    p.add_argument("--group", help="the App's id, its consumer group (default: a new one)")
    p.add_argument("--guarantee", choices=("at-least-once", "exactly-once"), default="exactly-once",
                   help="Faust's processing_guarantee (default %(default)s)")
    args = p.parse_args(argv)
    group = args.group or f"faust-elo-{uuid.uuid4().hex[:10]}"
    state_dir = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    started_at = time.time()
    partitions = input_partitions(args.broker, args.input)
    progress: dict[str, Any] = {"matches": 0, "first_at": None, "last_at": None}

    def done() -> None:
        # The worker's own SIGTERM handler (mode/worker.py): the app stops after this event.
        os.kill(os.getpid(), signal.SIGTERM)

    app = application(args.broker, args.input, args.output, state_dir, group, args.matches, progress,
                      args.guarantee, partitions, done)
    # Faust's banner and logs to stderr: stdout carries only the JSON line.
    worker = faust.Worker(app, loglevel="INFO", stdout=sys.stderr, stderr=sys.stderr, redirect_stdouts=False)
    serve(worker)
    stopped_at = time.time()
    if progress["matches"] < args.matches:
        print(f"faust_app: stopped after {progress['matches']:,} of {args.matches:,} matches", file=sys.stderr)
        return 1
    print(json.dumps({**progress, "stopped_at": stopped_at, "started_at": started_at, "group": group,
                      "guarantee": args.guarantee, "partitions": partitions, "store": "rocksdb (rocksdict)",
                      "commit": COMMIT, "producer": PRODUCER}), flush=True)
    return 0


# -- for the benchmark ------------------------------------------------------------------------


def run(bootstrap: str, input_topic: str, output_topic: str, matches: int, workdir: Path, timeout: float = 600.0,
        group: str | None = None, guarantee: str = "exactly-once") -> dict[str, Any]:
    """Run the application as a child process (bench/streamtools.run_peer) until it has
    processed `matches` matches; its JSON line plus `peak_rss_bytes`, `wall_s` and `log`."""
    from .streamtools import run_peer

    return run_peer("bench.faust_app", bootstrap, input_topic, output_topic, matches, workdir, timeout,
                    group or f"faust-elo-{uuid.uuid4().hex[:10]}", guarantee)


if __name__ == "__main__":
    sys.exit(main())
