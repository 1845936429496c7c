"""`ratings demo`: the whole service on this machine.

Starts the embedded broker and one worker as child processes, publishes sample
leagues the project generates itself, waits until the worker has applied
them, prints each league's leaderboard (checked against an offline replay of
the same events) and the URLs, and stops everything it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from .broker import EmbeddedBroker, free_port
from .client import RatingsClient
from .config import LeagueConfig
from .events import parse_match
from .replay import Ledger
from .sample import multi_player_league, two_player_league

DEMO_STREAM_CONFIG = """\
# Leagues of the streaming demo. Patterns are globs, matched in file order.
[default]
algorithm = "elo"

[leagues."chess-*"]
algorithm = "elo"
k = 24

[leagues."arena"]
algorithm = "elo-mmr"
subsample_size = 100
subsample_bucket = 2.0
"""


def demo_events(seed: int = 7) -> list[dict[str, Any]]:
    """A large multi-player elo-mmr league and two two-player elo leagues, interleaved."""
    rng = random.Random(seed)
    arena = list(multi_player_league("arena", 3000, 60, 800, rng))
    blitz = list(two_player_league("chess-blitz", 300, 6000, rng))
    rapid = list(two_player_league("chess-rapid", 150, 2000, rng))
    merged: list[dict[str, Any]] = []
    queues = [arena, blitz, rapid]
    weights = [len(q) for q in queues]
    positions = [0, 0, 0]
    while any(positions[i] < len(q) for i, q in enumerate(queues)):
        i = rng.choices(range(3), weights=[w if positions[k] < len(queues[k]) else 0 for k, w in enumerate(weights)])[0]
        merged.append(queues[i][positions[i]])
        positions[i] += 1
    return merged


def _get(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def run_demo(seed: int = 7, web_port: int | None = None, serve: bool | None = None) -> int:
    serve = sys.stdout.isatty() and sys.stdin.isatty() if serve is None else serve
    events = demo_events(seed)
    config = LeagueConfig.from_toml(DEMO_STREAM_CONFIG, "<demo config>")
    ledger = Ledger(config)
    for event in events:
        ledger.apply(parse_match(event))
    expected = {league: len(seen) for league, seen in ledger.seen.items()}

    port = web_port or (6066 if _port_free(6066) else free_port())
    with tempfile.TemporaryDirectory(prefix="ratings-demo-") as tmp, EmbeddedBroker(log=os.path.join(tmp, "broker.log")) as broker:
        config_path = Path(tmp) / "leagues.toml"
        config_path.write_text(DEMO_STREAM_CONFIG)
        print(f"demo: embedded broker (Tansu, in memory) at {broker.url}", flush=True)
        log_path = Path(tmp) / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, "-m", "stream_app.cli", "worker", "--broker", broker.url, "--data-dir", str(Path(tmp) / "data"),
             "--web-port", str(port), "--config", str(config_path)],
            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),
        )
        api = f"http://127.0.0.1:{port}"
        try:
            print(f"demo: worker starting (log: {log_path}); publishing {len(events):,} match results", flush=True)
            started = time.monotonic()
            asyncio.run(_publish(broker.url, events))
            print(f"demo: published in {time.monotonic() - started:.1f} s; waiting for the worker to apply them", flush=True)
            _wait_applied(api, expected, worker, log_path)
            elapsed = time.monotonic() - started
            print(f"demo: {sum(expected.values()):,} matches applied {elapsed:.1f} s after the first was published\n")
            same = _print_leaderboards(api, ledger)
            print(f"stream equals offline replay for every player of every league: {'yes' if same else 'NO'}")
            print(f"\nHTTP API:  {api}/leagues/arena/leaderboard?limit=10")
            print(f"           {api}/leagues/chess-blitz/players/chess-blitz-p0001")
            print(f"metrics:   {api}/metrics")
            print(f"health:    {api}/health", flush=True)
            if serve:
                print("\ndemo: running; press Ctrl-C to stop", flush=True)
                try:
                    while worker.poll() is None:
                        time.sleep(0.5)
                except KeyboardInterrupt:
                    pass
            return 0 if same else 1
        except KeyboardInterrupt:
            return 130
        finally:
            print("demo: stopping the worker and the broker", flush=True)
            _stop(worker)


async def _publish(broker_url: str, events: list[dict[str, Any]]) -> None:
    async with RatingsClient(broker_url) as client:
        sent, rejected = await client.publish_many(events)
        assert not rejected, rejected[:3]


def _wait_applied(api: str, expected: dict[str, int], worker: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise SystemExit(f"demo: the worker exited ({worker.returncode}); see {log_path}:\n{log_path.read_text()[-2000:]}")
        done = True
        for league, count in expected.items():
            status, body = _get(f"{api}/leagues/{league}")
            if status != 200 or body["matches"] < count:
                done = False
                break
        if done:
            return
        time.sleep(0.5)
    raise SystemExit("demo: the worker did not apply the sample within 10 minutes")


def _print_leaderboards(api: str, ledger: Ledger) -> bool:
    same = True
    snapshot = ledger.snapshot()
    for league in sorted(snapshot):
        status, board = _get(f"{api}/leagues/{league}/leaderboard?limit=100000", timeout=30)
        rows = board["players"]
        served = {row["player"]: row["rating"] for row in rows}
        same &= served == {p: v["rating"] for p, v in snapshot[league].items()}
        algorithm = ledger.config.rule_for(league).algorithm
        print(f"{league} ({algorithm}, {len(rows):,} players)")
        print(f"{'#':>3}  {'player':<22} {'rating':>9} {'matches':>8}")
        for row in rows[:10]:
            print(f"{row['rank']:>3}  {row['player']:<22} {row['rating']:>9.1f} {row['matches']:>8}")
        print()
    return same


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)


def _dies_with(parent: int):
    from .broker import _die_with_parent

    return lambda: _die_with_parent(parent)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
