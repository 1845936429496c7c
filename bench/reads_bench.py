"""Reads that do not wait for writes (issue #15): the API's read latency in one
large `elo` league while matches are applied in it, against the same requests
with no writes running, measured in the same run.

1. fill: one `ratings worker` (8 partitions, the league on one of them) and
   N two-player matches in one league (default 300,000 among 200,000 players,
   each with an occurred_at): the first players/2 matches bring every player
   in, the rest pair players at random;
2. idle (the baseline): sequential requests from one keep-alive HTTP client,
   cycling through five kinds until each has at least --requests answers and
   --min-seconds have passed, no writes running:
     leaderboard   GET /leagues/L/leaderboard?limit=100 (the top 100)
     page          GET /leagues/L/leaderboard?limit=100&offset=R (R random over the ranked players)
     player        GET /leagues/L/players/P (P random; the answer has the rank and the percentile)
     around        GET /leagues/L/leaderboard?around=P&radius=10
     history       GET /leagues/L/players/P/history?limit=20
     predict       GET /leagues/L/predict?team=P&team=Q (Q another random player)
     versus        GET /leagues/L/players/P/versus/Q?limit=10
3. loaded: the same while a separate process publishes a steady --rate
   matches/s (default 2,000) in the same league; the rate the worker applied
   during the requests (from /health) and how far it fell behind are recorded.

Each kind's p99 under load is printed against the 20 ms target and as a ratio
to its idle p99. The client runs alone in this process and the publisher in a
process of its own, so neither waits for the other's GIL.

    python -m bench.reads_bench [--quick] [--players N] [--matches N] [--rate N] [--requests N]
                                [--worker-code DIR] [--keep] [--output FILE]

--worker-code runs the worker from another checkout (this benchmark and the
broker stay this checkout's), e.g. the code before the issue:

    mkdir /tmp/before && git archive 02dda17 | tar -x -C /tmp/before
    python -m bench.reads_bench --worker-code /tmp/before --requests 150

Kinds that code does not serve (history: a 404 that is not the API's; around:
answered without `around`) are marked absent, and a player answer without a
rank is noted. --trace FILE keeps every timed request (to see when slow ones
happen).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from stream_app.broker import EmbeddedBroker
from stream_app.settings import DEFAULTS, Settings

from .streamtools import (BenchWorker, command_main, cpu_seconds, create_topics, dir_size, log, profile, publish,
                          stage_topics, vm_hwm)

LEAGUE = "big"
KINDS = ("leaderboard", "page", "player", "around", "history", "predict", "versus")
REQUESTS = {
    "leaderboard": "leaderboard?limit=100",
    "page": "leaderboard?limit=100&offset=R",
    "player": "players/P (rank, percentile)",
    "around": "leaderboard?around=P&radius=10",
    "history": "players/P/history?limit=20",
    "predict": "predict?team=P&team=Q",
    "versus": "players/P/versus/Q?limit=10",
}
TARGET_S = 0.020
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.reads_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20,000 players, 200 requests per kind, 10 s phases")
    p.add_argument("--players", type=int, help="players in the league (default 200,000; quick 20,000)")
    p.add_argument("--matches", type=int, help="matches filling the league (default 1.5 per player)")
    p.add_argument("--rate", type=int, default=2000, help="matches/s published while loaded (default %(default)s)")
    p.add_argument("--requests", type=int, help="requests of each kind per phase, at least (default 1,000; quick 200)")
    p.add_argument("--min-seconds", type=float, help="each phase lasts at least this long (default 30; quick 10)")
    p.add_argument("--max-seconds", type=float, default=900.0,
                   help="a phase stops after this long even short of --requests (default %(default)s)")
    p.add_argument("--warm-seconds", type=float, default=5.0,
                   help="the steady load runs this long before the loaded requests begin (default %(default)s)")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--worker-code", type=Path, help="run the worker from this checkout (default: this one)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help="py-spy the worker for this long at the start of the loaded phase (needs py-spy)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    p.add_argument("--trace", type=Path, help="write every timed request here (JSON: phase -> [s into it, kind, "
                   "verdict, ms])")
    p.add_argument("--output", help="(run alone) also write the results as JSON here")
    args = p.parse_args(argv)
    args.players = args.players or (20_000 if args.quick else 200_000)
    args.matches = args.matches or args.players * 3 // 2
    args.requests = args.requests or (200 if args.quick else 1_000)
    args.min_seconds = args.min_seconds if args.min_seconds is not None else (10.0 if args.quick else 30.0)
    return args


def occurred_at(j: int) -> str:
    return (EPOCH + timedelta(seconds=j)).strftime("%Y-%m-%dT%H:%M:%SZ")


def match(j: int, a: int, b: int, prefix: str = "m") -> bytes:
    return orjson.dumps({"match_id": f"{prefix}{j}", "league": LEAGUE, "occurred_at": occurred_at(j),
                         "participants": [{"player": f"p{a}", "rank": 1}, {"player": f"p{b}", "rank": 2}]})


def fill_matches(players: int, first: int, count: int, rng: random.Random) -> list[bytes]:
    """Matches first .. first+count-1 of the fill: match j pairs players 2j and 2j+1
    while there are any, then two players at random."""
    out = []
    for j in range(first, first + count):
        a, b = (2 * j, 2 * j + 1) if 2 * j + 1 < players else rng.sample(range(players), 2)
        out.append(match(j, a, b))
    return out


# -- the steady publisher: a process of its own ----------------------------------------------


def steady_publisher(bootstrap: str, topic: str, players: int, rate: int, first: int, seed: int, stop: Any,
                     acked: Any, results: Any, max_seconds: float) -> None:
    """Publish `rate` two-player matches a second (a chunk every 10 ms) until `stop`
    is set; `acked` counts the acknowledged ones; the summary goes to `results`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
    try:
        results.put(asyncio.run(_steady(bootstrap, topic, players, rate, first, seed, stop, acked, max_seconds)))
    except Exception as exc:  # noqa: BLE001 (reported by the parent)
        results.put({"error": f"{type(exc).__name__}: {exc}"})


async def _steady(bootstrap: str, topic: str, players: int, rate: int, first: int, seed: int, stop: Any, acked: Any,
                  max_seconds: float) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer

    rng = random.Random(seed)
    key = LEAGUE.encode()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, enable_idempotence=False)
    await producer.start()
    loop = asyncio.get_running_loop()
    chunk = max(1, rate // 100)
    pending: list = []
    sent = done = 0
    behind = 0.0  # the most the sending fell behind its schedule, s
    try:
        start = loop.time()
        while not stop.is_set() and loop.time() - start < max_seconds:
            delay = start + sent / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                behind = max(behind, -delay)
            for _ in range(chunk):
                a, b = rng.sample(range(players), 2)
                pending.append(await producer.send(topic, match(first + sent, a, b, "s"), key=key))
                sent += 1
            if len(pending) > 5 * chunk:
                await asyncio.gather(*pending[:-chunk])
                done += len(pending) - chunk
                pending = pending[-chunk:]
                acked.value = done
        await asyncio.gather(*pending)
        done += len(pending)
        acked.value = done
        seconds = loop.time() - start
        return {"sent": done, "seconds": seconds, "rate": done / seconds, "most_behind_schedule_s": behind}
    finally:
        await producer.stop()


# -- the client --------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP connection, requests one after another."""

    def __init__(self, port: int):
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str) -> tuple[int, bytes, float]:
        """(status, body, seconds from sending the request to the whole body read); status 0: no answer."""
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.conn.connect()
            started = time.perf_counter()
            try:
                self.conn.request("GET", path)
                reply = self.conn.getresponse()
                body = reply.read()
                seconds = time.perf_counter() - started
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    return 0, b"", time.perf_counter() - started
                continue
            if reply.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return reply.status, body, seconds
        raise AssertionError("unreachable")

    def json(self, path: str) -> tuple[int, Any]:
        status, body, _ = self.get(path)
        try:
            return status, orjson.loads(body)
        except orjson.JSONDecodeError:
            return status, body.decode(errors="replace")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def check(kind: str, status: int, body: bytes, player: str, offset: int) -> tuple[str, str]:
    """('ok' | 'absent' | 'error', why): is the answer what the kind asks for?"""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if kind == "history" and status == 404 and not (isinstance(doc, dict) and "error" in doc):
        return "absent", "no history route (404 without an API error)"
    if status != 200 or not isinstance(doc, dict):
        return "error", f"status {status}: {body[:200]!r}"
    if kind == "around" and "around" not in doc:
        return "absent", "around= ignored (the answer has no 'around')"
    if kind in ("leaderboard", "page"):
        rows = doc.get("players") or []
        if not rows or rows[0].get("rank") != offset + 1:
            return "error", f"page at offset {offset}: {str(doc)[:200]}"
    elif kind == "around":
        if player not in {row.get("player") for row in doc.get("players") or []}:
            return "error", f"{player} not in its around page: {str(doc)[:200]}"
    elif kind == "player":
        if doc.get("player", player) != player or "rating" not in doc:
            return "error", f"player answer: {str(doc)[:200]}"
    elif kind == "history" and not doc.get("changes"):
        return "error", f"no history for {player}: {str(doc)[:200]}"
    elif kind == "predict" and abs(sum(side.get("win", 0) for side in doc.get("sides") or []) - 1) > 1e-9:
        return "error", f"prediction: {str(doc)[:200]}"
    elif kind == "versus" and "against" not in doc:
        return "error", f"versus: {str(doc)[:200]}"
    return "ok", ""


def stats(values: list[float]) -> dict[str, Any]:
    import numpy as np

    if not values:
        return {"count": 0}
    array = np.asarray(values)
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return {"count": int(array.size), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(array.max()), "mean": float(array.mean()),
            "over_20ms": int((array > TARGET_S).sum())}


def worker_metrics(client: Client) -> dict[str, dict[str, float]]:
    """From the worker's /metrics: ratings_http_request_seconds buckets per endpoint, and
    ratings_batch_seconds' buckets, sum and count under "batch" ({} where it has none)."""
    status, body, _ = client.get("/metrics")
    out: dict[str, dict[str, float]] = {}
    if status != 200:
        return out
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("ratings_http_request_seconds_bucket{"):
            labels, _, value = line.rpartition(" ")
            fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1:-1].split(","))
            out.setdefault(fields["endpoint"].strip('"'), {})[fields["le"].strip('"')] = float(value)
        elif line.startswith("ratings_batch_seconds_"):
            name, _, value = line.rpartition(" ")
            if name.startswith("ratings_batch_seconds_bucket{"):
                out.setdefault("batch", {})[name.split('le="')[1].split('"')[0]] = float(value)
            elif name in ("ratings_batch_seconds_sum", "ratings_batch_seconds_count"):
                out.setdefault("batch", {})[name.rsplit("_", 1)[1]] = float(value)
    return out


def batch_times(before: dict, after: dict) -> dict[str, Any]:
    """The worker's batches (each applied and committed) between two worker_metrics()."""
    old, new = before.get("batch", {}), after.get("batch", {})
    count = new.get("count", 0) - old.get("count", 0)
    if not count:
        return {"count": 0}
    out: dict[str, Any] = {"count": int(count), "mean_s": (new.get("sum", 0) - old.get("sum", 0)) / count}
    for bound in ("0.01", "0.025", "0.05", "0.1"):
        out[f"over_{bound}_s"] = int(count - (new.get(bound, 0) - old.get(bound, 0)))
    return out


class CpuWatch:
    """Per process, the share of one core used between start() and stop()."""

    def __init__(self, pids: dict[str, int | None]):
        self.pids = pids

    def start(self) -> CpuWatch:
        self.began, self.first = time.monotonic(), {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def stop(self) -> dict[str, float | None]:
        seconds = time.monotonic() - self.began
        out = {}
        for name, pid in self.pids.items():
            now, then = cpu_seconds(pid), self.first[name]
            out[name] = None if now is None or then is None else round(100.0 * (now - then) / seconds, 1)
        return out


def server_over(before: dict, after: dict, bound: str = "0.02") -> dict[str, dict[str, int]]:
    """Per endpoint, requests the worker itself timed (handler only) and how many took over `bound` s."""
    out = {}
    for endpoint, buckets in after.items():
        old = before.get(endpoint, {})
        total = buckets.get("+Inf", 0) - old.get("+Inf", 0)
        within = buckets.get(bound, 0) - old.get(bound, 0)
        if total:
            out[endpoint] = {"requests": int(total), "over_20ms": int(total - within)}
    return out


# -- the benchmark ---------------------------------------------------------------------------


class ReadsBench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="reads-bench-"))
        self.rng = random.Random(args.seed)
        self.broker: EmbeddedBroker | None = None
        self.worker: BenchWorker | None = None
        self.client: Client | None = None
        self.absent: dict[str, str] = {}
        self.ranked = args.players  # ranked players, from the leaderboard's answers
        self.filled = 0  # matches applied by the fill
        self.trace: dict[str, list[tuple[float, str, str, float]]] = {}  # phase -> (s into it, kind, verdict, ms)

    def close(self) -> dict[str, Any]:
        problems = {}
        if self.client is not None:
            self.client.close()
        if self.worker is not None:
            if self.worker.proc.poll() is None:
                self.worker.stop()
            problems = self.worker.log_problems()
        if self.broker is not None:
            self.broker.stop()
        if self.args.keep:
            log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    def start_worker(self, topics: Settings) -> BenchWorker:
        # The group's timing given explicitly: a worker from another checkout runs with this one's defaults.
        group = ["--session-timeout", str(DEFAULTS.session_timeout),
                 "--heartbeat-interval", str(DEFAULTS.heartbeat_interval)]
        code = self.args.worker_code
        if code is None:
            return BenchWorker(self.broker.url, topics, topics.app_id, self.tmp / "data", None, self.tmp, "reads",
                               extra_args=group)
        # The same worker, run from another checkout: its directory first on the path.
        return BenchWorker(self.broker.url, topics, topics.app_id, self.tmp / "data", None, self.tmp,
                           "reads-other-code", extra_args=group, env={"PYTHONPATH": str(code.resolve())},
                           code=code.resolve())

    # -- 1. fill -------------------------------------------------------------------------
    def fill(self) -> dict[str, Any]:
        args = self.args
        self.broker = EmbeddedBroker(log=self.tmp / "broker.log").start()
        topics = self.topics = stage_topics("reads")
        asyncio.run(create_topics(self.broker.url, topics))
        self.worker = self.start_worker(topics)
        code = f"from {args.worker_code}" if args.worker_code else "from this checkout"
        log(f"fill: {args.matches:,} matches among {args.players:,} players in league {LEAGUE!r}, worker {code} "
            f"on port {self.worker.port}")
        started = time.monotonic()
        note = started + 10
        chunk = 25_000
        for first in range(0, args.matches, chunk):
            asyncio.run(publish(self.broker.bootstrap, topics.match_topic,
                                fill_matches(args.players, first, min(chunk, args.matches - first), self.rng)))
            if time.monotonic() > note:
                health = self.worker.health() or {}
                log(f"  fill: {first + chunk:,} of {args.matches:,} published, {health.get('applied', 0):,} applied")
                note = time.monotonic() + 10
        published_s = time.monotonic() - started
        log(f"fill: {args.matches:,} published in {published_s:.0f} s")
        health = self.worker.wait(lambda h: h["applied"] >= args.matches, args.matches / 200 + 600,
                                  f"{args.matches:,} applied",
                                  lambda h: f"fill: {h['applied']:,} of {args.matches:,} applied", every=10)
        self.filled = health["applied"]
        fill_s = time.monotonic() - started
        self.client = Client(self.worker.port)
        _, league = self.client.json(f"/leagues/{LEAGUE}")
        players = league.get("players") if isinstance(league, dict) else None
        if players is None or players < args.players:
            raise RuntimeError(f"the league has {players} players, not {args.players:,}: {league}")
        log(f"fill: {self.filled:,} matches applied, {players:,} players, {fill_s:.0f} s after the first was published")
        return {"players": players, "matches": self.filled, "publish_s": published_s, "publish_to_applied_s": fill_s,
                "dead_letters": health.get("dead_letters")}

    def warm_up(self) -> dict[str, Any]:
        """The first leaderboard request builds the standings (then kept up to date): not measured."""
        started = time.perf_counter()
        status, body, seconds = self.client.get(f"/leagues/{LEAGUE}/leaderboard?limit=100")
        if status != 200:
            raise RuntimeError(f"the first leaderboard request failed: {status} {body[:300]!r}")
        doc = orjson.loads(body)
        self.ranked = doc.get("eligible_total", doc.get("players_total"))
        log(f"warm-up: the first leaderboard request took {seconds * 1e3:,.0f} ms; {self.ranked:,} players ranked")
        for _ in range(20):
            for kind in KINDS:
                self.request(kind)
        return {"first_leaderboard_s": seconds, "ranked": self.ranked, "warm_up_s": time.perf_counter() - started}

    # -- requests --------------------------------------------------------------------------
    def request(self, kind: str) -> tuple[str, float, str]:
        player = f"p{self.rng.randrange(self.args.players)}"
        offset = 0
        if kind == "leaderboard":
            path = "leaderboard?limit=100"
        elif kind == "page":
            offset = self.rng.randrange(max(1, self.ranked - 100))
            path = f"leaderboard?limit=100&offset={offset}"
        elif kind == "player":
            path = f"players/{player}"
        elif kind == "around":
            path = f"leaderboard?around={player}&radius=10"
        elif kind == "history":
            path = f"players/{player}/history?limit=20"
        else:
            other = f"p{(int(player[1:]) + 1 + self.rng.randrange(self.args.players - 1)) % self.args.players}"
            path = f"predict?team={player}&team={other}" if kind == "predict" else f"players/{player}/versus/{other}?limit=10"
        status, body, seconds = self.client.get(f"/leagues/{LEAGUE}/{path}")
        verdict, why = check(kind, status, body, player, offset)
        if kind == "player" and verdict == "ok":
            doc = orjson.loads(body)
            if "rank" not in doc:
                self.absent.setdefault("rank", "the player answer has no rank")
            elif doc["rank"] is None:
                verdict, why = "error", f"{player} not ranked: {body[:200]!r}"
        if kind in ("leaderboard", "page") and verdict == "ok":
            doc = orjson.loads(body)
            self.ranked = doc.get("eligible_total", doc.get("players_total", self.ranked))
        return verdict, seconds, why

    def measure(self, phase: str, acked: Any = None, publisher_pid: int | None = None) -> dict[str, Any]:
        """Cycle through the kinds until each has --requests answers and --min-seconds have
        passed (or --max-seconds); /health is read about once a second, untimed."""
        args = self.args
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        errors: dict[str, int] = {kind: 0 for kind in KINDS}
        samples: dict[str, list[str]] = {kind: [] for kind in KINDS}
        healths: list[dict[str, Any]] = []
        metrics_before = worker_metrics(self.client)
        cpu = CpuWatch({"worker": self.worker.pid, "broker": self.broker.pid, "client (this process)": os.getpid(),
                        **({"publisher": publisher_pid} if publisher_pid else {})}).start()
        started = time.monotonic()
        trace = self.trace.setdefault(phase, [])
        next_health = started
        next_note = started + 10

        def wanted() -> list[str]:
            return [kind for kind in KINDS if kind not in self.absent]

        def done() -> bool:
            now = time.monotonic()
            if now - started > args.max_seconds:
                return True
            return now - started >= args.min_seconds and all(len(times[kind]) >= args.requests for kind in wanted())

        while not done():
            for kind in wanted():
                verdict, seconds, why = self.request(kind)
                if self.args.trace:
                    trace.append((round(time.monotonic() - started, 4), kind, verdict, round(seconds * 1e3, 3)))
                if verdict == "ok":
                    times[kind].append(seconds)
                elif verdict == "absent" and not times[kind] and not errors[kind]:
                    self.absent[kind] = why
                    log(f"  {phase}: {kind} absent: {why}")
                else:
                    errors[kind] += 1
                    if len(samples[kind]) < 3:
                        samples[kind].append(why)
            now = time.monotonic()
            if now >= next_health:
                status, health = self.client.json("/health")
                if status == 200:
                    healths.append({"t": time.time(), "applied": health["applied"],
                                    "published": acked.value if acked is not None else None})
                next_health = now + 1.0
            if now >= next_note:
                counts = ", ".join(f"{kind} {len(times[kind]):,}" for kind in wanted())
                log(f"  {phase}: {counts} requests answered")
                next_note = now + 10
        seconds = time.monotonic() - started
        cpu_percent = cpu.stop()
        status, health = self.client.json("/health")
        if status == 200:
            healths.append({"t": time.time(), "applied": health["applied"],
                            "published": acked.value if acked is not None else None})
        result = {"seconds": seconds,
                  "kinds": {kind: {**stats(times[kind]), "errors": errors[kind], "error_samples": samples[kind]}
                            for kind in wanted()},
                  "cpu_percent_of_a_core": cpu_percent, "health": healths}
        metrics_after = worker_metrics(self.client)
        result["worker_timed"] = server_over({k: v for k, v in metrics_before.items() if k != "batch"},
                                             {k: v for k, v in metrics_after.items() if k != "batch"})
        result["worker_batches"] = batch_times(metrics_before, metrics_after)
        for kind in self.absent:
            if kind in KINDS:
                result["kinds"][kind] = {"absent": self.absent[kind]}
        return result

    # -- 3. loaded ---------------------------------------------------------------------------
    def loaded(self) -> dict[str, Any]:
        args = self.args
        ctx = multiprocessing.get_context("spawn")
        stop, acked, results = ctx.Event(), ctx.Value("q", 0), ctx.Queue()
        publisher = ctx.Process(target=steady_publisher, name="steady-publisher", daemon=True,
                                args=(self.broker.bootstrap, self.topics.match_topic, args.players, args.rate,
                                      args.matches, args.seed + 1, stop, acked, results,
                                      args.max_seconds + args.warm_seconds + 300))
        publisher.start()
        spy: dict[str, Any] = {}
        spy_thread = None
        try:
            deadline = time.monotonic() + 60
            while acked.value == 0:
                if time.monotonic() > deadline or not publisher.is_alive():
                    why = "still running" if publisher.is_alive() else results.get(timeout=5)
                    raise RuntimeError(f"the steady publisher sent nothing in 60 s: {why}")
                time.sleep(0.05)
            log(f"loaded: publishing {args.rate:,} matches/s; {args.warm_seconds:.0f} s before the requests")
            time.sleep(args.warm_seconds)
            if args.profile > 0:
                output = self.tmp / "worker-profile.txt"
                spy_thread = threading.Thread(target=lambda: spy.update(profile(self.worker.pid, args.profile, output)),
                                              daemon=True)
                spy_thread.start()
            result = self.measure("loaded", acked, publisher.pid)
        finally:
            stop.set()
            publisher.join(60)
            if publisher.is_alive():
                publisher.terminate()
        summary = results.get(timeout=10)
        if "error" in summary:
            raise RuntimeError(f"the steady publisher failed: {summary['error']}")
        if spy_thread is not None:
            spy_thread.join(args.profile + 90)
            result["profile"] = spy
        result["publisher"] = summary
        # The rate applied while the requests ran, and how far applying was behind publishing.
        first, last = result["health"][0], result["health"][-1]
        applied_rate = (last["applied"] - first["applied"]) / max(last["t"] - first["t"], 1e-9)
        lags = [h["published"] - (h["applied"] - self.filled) for h in result["health"]]
        result["applied_per_s"] = applied_rate
        result["lag_matches"] = {"max": max(lags), "last": lags[-1], "mean": sum(lags) / len(lags)}
        # Everything published is applied: how long after the publisher stopped.
        stopped = time.monotonic()
        target = self.filled + summary["sent"]
        health = self.worker.wait(lambda h: h["applied"] >= target, 600, f"{target:,} applied", interval=0.05)
        result["caught_up_after_stop_s"] = time.monotonic() - stopped
        result["dead_letters"] = health.get("dead_letters")
        log(f"loaded: published {summary['rate']:,.0f}/s for {summary['seconds']:.0f} s; applied {applied_rate:,.0f}/s "
            f"during the requests; lag at most {max(lags):,} matches ({max(lags) / args.rate:.2f} s of input); "
            f"all applied {result['caught_up_after_stop_s']:.1f} s after the publisher stopped")
        return result


def summarise(results: dict[str, Any]) -> None:
    """Ratios to the idle baseline and the target, per kind (into results)."""
    idle, loaded = results["idle"]["kinds"], results["loaded"]["kinds"]
    verdicts = {}
    for kind in KINDS:
        i, l = idle.get(kind, {}), loaded.get(kind, {})
        if "absent" in l or "absent" in i or not l.get("count"):
            verdicts[kind] = {"absent": l.get("absent") or i.get("absent") or "no answers"}
            continue
        verdicts[kind] = {
            "idle_p99_ms": i["p99"] * 1e3, "loaded_p99_ms": l["p99"] * 1e3,
            "ratio_loaded_to_idle_p99": l["p99"] / i["p99"] if i.get("p99") else None,
            "target_ms": TARGET_S * 1e3, "meets_target": l["p99"] < TARGET_S and l["count"] >= 1000
            and not l["errors"],
            "enough_requests": l["count"] >= 1000,
        }
    results["verdict"] = verdicts


def print_table(results: dict[str, Any]) -> None:
    fill, idle, loaded = results["fill"], results["idle"]["kinds"], results["loaded"]["kinds"]
    load = results["loaded"]
    print(f"reads: league of {fill['players']:,} players ({fill['matches']:,} matches); loaded: "
          f"{load['publisher']['rate']:,.0f} matches/s published, {load['applied_per_s']:,.0f}/s applied during the "
          f"requests, lag at most {load['lag_matches']['max']:,} matches")
    header = ("kind", "request", "idle p50/p99 ms", "loaded n", "loaded p50/p90/p99/max ms", "p99 vs idle", "< 20 ms",
              "errors")
    rows = [header]
    for kind in KINDS:
        v = results["verdict"][kind]
        if "absent" in v:
            rows.append((kind, REQUESTS[kind], "-", "-", "absent: " + v["absent"][:60], "-", "-", "-"))
            continue
        i, l = idle[kind], loaded[kind]
        rows.append((kind, REQUESTS[kind], f"{i['p50'] * 1e3:.1f} / {i['p99'] * 1e3:.1f}", f"{l['count']:,}",
                     f"{l['p50'] * 1e3:.1f} / {l['p90'] * 1e3:.1f} / {l['p99'] * 1e3:.1f} / {l['max'] * 1e3:.0f}",
                     f"{v['ratio_loaded_to_idle_p99']:.2f}" if v["ratio_loaded_to_idle_p99"] else "-",
                     ("yes" if v["meets_target"] else "NO") + ("" if v["enough_requests"] else " (< 1,000 requests)"),
                     str(l["errors"])))
    width = [max(len(row[k]) for row in rows) for k in range(len(header))]
    for row in rows:
        print("  ".join(f"{cell:<{width[k]}}" if k < 2 else f"{cell:>{width[k]}}" for k, cell in enumerate(row)))
    timed = results["loaded"].get("worker_timed") or {}
    if timed:
        over = ", ".join(f"{endpoint} {t['over_20ms']:,} of {t['requests']:,}" for endpoint, t in sorted(timed.items()))
        print(f"worker's own timing under load (handler only, no queueing), requests over 20 ms: {over}")
    for phase in ("idle", "loaded"):
        cpu = results[phase].get("cpu_percent_of_a_core") or {}
        batches = results[phase].get("worker_batches") or {}
        line = ", ".join(f"{name} {share:.0f}%" for name, share in cpu.items() if share is not None)
        if batches.get("count"):
            line += (f"; worker batches: {batches['count']:,}, mean {batches['mean_s'] * 1e3:.1f} ms, "
                     f"{batches['over_0.025_s']:,} over 25 ms")
        print(f"{phase}: CPU (% of one core, 2 cores here): {line}")
    if "rank" in results.get("absent", {}):
        print(f"rank: absent ({results['absent']['rank']})")


def run(args: argparse.Namespace | list[str] | None = None) -> dict[str, Any]:
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args or [])
    bench = ReadsBench(args)
    started = time.monotonic()
    results: dict[str, Any] = {"quick": args.quick, "rate": args.rate, "requests_per_kind": args.requests,
                               "min_seconds": args.min_seconds, "target_ms": TARGET_S * 1e3,
                               "worker_code": str(args.worker_code) if args.worker_code else None, "kinds": REQUESTS}
    log(f"reads bench: work directory {bench.tmp}")
    try:
        results["fill"] = bench.fill()
        results["warm_up"] = bench.warm_up()
        log(f"idle: {args.requests:,} requests of each kind, at least {args.min_seconds:.0f} s, no writes")
        results["idle"] = bench.measure("idle")
        results["loaded"] = bench.loaded()
        results["worker_peak_rss_bytes"] = vm_hwm(bench.worker.pid)
        results["data_dir_bytes"] = dir_size(bench.worker.data_dir)
    finally:
        results["worker_log_problems"] = bench.close()
        results["absent"] = dict(bench.absent)
        if args.trace:
            args.trace.write_text(json.dumps(bench.trace) + "\n")
        results["wall_s"] = time.monotonic() - started
    summarise(results)
    print_table(results)
    problems = results["worker_log_problems"]
    if problems.get("count"):
        kinds = "; ".join(f"{n} x {kind.strip()}" for kind, n in list(problems["kinds"].items())[:3])
        print(f"worker log: {problems['count']} warnings/errors: {kinds}")
    print(f"reads bench: {results['wall_s']:.0f} s")
    return results


def main(argv: list[str] | None = None) -> int:
    return command_main(parse_args, run, argv)


if __name__ == "__main__":
    # Through the package's module, so that the publisher process (spawned) finds its function there.
    from bench.reads_bench import main as _main

    sys.exit(_main())
