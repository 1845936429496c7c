"""What keeping every player's history costs: disk per million history entries
(the local RocksDB and the changelog) and the batch loop's speed, against the
same matches applied with `history_max = 0` in the same run.

The batch loop and the commit sequence run for real on a real local store; the
broker is tests/support/memory.py's, so the figures are the worker's own and
not the embedded broker's.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from stream_app.settings import Settings
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.store import LocalStore
from stream_app.stream.worker import Worker
from tests.support.memory import MemoryBroker

BATCH = 2_000  # input records per batch, as the intake hands them over under load


def _records(matches: int, players: int) -> list[InputRecord]:
    rng = random.Random(3)
    lines = [orjson.dumps(e) for e in two_player_league("league", players, matches, rng)]
    return [InputRecord("matches", 0, i, b"league", line, 0) for i, line in enumerate(lines)]


async def batch_loop(directory: Path, config: LeagueConfig,
                     records: list[InputRecord]) -> tuple[float, LocalStore, MemoryBroker, str]:
    """The records applied by the batch loop in batches of BATCH, on a real store in
    `directory` and an in-memory broker: (seconds, store, broker, changelog topic)."""
    store, broker = LocalStore(directory), MemoryBroker(partitions=1)
    settings = Settings(partitions=1, match_topic="matches")
    worker = Worker(settings, config, store, broker, broker, Intake({}, BATCH))
    started = time.perf_counter()
    for first in range(0, len(records), BATCH):
        await worker.apply_batch(records[first:first + BATCH])
    return time.perf_counter() - started, store, broker, settings.changelog_topic


async def _apply(directory: Path, config: LeagueConfig, records: list[InputRecord]) -> dict[str, Any]:
    seconds, store, broker, changelog_topic = await batch_loop(directory, config, records)
    db = store.db(0)
    db.flush()
    db.compact_range(None, None)
    history = sum(1 for _ in store.scan(0, b"h"))
    changelog = sum(len(key) + len(value) for key, value in broker.logs[(changelog_topic, 0)])
    result = {"seconds": seconds, "matches_per_s": len(records) / seconds, "history_entries": history,
              "store_bytes": store.size(0), "changelog_bytes": changelog}
    store.close()
    return result


def run(matches: int = 500_000, players: int = 100_000) -> dict[str, Any]:
    records = _records(matches, players)
    print(f"history: {matches:,} two-player matches among {players:,} players, batches of {BATCH:,}", flush=True)
    out: dict[str, Any] = {"matches": matches, "players": players}
    for name, extra in (("without", "history_max = 0\n"), ("with", "")):
        config = LeagueConfig.from_toml(f'[default]\nalgorithm = "elo"\n{extra}')
        directory = Path(tempfile.mkdtemp(prefix=f"history-{name}-"))
        try:
            out[name] = asyncio.run(_apply(directory, config, records))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        r = out[name]
        print(f"  {name} history: {r['matches_per_s']:,.0f} matches/s; store {r['store_bytes'] / 2**20:,.1f} MiB, "
              f"changelog {r['changelog_bytes'] / 2**20:,.1f} MiB, {r['history_entries']:,} history entries", flush=True)
    with_, without = out["with"], out["without"]
    per_million = 1e6 / with_["history_entries"]
    out["store_bytes_per_million_entries"] = (with_["store_bytes"] - without["store_bytes"]) * per_million
    out["changelog_bytes_per_million_entries"] = (with_["changelog_bytes"] - without["changelog_bytes"]) * per_million
    out["speed_ratio_with_to_without"] = with_["matches_per_s"] / without["matches_per_s"]
    print(f"  per million history entries: local store +{out['store_bytes_per_million_entries'] / 2**20:,.1f} MiB, "
          f"changelog +{out['changelog_bytes_per_million_entries'] / 2**20:,.1f} MiB (before compaction); "
          f"speed with history {out['speed_ratio_with_to_without']:.2f} of without", flush=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.history_bench")
    parser.add_argument("--matches", type=int, default=500_000)
    parser.add_argument("--players", type=int, default=100_000)
    args = parser.parse_args()
    run(args.matches, args.players)
