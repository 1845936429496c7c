"""Where a league lives: the partition of its records, as Kafka's default
partitioner places a keyed record (producers key match results by league)."""

from __future__ import annotations

from functools import lru_cache

from aiokafka.partitioner import murmur2


def key_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: murmur2 of the key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@lru_cache(maxsize=65536)
def league_partition(league: str, partitions: int) -> int:
    """Where a league lives: its matches are keyed by league."""
    return key_partition(league.encode(), partitions)
