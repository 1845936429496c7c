"""Where a match's time goes in the worker, stage by stage, in microseconds per
match (issue #18): two-player `elo` matches over 50 leagues of 1,000 players, in
batches of 2,000 as the intake hands them over under load, on a real local
store (RocksDB), without the broker.

Each stage is the real code, timed on its own or by difference:
- parse: inputs.parse_input (JSON, the schema's rules, a Match);
- apply: apply.apply through the partition's transaction (duplicate check,
  the players read, the rating system, the local writes in the batch's
  overlay), minus parse;
- events: the rest of RecordHandler.handle (the changelog entry and the
  rating-changed events built and encoded, the outcome), minus parse and apply;
- tally: the batch loop's accounting per match (metrics), observe.Tally;
- records: the checkpoint's changelog records (PartitionTransaction.checkpoint_writes);
- store: the overlay encoded and written with the checkpoint in one RocksDB write;
- checkpointed: the overlay becomes the committed state (cache kept).

`without storage`: the same records through RecordHandler.handle and the tally, over
the replay's memory partition (dicts of decoded values: no transaction, no encoding,
no RocksDB, no changelog). The worker's path minus it bounds what any storage half,
native or not, can take off.

What the broker adds (records into aiokafka's batches, waiting for acks, the
input consumer) is the stream benchmark's (`python -m bench.stream_bench
--only throughput --profile 10`: py-spy of the worker, by package).

    python -m bench.profile_bench [--matches N] [--history-max N] [--repeat N] [--no-compiled] [--plot PNG]
    python -m bench.profile_bench --instructions [--matches N]

`--instructions` counts instead of timing: the machine instructions a match takes
(valgrind's cachegrind, every thread: RocksDB's flushes too), the worker's path, the
path without storage and the floor, each the difference of two runs (a warm-up
batch, then the warm-up and the matches). A count does not vary with the machine's
load as a time does, so it tells two versions of the code apart where times of this
machine cannot (it does not see cache misses: the time stays the measure of the targets).

The stages run in this process (plain Python), then in a process running the
per-match path compiled by mypyc (deploy/compile.py), built for the run. The
baseline, same run: `floor`, the same work in one loop with nothing around it.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from rocksdict import WriteBatch

from stream_app.inputs import SEP, parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from stream_app.published import event_id
from stream_app.apply import apply
from stream_app.stream import observe
from stream_app.stream.observe import compiled_modules
from stream_app import runtime
from stream_app.stream.changelog import Checkpoint
from stream_app.state.league_tables import PartitionLeagues
from stream_app.stream.records import RecordHandler
from stream_app.state.memory import MemoryPartition
from stream_app.state.tables import tables_for
from stream_app.stream.commit import transaction
from stream_app.stream.store import LocalStore

from .streamtools import ROOT, compiled_copy

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
        self.state = transaction(self.store, 0, Checkpoint(), tables_for(config))  # (the worker's)
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
        _, _, after, values = state.checkpoint_writes()
        self.seconds["records"] += clock() - started
        started = clock()
        self.store.write(0, values, after)
        self.seconds["store"] += clock() - started
        started = clock()
        state.checkpointed(after)
        self.seconds["checkpointed"] += clock() - started

    def close(self) -> None:
        self.store.close()


class _FreeStorage(MemoryPartition):
    """The replay's memory partition with what the record handler asks of a partition's
    transaction, doing nothing: every offset new, no savepoint to go back to."""

    partition = 0

    def take_offset(self, topic: str, offset: int) -> bool:
        return True

    def savepoint(self, journal: bool) -> None:
        pass

    def rollback(self) -> None:
        pass


def without_storage(lines: list[bytes], config: LeagueConfig) -> float:
    """Microseconds per match of the worker's records (parse, apply, events) and its
    tally, over storage that costs next to nothing (`_FreeStorage`). Plain Python only."""
    state = _FreeStorage(tables_for(config))
    handler, tally = RecordHandler(config, 1, "forward"), observe.Tally(config)
    started = time.perf_counter()
    for first in range(0, len(lines), BATCH):
        applied = []
        for offset, line in enumerate(lines[first:first + BATCH], first):
            outcome = handler.handle(state, "matches", 0, offset, b"k", line)  # type: ignore[arg-type]
            applied.append((outcome.applied, int(time.time() * 1000)))
        tally.applied_batch(applied, time.time())
    return (time.perf_counter() - started) / len(lines) * 1e6


def floor(lines: list[bytes], directory: Path) -> float:
    """Microseconds per match of the work no design can leave out, in one plain loop
    with nothing around it: the input parsed and checked (parse_input), the match
    id and both players read from RocksDB, the Elo update, the six local values
    (two players, two history rows, the place, the log row) encoded and put in one
    write per batch, the changelog entry and the two rating-changed events (with
    their ids) encoded. What the service adds to it is its design's cost."""
    store = LocalStore(directory)
    db = store.db(0)
    get = db.get
    seen: dict[bytes, dict[str, Any]] = {}
    started = time.perf_counter()
    for first in range(0, len(lines), BATCH):
        batch = WriteBatch(raw_mode=True)
        for line in lines[first:first + BATCH]:
            match = parse_input(line)
            league, match_id = match.league, match.match_id
            place = b"m" + f"{league}{SEP}{match_id}".encode()
            if get(place) is not None:
                continue
            a, b = match.participants
            key_a, key_b = b"p" + f"{league}{SEP}{a.player}".encode(), b"p" + f"{league}{SEP}{b.player}".encode()
            found_a, found_b = seen.get(key_a) or get(key_a), seen.get(key_b) or get(key_b)
            old_a = orjson.loads(found_a) if type(found_a) is bytes else found_a or {"rating": 1500.0, "matches": 0}
            old_b = orjson.loads(found_b) if type(found_b) is bytes else found_b or {"rating": 1500.0, "matches": 0}
            expected = 1 / (1 + 10 ** ((old_b["rating"] - old_a["rating"]) / 400))
            score = 1.0 if a.rank < b.rank else 0.0 if a.rank > b.rank else 0.5
            new_a = {"rating": old_a["rating"] + 32 * (score - expected), "matches": old_a["matches"] + 1,
                     "last_occurred": match.time}
            new_b = {"rating": old_b["rating"] - 32 * (score - expected), "matches": old_b["matches"] + 1,
                     "last_occurred": match.time}
            seen[key_a], seen[key_b] = new_a, new_b
            order = struct.pack(">dQ", match.time or 0.0, first)
            logged = [match_id, match.time, [[a.player, a.rank], [b.player, b.rank]]]
            batch.put(key_a, orjson.dumps(new_a))
            batch.put(key_b, orjson.dumps(new_b))
            batch.put(place, orjson.dumps({"key": order.hex()}))
            batch.put(b"a" + f"{league}{SEP}".encode() + order, orjson.dumps(logged))
            for key, player, old, new in ((key_a, a, old_a, new_a), (key_b, b, old_b, new_b)):
                batch.put(b"h" + key[1:] + new["matches"].to_bytes(8, "big"), orjson.dumps(
                    [new["matches"], match_id, match.time, player.rank, old["rating"], new["rating"], None, "match"]))
                orjson.dumps({"schema": "rating-changed.v1", "event_id": event_id(league, match_id, player.player),
                              "league": league, "match_id": match_id, "player": player.player, "algorithm": "elo",
                              "rank": player.rank, "rating_before": old["rating"], "rating_after": new["rating"],
                              "delta": new["rating"] - old["rating"], "matches": new["matches"]})
            orjson.dumps([league, logged, [new_a, new_b]])
        db.write(batch)
        if len(seen) > 50_000:
            seen.clear()
    seconds = time.perf_counter() - started
    store.close()
    return seconds / len(lines) * 1e6


def measure(lines: list[bytes], config: LeagueConfig, repeat: int) -> dict[str, float]:
    """Microseconds per match of each stage. Each pass `repeat` times, passes
    interleaved; each stage's least time counts (the machine's noise only ever adds)."""
    runtime.collect_for_batches()  # the worker's setting
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
    return {
        "parse": passes["parse"]["input"],
        "apply": passes["apply"]["input"] - passes["parse"]["input"],
        "events": full["input"] - passes["apply"]["input"],
        "tally": full["tally"], "records": full["records"], "store": full["store"], "checkpointed": full["checkpointed"],
    }


def calls_per_match(lines: list[bytes], config: LeagueConfig) -> dict[str, float]:
    """Python calls a match (cProfile counts every function and builtin called), over
    the second half of the matches (the first makes the players): the worker's path
    as `measure` runs it, without the broker; and the offline replay's, an input applied
    to its in-memory ledger (its lines are parsed in another process: stream_app/offline/replay.py)."""
    import cProfile
    import pstats

    from stream_app.offline.ledger import Ledger

    half = len(lines) // 2 // BATCH * BATCH

    def counted(work) -> float:
        profile = cProfile.Profile()
        profile.enable()
        work()
        profile.disable()
        return sum(entry[1] for entry in pstats.Stats(profile).stats.values()) / (len(lines) - half)

    found = {}
    with tempfile.TemporaryDirectory(prefix="profile-calls-") as directory:
        worker = Run(config, Path(directory))
        for first in range(0, half, BATCH):
            worker.batch(lines[first:first + BATCH], first, "handle")
        found["worker"] = counted(lambda: [worker.batch(lines[first:first + BATCH], first, "handle")
                                           for first in range(half, len(lines), BATCH)])
        worker.close()
    ledger, inputs = Ledger(config), [parse_input(line) for line in lines]
    for item in inputs[:half]:
        ledger.apply(item)
    found["replay"] = counted(lambda: [ledger.apply(item) for item in inputs[half:]])
    return found


def run(matches_n: int = 60_000, history_max: int | None = None, repeat: int = 3,
        compiled: bool = True, plot_to: Path | None = None) -> dict[str, Any]:
    """The stages in this process, then (with `compiled`) in a process running the
    per-match path compiled by mypyc (deploy/compile.py), built for the run."""
    lines = matches(matches_n)
    extra = "" if history_max is None else f"history_max = {history_max}\n"
    config = LeagueConfig.from_toml(f'[default]\nalgorithm = "elo"\n{extra}')
    here = "compiled" if compiled_modules() else "plain"
    found = {here: measure(lines, config, repeat)}
    with tempfile.TemporaryDirectory(prefix="profile-floor-") as directory:
        least = min(floor(lines, Path(directory) / str(k)) for k in range(repeat))
    # (plain Python only: the compiled record handler takes nothing but a PartitionTransaction)
    free = min(without_storage(lines, config) for _ in range(repeat)) if here == "plain" else None
    if compiled and here == "plain":
        with tempfile.TemporaryDirectory(prefix="profile-compiled-") as directory:
            env = compiled_copy(Path(directory) / "build")
            output = Path(directory) / "profile.json"
            argv = [sys.executable, "-m", "bench.profile_bench", "--matches", str(matches_n), "--repeat", str(repeat),
                    "--no-compiled", "--json", str(output)]
            if history_max is not None:
                argv += ["--history-max", str(history_max)]
            subprocess.run(argv, cwd=ROOT, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
            found["compiled"] = orjson.loads(output.read_bytes())["us_per_match"]["compiled"]
    print(f"profile: {len(lines):,} two-player elo matches, {LEAGUES} leagues, batches of {BATCH:,}"
          f"{'' if history_max is None else f', history_max {history_max}'}; microseconds per match:")
    kinds = list(found)
    print(f"  {'':<13}" + "".join(f"{kind:>10}" for kind in kinds) + ("   compiled / plain" if len(kinds) == 2 else ""))
    totals = {kind: sum(us.values()) for kind, us in found.items()}
    for stage in [*STAGES, "total"]:
        values = [totals[kind] if stage == "total" else found[kind][stage] for kind in kinds]
        ratio = f"   {values[1] / values[0]:.2f}" if len(values) == 2 and values[0] > 0 else ""
        print(f"  {stage:<13}" + "".join(f"{value:10.1f}" for value in values) + ratio)
    for kind in kinds:
        print(f"  {kind}: {1e6 / totals[kind]:,.0f} matches/s on one core, before the broker's share; "
              f"{totals[kind] / least:.2f} x the floor")
    if free is not None:
        print(f"  without storage ({here}): {free:.1f} us a match, the records and the tally over a memory "
              f"partition: {free / least:.2f} x the floor; the storage half is {totals[here] - free:.1f} us "
              f"of the {totals[here]:.1f}")
    print(f"  floor: {least:.1f} us a match, the same work in one loop with nothing around it (`floor`)")
    if plot_to is not None and free is not None:
        plot(found[here], free, least, plot_to)
        print(f"  plotted: {plot_to}")
    calls = calls_per_match(lines, config)
    print(f"  Python calls a match ({here}, cProfile): worker {calls['worker']:.1f}, replay {calls['replay']:.1f}")
    return {"matches": len(lines), "history_max": history_max, "us_per_match": found, "total_us": totals,
            "floor_us": least, "without_storage_us": free, "calls_per_match": calls}


TARGET_US = 40.0  # issue #45's target for the worker's path in plain Python
PROFILE_PNG = ROOT / "docs" / "profile.png"  # what `make bench` draws (`plot`)


def plot(stages: dict[str, float], free: float, least: float, path: Path) -> None:
    """The worker's path stage by stage, the same path over storage that costs nothing,
    and the floor, against the target: one horizontal bar each, in microseconds a match."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    bars = ["the worker's path", "without storage\n(records and tally)", "the floor"]
    left = 0.0
    colours = plt.get_cmap("tab10").colors
    for k, stage in enumerate(STAGES):
        ax.barh(0, stages[stage], left=left, color=colours[k], label=stage)
        left += stages[stage]
    ax.barh(1, free, color="0.55")
    ax.barh(2, least, color="0.3")
    for y, value in enumerate((left, free, least)):
        ax.text(value + 0.5, y, f"{value:.1f} us", va="center", fontsize=9)
    ax.axvline(TARGET_US, color="crimson", linestyle="--", linewidth=1.2)
    ax.text(TARGET_US, -0.55, f" target {TARGET_US:.0f} us", color="crimson", va="center", fontsize=9)
    ax.set_yticks(range(3), bars)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, TARGET_US) * 1.15)
    ax.set_xlabel("microseconds a two-player elo match, plain Python (least of the passes)")
    ax.legend(ncol=4, fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _count_run(kind: str, n: int, matches_n: int) -> None:
    """The work `instructions` counts: the first `n` of the matches, through the worker's
    path (`handle`, with the checkpoint and the store's write), the path without storage
    (`free`) or the floor."""
    lines = matches(matches_n)[:n]
    runtime.collect_for_batches()
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
    if kind == "free":
        without_storage(lines, config)
        return
    with tempfile.TemporaryDirectory(prefix="profile-count-") as directory:
        if kind == "floor":
            floor(lines, Path(directory))
            return
        worker = Run(config, Path(directory))
        for first in range(0, len(lines), BATCH):
            worker.batch(lines[first:first + BATCH], first, "handle")
        worker.close()


def instructions(matches_n: int = 20_000) -> dict[str, float] | None:
    """Instructions a match (cachegrind) of the worker's path, of the path without
    storage and of the floor, plain Python; None without valgrind. Two processes at a
    time, one per core."""
    if shutil.which("valgrind") is None:
        print("profile --instructions: needs valgrind (apt-get install valgrind); skipped")
        return None
    warm = BATCH

    def start(kind: str, n: int) -> subprocess.Popen:
        return subprocess.Popen(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                                 sys.executable, "-m", "bench.profile_bench", "--count-run", kind, str(n),
                                 "--matches", str(warm + matches_n)],  # (both runs the same matches, in order)
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def counted(process: subprocess.Popen) -> int:
        _, err = process.communicate()
        found = re.search(r"I\s+refs:\s+([\d,]+)", err)
        if process.returncode != 0 or found is None:
            raise RuntimeError(f"cachegrind failed: {err[-2000:]}")
        return int(found.group(1).replace(",", ""))

    found = {}
    for kind in ("handle", "free", "floor"):
        short, long_ = start(kind, warm), start(kind, warm + matches_n)
        found[kind] = (counted(long_) - counted(short)) / matches_n
    handle, free, least = found["handle"], found["free"], found["floor"]
    print(f"profile --instructions: {matches_n:,} two-player elo matches after {warm:,}, instructions a match "
          f"(cachegrind): the worker's path {handle:,.0f} ({handle / least:.2f} x the floor), without storage "
          f"{free:,.0f} ({free / least:.2f} x; the storage half {handle - free:,.0f}), the floor {least:,.0f}")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, help="matches timed (default 60,000) or counted (default 20,000)")
    p.add_argument("--repeat", type=int, default=3, help="passes of each kind; the least time counts (default 3)")
    p.add_argument("--history-max", type=int, help="the leagues' history_max (default: the league default)")
    p.add_argument("--no-compiled", action="store_true",
                   help="skip the run compiled by mypyc (deploy/compile.py; needs a C compiler)")
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--plot", type=Path, help="plot the plain path's stages, without storage and the floor (PNG)")
    p.add_argument("--instructions", action="store_true",
                   help="count the instructions a match takes (valgrind) instead of timing the stages")
    p.add_argument("--count-run", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)  # (what --instructions runs)
    args = p.parse_args(argv)
    if args.count_run:
        _count_run(args.count_run[0], int(args.count_run[1]), args.matches)
        return 0
    if args.instructions:
        counts = instructions(args.matches or 20_000)
        if args.json and counts is not None:
            Path(args.json).write_bytes(orjson.dumps({"instructions_per_match": counts}))
        return 0
    results = run(args.matches or 60_000, args.history_max, args.repeat, compiled=not args.no_compiled,
                  plot_to=args.plot)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
