"""Shared fixtures. `broker`: one embedded Tansu broker for the whole session
(memory only; every test uses its own topic names, see tests/support/names.py)."""

from __future__ import annotations

import pytest

from stream_app.broker import EmbeddedBroker
from tests.support.names import Topics, unique_name


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
