"""What the changelog costs per match: records and bytes a two-player `elo`
match writes to the changelog topic, with history on (the default), against
the input itself measured in the same run (the bytes of the results read).

30,000 two-player matches over 10 leagues of 1,000 players, applied by the
batch loop (stream/batch_loop.py) in batches of 2,000 on a real local store, the
broker in memory (streamtools.RecordingBroker): the figures are the worker's own
records, keys and values (Kafka's per-record overhead and compression not
counted), before any compaction.

    python -m bench.changelog_bench [--matches N] [--leagues N] [--players N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from stream_app.stream.intake import InputRecord

from stream_app.stream.store import CHECKPOINT_KEY

from .streamtools import BATCH, batch_loop

KINDS = {b"E": "entries", b"R": "rows", b"D": "rows (format before entries)", b"C": "checkpoints", b"F": "fences",
         b"S": "starts"}


def _records(matches: int, leagues: int, players: int) -> list[InputRecord]:
    rng = random.Random(5)
    streams = [iter(two_player_league(f"league-{n}", players, matches // leagues, rng)) for n in range(leagues)]
    events = [event for group in zip(*streams) for event in group]  # the leagues interleaved, as they arrive
    return [InputRecord("matches", 0, i, e["league"].encode(), orjson.dumps(e), 0) for i, e in enumerate(events)]


def run(matches: int = 30_000, leagues: int = 10, players: int = 1_000) -> dict[str, Any]:
    records = _records(matches, leagues, players)
    matches = len(records)
    directory = Path(tempfile.mkdtemp(prefix="changelog-bench-"))
    try:
        config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
        _, store, broker, topic = asyncio.run(batch_loop(directory, config, records))
        # The state itself: what a changelog keyed by state key would hold once cleaned.
        live = [(key, value) for key, value in store.scan(0, b"") if key != CHECKPOINT_KEY]
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    changelog = broker.logs[(topic, 0)]
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for key, value in changelog:
        kind = KINDS.get(value[:1], value[:1].decode())
        count[kind] += 1
        size[kind] += len(key) + len(value)
    input_bytes = sum(len(r.key) + len(r.value) for r in records)
    out = {"matches": matches, "leagues": leagues, "players": players, "records_by_kind": dict(count),
           "bytes_by_kind": dict(size), "records_per_match": sum(count.values()) / matches,
           "bytes_per_match": sum(size.values()) / matches, "input_bytes_per_match": input_bytes / matches}
    out["ratio_to_input"] = out["bytes_per_match"] / out["input_bytes_per_match"]
    out["state_keys"] = len(live)
    out["state_bytes_per_match"] = sum(len(key) + len(value) for key, value in live) / matches
    print(f"changelog: {matches:,} two-player elo matches, {leagues} leagues of {players:,} players, history on, "
          f"batches of {BATCH:,}", flush=True)
    for kind in sorted(count, key=lambda k: -size[k]):
        print(f"  {kind:<12} {count[kind] / matches:6.3f} records, {size[kind] / matches:6.1f} bytes per match")
    print(f"  per match: {out['records_per_match']:.3f} records, {out['bytes_per_match']:.1f} bytes; the input "
          f"{out['input_bytes_per_match']:.1f} bytes (ratio {out['ratio_to_input']:.2f})", flush=True)
    print(f"  the local store at the end: {len(live):,} keys, {out['state_bytes_per_match']:.1f} bytes per match "
          "(what a changelog keyed by state key would hold once cleaned)", flush=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.changelog_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--matches", type=int, default=30_000)
    parser.add_argument("--leagues", type=int, default=10)
    parser.add_argument("--players", type=int, default=1_000)
    args = parser.parse_args()
    run(args.matches, args.leagues, args.players)
