"""Faust's own table recovery speed, for comparison with the worker's restore
(docs/performance.md, "Recovery"). Not part of `make bench`: a one-off.

N records of a byte-valued RocksDB table, over 8 changelog partitions, are
restored by a Faust worker with an empty data directory; the seconds between
Faust's "Restoring state from changelog topics" and "Done reading from
changelog topics" log lines give its records/s. `tuned` raises the fetch size
and stream buffer and drops the recovery delay.

    python -m bench.faust_recovery [N] [tuned]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stream_app.broker import EmbeddedBroker

MARKS = {"start": "Restoring state from changelog topics", "end": "Done reading from changelog topics"}


async def prepare(bootstrap: str, topics: list[str], changelog: str, count: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(name, 8, 1) for name in topics])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    pending = []
    for i in range(count):
        pending.append(await producer.send(changelog, key=f"k{i % 200_000:07d}".encode(),
                                           value=b'{"rating":1500.0,"matches":3}', partition=i % 8))
        if len(pending) > 5000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    await producer.stop()


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    tuned = len(sys.argv) > 2 and sys.argv[2] == "tuned"
    work = Path(tempfile.mkdtemp(prefix="faust-recovery-"))
    log_path = work / "worker.log"
    with EmbeddedBroker() as broker:
        app_id = f"frx{os.getpid()}"
        options = dict(broker=broker.url, store="rocksdb://", datadir=str(work / "data"), topic_partitions=8,
                       key_serializer="raw", value_serializer="raw", web_enabled=False, autodiscover=False,
                       topic_replication_factor=1)
        if tuned:
            options.update(stream_recovery_delay=0.0, consumer_max_fetch_size=32 * 1024 * 1024,
                           stream_buffer_maxsize=65536, broker_max_poll_records=None)
        app = faust.App(app_id, **options)
        table = app.Table("t", partitions=8, key_type=bytes, value_type=bytes, default=None,
                          options={"block_cache_size": 8 << 20, "write_buffer_size": 8 << 20})
        source = app.topic(f"{app_id}-in", partitions=8, key_serializer="raw", value_serializer="raw")
        changelog = table.changelog_topic.get_topic_name()
        asyncio.run(prepare(broker.bootstrap, [source.get_topic_name(), changelog], changelog, count))

        @app.agent(source)
        async def agent(stream):  # subscribes the group, so the table's partitions are assigned
            async for _ in stream:
                pass

        @app.on_rebalance_complete.connect
        async def done(sender, **_):
            found = {}
            for line in log_path.read_text().splitlines():
                for name, mark in MARKS.items():
                    if mark in line and line.startswith("[20"):
                        found[name] = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            seconds = found["end"] - found["start"]
            print(f"Faust recovery ({'tuned' if tuned else 'defaults'}): {count:,} records in {seconds:.1f} s, "
                  f"{count / seconds:,.0f} records/s", file=sys.__stderr__, flush=True)
            os._exit(0)

        faust.Worker(app, loglevel="info", quiet=True, logfile=str(log_path)).execute_from_commandline()


if __name__ == "__main__":
    main()
