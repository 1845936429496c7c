"""Reading changelog partitions from the broker (stream/commit.py's `Changelog`):
the catch-up of a take-up, the check of another writer's records, and whether
a log still holds what was applied from it.

A restore is a read of existing records, so it fetches large (tens of MiB a
request) and never waits for more; the rule that turns the records into
committed state is stream/changelog.py's.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

from .intake import first_records, read_partition


class KafkaChangelog:
    def __init__(self, options: dict[str, Any], timeout: float = 60.0):
        self.options = options  # aiokafka connection options
        self.timeout = timeout

    async def read(self, topic: str, partition: int, start: int, end: int) -> AsyncIterator[list[tuple[int, bytes, bytes]]]:
        async for chunk in read_partition(self.options, topic, partition, start, end, self.timeout):
            yield [(r.offset, r.key, r.value) for r in chunk]

    async def first_records(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], Any]:
        return await first_records(self.options, wanted, self.timeout)
