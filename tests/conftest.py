"""Shared fixtures. `broker`: one embedded Tansu broker for the whole session
(memory only; every test uses its own topic names, see tests/support/names.py)."""

from __future__ import annotations

import os

import pytest

from stream_app.broker import EmbeddedBroker
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


@pytest.fixture(scope="session")
def broker():
    """A running EmbeddedBroker on a free port; stopped (and gone) after the session."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def topics_prefix() -> str:
    return unique_name("test")


@pytest.fixture
def topics(topics_prefix: str) -> Topics:
    return Topics(topics_prefix)
