"""Changelog records as releases before entries (issue #31) wrote them: what the
upgrade in place reads."""

from __future__ import annotations


def old_row(epoch: int, batch: int, key: bytes, value: bytes | None, before: bytes | None) -> tuple[bytes, bytes]:
    """A row keyed by the local key, with its new value and its value before its batch."""
    value = value or b""
    head = epoch.to_bytes(8, "big") + batch.to_bytes(8, "big") + len(value).to_bytes(4, "big")
    return key, b"D" + head + value + (before or b"")
