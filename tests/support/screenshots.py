"""The README's screenshots of the web page, from a running worker (for
example `ratings demo` on a terminal, which keeps serving):

    python -m tests.support.screenshots http://127.0.0.1:6066
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from tests.support.browser import headless_chrome, load, screenshot

IMAGES = Path(__file__).resolve().parent.parent.parent / "docs" / "images"


def save(url: str, league: str = "chess-rapid", rated: str = "arena") -> list[Path]:
    """The demo's `league` leaderboard, and the page of the `rated` league's 5th player (a system with an uncertainty)."""
    with urllib.request.urlopen(f"{url}/leagues/{rated}/leaderboard?limit=5", timeout=30) as reply:
        player = json.loads(reply.read())["players"][-1]["player"]
    driver = headless_chrome(window=(1100, 820))
    try:
        load(driver, f"{url}/ui/#/league/{league}")
        saved = [screenshot(driver, IMAGES / "leaderboard.png")]
        load(driver, f"{url}/ui/#/player/{rated}/{player}")
        saved.append(screenshot(driver, IMAGES / "player.png"))
        return saved
    finally:
        driver.quit()


if __name__ == "__main__":
    for path in save(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:6066"):
        print(f"{path} ({path.stat().st_size:,} bytes)")
