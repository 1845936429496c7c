"""Shared fixtures. `broker`: one Apache Kafka node for the whole session of each test
process (`make test` runs several under pytest-xdist, each with its own broker; every
test uses its own topic names, see tests/support/names.py); `embedded_broker`: the
same for the embedded broker, `make demo`'s."""

from __future__ import annotations

import os

import pytest

from tests.support.brokers import start_broker, start_embedded_broker
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
    uses a shared broker is marked `broker` (`make check` leaves those out)."""
    def rank(item) -> int:
        path = item.nodeid
        return next((i for i, prefix in enumerate(LONG_FIRST) if path.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)
    for item in items:
        if {"broker", "embedded_broker"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


def pytest_configure(config):
    """--dist loadgroup keeps a module's tests (and the workers they share) in one test
    process; from pytest 9.2 it silently stops grouping (pytest-xdist#1386)."""
    if config.getoption("dist", "no") == "loadgroup" and tuple(pytest.version_tuple[:2]) >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__}: --dist loadgroup does not group tests "
                                "(pytest-xdist#1386); install the pinned pytest (make test does)")


# Set by .ci/run: there every tool a test needs is installed, so a skip is a failure.
FAIL_ON_SKIP = "RATINGS_TESTS_FAIL_ON_SKIP"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get(FAIL_ON_SKIP) and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under {FAIL_ON_SKIP} (CI installs what every test needs): {reason}"


@pytest.fixture(scope="session")
def broker():
    """A running one-node Apache Kafka (tests/support/brokers.py; skipped with one line
    where Java or Maven is missing); stopped, and its data gone, after the session."""
    with start_broker() as running:
        yield running


@pytest.fixture(scope="session")
def embedded_broker():
    """A running embedded broker; stopped (and gone) after the session."""
    with start_embedded_broker() as running:
        yield running


@pytest.fixture
def topics_prefix() -> str:
    return unique_name("test")


@pytest.fixture
def topics(topics_prefix: str) -> Topics:
    return Topics(topics_prefix)
