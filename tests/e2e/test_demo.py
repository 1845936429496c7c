"""`ratings demo` runs the whole service on the sample leagues (every rating
system), prints URLs only while they answer, and leaves no process behind."""

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import DEMO_CONFIG
from tests.support.workers import ROOT

# One demo at a time: each takes port 6066 when it looks free, and two starting together
# would both see it free.
pytestmark = pytest.mark.xdist_group("demo")

# The sample leagues and their systems: every system the service has.
LEAGUES = {"arena": "elo-mmr", "chess-blitz": "elo", "chess-rapid": "elo", "contests": "codeforces", "go": "glicko2",
           "karting": "elo-pairwise", "relay": "elo-mmx", "squads": "weng-lin", "squash": "elo", "tennis": "glicko"}


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


def assert_nothing_left(out: str) -> None:
    temp = re.search(r"\(log: (\S+)/worker\.log\)", out).group(1)
    assert not processes_mentioning(temp), "the worker outlived the demo"
    broker = re.search(r"at kafka://127\.0\.0\.1:(\d+)", out).group(1)
    assert not processes_mentioning(f"127.0.0.1:{broker}"), "the broker outlived the demo"
    assert not Path(temp).exists()


def test_the_sample_leagues_use_every_system():
    from stream_app.engine import SYSTEMS

    config = LeagueConfig.from_toml(DEMO_CONFIG)
    assert {config.rule_for(league).algorithm for league in LEAGUES} == set(SYSTEMS)
    assert {league: config.rule_for(league).algorithm for league in LEAGUES} == LEAGUES


def test_demo_runs_end_to_end_and_stops_everything():
    done = subprocess.run(
        [sys.executable, "-m", "stream_app.cli", "demo", "--no-serve"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "stream equals offline replay for every player of every league: yes" in out
    for league, algorithm in LEAGUES.items():
        players, ranked = re.search(rf"^{league} \({algorithm}, ([\d,]+) players, ([\d,]+) ranked\)$", out, re.M).groups()
        assert 0 < int(ranked.replace(",", "")) <= int(players.replace(",", "")), league
    # The demo's rules leave some players provisional (not ranked).
    for league in ("arena", "chess-rapid"):
        players, ranked = re.search(rf"^{league} \(.*, ([\d,]+) players, ([\d,]+) ranked\)$", out, re.M).groups()
        assert int(ranked.replace(",", "")) < int(players.replace(",", "")), league
    rows = re.findall(r"^\s+\d+\s+\S+\s+\d+\.\d\s+\d+$", out, re.M)
    assert len(rows) == 10 * len(LEAGUES)
    # chess-rapid runs monthly seasons: January's final standings, with tiers, then February in progress.
    assert re.search(r"^    season 2026-01: \d+ players; final standings: chess-rapid-p\d+ [\d.]+ \(Top 5%\)", out, re.M)
    assert "    season 2026-02: in progress" in out
    # Not serving: no URL that would be dead when read, and it says so.
    assert "http://" not in out and "/metrics" not in out
    assert "demo: not serving (--no-serve, or no terminal): the worker stops now." in out
    assert_nothing_left(out)


def test_on_a_terminal_the_demo_serves_the_urls_it_prints_until_ctrl_c():
    leader, follower = pty.openpty()
    # stderr to the terminal too: a pipe nobody read would fill and block the demo (once, in the suite).
    demo = subprocess.Popen([sys.executable, "-m", "stream_app.cli", "demo"], cwd=ROOT, stdin=follower,
                            stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    out = ""
    try:
        deadline = time.monotonic() + 600
        while "serving these until Ctrl-C" not in out:
            assert time.monotonic() < deadline and demo.poll() is None, out
            if select.select([leader], [], [], 1.0)[0]:
                out += os.read(leader, 65536).decode(errors="replace")
        urls = dict(re.findall(r"^(web page|metrics|health):\s+(http://\S+)\r?$", out, re.M))
        assert set(urls) == {"web page", "metrics", "health"}, out
        for name, url in urls.items():
            with urllib.request.urlopen(url, timeout=10) as reply:
                assert reply.status == 200, name
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the terminal's whole foreground group
        # The terminal is read while the demo stops: one nobody reads fills, and a process
        # writing to it waits for ever (twice in the full suite). The demo's own bound: the
        # worker gets 30 s to stop, then SIGKILL and 10 s; then the broker's stop.
        deadline = time.monotonic() + 120
        while True:
            stopped = demo.poll() is not None
            try:
                while select.select([leader], [], [], 0 if stopped else 0.5)[0]:
                    out += os.read(leader, 65536).decode(errors="replace")
            except OSError:  # the terminal closed with its last process
                pass
            if stopped:
                break
            assert time.monotonic() < deadline, f"the demo did not stop in 120 s after Ctrl-C:\n{out[-3000:]}"
        assert demo.returncode == 0, out[-3000:]
    finally:
        if demo.poll() is None:
            demo.kill()
        os.close(leader)
    assert "demo: stopping the worker and the broker" in out
    assert_nothing_left(out)
    for url in urls.values():
        try:
            urllib.request.urlopen(url, timeout=5)
        except urllib.error.HTTPError:
            raise AssertionError(f"{url} still answers after the demo") from None
        except OSError:
            continue
        raise AssertionError(f"{url} still answers after the demo")
