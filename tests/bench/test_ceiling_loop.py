"""The throughput stage's ceiling (bench/stream_bench.py, `ceiling_loop`) on the
embedded broker: it reads every match and publishes, league by league in order,
the plain job's events byte for byte, keyed by league onto Kafka's partition
for the key, as the worker does."""

from __future__ import annotations

import asyncio
import random

from bench import elo_job
from bench.stream_bench import ceiling_loop
from stream_app.offline.sample import two_player_league
from stream_app.stream.partitioner import key_partition
from tests.support.kafka import ensure_topics, keyed, publish, read_records
from tests.support.names import unique_name

PARTITIONS = 8


def test_the_ceiling_publishes_every_leagues_events_in_order_on_the_leagues_partition(broker):
    rng = random.Random(12)
    per_league = [list(two_player_league(f"ceiling-{k}", 30, 300, rng)) for k in range(4)]
    matches = [doc for round_ in zip(*per_league) for doc in round_]
    prefix = unique_name("ceiling")
    asyncio.run(ensure_topics(broker.url, prefix, PARTITIONS))
    source, sink = f"{prefix}.matches", f"{prefix}.changes"
    assert asyncio.run(publish(broker.bootstrap, source, keyed(matches))) == len(matches)

    seconds = asyncio.run(asyncio.wait_for(ceiling_loop(broker.bootstrap, source, sink, len(matches)), 60))

    assert seconds > 0
    records = asyncio.run(read_records(broker.bootstrap, sink, PARTITIONS, 2 * len(matches)))
    assert len(records) == 2 * len(matches)
    published: dict[bytes, list[bytes]] = {}
    for partition, key, value in records:
        # Each league on Kafka's partition for its key, as the worker publishes it.
        assert partition == key_partition(key, PARTITIONS), key
        published.setdefault(key, []).append(value)
    for docs in per_league:
        players: dict[str, list] = {}
        assert published[docs[0]["league"].encode()] == [event for doc in docs for event in elo_job.rate(players, doc)]
