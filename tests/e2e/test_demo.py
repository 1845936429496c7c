"""`ratings demo` runs the whole service and leaves no process behind."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.workers import ROOT


def processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if text in cmdline and " Z " not in state + " ":
            found.append(f"{pid}: {cmdline}")
    return found


def test_demo_runs_end_to_end_and_stops_everything():
    done = subprocess.run(
        [sys.executable, "-m", "stream_app.cli", "demo", "--no-serve"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "stream equals offline replay for every player of every league: yes" in out
    for league, algorithm in (("arena", "elo-mmr"), ("chess-blitz", "elo"), ("chess-rapid", "elo")):
        players, ranked = re.search(rf"^{league} \({algorithm}, ([\d,]+) players, ([\d,]+) ranked\)$", out, re.M).groups()
        # The demo's rules leave some players provisional (not ranked) in every league.
        assert 0 < int(ranked.replace(",", "")) < int(players.replace(",", "")), league
    rows = re.findall(r"^\s+\d+\s+\S+\s+\d+\.\d\s+\d+$", out, re.M)
    assert len(rows) == 30
    # chess-rapid runs monthly seasons: January's final standings, with tiers, then February in progress.
    assert re.search(r"^    season 2026-01: \d+ players; final standings: chess-rapid-p\d+ [\d.]+ \(Top 5%\)", out, re.M)
    assert "    season 2026-02: in progress" in out
    assert re.search(r"metrics:\s+http://127\.0\.0\.1:\d+/metrics", out)
    assert re.search(r"web page:\s+http://127\.0\.0\.1:\d+/ui/$", out, re.M)
    temp = re.search(r"\(log: (\S+)/worker\.log\)", out).group(1)
    assert not processes_mentioning(temp), "the worker outlived the demo"
    broker = re.search(r"at kafka://127\.0\.0\.1:(\d+)", out).group(1)
    assert not processes_mentioning(f"127.0.0.1:{broker}"), "the broker outlived the demo"
    assert not Path(temp).exists()
