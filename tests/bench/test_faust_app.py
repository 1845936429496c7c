"""The Faust version of the Elo job (bench/faust_app.py) on Apache Kafka: for every
league, the events it publishes are, in order and byte for byte, what
bench/elo_job.rate gives for that league's matches in order, two per match, and a
read_committed consumer sees them. With processing_guarantee="exactly_once" the
table's changelog and the input offsets go in Kafka transactions, the output does
not (see bench/faust_app.py); and Faust's stop can lose the race between its last
commit and its producer buffer, which the run then reports as an error."""

from __future__ import annotations

import asyncio
import random

import pytest

from bench import faust_app
from stream_app.offline.sample import two_player_league
from tests.support.kafka import end_offsets, ensure_topics, keyed, publish, read_records
from tests.support.names import unique_name
from tests.support.peers import assert_the_plain_jobs_bytes

LEAGUES = 5
PER_LEAGUE = 400
PARTITIONS = 8

# Faust's stop ends the transactions before its producer buffer is empty (bench/faust_app.py).
STOP_RACE = "Can't send messages while not in transaction"


@pytest.fixture(scope="module")
def published(broker):
    """5 leagues x 400 matches, interleaved, published once on an input topic of 8
    partitions: (each league's matches in order, the topic)."""
    rng = random.Random(11)
    # 40 players a league: they meet again, so ratings read back from the table matter.
    per_league = [list(two_player_league(f"faust-{k}", 40, PER_LEAGUE, rng)) for k in range(LEAGUES)]
    matches = [doc for round_ in zip(*per_league) for doc in round_]  # interleaved, each league in order
    prefix = unique_name("faust")
    asyncio.run(ensure_topics(broker.url, prefix, PARTITIONS))
    assert asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(matches))) == len(matches)
    return per_league, f"{prefix}.matches"


def read_committed(bootstrap: str, topic: str, expected: int) -> tuple[list[tuple[int, bytes, bytes]], dict[int, int]]:
    """What a read_committed consumer gets of the topic from its beginning, and each
    partition's end offset (transaction markers take offsets: end - records = markers)."""
    records = asyncio.run(read_records(bootstrap, topic, PARTITIONS, expected, isolation_level="read_committed"))
    return records, asyncio.run(end_offsets(bootstrap, topic, PARTITIONS))


def per_partition(records: list[tuple[int, bytes, bytes]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for partition, _, _ in records:
        counts[partition] = counts.get(partition, 0) + 1
    return counts


def run_app(broker, published, tmp_path, guarantee: str) -> tuple[dict, str]:
    per_league, source = published
    prefix = unique_name("faust-out")
    asyncio.run(ensure_topics(broker.url, prefix, PARTITIONS))
    sink = f"{prefix}.changes"
    matches = LEAGUES * PER_LEAGUE
    result = faust_app.run(broker.bootstrap, source, sink, matches, tmp_path / "faust", timeout=120,
                           guarantee=guarantee)
    assert result["matches"] == matches
    assert result["first_at"] <= result["last_at"] <= result["stopped_at"]
    assert result["peak_rss_bytes"] > 0
    assert result["partitions"] == PARTITIONS
    assert list((tmp_path / "faust" / "state").rglob("CURRENT")), "no RocksDB store under the state directory"
    return result, sink


def test_at_least_once_publishes_the_plain_jobs_bytes_for_every_league_in_order(broker, published, tmp_path):
    result, sink = run_app(broker, published, tmp_path, "at-least-once")

    assert result["output_transactional"] is False
    records, ends = read_committed(broker.bootstrap, sink, 2 * result["matches"])
    assert_the_plain_jobs_bytes(records, published[0])
    assert ends == {p: per_partition(records).get(p, 0) for p in range(PARTITIONS)}  # no transactions


def test_exactly_once_puts_the_changelog_in_transactions_and_not_the_output(broker, published, tmp_path):
    try:
        result, sink = run_app(broker, published, tmp_path, "exactly-once")
    except RuntimeError as exc:  # the known failure, and no other
        assert STOP_RACE in str(exc), str(exc)
        pytest.xfail(f"Faust's exactly_once stop lost the race with its producer buffer: {STOP_RACE}")

    assert result["transactional_producers"] == PARTITIONS + 1  # the input's partitions and the leader topic
    # Output: the plain job's bytes, seen by read_committed, written outside any transaction
    # (Faust decides so for a topic its consumer does not read): no markers.
    assert result["output_transactional"] is False
    records, ends = read_committed(broker.bootstrap, sink, 2 * result["matches"])
    assert_the_plain_jobs_bytes(records, published[0])
    assert ends == {p: per_partition(records).get(p, 0) for p in range(PARTITIONS)}
    # The table's changelog: one record per player update, committed in transactions (at
    # least one marker after each partition's records).
    changelog, ends = read_committed(broker.bootstrap, f"{result['group']}-players-changelog",
                                       2 * result["matches"])
    assert len(changelog) == 2 * result["matches"]
    counts = per_partition(changelog)
    assert counts and all(ends[p] > count for p, count in counts.items()), (ends, counts)
