"""Shared fixtures. `broker`: one embedded Tansu broker for the whole session
(memory only; every test uses its own topic names, see `topics`)."""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass

import pytest

from stream_app.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker():
    """A running EmbeddedBroker on a free port; stopped (and gone) after the session."""
    with EmbeddedBroker() as running:
        yield running


_counter = itertools.count()


def unique_name(prefix: str = "t") -> str:
    """A topic name no other test (or earlier run against the same broker) uses."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Topics:
    """A fresh set of the service's three topic names for one test."""

    prefix: str

    @property
    def match(self) -> str:
        return f"{self.prefix}.match-results"

    @property
    def changes(self) -> str:
        return f"{self.prefix}.rating-changes"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.match-results-dlq"

    def client_kwargs(self) -> dict[str, str]:
        """For RatingsClient(...)."""
        return {"match_topic": self.match, "changes_topic": self.changes, "dlq_topic": self.dlq}

    def cli_args(self) -> list[str]:
        """For `ratings produce/subscribe/worker`."""
        return ["--match-topic", self.match, "--changes-topic", self.changes, "--dlq-topic", self.dlq]


@pytest.fixture
def topics_prefix() -> str:
    return unique_name("test")


@pytest.fixture
def topics(topics_prefix: str) -> Topics:
    return Topics(topics_prefix)
