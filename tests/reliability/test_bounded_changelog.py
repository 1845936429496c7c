"""The changelog stays bounded by the state on Apache Kafka: results with voids,
corrections and late results, published in three parts, the worker SIGKILLed after
each of the first two (restarted on its data directory, then on an empty one). Each
base deletes the records before it (DeleteRecords), so each partition's changelog
holds at most twice as many records as the worker's local store has keys (the issue
measured 13.5 times without bases), and a worker taking it all up on an empty
directory serves the replay."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_app.leagues import LeagueConfig
from stream_app.stream.changelog import BASE_ROWS_FIRST, DATA_START, PACKED, packed_count
from stream_app.stream.partitioner import league_partition
from stream_app.stream.store import LocalStore
from tests.support.corrections import CONFIG, corrected_leagues, run
from tests.support.kafka import ensure_topics, keyed, publish, topic_args
from tests.support.leagues import assert_same_history, assert_same_state
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, assigned, wait_for

pytestmark = pytest.mark.reliability

BASE_AFTER = 500


def counted_as(key: bytes, value: bytes | None) -> int:
    """A batch's packed record counts as its rows (a base's as one record: it is the state),
    as the owner counts what its changelog holds for when a base is due."""
    if value is None or value[0] not in PACKED or int.from_bytes(key[-4:], "big") >= BASE_ROWS_FIRST:
        return 1
    return packed_count(value[DATA_START:])


async def records_held(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """Each partition's records as a consumer reads them from its first offset (a batch's
    packed record counted as its rows), and how many of them are tombstones (none: a base
    deletes, it sends no tombstone)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(8)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        held, tombstones = {tp.partition: 0 for tp in tps}, {tp.partition: 0 for tp in tps}
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                held[tp.partition] += sum(counted_as(record.key, record.value) for record in records)
                tombstones[tp.partition] += sum(record.value is None for record in records)
        return held, tombstones
    finally:
        await consumer.stop()


def local_keys(directory: Path) -> dict[int, int]:
    store = LocalStore(directory / "state")
    try:
        return {p: store.count(p) for p in range(8)}
    finally:
        store.close()


def test_the_cleaned_changelog_holds_at_most_twice_the_state_and_an_empty_take_up_is_the_replay(broker, tmp_path):
    prefix = unique_name("bounded")
    changelog = f"{prefix}-state-changelog"
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    docs = corrected_leagues(7, scale=3)
    ledger, _, _ = run(docs, LeagueConfig.from_toml(CONFIG))
    assert ledger.rerates > 50
    asyncio.run(ensure_topics(broker.url, prefix))
    args = [*FAST_GROUP, "--base-after", str(BASE_AFTER)]
    parts = [docs[:len(docs) // 3], docs[len(docs) // 3:2 * len(docs) // 3], docs[2 * len(docs) // 3:]]

    def start(name: str, directory: str) -> WorkerProcess:
        worker = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / directory, config_path, name=name,
                               extra_args=args)
        wait_for(lambda: assigned(worker) == set(range(8)), 120, f"{name} to own the partitions", workers=[worker])
        return worker

    def applied(worker: WorkerProcess, published: list[dict]) -> None:
        """Once each league's matches and re-rates are the replay's of what was published."""
        so_far, _, _ = run(published, LeagueConfig.from_toml(CONFIG))
        expected = {league: (record["matches"], record.get("revision", 0)) for league, record in so_far.records.items()}

        def league_is(league: str) -> bool:
            status, body = worker.get(f"/leagues/{league}")
            return status == 200 and (body["matches"], body.get("rerates", 0)) == expected[league]

        wait_for(lambda: all(map(league_is, expected)), 180, "the part applied", workers=[worker])

    def counted(worker: WorkerProcess, name: str) -> float:
        _, text = worker.get("/metrics")
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    worker = start("w0", "a")
    bases = 0.0
    try:
        for n, part in enumerate(parts):
            asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(part)))
            applied(worker, [doc for done in parts[:n + 1] for doc in done])
            bases += counted(worker, "ratings_changelog_bases_total")
            if n == 0:
                worker.kill()
                worker = start("w1", "a")  # its own data directory
            elif n == 1:
                worker.kill()
                worker = start("w2", "b")  # an empty one
        assert_same_state(worker, ledger)
    finally:
        worker.stop()
    keys = local_keys(tmp_path / "b")
    # A worker on an empty directory takes it all up and serves the replay.
    started = time.monotonic()
    reader = start("w3", "c")
    try:
        taken_up = time.monotonic() - started
        assert_same_state(reader, ledger)
        assert_same_history(reader, ledger, per_league=50)
        # A SIGKILL between a base and its deletion leaves the records before it until the
        # next base: a result a second in a league of each partition brings one, until each
        # partition is within twice its local keys, each result adding a few.
        leagues: dict[int, str] = {}
        for n in range(1000):
            leagues.setdefault(league_partition(f"after-{n}", 8), f"after-{n}")
        assert len(leagues) == 8
        extra: list[dict] = []

        def within() -> bool:
            return all(held[p] <= 2 * keys[p] + 16 + 2 * len(extra) // 8 for p in held)

        held, tombstones = asyncio.run(records_held(broker.bootstrap, changelog))
        rounds = 0
        while not within() and rounds < 60:
            rounds += 1
            more = [{"league": league, "match_id": f"r{rounds}",
                     "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}
                    for league in leagues.values()]
            extra += more
            asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(more)))
            time.sleep(1.0)
            held, tombstones = asyncio.run(records_held(broker.bootstrap, changelog))
        assert within(), "partition: (records held, tombstones, local keys) " + str(
            {p: (held[p], tombstones[p], keys[p]) for p in held})
        final, _, _ = run(docs + extra, LeagueConfig.from_toml(CONFIG))
        applied(reader, docs + extra)
        assert_same_state(reader, final)
    finally:
        reader.stop()
    # (A base ends with its partition's next commits, and a SIGKILL abandons one still open:
    # 7 to 13 bases ended in runs of 2026-11-28 when a result was an entry, 1 to 3 since its
    # local writes are packed rows, which a base replaces no faster than it takes them up.)
    assert bases >= 1 and not any(tombstones.values())
    live = sum(held.values())
    print(f"{len(docs):,} inputs, {ledger.rerates} re-rates; {bases:.0f} bases; the changelog holds {live:,} "
          f"records for {sum(keys.values()):,} local keys ({live / sum(keys.values()):.2f} x) after {len(extra) // 8} "
          f"rounds of results after the last part; empty-directory take-up to serving {taken_up:.1f} s")
