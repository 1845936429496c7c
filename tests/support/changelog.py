"""Changelog records as earlier releases wrote them: what the upgrade in place reads.
Rows with their value before (releases before issue #31), and entries (from issue
#31 to the release before packed batches)."""

from __future__ import annotations

from typing import Any

import orjson

from stream_app.engine import Match
from stream_app.rating.log_rows import log_entry
from stream_app.stream.changelog import RecordWriter


def old_row(epoch: int, batch: int, key: bytes, value: bytes | None, before: bytes | None) -> tuple[bytes, bytes]:
    """A row keyed by the local key, with its new value and its value before its batch."""
    value = value or b""
    head = epoch.to_bytes(8, "big") + batch.to_bytes(8, "big") + len(value).to_bytes(4, "big")
    return key, b"D" + head + value + (before or b"")


def entry_record(epoch: int, batch: int, match: Match, changes: list[Any]) -> tuple[bytes, bytes]:
    """A result applied at the end of its league's log, as its entry: the league, the log
    row and each participant's state after it, from which a take-up derives its writes."""
    payload = orjson.dumps([match.league, log_entry(match), [change.after.to_dict() for change in changes]])
    return RecordWriter(epoch, batch).entry(payload)
