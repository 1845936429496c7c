"""Where a match's time goes in the worker, stage by stage, in microseconds per
match (issue #18): two-player `elo` matches over 50 leagues of 1,000 players, in
batches of 2,000 as the intake hands them over under load, on a real local
store (RocksDB), without the broker.

Each stage is the real code, timed on its own or by difference:
- parse: events.parse_input (JSON, the schema's rules, a Match);
- apply: apply.apply through the partition's transaction (duplicate check,
  the players read, the rating system, the local writes in the batch's
  overlay), minus parse;
- events: the rest of RecordHandler.handle (the changelog entry and the
  rating-changed events built and encoded, the outcome), minus parse and apply;
- tally: the batch loop's accounting per match (metrics), observe.Tally;
- records: the checkpoint's changelog records (PartitionTransaction.checkpoint_writes);
- store: the overlay encoded and written with the checkpoint in one RocksDB write;
- checkpointed: the overlay becomes the committed state (cache kept).

What the broker adds (records into aiokafka's batches, waiting for acks, the
input consumer) is the stream benchmark's (`python -m bench.stream_bench
--only throughput --profile 10`: py-spy of the worker, by package).

    python -m bench.profile_bench [--matches N] [--history-max N] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from stream_app.events import parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from stream_app.apply import apply
from stream_app.stream import observe
from stream_app.stream.app import GC_THRESHOLDS
from stream_app.stream.changelog import Checkpoint
from stream_app.stream.league_tables import PartitionLeagues
from stream_app.stream.records import RecordHandler
from stream_app.stream.tables import TABLES
from stream_app.stream.transaction import PartitionTransaction
from stream_app.stream.store import LocalStore

LEAGUES = 50
BATCH = 2_000
STAGES = ("parse", "apply", "events", "tally", "records", "store", "checkpointed")


def matches(n: int) -> list[bytes]:
    rng = random.Random(6)
    leagues = [two_player_league(f"elo-{k:02d}", 1000, n // LEAGUES + 1, rng) for k in range(LEAGUES)]
    return [orjson.dumps(e) for round_ in zip(*leagues) for e in round_][:n]


class Run:
    """One pass over the matches through some of the stages, on a fresh store."""

    def __init__(self, config: LeagueConfig, directory: Path):
        self.config = config
        self.store = LocalStore(directory)
        self.state = PartitionTransaction(0, Checkpoint(), lambda key: self.store.get(0, key), TABLES,
                                          lambda start, end: self.store.scan_range(0, start, end))
        self.handler = RecordHandler(config, 1, "forward")
        self.tally = observe.Tally(config)
        self.seconds = dict.fromkeys(("input", *STAGES[3:]), 0.0)

    def batch(self, lines: list[bytes], first: int, how: str) -> None:
        clock = time.perf_counter
        state, applied = self.state, []
        started = clock()
        if how == "parse":
            for line in lines:
                parse_input(line)
        elif how == "apply":
            leagues = PartitionLeagues(state, self.config)
            for line in lines:
                apply(self.config, leagues, parse_input(line))
        else:
            for offset, line in enumerate(lines, first):
                outcome = self.handler.handle(state, "matches", 0, offset, b"k", line)
                applied.append((outcome.applied, int(time.time() * 1000)))
        self.seconds["input"] += clock() - started
        if how == "handle":
            started = clock()
            self.tally.applied_batch(applied, time.time())
            self.seconds["tally"] += clock() - started
        started = clock()
        _, _, after = state.checkpoint_writes()
        self.seconds["records"] += clock() - started
        started = clock()
        self.store.write(0, state.local_values(), after)
        self.seconds["store"] += clock() - started
        started = clock()
        state.checkpointed(after)
        self.seconds["checkpointed"] += clock() - started

    def close(self) -> None:
        self.store.close()


def run(matches_n: int = 60_000, history_max: int | None = None, repeat: int = 3) -> dict[str, Any]:
    """Each pass `repeat` times, passes interleaved; each stage's least time counts
    (the machine's noise only ever adds)."""
    lines = matches(matches_n)
    extra = "" if history_max is None else f"history_max = {history_max}\n"
    config = LeagueConfig.from_toml(f'[default]\nalgorithm = "elo"\n{extra}')
    gc.set_threshold(*GC_THRESHOLDS)  # the worker's setting
    passes: dict[str, dict[str, float]] = {}
    for _ in range(repeat):
        for how in ("parse", "apply", "handle"):
            directory = Path(tempfile.mkdtemp(prefix=f"profile-{how}-"))
            try:
                one = Run(config, directory)
                for first in range(0, len(lines), BATCH):
                    one.batch(lines[first:first + BATCH], first, how)
                one.close()
                us = {k: v / len(lines) * 1e6 for k, v in one.seconds.items()}
                best = passes.setdefault(how, us)
                for k, v in us.items():
                    best[k] = min(best[k], v)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    full = passes["handle"]
    us = {
        "parse": passes["parse"]["input"],
        "apply": passes["apply"]["input"] - passes["parse"]["input"],
        "events": full["input"] - passes["apply"]["input"],
        "tally": full["tally"], "records": full["records"], "store": full["store"], "checkpointed": full["checkpointed"],
    }
    total = sum(us.values())
    print(f"profile: {len(lines):,} two-player elo matches, {LEAGUES} leagues, batches of {BATCH:,}"
          f"{'' if history_max is None else f', history_max {history_max}'}; microseconds per match:")
    for stage in STAGES:
        print(f"  {stage:<13} {us[stage]:7.1f}  ({us[stage] / total:5.1%})")
    print(f"  {'total':<13} {total:7.1f}  = {1e6 / total:,.0f} matches/s on one core, before the broker's share")
    return {"matches": len(lines), "history_max": history_max, "us_per_match": us, "total_us": total}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, default=60_000)
    p.add_argument("--repeat", type=int, default=3, help="passes of each kind; the least time counts (default 3)")
    p.add_argument("--history-max", type=int, help="the leagues' history_max (default: the league default)")
    args = p.parse_args(argv)
    run(args.matches, args.history_max, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
