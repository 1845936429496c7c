"""The brokers the suite runs against, started in one place. The suite's broker is
Apache Kafka, one node (stream_app/kafka_broker.py): the session's shared one
(tests/conftest.py `broker`) and the tests that need one of their own (to stop,
freeze or empty it) all call `start_broker`. The embedded broker (Tansu,
stream_app/broker.py) is `make demo`'s: `start_embedded_broker`, for its own tests
and the demo's path."""

from __future__ import annotations

import os
import shutil
from typing import Sequence

import pytest

from stream_app.broker import EmbeddedBroker
from stream_app.kafka_broker import KafkaCluster
from tests.support.ports import free_port

# Set by `make check`, the suite's part without brokers and workers: starting one fails the test.
NO_BROKER = "RATINGS_TESTS_NO_BROKER"


def refuse_without_broker(what: str) -> None:
    if os.environ.get(NO_BROKER):
        raise RuntimeError(f"{what} under {NO_BROKER} (make check): mark the test `broker`")


def start_embedded_broker(port: int | None = None) -> EmbeddedBroker:
    """A running embedded broker on `port` (default: a free one of this test process's
    ports); the caller stops it (`stop()`, or use it as a context manager)."""
    refuse_without_broker("a broker started")
    return EmbeddedBroker(port=port or free_port()).start()


# Without Java or Maven the tests on Kafka skip with this reason; .ci/run installs both
# (and fails on a skip).
KAFKA_MISSING = None if shutil.which("java") and shutil.which("mvn") else \
    "Apache Kafka needs Java 17 and Maven: apt-get install openjdk-17-jre-headless maven"


def start_broker(ports: Sequence[int] | None = None, nodes: int = 1) -> KafkaCluster:
    """A running Apache Kafka of `nodes` nodes on ports of this test process, or on `ports`
    (each node's client then controller port: `broker.ports` of a stopped one, to start an
    empty broker where it was); the caller stops it (`stop()`, or a `with`)."""
    refuse_without_broker("a Kafka cluster started")
    if KAFKA_MISSING:
        pytest.skip(KAFKA_MISSING)
    return KafkaCluster(nodes, ports=ports or [free_port() for _ in range(2 * nodes)]).start()
