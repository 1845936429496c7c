"""Names no other test uses: every test has its own topics on the shared broker."""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass

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
