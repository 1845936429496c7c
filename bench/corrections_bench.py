"""What correcting the record costs (issue #16), each figure next to a baseline
from the same run:

1. void: one `ratings worker` on an embedded broker has applied a 100,000-match
   two-player `elo` league; a void of match 50,000 is published, and timed to
   the last of its correction events read back. Baseline: the same re-rate in
   memory (the replay's Ledger, same code path, no broker, no disk).
2. codeforces: the Codeforces file (1,071 contests) replayed under the fast
   Elo-MMR settings with a boundary every 50 contests, then contest 536 voided.
   Baseline: the replay of the whole file.
3. cost: the batch loop and commit sequence on a real local store (the broker
   in memory: streamtools.RecordingBroker) over 500,000 two-player matches: the log's,
   the snapshots' and the boundaries' share of the store and the changelog,
   and the speed with a boundary every 10,000 results (the default) and every
   1,000, against none, in the same run.

    python -m bench.corrections_bench [--only void|codeforces|cost] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from stream_app.broker import EmbeddedBroker
from stream_app.inputs import parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.offline.sample import two_player_league
from stream_app.apply import apply
from stream_app.rerate import Rerated

from .streamtools import ROOT, Collector, BenchWorker, command_main, create_topics, log, publish, stage_topics

CODEFORCES = ROOT.parent / "shared" / "data" / "codeforces-1071.jsonl.gz"
CODEFORCES_CONFIG = ROOT / "deploy" / "accuracy" / "codeforces-elo-mmr.toml"
STAGES = ("void", "codeforces", "cost")
ELO = '[default]\nalgorithm = "elo"\n'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.corrections_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", choices=STAGES, help="run only these stages (repeatable)")
    p.add_argument("--quick", action="store_true", help="20,000 matches for (1) and (3), no Codeforces")
    p.add_argument("--output", help="(run alone) also write the results as JSON here")
    args = p.parse_args(argv)
    args.stages = args.only or [s for s in STAGES if not (args.quick and s == "codeforces")]
    return args


def void(match_id: str, league: str) -> dict[str, Any]:
    return {"schema": "match-voided.v1", "league": league, "match_id": match_id, "reason": "benchmark"}


def in_memory(config: LeagueConfig, docs: list[dict], command: dict) -> tuple[Ledger, float, Rerated]:
    """The league replayed in memory, then the command applied: (ledger, re-rate seconds, outcome)."""
    ledger = Ledger(config)
    for doc in docs:
        apply(config, ledger.tables, parse_input(orjson.dumps(doc)))
    started = time.perf_counter()
    done = apply(config, ledger.tables, parse_input(orjson.dumps(command)))
    return ledger, time.perf_counter() - started, done


# -- (1) -------------------------------------------------------------------------------------
def stream_void(matches: int, players: int = 1000) -> dict[str, Any]:
    docs = list(two_player_league("chess", players, matches, random.Random(16)))
    command = void(docs[matches // 2]["match_id"], "chess")
    config = LeagueConfig.from_toml(ELO)
    _, memory_s, done = in_memory(config, docs, command)
    expected = len(done.corrections)
    log(f"void: in memory, {done.reapplied:,} matches applied again and {expected:,} corrections in {memory_s:.3f} s")
    tmp = Path(tempfile.mkdtemp(prefix="corrections-bench-"))
    broker = EmbeddedBroker(log=tmp / "broker.log").start()
    worker = None
    try:
        config_path = tmp / "leagues.toml"
        config_path.write_text(ELO)
        topics = stage_topics("void")
        asyncio.run(create_topics(broker.url, topics))
        asyncio.run(publish(broker.bootstrap, topics.match_topic, docs))
        worker = BenchWorker(broker.url, topics, "void", tmp / "data", config_path, tmp, "worker")
        worker.wait(lambda h: h["applied"] >= matches, 600, f"{matches:,} matches applied")
        arrived: list[float] = []
        collector = Collector(broker.bootstrap, topics.changes_topic,
                              lambda event, now: arrived.append(now) if event.get("cause") == "correction" else None,
                              max_wait_ms=10)
        collector.start()
        collector.positioned.wait(30)
        sent = time.time()  # the collector's clock
        asyncio.run(publish(broker.bootstrap, topics.match_topic, [command]))
        deadline = time.monotonic() + 300
        while len(arrived) < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        collector.stop()
        if len(arrived) < expected:
            raise RuntimeError(f"only {len(arrived)} of {expected} corrections arrived")
        stream_s = max(arrived) - sent
        health = worker.health() or {}
        last = health.get("last_rerate") or {}
        log(f"void: stream, publish to the last of {expected:,} corrections {stream_s:.3f} s "
            f"({stream_s / memory_s:.1f} x in memory; the worker's re-rate took {last.get('elapsed_seconds', 0):.3f} s)")
        return {"matches": matches, "players": players, "reapplied": done.reapplied, "corrections": expected,
                "in_memory_s": memory_s, "stream_publish_to_last_correction_s": stream_s,
                "stream_rerate_s": last.get("elapsed_seconds"), "ratio_stream_to_memory": stream_s / memory_s,
                "goal_s": 2.0}
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# -- (2) -------------------------------------------------------------------------------------
def codeforces(every: int = 50) -> dict[str, Any] | None:
    if not CODEFORCES.is_file():
        log(f"codeforces: {CODEFORCES} not found: skipped")
        return None
    text = CODEFORCES_CONFIG.read_text() + f"snapshot_every = {every}\n"
    config = LeagueConfig.from_toml(text)
    with gzip.open(CODEFORCES, "rb") as lines:
        items = [parse_input(line) for line in lines if line.strip()]
    league = items[0].league
    ledger = Ledger(config)
    started = time.perf_counter()
    for item in items:
        apply(config, ledger.tables, item)
    replay_s = time.perf_counter() - started
    middle = items[len(items) // 2]
    started = time.perf_counter()
    done = apply(config, ledger.tables, parse_input(orjson.dumps(void(middle.match_id, league))))
    rerate_s = time.perf_counter() - started
    rows = sum(len(rows) for rows in ledger.snapshot_rows.get(league, {}).values())
    participants = sum(len(item.participants) for item in items)
    log(f"codeforces: replay {replay_s:.1f} s; voiding contest {len(items) // 2 + 1} of {len(items):,} "
        f"({len(middle.participants):,} participants) re-rated {done.reapplied:,} contests, "
        f"{len(done.corrections):,} players corrected, in {rerate_s:.1f} s ({rerate_s / replay_s:.2f} of the replay); "
        f"{rows:,} snapshot rows for {participants:,} results")
    return {"contests": len(items), "results": participants, "snapshot_every": every, "replay_s": replay_s,
            "voided_participants": len(middle.participants), "reapplied": done.reapplied,
            "corrections": len(done.corrections), "rerate_s": rerate_s, "ratio_rerate_to_replay": rerate_s / replay_s,
            "snapshot_rows": rows}


# -- (3) -------------------------------------------------------------------------------------
def cost(matches: int, players: int = 100_000) -> dict[str, Any]:
    from bench.streamtools import batch_loop, two_player_records
    from stream_app.stream.changelog import DATA_START, row_of
    from stream_app.state.tables import TABLE_PREFIX

    records = two_player_records(matches, players)
    out: dict[str, Any] = {"matches": matches, "players": players}
    names = {prefix: table for table, prefix in TABLE_PREFIX.items()}

    def changelog_part(value: bytes) -> str:
        """What a changelog record is: an entry (a result with its outcome), a row of a
        table (what a re-rate wrote), a base's packed rows, or a mark (checkpoint, fence, start)."""
        if value[:1] == b"E":
            return "entries"
        if value[:1] == b"R":
            return names.get(row_of(value[DATA_START:])[0][:1], "other rows")
        if value[:1] == b"P":
            return "bases"
        return "marks"
    for name, every in (("no boundaries", 10**12), ("a boundary every 10,000", 10_000), ("a boundary every 1,000", 1000)):
        config = LeagueConfig.from_toml(f'[default]\nalgorithm = "elo"\nsnapshot_every = {every}\n')
        directory = Path(tempfile.mkdtemp(prefix="corrections-cost-"))

        async def go() -> dict[str, Any]:
            seconds, store, broker, changelog_topic = await batch_loop(directory, config, records)
            by_table: dict[str, int] = {}
            for key, value in broker.logs[(changelog_topic, 0)]:
                by_table[changelog_part(value)] = by_table.get(changelog_part(value), 0) + len(key) + len(value)
            stored: dict[str, int] = {}
            for key, value in store.scan(0, b""):
                table = names.get(key[:1], "checkpoint")
                stored[table] = stored.get(table, 0) + len(key) + len(value)
            store.close()
            return {"seconds": seconds, "matches_per_s": len(records) / seconds, "changelog_bytes": by_table,
                    "stored_bytes": stored}

        try:
            out[name] = result = asyncio.run(go())
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        log(f"cost, {name}: {result['matches_per_s']:,.0f} matches/s; changelog bytes per match: "
            + ", ".join(f"{t} {b / matches:,.0f}" for t, b in sorted(result["changelog_bytes"].items())))
    without = out["no boundaries"]
    for name in ("a boundary every 10,000", "a boundary every 1,000"):
        with_ = out[name]
        ratio = with_["matches_per_s"] / without["matches_per_s"]
        logged = sum(with_["changelog_bytes"].get(t, 0) for t in ("log", "snapshots", "boundaries"))
        share = logged / sum(with_["changelog_bytes"].values())
        stored = sum(with_["stored_bytes"].get(t, 0) for t in ("log", "snapshots", "boundaries"))
        with_.update(speed_ratio_to_none=ratio, changelog_bytes_per_match_log_snapshots=logged / matches,
                     changelog_share_log_snapshots=share, stored_bytes_per_match_log_snapshots=stored / matches)
        log(f"cost, {name}: speed {ratio:.2f} of no boundaries; the log, snapshots and boundaries are "
            f"{logged / matches:,.0f} changelog bytes per match ({share:.0%} of the changelog), "
            f"{stored / matches:,.0f} bytes per match in the store")
    return out


def run(args: argparse.Namespace | list[str] | None = None) -> dict[str, Any]:
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    matches = 20_000 if args.quick else 100_000
    results: dict[str, Any] = {}
    if "void" in args.stages:
        results["void"] = stream_void(matches)
    if "codeforces" in args.stages:
        results["codeforces"] = codeforces()
    if "cost" in args.stages:
        results["cost"] = cost(matches * 5)
    return results


def main(argv: list[str] | None = None) -> int:
    return command_main(parse_args, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
