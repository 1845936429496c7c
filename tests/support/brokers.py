"""The broker the suite runs against, started in one place: the session's shared
broker (tests/conftest.py) and the tests that need one of their own (to stop,
freeze or empty it) all call `start_broker`, so that pointing the suite at
another broker changes this module, not the tests."""

from __future__ import annotations

import os

from stream_app.broker import EmbeddedBroker
from tests.support.ports import free_port

# Set by `make check`, the suite's part without brokers and workers: starting one fails the test.
NO_BROKER = "RATINGS_TESTS_NO_BROKER"


def refuse_without_broker(what: str) -> None:
    if os.environ.get(NO_BROKER):
        raise RuntimeError(f"{what} under {NO_BROKER} (make check): mark the test `broker`")


def start_broker(port: int | None = None) -> EmbeddedBroker:
    """A running broker on `port` (default: a free one of this test process's
    ports); the caller stops it (`stop()`, or use it as a context manager)."""
    refuse_without_broker("a broker started")
    return EmbeddedBroker(port=port or free_port()).start()
