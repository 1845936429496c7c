"""The OpenAPI 3.1 document of the HTTP API, served at /openapi.json.

It is written by hand as JSON (openapi.json, next to this file) rather than
built from the views: the views check their parameters in code, which no
introspection turns into bounds and schemas, and a plain JSON file is what
readers and tools (validators, client generators) take as it is. The tests
keep it true: every route is documented (tests/stream/test_openapi.py) and the
real answers match its schemas (tests/e2e/test_reads.py, test_reads_cli.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

PATH = Path(__file__).resolve().parent / "openapi.json"


def document() -> dict[str, Any]:
    return orjson.loads(PATH.read_bytes())


def served() -> bytes:
    """The document as served: parsed first, so that a broken file stops the
    worker at start-up rather than serving it."""
    return orjson.dumps(document())
