"""Shared fixtures. `broker`: one broker for the whole session of each test process
(`make test` runs several under pytest-xdist, each with its own broker; every test
uses its own topic names, see tests/support/names.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.brokers import KAFKA_MISSING, start_broker, start_kafka
from tests.support.names import Topics, unique_name


def pytest_sessionstart(session):
    """Under RATINGS_EXPECT_COMPILED (tests/deploy/test_compile.py), refuse to run the
    suite on anything but the compiled modules."""
    expected = os.environ.get("RATINGS_EXPECT_COMPILED")
    if expected:
        import importlib

        plain = [name for name in expected.split(",") if not importlib.import_module(name).__file__.endswith(".so")]
        if plain:
            pytest.exit(f"RATINGS_EXPECT_COMPILED: not compiled: {plain}", returncode=3)


# The directories whose tests take minutes, started first: under pytest-xdist the
# processes then end together instead of one finishing a long test alone.
LONG_FIRST = ("tests/reliability/", "tests/deploy/test_compile.py", "tests/e2e/")


def pytest_collection_modifyitems(config, items):
    """Long tests first (a stable sort: a module's tests stay together); a test that
    uses the shared broker or Kafka is marked `broker` (`make check` leaves those out)."""
    def rank(item) -> int:
        path = item.nodeid
        return next((i for i, prefix in enumerate(LONG_FIRST) if path.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)
    for item in items:
        if {"broker", "kafka"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


def pytest_configure(config):
    """--dist loadgroup keeps a module's tests (and the workers they share) in one test
    process; from pytest 9.2 it silently stops grouping (pytest-xdist#1386)."""
    if config.getoption("dist", "no") == "loadgroup" and tuple(pytest.version_tuple[:2]) >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__}: --dist loadgroup does not group tests "
                                "(pytest-xdist#1386); install the pinned pytest (make test does)")


@pytest.fixture(scope="session")
def broker():
    """A running broker (tests/support/brokers.py); stopped (and gone) after the session."""
    with start_broker() as running:
        yield running


@pytest.fixture(scope="session")
def kafka():
    """A running one-node Apache Kafka for the session of each test process (skipped
    with one line where Java or Maven is missing)."""
    if KAFKA_MISSING:
        pytest.skip(KAFKA_MISSING)
    with start_kafka() as running:
        yield running


@pytest.fixture
def topics_prefix() -> str:
    return unique_name("test")


@pytest.fixture
def topics(topics_prefix: str) -> Topics:
    return Topics(topics_prefix)
