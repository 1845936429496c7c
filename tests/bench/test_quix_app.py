"""The Quix Streams version of the Elo job (bench/quix_app.py) on the embedded broker:
for every league, the events it publishes are, in order and byte for byte, what
bench/elo_job.rate gives for that league's matches in order, two per match."""

from __future__ import annotations

import asyncio
import random

from bench import quix_app
from stream_app.offline.sample import two_player_league
from tests.support.kafka import ensure_topics, keyed, publish, read_records
from tests.support.names import unique_name
from tests.support.peers import assert_the_plain_jobs_bytes

LEAGUES = 5
PER_LEAGUE = 400
PARTITIONS = 8


def test_the_quix_app_publishes_the_plain_jobs_bytes_for_every_league_in_order(broker, tmp_path):
    rng = random.Random(11)
    # 40 players a league: they meet again, so ratings read back from the state matter.
    per_league = [list(two_player_league(f"quix-{k}", 40, PER_LEAGUE, rng)) for k in range(LEAGUES)]
    matches = [doc for round_ in zip(*per_league) for doc in round_]  # interleaved, each league in order
    prefix = unique_name("quix")
    asyncio.run(ensure_topics(broker.url, prefix, PARTITIONS))
    source, sink = f"{prefix}.matches", f"{prefix}.changes"
    assert asyncio.run(publish(broker.bootstrap, source, keyed(matches))) == len(matches)

    result = quix_app.run(broker.bootstrap, source, sink, len(matches), tmp_path / "quix", timeout=120)

    assert result["matches"] == len(matches)
    assert result["first_at"] <= result["last_at"] <= result["stopped_at"]
    assert result["peak_rss_bytes"] > 0
    assert list((tmp_path / "quix" / "state").rglob("CURRENT")), "no RocksDB store under the state directory"
    records = asyncio.run(read_records(broker.bootstrap, sink, PARTITIONS, 2 * len(matches)))
    assert_the_plain_jobs_bytes(records, per_league)
