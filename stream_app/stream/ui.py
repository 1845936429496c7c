"""The web pages for people (`/ui/`): static files from stream_app/web/, which
read the JSON API from the browser. Work in progress."""

from __future__ import annotations

from typing import Any


def ui_routes(app: Any) -> None:
    """Register the /ui/ pages on the Faust app."""
