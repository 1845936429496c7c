"""The HTTP API's views over a real local store that the batch loop filled from
input records (tests/support/memory.py stands in for the broker): what a worker
answers, without the web server."""

from __future__ import annotations

from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, AsyncIterator

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.settings import Settings
from stream_app.stream.api import Api
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.reads import Reads
from stream_app.stream.store import LocalStore
from stream_app.stream.batch_loop import BatchLoop
from tests.support.memory import MemoryBroker

SETTINGS = Settings(partitions=1)


@asynccontextmanager
async def served(directory: Any, config: LeagueConfig, batches: list[list[dict[str, Any]]]) -> AsyncIterator[Api]:
    """The views of one worker owning the only partition, after each batch of input
    documents was applied and committed (none may be a dead letter)."""
    store, broker = LocalStore(directory), MemoryBroker(partitions=1)
    worker = BatchLoop(SETTINGS, config, store, broker, broker, Intake({}, SETTINGS.batch_max, wait_ms=100))
    offset = 0
    for batch in batches:
        await worker.apply_batch([InputRecord(SETTINGS.match_topic, 0, offset + i, doc["league"].encode(),
                                              orjson.dumps(doc), 1000) for i, doc in enumerate(batch)])
        offset += len(batch)
    assert broker.values(SETTINGS.dlq_topic) == []  # every result and command applied
    try:
        yield Api(Reads(store, SETTINGS.partitions, config), config, owns=lambda partition: True,
                  owner_url=lambda partition: None, ready=lambda: True, health=dict)
    finally:
        store.close()


def query(**params: Any) -> Any:
    """What the views read of a request: its query (a list gives a parameter several times)."""
    class Query(dict):
        def getall(self, name: str, default: Any = None) -> list[str]:
            value = self.get(name)
            return default if value is None else (value if isinstance(value, list) else [value])

    return SimpleNamespace(query=Query({name: value if isinstance(value, list) else str(value)
                                        for name, value in params.items()}))
