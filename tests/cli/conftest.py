"""The commands' tests share a stand-in producer (no broker)."""

import pytest

from stream_app.client import InputProducer
from tests.support.stand_ins import FakeProducer


@pytest.fixture
def producer(monkeypatch) -> FakeProducer:
    fake = FakeProducer()

    async def start(self, *, ensure_topics: bool = True) -> None:
        fake.starts += 1
        self._producer = fake

    monkeypatch.setattr(InputProducer, "start", start)
    return fake
