"""Prometheus' binaries, from Debian's prometheus package (installed by .ci/run)."""

from __future__ import annotations

import os
import shutil

INSTALL_HINT = "install Debian's prometheus package (apt-get install prometheus); .ci/run does it in CI"


def binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and os.access(f"/usr/bin/{name}", os.X_OK):
        found = f"/usr/bin/{name}"
    return found
