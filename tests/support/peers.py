"""What the benchmark's peer applications (bench/quix_app.py, bench/faust_app.py) must
publish: for every league, in order and byte for byte, bench/elo_job.rate of its
matches in order, two events per match."""

from __future__ import annotations

from bench import elo_job


def assert_the_plain_jobs_bytes(records: list[tuple[int, bytes, bytes]], per_league: list[list[dict]]) -> None:
    """`records` as (partition, key, value), read from the output topic; `per_league`, each
    league's matches in order."""
    assert len(records) == 2 * sum(len(docs) for docs in per_league)  # a clean run: no redelivery
    published: dict[bytes, list[bytes]] = {}
    for _, key, value in records:
        published.setdefault(key, []).append(value)
    assert sorted(published) == sorted(docs[0]["league"].encode() for docs in per_league)
    for docs in per_league:
        players: dict[str, list] = {}
        expected = [event for doc in docs for event in elo_job.rate(players, doc)]
        assert published[docs[0]["league"].encode()] == expected, docs[0]["league"]
