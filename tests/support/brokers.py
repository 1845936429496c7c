"""The brokers the suite runs against, started in one place: the session's shared
broker (tests/conftest.py) and the tests that need one of their own (to stop,
freeze or empty it) all call `start_broker`, so that pointing the suite at
another broker changes this module, not the tests. `start_kafka`: Apache Kafka
(stream_app/kafka_broker.py), for the tests of what only it does."""

from __future__ import annotations

import os
import shutil

from stream_app.broker import EmbeddedBroker
from stream_app.kafka_broker import KafkaCluster
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


# Without Java or Maven the tests on Kafka skip with this reason; .ci/run installs both.
KAFKA_MISSING = None if shutil.which("java") and shutil.which("mvn") else \
    "Apache Kafka needs Java 17 and Maven: apt-get install openjdk-17-jre-headless maven"


def start_kafka(nodes: int = 1) -> KafkaCluster:
    """A running Apache Kafka cluster on ports of this test process; the caller stops it."""
    refuse_without_broker("a Kafka cluster started")
    return KafkaCluster(nodes, ports=[free_port() for _ in range(2 * nodes)]).start()
