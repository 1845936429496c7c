"""`ratings demo`: the whole service on this machine.

Starts the embedded broker and one worker as child processes, publishes the
sample leagues (offline/sample.py, with their configuration
offline/sample_leagues.toml, which deploy/leagues.toml links to), waits until
the worker has applied them, prints each league's leaderboard (checked against
an offline replay of the same events), and on a terminal serves the web page,
the API and the metrics, printing their URLs, until Ctrl-C. It stops
everything it started.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .broker import EmbeddedBroker
from .client import RatingsClient
from .inputs import parse_input
from .leagues import LeagueConfig
from .offline.replay import Ledger
from .offline.sample import DEMO_CONFIG, demo_matches
from .processes import HOST, WorkerProcess, free_port, port_free


def run_demo(seed: int = 7, web_port: int | None = None, serve: bool | None = None) -> int:
    serve = sys.stdout.isatty() and sys.stdin.isatty() if serve is None else serve
    if serve and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # It serves until Ctrl-C: started from a shell's background job (`cmd &` in a script
        # ignores SIGINT for its children), Ctrl-C would not reach it at all.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    events = demo_matches(seed)
    config = LeagueConfig.from_toml(DEMO_CONFIG, "<demo config>")
    ledger = Ledger(config)
    for event in events:
        ledger.apply(parse_input(event))
    expected = {league: record["matches"] for league, record in ledger.records.items()}

    port = web_port or (6066 if port_free(HOST, 6066) else free_port())
    with tempfile.TemporaryDirectory(prefix="ratings-demo-") as tmp, EmbeddedBroker(log=os.path.join(tmp, "broker.log")) as broker:
        config_path = Path(tmp) / "leagues.toml"
        config_path.write_text(DEMO_CONFIG)
        print(f"demo: embedded broker (Tansu, in memory) at {broker.url}", flush=True)
        log_path = Path(tmp) / "worker.log"
        # No bases: Tansu compacts nothing, so a base would only add records.
        args = ["--config", str(config_path), "--base-after", "0"]
        worker = WorkerProcess(broker.url, Path(tmp) / "data", log_path, port=port, args=args)
        api = worker.url
        try:
            print(f"demo: worker starting (log: {log_path}); publishing {len(events):,} match results", flush=True)
            started = time.monotonic()
            asyncio.run(_publish(broker.url, events))
            print(f"demo: published in {time.monotonic() - started:.1f} s; waiting for the worker to apply them", flush=True)
            _wait_applied(worker, expected)
            elapsed = time.monotonic() - started
            print(f"demo: {sum(expected.values()):,} matches applied {elapsed:.1f} s after the first was published\n")
            same = _print_leaderboards(worker, ledger)
            print(f"stream equals offline replay for every player of every league: {'yes' if same else 'NO'}")
            if not serve:
                # The worker stops now: URLs printed here would be dead when read.
                print("\ndemo: not serving (--no-serve, or no terminal): the worker stops now. Run `ratings demo` "
                      "in a terminal to browse the web page, the API and the metrics, or serve the same leagues "
                      "yourself (README: a typical session).", flush=True)
            else:
                print(f"\nweb page:  {api}/ui/")
                print(f"HTTP API:  {api}/leagues/arena/leaderboard?limit=10")
                print(f"           {api}/leagues/chess-blitz/players/chess-blitz-p0001")
                print(f"metrics:   {api}/metrics")
                print(f"health:    {api}/health")
                print("\ndemo: serving these until Ctrl-C", flush=True)
                try:
                    while worker.alive():
                        time.sleep(0.5)
                except KeyboardInterrupt:
                    pass
                else:
                    print(f"demo: the worker exited ({worker.proc.returncode}); see {log_path}:\n{worker.log_tail()}")
                    return 1
            return 0 if same else 1
        except KeyboardInterrupt:
            return 130
        finally:
            print("demo: stopping the worker and the broker", flush=True)
            worker.stop(timeout=30)


async def _publish(broker_url: str, events: list[dict[str, Any]]) -> None:
    async with RatingsClient(broker_url) as client:
        sent, rejected = await client.publish_many(events)
        assert not rejected, rejected[:3]


def _wait_applied(worker: WorkerProcess, expected: dict[str, int]) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if not worker.alive():
            raise SystemExit(f"demo: the worker exited ({worker.proc.returncode}); see {worker.log_path}:\n{worker.log_tail()}")
        if all(_applied(worker, league) >= count for league, count in expected.items()):
            return
        time.sleep(0.5)
    raise SystemExit("demo: the worker did not apply the sample within 10 minutes")


def _applied(worker: WorkerProcess, league: str) -> int:
    status, body = worker.get(f"/leagues/{league}", timeout=5)
    return body["matches"] if status == 200 else -1


def _print_leaderboards(worker: WorkerProcess, ledger: Ledger) -> bool:
    same = True
    snapshot = ledger.snapshot()
    for league in sorted(snapshot):
        status, board = worker.get(f"/leagues/{league}/leaderboard?limit=100000", timeout=30)
        rows = board["players"]
        # The leaderboard lists ranked players only (not provisional or inactive ones).
        same &= board["players_total"] == len(snapshot[league]) and all(
            row["rating"] == snapshot[league][row["player"]]["rating"] for row in rows)
        algorithm = ledger.config.rule_for(league).algorithm
        print(f"{league} ({algorithm}, {len(snapshot[league]):,} players, {board['eligible_total']:,} ranked)")
        print(f"{'#':>3}  {'player':<22} {'rating':>9} {'matches':>8}")
        for row in rows[:10]:
            print(f"{row['rank']:>3}  {row['player']:<22} {row['rating']:>9.1f} {row['matches']:>8}")
        same &= _print_seasons(worker, ledger, league)
        print()
    return same


def _print_seasons(worker: WorkerProcess, ledger: Ledger, league: str) -> bool:
    """An ended season's final standings, checked against the replay's."""
    final = [row for row in ledger.final_standings() if row["league"] == league]
    if league not in ledger.season_rows:
        return True
    same = True
    for row in ledger.season_rows[league]:
        if "end" not in row:
            print(f"    season {row['name']}: in progress")
            continue
        status, board = worker.get(f"/leagues/{league}/seasons/{row['name']}/leaderboard?limit=100000", timeout=30)
        kept = [{k: v for k, v in entry.items() if k not in ("league", "season")} for entry in final
                if entry["season"] == row["name"]]
        same &= status == 200 and board["players"] == kept
        top = ", ".join(f"{entry['player']} {entry['rating']:.1f} ({entry.get('tier')})" for entry in kept[:3])
        print(f"    season {row['name']}: {row['players']} players; final standings: {top}, ...")
    return same
