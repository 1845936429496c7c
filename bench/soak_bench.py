"""The worker's memory over a long run at a steady rate (issue #18): one worker,
two-player `elo` matches over 50 leagues of 2,000 players published at a steady
rate (1,000 matches/s for 60 minutes by default, a chunk every 500 ms) on the
embedded broker. Every `--every` seconds: the worker's RSS and peak RSS, its
matches applied, the broker's RSS, the CPU time of both, and RocksDB's memory
in the worker (its metrics: memtables, table readers, block cache). The figure
is the worker's RSS growth over the second half of the run (MiB per hour, least
squares), next to its RSS at the start of that half; the curves are plotted
(bench/soak.png).

    python -m bench.soak_bench [--minutes 60] [--rate 1000] [--every 10] [--chart PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import threading
import time
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import orjson

from stream_app.broker import EmbeddedBroker
from stream_app.offline.sample import two_player_league

from .streamtools import (ROOT, BenchWorker, command_main, cpu_seconds, create_topics, log, send_paced, stage_topics,
                          vm_hwm, vm_rss)

MIB = 1024 * 1024
LEAGUES = 50
PLAYERS = 2_000  # per league: 100,000 players in all
CONFIG = '[default]\nalgorithm = "elo"\n'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate", type=int, default=1000, help="matches a second (default %(default)s)")
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples (default %(default)s)")
    p.add_argument("--chart", type=Path, default=ROOT / "bench" / "soak.png")
    p.add_argument("--broker-rss-limit-gb", type=float, default=16.0,
                   help="stop publishing if the broker's RSS passes this (Tansu keeps every record in memory)")
    p.add_argument("--output", help="(run alone) also write the results as JSON here")
    return p.parse_args(argv)


def matches(seed: int = 7) -> Iterator[tuple[bytes, bytes]]:
    """Keyed match results, round robin over the leagues, without end."""
    rng = random.Random(seed)
    leagues = [two_player_league(f"soak-{k:02d}", PLAYERS, 1 << 40, rng) for k in range(LEAGUES)]
    for round_ in zip(*leagues):
        for event in round_:
            yield event["league"].encode(), orjson.dumps(event)


async def publish_steadily(bootstrap: str, topic: str, rate: int, seconds: float, sent: list[int],
                           stop: threading.Event) -> None:
    """`rate` records a second for `seconds`, a chunk every 500 ms: the embedded
    broker lists every record batch a partition holds at each fetch that finds
    new records (docs/performance.md), so the input is sent in few, larger
    batches to let it last the hour. `sent[0]` counts them."""

    def count(i: int) -> None:
        sent[0] = i + 1

    await send_paced(bootstrap, topic, islice(matches(), int(rate * seconds)), rate, chunks_per_s=2, linger_ms=5,
                     on_send=count, stop=stop)


def store_memory(worker: BenchWorker) -> dict[str, float]:
    """RocksDB's memory in the worker (ratings_local_store_memory_bytes), in MiB by kind."""
    status, text = worker.get("/metrics", timeout=5)
    found = {}
    if status == 200:
        for line in text.splitlines():
            if line.startswith("ratings_local_store_memory_bytes{"):
                kind = line.split('kind="', 1)[1].split('"', 1)[0]
                found[f"store_{kind}_mib"] = float(line.rsplit(" ", 1)[1]) / MIB
    return found


def growth_per_hour(samples: list[dict[str, Any]], key: str = "worker_rss_mib") -> float | None:
    """Least-squares slope of `key` over the second half of the samples, in MiB per hour."""
    half = samples[len(samples) // 2:]
    if len(half) < 3:
        return None
    t = np.array([s["t_s"] for s in half])
    y = np.array([s[key] for s in half])
    return float(np.polyfit(t, y, 1)[0] * 3600)


def plot(samples: list[dict[str, Any]], rate: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["t_s"] / 60 for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    top.plot(minutes, [s["worker_rss_mib"] for s in samples], label="worker RSS")
    top.plot(minutes, [s["worker_hwm_mib"] for s in samples], linestyle="--", label="worker peak RSS")
    rocksdb = [sum(s.get(f"store_{kind}_mib", 0.0) for kind in ("memtables", "table_readers", "block_cache"))
               for s in samples]
    top.plot(minutes, rocksdb, label="of which RocksDB (memtables, table readers, block cache)")
    top.set_ylabel("MiB")
    top.set_ylim(bottom=0)
    top.legend(loc="lower right")
    top.set_title(f"Worker memory at {rate:,} two-player matches/s (50 leagues, 100,000 players)")
    rates = [0.0] + [(b["applied"] - a["applied"]) / (b["t_s"] - a["t_s"]) for a, b in zip(samples, samples[1:])]
    bottom.plot(minutes, rates, color="tab:green")
    bottom.set_ylabel("applied/s")
    bottom.set_xlabel("minutes")
    bottom.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def soak(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="soak-bench-"))
    config = tmp / "leagues.toml"
    config.write_text(CONFIG)
    broker = EmbeddedBroker(log=tmp / "broker.log").start()
    worker = None
    stop = threading.Event()
    try:
        topics = stage_topics("soak")
        asyncio.run(create_topics(broker.url, topics))
        worker = BenchWorker(broker.url, topics, "soak", tmp / "data", config, tmp, "soak")
        worker.wait(lambda h: True, 120, "the worker's /health")
        seconds = args.minutes * 60
        sent = [0]
        publisher = threading.Thread(
            target=lambda: asyncio.run(publish_steadily(broker.bootstrap, topics.match_topic, args.rate, seconds, sent,
                                                        stop)),
            name="soak-publisher", daemon=True)
        samples: list[dict[str, Any]] = []
        stopped = None
        started = time.monotonic()
        publisher.start()
        next_note = started + 60
        while True:
            if worker.proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.proc.returncode}):\n{worker.log_tail()}")
            health = worker.health() or {}
            now = time.monotonic()
            samples.append({"t_s": round(now - started, 1), "sent": sent[0], "applied": health.get("applied", 0),
                            "worker_rss_mib": (vm_rss(worker.pid) or 0) / MIB,
                            "worker_hwm_mib": (vm_hwm(worker.pid) or 0) / MIB,
                            "broker_rss_mib": (vm_rss(broker.pid) or 0) / MIB,
                            "worker_cpu_s": cpu_seconds(worker.pid), "broker_cpu_s": cpu_seconds(broker.pid),
                            **store_memory(worker)})
            if not stopped and samples[-1]["broker_rss_mib"] > args.broker_rss_limit_gb * 1024:
                stopped = f"the broker's RSS passed {args.broker_rss_limit_gb:g} GiB after {samples[-1]['t_s'] / 60:.0f} min"
                log(f"soak: {stopped}; publishing stops")
                stop.set()
            if now >= next_note:
                s = samples[-1]
                log(f"soak: {s['t_s'] / 60:.0f} of {args.minutes:.0f} min, {s['applied']:,} applied of "
                    f"{s['sent']:,} sent; worker RSS {s['worker_rss_mib']:.0f} MiB (peak {s['worker_hwm_mib']:.0f}), "
                    f"broker RSS {s['broker_rss_mib']:.0f} MiB")
                next_note = now + 60
            if not publisher.is_alive() and health.get("applied", 0) >= sent[0]:
                break
            if now - started > seconds + 600:  # the samples so far still make the result
                stopped = (f"the worker was still {sent[0] - health.get('applied', 0):,} matches behind "
                           "10 minutes after the last was sent")
                log(f"soak: {stopped}")
                break
            time.sleep(max(0.0, started + len(samples) * args.every - time.monotonic()))
        publisher.join()
    finally:
        stop.set()
        if worker is not None and worker.proc.poll() is None:
            worker.stop()
        broker.stop()
    problems = worker.log_problems() if worker is not None else {}
    shutil.rmtree(tmp, ignore_errors=True)
    half = samples[len(samples) // 2]
    result = {
        "minutes": args.minutes, "rate": args.rate, "stopped_early": stopped, "sent": sent[0], "applied": samples[-1]["applied"],
        "worker_rss_at_half_mib": half["worker_rss_mib"], "worker_rss_end_mib": samples[-1]["worker_rss_mib"],
        "worker_peak_rss_mib": max(s["worker_hwm_mib"] for s in samples),
        "worker_rss_growth_mib_per_hour": growth_per_hour(samples),
        "broker_rss_end_mib": samples[-1]["broker_rss_mib"],
        "worker_log_problems": problems, "samples": samples,
    }
    plot(samples, args.rate, args.chart)
    growth = result["worker_rss_growth_mib_per_hour"]
    minutes = samples[-1]["t_s"] / 60
    print(f"soak: {result['applied']:,} matches at {args.rate:,}/s over {minutes:.0f} min"
          f"{'' if stopped is None else f' ({stopped})'}; worker RSS "
          f"{half['worker_rss_mib']:.0f} MiB at half time, {samples[-1]['worker_rss_mib']:.0f} MiB at the end, "
          f"peak {result['worker_peak_rss_mib']:.0f} MiB; growth over the second half "
          f"{'n/a' if growth is None else f'{growth:+.1f} MiB/h'}; chart {args.chart}", flush=True)
    return result


def run(args: argparse.Namespace | list[str] | None = None) -> dict[str, Any]:
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    return soak(args)


def main(argv: list[str] | None = None) -> int:
    return command_main(parse_args, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
