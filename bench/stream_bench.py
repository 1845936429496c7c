"""The stream service measured end to end (issue #6), against embedded brokers
this benchmark starts and stops itself, next to a baseline from the same run:

1. ceiling: a plain aiokafka loop over the pre-published input doing the worker's
   output work (bench/elo_job.py: per-league state, the worker's rating-changed
   event bytes per participant) and producing it as the worker does (whole
   record batches of up to 512 KiB per partition), offsets committed after
   each batch;
2. service: the same N two-player `elo` matches (50 leagues, 8 partitions)
   through one `ratings worker`, from its first applied match to the last of
   the 2N rating-changed events read back; the ratio to (1), and to the same
   job as a Quix Streams application (bench/quix_app.py: RocksDB state with
   changelogs, at-least-once, and on Kafka exactly-once too) and, on Kafka, as
   a Faust application with processing_guarantee="exactly_once"
   (bench/faust_app.py), on the same input, from its first processed match to
   the last of its events read back; then again with the per-match
   path compiled by mypyc (deploy/compile.py, built in the run; `--no-compiled`
   skips it), and through two workers of one group sharing the partitions
   (`--scale-workers`), with the cores the broker, the workers and this
   process (publisher and reader) used;
3. latency at a steady rate (2,000 and 500 matches/s for 30 s each, each rate
   with a broker and a worker of its own, caught up, after 15 s at that rate
   reported apart: a broker just started is slower while its JVM compiles):
   publish time to each rating-changed event's arrival, with the p50 of each
   tenth of the run, the cores the broker and the worker used, and the mean
   of each stage of the worker's batches (`ratings_batch_stage_seconds`: where
   the time goes); then again with a worker whose input
   fetch is held 0.5 s (aiokafka's default, the worker's before issue #18: the
   embedded broker holds an empty fetch that long);
4. `elo-mmr` rounds of 1,000 and 5,000 participants: publish to the round's
   last rating-changed event;
5. the Codeforces file (280,701 players) ingested by a worker with the fast
   Elo-MMR settings, 10 contests at a time (`--codeforces-chunk 0` publishes
   the whole file at once: the worker then applies it in parts of about
   512 KiB of input, each checkpointed), then leaderboard requests (limit 100
   and 10,000); the broker's RSS is watched (Tansu keeps every record in memory);
6. worker peak RSS (VmHWM) and data directory size after (2) and (5).

Recovery after a crash and failover are bench/recovery_bench.py's.

    python -m bench.stream_bench [--matches N] [--quick] [--only STAGE ...] [--profile SECONDS] [--scale-workers N]

Each stage has its own broker (Tansu keeps everything in memory), so memory from
one stage does not weigh on the next.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from stream_app.offline.sample import multi_player_league, two_player_league
from stream_app.settings import Settings
from stream_app.stream.kafka_io import send_batches
from stream_app.stream.partitioner import key_partition

from . import elo_job, faust_app, quix_app
from .streamtools import (PARTITIONS, ROOT, BenchWorker, Broker, Collector, PhaseSampler, add_broker_flag, batch_stages,
                          command_main, compiled_copy, cpu_seconds, create_topics, dir_size, log, percentiles, profile,
                          publish, send_paced, source_copy, stage_means, stage_topics, start_broker, vm_hwm, vm_rss,
                          wait_until)

CODEFORCES = ROOT.parent / "shared" / "data" / "codeforces-1071.jsonl.gz"
CODEFORCES_CONFIG = ROOT / "deploy" / "accuracy" / "codeforces-elo-mmr.toml"
LEAGUES = 50
CONFIG = """[default]
algorithm = "elo"

[leagues."mmr-*"]
algorithm = "elo-mmr"
"""
STAGES = ("throughput", "latency", "mmr", "codeforces")
GIB = 1024**3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.stream_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, help="two-player matches for (1) and (2) (default 100,000; quick 20,000)")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes: 20,000 matches, 10 s of latency, 2 rounds, no Codeforces")
    p.add_argument("--only", action="append", choices=STAGES, help="run only these stages (repeatable)")
    p.add_argument("--latency-rates", default="2000,500",
                   help="matches/s for (3), one run each (default %(default)s: the issue's rate, and one below saturation)")
    p.add_argument("--latency-seconds", type=float, help="duration of (3) (default 30; quick 10)")
    p.add_argument("--latency-warm-seconds", type=float,
                   help="before (3), the same rate for this long on the same broker and worker, reported apart: a "
                   "broker's JVM just started compiles its hot code meanwhile (default 15; quick 5; 0: none)")
    p.add_argument("--before-fetch-wait", type=float, default=0.5,
                   help="(3) again with the worker's input fetch held this long, as before issue #18 "
                   "(aiokafka's default; default %(default)s; 0: skip)")
    p.add_argument("--before-rates", default="500,2000", help="rates of that run (default %(default)s)")
    p.add_argument("--mmr-sizes", default="1000,5000", help="participants per elo-mmr round (default %(default)s)")
    p.add_argument("--mmr-rounds", type=int, help="rounds per size (default 4; quick 2)")
    p.add_argument("--codeforces-contests", type=int, default=0, help="first N contests of the file (default all)")
    p.add_argument("--codeforces-chunk", type=int, default=10,
                   help="publish this many contests at a time, each chunk applied before the next (default %(default)s; 0: all at once)")
    p.add_argument("--codeforces-timeout", type=float, default=2400.0, help="give up ingesting after this many s")
    p.add_argument("--broker-rss-limit-gb", type=float, default=10.0,
                   help="stop waiting for Codeforces ingestion if the broker's RSS passes this (default %(default)s)")
    p.add_argument("--scale-workers", type=int, metavar="N",
                   help="(2) again with N workers sharing the partitions (default 2, one per core here; quick 0: skip)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help="py-spy the worker for this long during (2) (default: no profile)")
    p.add_argument("--no-compiled", action="store_true",
                   help="skip (2) with the per-match path compiled by mypyc (deploy/compile.py; needs a C compiler)")
    p.add_argument("--baseline", metavar="REV",
                   help="(2) and (3) again with the package as git revision REV has it, same input, same run: a "
                   "change that must leave the throughput as it was, or one that changes the latency (e.g. the "
                   "commit before it)")
    add_broker_flag(p)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data, profiles)")
    p.add_argument("--output", help="(run alone) also write the results as JSON here")
    args = p.parse_args(argv)
    quick = args.quick
    args.matches = args.matches or (20_000 if quick else 100_000)
    args.latency_seconds = args.latency_seconds or (10.0 if quick else 30.0)
    if args.latency_warm_seconds is None:
        args.latency_warm_seconds = 5.0 if quick else 15.0
    args.mmr_rounds = args.mmr_rounds or (2 if quick else 4)
    args.scale_workers = (0 if quick else 2) if args.scale_workers is None else args.scale_workers
    args.stages = args.only or [s for s in STAGES if not (quick and s == "codeforces")]
    return args


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="stream-bench-"))
        self.config = self.tmp / "leagues.toml"
        self.config.write_text(CONFIG)
        self.workers: list[BenchWorker] = []
        self._baseline_env: dict[str, str] | None = None
        self.brokers: list[Broker] = []
        self.problems: dict[str, Any] = {}

    # -- plumbing ------------------------------------------------------------------------

    def broker(self) -> Broker:
        broker = start_broker(self.args.broker, self.tmp, len(self.brokers))
        self.brokers.append(broker)
        return broker

    def worker(self, broker: Broker, topics: Settings, app_id: str, name: str, config: Path | None = None,
               extra_args: list[str] = (), env: dict[str, str] | None = None) -> BenchWorker:
        data = self.tmp / f"data-{name}"
        worker = BenchWorker(broker.url, topics, app_id, data, config or self.config, self.tmp, name, extra_args=list(extra_args),
                        env=env)
        self.workers.append(worker)
        return worker

    def stop(self, worker: BenchWorker) -> int | None:
        code = worker.stop()
        self.problems[worker.name] = worker.log_problems()
        return code

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                self.stop(worker)
        for broker in self.brokers:
            broker.stop()

    def close(self) -> None:
        self.stop_all()
        if self.args.keep:
            log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- (1) and (2) ---------------------------------------------------------------------

    def throughput(self) -> dict[str, Any]:
        n = self.args.matches
        rng = random.Random(6)
        per_league = [two_player_league(f"elo-{k:02d}", 1000, n // LEAGUES + 1, rng) for k in range(LEAGUES)]
        events = [e for round_ in zip(*per_league) for e in round_][:n]  # interleaved, each league in order
        records = [orjson.dumps(e) for e in events]
        del events
        broker = self.broker()
        topics = stage_topics("tput")
        asyncio.run(create_topics(broker.url, topics))
        started = time.perf_counter()
        asyncio.run(publish(broker.bootstrap, topics.match_topic, records))
        log(f"published {n:,} matches in {time.perf_counter() - started:.1f} s")

        out = stage_topics("ceiling")
        asyncio.run(create_topics(broker.url, out))
        ceiling_s = asyncio.run(ceiling_loop(broker.bootstrap, topics.match_topic, out.changes_topic, n))
        ceiling = n / ceiling_s
        log(f"ceiling: {n:,} matches in {ceiling_s:.1f} s = {ceiling:,.0f} matches/s")

        quix = self.peer(quix_app, broker, topics.match_topic, n, "at-least-once")
        # Exactly-once needs transactions: Kafka has them, the embedded broker not.
        kafka = self.args.broker == "kafka"
        quix_eos = self.peer(quix_app, broker, topics.match_topic, n, "exactly-once") if kafka else None
        faust_eos = self.peer(faust_app, broker, topics.match_topic, n, "exactly-once") if kafka else None

        run = self.service(broker, topics, n, "service")
        service = run["matches_per_s"]
        log(f"service: {n:,} matches in {run['seconds']:.1f} s = {service:,.0f} matches/s "
            f"({service / ceiling:.3f} of the ceiling)")
        result = {
            "matches": n, "leagues": LEAGUES, "partitions": PARTITIONS,
            "ceiling_s": ceiling_s, "ceiling_matches_per_s": ceiling,
            "service_s": run.pop("seconds"), "service_matches_per_s": run.pop("matches_per_s"),
            "ratio_service_to_ceiling": service / ceiling,
            "quix": quix, "ratio_service_to_quix": service / quix["matches_per_s"] if "matches_per_s" in quix else None,
            "quix_exactly_once": quix_eos,
            "ratio_service_to_quix_exactly_once": (service / quix_eos["matches_per_s"]
                                                   if quix_eos and "matches_per_s" in quix_eos else None),
            "faust_exactly_once": faust_eos,
            "ratio_service_to_faust_exactly_once": (service / faust_eos["matches_per_s"]
                                                    if faust_eos and "matches_per_s" in faust_eos else None),
            **run, "broker_rss_bytes": vm_rss(broker.pid),
        }
        if not self.args.no_compiled:
            # The same worker on the per-match path compiled by mypyc (deploy/compile.py), same input.
            env = compiled_copy(self.tmp / "compiled")
            again = stage_topics("tput-compiled")
            asyncio.run(create_topics(broker.url, again))
            asyncio.run(publish(broker.bootstrap, again.match_topic, records))
            compiled = self.service(broker, again, n, "service-compiled", env)
            log(f"service, compiled: {n:,} matches in {compiled['seconds']:.1f} s = "
                f"{compiled['matches_per_s']:,.0f} matches/s ({compiled['matches_per_s'] / service:.2f} x plain Python)")
            compiled["ratio_to_ceiling"] = compiled["matches_per_s"] / ceiling
            compiled["ratio_to_plain"] = compiled["matches_per_s"] / service
            if "matches_per_s" in quix:
                compiled["ratio_to_quix"] = compiled["matches_per_s"] / quix["matches_per_s"]
            result["compiled"] = compiled
        if self.args.baseline:
            # The same worker as an earlier revision has it, same input: with (2) just before, a ratio.
            env = self.baseline_env()
            again = stage_topics("tput-baseline")
            asyncio.run(create_topics(broker.url, again))
            asyncio.run(publish(broker.bootstrap, again.match_topic, records))
            base = self.service(broker, again, n, "service-baseline", env)
            base["revision"] = self.args.baseline
            base["ratio_plain_to_baseline"] = service / base["matches_per_s"]
            log(f"service at {self.args.baseline}: {base['matches_per_s']:,.0f} matches/s; this tree "
                f"{base['ratio_plain_to_baseline']:.3f} x that")
            result["baseline"] = base
        if self.args.scale_workers > 1:
            scaled = self.scale_out(broker, records, n, self.args.scale_workers)
            if "matches_per_s" in scaled:
                scaled["ratio_to_ceiling"] = scaled["matches_per_s"] / ceiling
                scaled["ratio_to_one_worker"] = scaled["matches_per_s"] / service
            result["scaled"] = scaled
        broker.stop()
        return result

    def service(self, broker: Broker, topics: Settings, n: int, name: str,
                env: dict[str, str] | None = None) -> dict[str, Any]:
        """One worker through the n matches already on `topics`: from its first applied
        match to the last of the 2n rating-changed events read back."""
        collector, seen, last = read_changes(broker, topics.changes_topic)
        worker = self.worker(broker, topics, name, name, env=env)
        spy: dict[str, Any] = {}
        spy_thread = None
        phases = PhaseSampler(worker)
        try:
            worker.wait(lambda h: h["first_applied_at"], 300, "first applied match")
            phases.start()

            def progress() -> str:
                h = worker.health() or {}
                return f"{name}: {h.get('applied', '?'):,} applied, phase {h.get('phase')!r}, {len(seen):,} changes read"

            if self.args.profile > 0:
                wait_until(lambda: len(seen) > n // 5, n / 50 + 300, "20% of the changes", collector, worker, progress)
                output = self.tmp / f"{name}-profile.txt"
                spy_thread = threading.Thread(target=lambda: spy.update(profile(worker.pid, self.args.profile, output)))
                spy_thread.start()
            wait_until(lambda: len(seen) >= 2 * n, n / 50 + 600, f"{2 * n:,} rating-changed events", collector, worker,
                       progress)
            health = worker.health() or {}
        finally:
            collector.stop()
            agent_phases = phases.stop() if phases.is_alive() else {}
            if spy_thread is not None:
                spy_thread.join(self.args.profile + 90)
        seconds = last[0] - health["first_applied_at"]
        result = {
            "seconds": seconds, "matches_per_s": n / seconds, "compiled_modules": health.get("compiled_modules"),
            "worker_start_to_first_applied_s": health["first_applied_at"] - worker.started,
            "changes_read": collector.records, "distinct_changes": len(seen),
            "applied": health.get("applied"), "dead_letters": health.get("dead_letters"),
            "duplicates": health.get("duplicates"),
            "worker_peak_rss_bytes": vm_hwm(worker.pid), "data_dir_bytes": dir_size(worker.data_dir),
            "agent_phases_percent": agent_phases,
        }
        if spy:
            result["profile"] = spy
        self.stop(worker)
        return result

    def scale_out(self, broker: Broker, records: list[bytes], n: int,
                  count: int) -> dict[str, Any]:
        """The same matches through `count` workers of one group (each owns its share of the
        partitions, as a deployment scales out), on topics of their own: the input is
        published once every worker is ready; timed from the first match applied by any
        of them to the last change read back."""
        topics = stage_topics("scale")
        asyncio.run(create_topics(broker.url, topics))
        collector, seen, last = read_changes(broker, topics.changes_topic)
        workers = [self.worker(broker, topics, "scale", f"scale-{i}") for i in range(count)]

        def healths() -> list[dict[str, Any]]:
            return [worker.health() or {} for worker in workers]

        def shared() -> bool:
            found = healths()
            owned = [len(h.get("assigned_partitions") or ()) for h in found]
            return all(h.get("ready") for h in found) and all(owned) and sum(owned) == PARTITIONS

        pids = {"broker": [broker.pid], "workers": [worker.pid for worker in workers], "this process": [os.getpid()]}

        def cpu() -> dict[str, float]:
            return {name: sum(cpu_seconds(pid) or 0.0 for pid in group) for name, group in pids.items()}

        def running(condition: Callable[[], Any]) -> Callable[[], Any]:
            def check() -> Any:
                for worker in workers:
                    if worker.proc.poll() is not None:
                        raise RuntimeError(f"{worker.name} exited ({worker.proc.returncode}):\n{worker.log_tail()}")
                return condition()
            return check

        try:
            wait_until(running(shared), 300, f"{count} ready workers sharing the partitions", collector)
            cpu_before, wall_before = cpu(), time.perf_counter()
            asyncio.run(publish(broker.bootstrap, topics.match_topic, records))
            wait_until(running(lambda: len(seen) >= 2 * n), n / 50 + 600,
                       f"{2 * n:,} rating-changed events of {count} workers", collector,
                       progress=lambda: f"{count} workers: {len(seen):,} changes read")
            wall = time.perf_counter() - wall_before
            cores = {name: (used - cpu_before[name]) / wall for name, used in cpu().items()}
            found = healths()
            seconds = last[0] - min(h["first_applied_at"] for h in found if h.get("first_applied_at"))
            rate = n / seconds
        except Exception as exc:  # the scale-out figure is lost, not the stage
            log(f"{count} workers: FAILED: {exc}")
            return {"workers": count, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        finally:
            collector.stop()
            for worker in workers:
                self.stop(worker)
        shares = ", ".join(f"{h.get('applied') or 0:,}" for h in found)
        used = ", ".join(f"{name} {value:.2f}" for name, value in cores.items())
        log(f"{count} workers: {n:,} matches in {seconds:.1f} s = {rate:,.0f} matches/s "
            f"(applied {shares}; cores: {used})")
        return {"workers": count, "seconds": seconds, "matches_per_s": rate, "cores": cores,
                "applied": [h.get("applied") for h in found], "distinct_changes": len(seen)}

    def peer(self, app: Any, broker: Broker, input_topic: str, n: int, guarantee: str) -> dict[str, Any]:
        """The same job as a peer application (bench/quix_app.py, bench/faust_app.py) on the
        same input: from its first processed match to the last of its 2n events read back."""
        name = app.__name__.rsplit(".", 1)[-1].split("_")[0]  # quix, faust
        out = stage_topics(f"{name}-{guarantee}")
        asyncio.run(create_topics(broker.url, out))
        last = [0.0]
        count = [0]

        def on_event(event: dict[str, Any], now: float) -> None:
            count[0] += 1
            last[0] = now

        collector = Collector(broker.bootstrap, out.changes_topic, on_event, max_wait_ms=50)
        collector.start()
        try:
            ran = app.run(broker.bootstrap, input_topic, out.changes_topic, n, self.tmp / f"{name}-{guarantee}",
                          timeout=n / 100 + 300, guarantee=guarantee)
            wait_until(lambda: count[0] >= 2 * n, 120, f"{2 * n:,} events of the {name} app", collector)
        except Exception as exc:  # the comparison is lost, not the stage
            log(f"{name}, {guarantee}: FAILED: {str(exc)[:300]}")
            return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        finally:
            collector.stop()
        seconds = last[0] - ran["first_at"]
        rate = n / seconds
        log(f"{name}, {guarantee}: {n:,} matches in {seconds:.1f} s = {rate:,.0f} matches/s "
            f"(start to first match {ran['first_at'] - ran['started_at']:.0f} s)")
        found = {"seconds": seconds, "matches_per_s": rate, "events_read": count[0],
                 "processed_matches_per_s": n / (ran["last_at"] - ran["first_at"]),
                 "peak_rss_bytes": ran["peak_rss_bytes"], "start_to_first_s": ran["first_at"] - ran["started_at"]}
        if "output_transactional" in ran:  # Faust's decision for the output topic (bench/faust_app.py)
            found["output_transactional"] = ran["output_transactional"]
        return found

    # -- (3) and (4) ---------------------------------------------------------------------

    def latency_and_mmr(self) -> dict[str, Any]:
        # Each rate with a broker and worker of its own: the embedded broker slows as
        # it fills (docs/performance.md), so a run after another would be measured on
        # a slower broker than the one before it.
        result: dict[str, Any] = {}
        if "latency" in self.args.stages:
            for rate in self.args.latency_rates.split(","):
                result.setdefault("latency", {}).update(self.live([int(rate)], mmr=False)["latency"])
                if self.args.baseline:  # the same rate with the baseline's worker, right after
                    base = self.live([int(rate)], mmr=False, env=self.baseline_env())["latency"][rate]
                    base["revision"] = self.args.baseline
                    result.setdefault("latency_baseline", {})[rate] = base
            if self.args.before_fetch_wait:
                # The same with the input fetch held as long as before issue #18.
                before = {"fetch_wait": self.args.before_fetch_wait}
                for rate in self.args.before_rates.split(","):
                    before.update(self.live([int(rate)], mmr=False,
                                            extra_args=["--fetch-wait", str(self.args.before_fetch_wait)])["latency"])
                result["latency_before"] = before
        if "mmr" in self.args.stages:
            live = self.live([], mmr=True)
            result["mmr"] = live["mmr"]
            result["worker_peak_rss_bytes"] = live["worker_peak_rss_bytes"]
        return result

    def baseline_env(self) -> dict[str, str]:
        """The package as --baseline's revision has it (made once per run)."""
        if self._baseline_env is None:
            self._baseline_env = source_copy(self.args.baseline, self.tmp / "baseline")
        return self._baseline_env

    def live(self, rates: list[int], mmr: bool, extra_args: list[str] = (),
             env: dict[str, str] | None = None) -> dict[str, Any]:
        args = self.args
        broker = self.broker()
        topics = stage_topics("live")
        asyncio.run(create_topics(broker.url, topics))
        published: dict[str, float] = {}
        latencies: list[float] = []
        match_latencies: list[float] = []
        counts: dict[str, int] = {}
        expected: dict[str, int] = {}
        finished: dict[str, float] = {}

        def on_event(event: dict[str, Any], now: float) -> None:
            mid = event["match_id"]
            count = counts[mid] = counts.get(mid, 0) + 1
            sent = published.get(mid)
            if sent is not None:
                latencies.append(now - sent)
                if count == 2:
                    match_latencies.append(now - sent)
            if count == expected.get(mid):
                finished[mid] = now

        collector = Collector(broker.bootstrap, topics.changes_topic, on_event, max_wait_ms=5)
        collector.start()
        worker = self.worker(broker, topics, "live", f"live-{len(self.workers)}", extra_args=extra_args, env=env)
        result: dict[str, Any] = {}
        try:
            rng = random.Random(3)
            leagues = [two_player_league(f"lat-{k:02d}", 200, 100_000, rng) for k in range(LEAGUES)]
            stream = (e for round_ in zip(*leagues) for e in round_)
            warm = [next(stream) for _ in range(2000)]
            asyncio.run(publish(broker.bootstrap, topics.match_topic, warm))
            worker.wait(lambda h: h["applied"] >= len(warm), 300, "warm-up applied")
            log(f"latency: worker up and caught up ({time.time() - worker.started:.0f} s after start)")
            for rate in rates:
                warm_count = int(rate * args.latency_warm_seconds)
                if warm_count:
                    latencies.clear()
                    steady = [(e["league"].encode(), orjson.dumps(e), e["match_id"])
                              for e in (next(stream) for _ in range(warm_count))]
                    asyncio.run(steady_publish(broker.bootstrap, topics.match_topic, steady, rate, published))
                    wait_until(lambda: len(latencies) >= 2 * warm_count, 600, "the warm-up's changes", collector, worker)
                    warm = percentiles(latencies)
                    log(f"latency at {rate:,}/s, warming up for {args.latency_warm_seconds:.0f} s (not counted): "
                        f"p50 {warm['p50'] * 1000:.0f} ms, p99 {warm['p99'] * 1000:.0f} ms")
                latencies.clear()
                match_latencies.clear()
                count = int(rate * args.latency_seconds)
                steady = [(e["league"].encode(), orjson.dumps(e), e["match_id"]) for e in (next(stream) for _ in range(count))]
                started = time.time()
                cpu_before = cpu_seconds(broker.pid) or 0.0, cpu_seconds(worker.pid) or 0.0
                stages_before = batch_stages(worker)
                sent_s = asyncio.run(steady_publish(broker.bootstrap, topics.match_topic, steady, rate, published))
                wait_until(lambda: len(latencies) >= 2 * count, 600, "the steady matches' changes", collector, worker,
                           lambda: f"latency: {len(latencies):,} of {2 * count:,} changes read")
                took = time.time() - started
                stats = percentiles(latencies)
                result.setdefault("latency", {})[str(rate)] = {
                    "rate": rate, "seconds": args.latency_seconds, "matches": count,
                    "warm_up": {"seconds": args.latency_warm_seconds, "event_s": warm} if warm_count else None,
                    "publish_rate_achieved": count / sent_s,
                    "processed_rate": count / took,
                    "event_s": stats, "match_s": percentiles(match_latencies),
                    "by_tenth": [percentiles(part) for part in tenths(latencies)],
                    "broker_cores": ((cpu_seconds(broker.pid) or 0.0) - cpu_before[0]) / took,
                    "worker_cores": ((cpu_seconds(worker.pid) or 0.0) - cpu_before[1]) / took,
                    "batch_stages": stage_means(stages_before, batch_stages(worker)),
                }
                log(f"latency at {rate:,}/s: p50 {stats['p50'] * 1000:.0f} ms, p99 {stats['p99'] * 1000:.0f} ms, "
                    f"max {stats['max'] * 1000:.0f} ms; {describe_stages(result['latency'][str(rate)]['batch_stages'])}")
            if mmr:
                result["mmr"] = self.mmr_rounds(broker, topics, expected, finished, collector, worker)
            result["worker_peak_rss_bytes"] = vm_hwm(worker.pid)
        finally:
            collector.stop()
        self.stop(worker)
        broker.stop()
        return result

    def mmr_rounds(self, broker: Broker, topics: Settings, expected: dict[str, int], finished: dict[str, float],
                   collector: Collector, worker: BenchWorker) -> dict[str, Any]:
        out = {}
        for size in (int(s) for s in self.args.mmr_sizes.split(",")):
            league = f"mmr-{size}"
            rounds = list(multi_player_league(league, size, self.args.mmr_rounds, size, random.Random(size)))
            seconds = []
            for event in rounds:
                mid = event["match_id"]
                expected[mid] = size
                record = orjson.dumps(event)
                started = time.time()
                asyncio.run(publish(broker.bootstrap, topics.match_topic, [record]))
                wait_until(lambda: mid in finished, 300, f"{league} round {mid}", collector, worker)
                seconds.append(finished[mid] - started)
                log(f"elo-mmr round of {size:,} ({len(record) / 1e3:.0f} kB): {seconds[-1]:.2f} s")
            health = worker.health() or {}
            out[str(size)] = {"participants": size, "rounds_s": seconds, "first_round_s": seconds[0],
                              "later_rounds_median_s": sorted(seconds[1:])[len(seconds[1:]) // 2] if len(seconds) > 1 else None,
                              "dead_letters": health.get("dead_letters")}
        return out

    # -- (5) and (6) ---------------------------------------------------------------------

    def codeforces(self) -> dict[str, Any]:
        args = self.args
        if not CODEFORCES.is_file():
            log(f"codeforces: {CODEFORCES} is absent: skipped")
            return {"skipped": f"{CODEFORCES} absent"}
        with gzip.open(CODEFORCES, "rb") as f:
            lines = [line.rstrip(b"\n") for line in f]
        if args.codeforces_contests:
            lines = lines[: args.codeforces_contests]
        league = orjson.loads(lines[0])["league"]
        broker = self.broker()
        topics = stage_topics("cf")
        asyncio.run(create_topics(broker.url, topics))
        worker = self.worker(broker, topics, "cf", "codeforces", CODEFORCES_CONFIG)
        worker.wait(lambda h: h["ready"], 300, "ready")
        started = time.time()
        limit = args.broker_rss_limit_gb * GIB
        chunk = args.codeforces_chunk or len(lines)
        stopped = None
        target = 0

        def done(h: dict[str, Any]) -> bool:
            nonlocal stopped
            if (vm_rss(broker.pid) or 0) > limit:
                stopped = f"broker RSS passed {args.broker_rss_limit_gb} GiB"
                return True
            return h["applied"] + h["dead_letters"] >= target

        def progress(h: dict[str, Any]) -> str:
            return (f"{h['applied']:,} of {len(lines):,} contests applied, {time.time() - started:.0f} s; "
                    f"worker RSS {(vm_rss(worker.pid) or 0) / GIB:.2f} GiB, broker RSS {(vm_rss(broker.pid) or 0) / GIB:.2f} GiB")

        # `--codeforces-chunk` contests at a time, each chunk applied before the next (0: all at once).
        health: dict[str, Any] = {}
        for first in range(0, len(lines), chunk):
            target = min(first + chunk, len(lines))
            asyncio.run(publish(broker.bootstrap, topics.match_topic, lines[first:target]))
            if first == 0:
                log(f"codeforces: {target:,} contests ({sum(map(len, lines[:target])) / 1e6:.0f} MB) published in "
                    f"{time.time() - started:.1f} s")
            try:
                health = worker.wait(done, started + args.codeforces_timeout - time.time(), "contests applied", progress,
                                     every=30, interval=0.5)
            except TimeoutError:
                stopped, health = f"timeout after {args.codeforces_timeout:.0f} s", worker.health() or {}
            if stopped:
                break
            if chunk < len(lines) and (first // chunk) % 10 == 9:
                log(f"  codeforces: {progress(health)}")
        ingest_s = time.time() - started
        log(f"codeforces: {health.get('applied'):,} contests applied in {ingest_s:.0f} s" + (f" (stopped: {stopped})" if stopped else ""))
        result: dict[str, Any] = {
            "contests": len(lines), "applied": health.get("applied"), "dead_letters": health.get("dead_letters"),
            "ingest_s": ingest_s, "stopped_early": stopped, "published_in_chunks_of": chunk,
            "first_applied_to_done_s": time.time() - health["first_applied_at"] if health.get("first_applied_at") else None,
        }
        _, info = worker.get(f"/leagues/{league}", timeout=60)
        result["players"] = info.get("players") if isinstance(info, dict) else None
        result["leaderboard"] = {str(n): leaderboard_latency(worker, league, n) for n in (100, 10_000)}
        for n, stats in result["leaderboard"].items():
            log(f"leaderboard limit={n}: p50 {stats.get('p50', 0) * 1000:.0f} ms, p99 {stats.get('p99', 0) * 1000:.0f} ms "
                f"({stats.get('count')} requests, {result['players']} players)")
        result["worker_peak_rss_bytes"] = vm_hwm(worker.pid)
        result["data_dir_bytes"] = dir_size(worker.data_dir)
        result["broker_rss_bytes"] = vm_rss(broker.pid)
        self.stop(worker)
        broker.stop()
        return result


def read_changes(broker: Broker, topic: str) -> tuple[Collector, set[str], list[float]]:
    """A started reader of rating-changed events: the distinct event ids read so far,
    and when the last one arrived ([seconds])."""
    seen: set[str] = set()
    last = [0.0]

    def on_event(event: dict[str, Any], now: float) -> None:
        seen.add(event["event_id"])
        last[0] = now

    collector = Collector(broker.bootstrap, topic, on_event, max_wait_ms=50)
    collector.start()
    return collector, seen, last


async def ceiling_loop(bootstrap: str, topic: str, out_topic: str, n: int) -> float:
    """Consume, rate and build the events as the worker does (bench/elo_job.py: per-league
    state, the worker's event bytes per participant), produce them keyed by league as the
    worker does (Kafka's partitioner, whole record batches of up to 512 KiB per partition),
    commit after each fetched batch; seconds from the first record to the last commit."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"ceiling-{time.time_ns()}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=False,
                                max_batch_size=512 * 1024, max_request_size=2 * 1024 * 1024)
    await consumer.start()
    await producer.start()
    partitions = len(await producer.partitions_for(out_topic))
    leagues: dict[bytes, dict[str, list]] = {}
    done, started = 0, None
    try:
        while done < n:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            if started is None and batches:
                started = time.perf_counter()
            outputs: dict[int, list[tuple[bytes, bytes]]] = {}
            for records in batches.values():
                for record in records:
                    players = leagues.get(record.key)
                    if players is None:
                        players = leagues[record.key] = {}
                    out = outputs.setdefault(key_partition(record.key, partitions), [])
                    out += [(record.key, value) for value in elo_job.rate(players, orjson.loads(record.value))]
                    done += 1
            acks = []
            for partition, records in outputs.items():
                acks += await send_batches(producer, out_topic, partition, records)  # the worker's way
            await asyncio.gather(*acks)
            if batches:
                await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()
    return time.perf_counter() - (started or time.perf_counter())


async def steady_publish(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, str]], rate: int,
                         published: dict[str, float]) -> float:
    """Send at `rate` records/s (a chunk every 10 ms), noting each match's send time; returns seconds taken."""

    def note(i: int) -> None:
        published[records[i][2]] = time.time()

    return await send_paced(bootstrap, topic, ((key, value) for key, value, _ in records), rate, on_send=note)


def tenths(values: list[float]) -> list[list[float]]:
    """The values in ten consecutive parts (in arrival order)."""
    n = len(values)
    return [values[n * k // 10:n * (k + 1) // 10] for k in range(10)]


def describe_stages(stages: dict[str, Any]) -> str:
    """Mean time of each batch stage (ratings_batch_stage_seconds), in the order a batch goes through them."""
    order = ("waiting", "applying", "publishing", "checkpointing")
    said = [f"{stage} {stages[stage]['mean_s'] * 1e3:.1f} ms" for stage in order if stage in stages]
    batches = stages.get("applying", {}).get("batches")
    return (", ".join(said) + (f" (means over {batches:,} batches)" if batches else "")) if said else "no batches"


def leaderboard_latency(worker: BenchWorker, league: str, limit: int, most: int = 20, budget: float = 90.0) -> dict[str, Any]:
    times = []
    deadline = time.monotonic() + budget
    while len(times) < most and time.monotonic() < deadline:
        started = time.perf_counter()
        status, body = worker.get(f"/leagues/{league}/leaderboard?limit={limit}", timeout=120)
        elapsed = time.perf_counter() - started
        if status != 200:
            return {"error": f"status {status}: {str(body)[:200]}", "count": len(times)}
        times.append(elapsed)
    return percentiles(times)


# -- the table -------------------------------------------------------------------------------


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def table(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = [(f"{name}: FAILED", "-", str(r["error"] if isinstance(r, dict) else r).splitlines()[0][:100])
            for name, r in results.items() if name.endswith("error") or (isinstance(r, dict) and "error" in r)]
    results = {name: r for name, r in results.items() if not (name.endswith("error") or (isinstance(r, dict) and "error" in r))}
    t = results.get("throughput")
    if t:
        rows += [
            (f"(1) ceiling: aiokafka consume/Elo/produce/commit, {t['matches']:,} matches", f"{t['ceiling_matches_per_s']:,.0f} matches/s", "baseline"),
            ("(2) service: one worker, first applied to last change", f"{t['service_matches_per_s']:,.0f} matches/s",
             f"{t['ratio_service_to_ceiling']:.3f} of (1)"),
            ("    the same job in Quix Streams, at-least-once (bench/quix_app.py)",
             f"{t['quix']['matches_per_s']:,.0f} matches/s" if "matches_per_s" in t["quix"] else "FAILED",
             f"service {t['ratio_service_to_quix']:.2f} x Quix" if t.get("ratio_service_to_quix") else ""),
            ("    worker start to first applied match", f"{t['worker_start_to_first_applied_s']:.1f} s", ""),
        ]
        eos = t.get("quix_exactly_once")
        if eos:
            rows.append(("    the same job in Quix Streams, exactly-once (Kafka only)",
                         f"{eos['matches_per_s']:,.0f} matches/s" if "matches_per_s" in eos else "FAILED",
                         f"service {t['ratio_service_to_quix_exactly_once']:.2f} x Quix exactly-once"
                         if t.get("ratio_service_to_quix_exactly_once") else str(eos.get("error", ""))[:100]))
        faust = t.get("faust_exactly_once")
        if faust:
            rows.append(("    the same job in Faust, processing_guarantee=exactly_once (bench/faust_app.py)",
                         f"{faust['matches_per_s']:,.0f} matches/s" if "matches_per_s" in faust else "FAILED",
                         (f"service {t['ratio_service_to_faust_exactly_once']:.2f} x Faust; its output topic "
                          f"{'in' if faust.get('output_transactional') else 'outside'} the transactions")
                         if t.get("ratio_service_to_faust_exactly_once") else str(faust.get("error", ""))[:100]))
        compiled = t.get("compiled")
        if compiled:
            rows.append(("    the service compiled by mypyc (deploy/compile.py)", f"{compiled['matches_per_s']:,.0f} matches/s",
                         f"{compiled['ratio_to_ceiling']:.3f} of (1), {compiled['ratio_to_plain']:.2f} x plain Python"
                         + (f", {compiled['ratio_to_quix']:.2f} x Quix" if "ratio_to_quix" in compiled else "")))
        base = t.get("baseline")
        if base:
            rows.append((f"    the service as revision {base['revision']} has it", f"{base['matches_per_s']:,.0f} matches/s",
                         f"this tree {base['ratio_plain_to_baseline']:.3f} x that"))
        scaled = t.get("scaled")
        if scaled:
            label = f"    the service with {scaled['workers']} workers (one group, the partitions shared)"
            rows.append((label, f"{scaled['matches_per_s']:,.0f} matches/s",
                         f"{scaled['ratio_to_ceiling']:.3f} of (1), {scaled['ratio_to_one_worker']:.2f} x one worker")
                        if "matches_per_s" in scaled else (label, "FAILED", str(scaled.get("error", ""))[:100]))
        rows += [
            ("(6) worker peak RSS / data dir after (2)", f"{_mb(t['worker_peak_rss_bytes'])} / {_mb(t['data_dir_bytes'])}", ""),
        ]
    for lat in (results.get("latency") or {}).values():
        e = lat["event_s"]
        rows.append((f"(3) latency at {lat['rate']:,}/s for {lat['seconds']:.0f} s (publish to change)",
                     f"p50 {e['p50'] * 1e3:,.0f} ms, p99 {e['p99'] * 1e3:,.0f} ms, max {e['max'] * 1e3:,.0f} ms",
                     f"sent {lat['publish_rate_achieved']:,.0f}/s, done {lat['processed_rate']:,.0f}/s; "
                     f"p50 first tenth {lat['by_tenth'][0]['p50'] * 1e3:,.0f} ms, last {lat['by_tenth'][-1]['p50'] * 1e3:,.0f} ms; "
                     f"cores: broker {lat['broker_cores']:.2f}, worker {lat['worker_cores']:.2f}"))
        if lat.get("warm_up"):
            w = lat["warm_up"]["event_s"]
            rows.append((f"    the {lat['warm_up']['seconds']:.0f} s before it (broker and worker just started)",
                         f"p50 {w['p50'] * 1e3:,.0f} ms, p99 {w['p99'] * 1e3:,.0f} ms, max {w['max'] * 1e3:,.0f} ms", ""))
        if lat.get("batch_stages"):
            rows.append(("    where the time goes (the worker's batches)", describe_stages(lat["batch_stages"]), ""))
        base = (results.get("latency_baseline") or {}).get(str(lat["rate"]))
        if base:
            b = base["event_s"]
            rows.append((f"    the same at {base['revision']} (baseline, same run)",
                         f"p50 {b['p50'] * 1e3:,.0f} ms, p99 {b['p99'] * 1e3:,.0f} ms, max {b['max'] * 1e3:,.0f} ms",
                         f"this tree: p50 {e['p50'] / b['p50']:.2f} x, p99 {e['p99'] / b['p99']:.2f} x that; "
                         f"{describe_stages(base.get('batch_stages') or {})}"))
    before = results.get("latency_before") or {}
    for key, lat in before.items():
        if key == "fetch_wait":
            continue
        e = lat["event_s"]
        rows.append((f"    the same with the input fetch held {before['fetch_wait']} s (before #18)",
                     f"p50 {e['p50'] * 1e3:,.0f} ms, p99 {e['p99'] * 1e3:,.0f} ms, max {e['max'] * 1e3:,.0f} ms",
                     f"at {lat['rate']:,}/s; p50 first tenth {lat['by_tenth'][0]['p50'] * 1e3:,.0f} ms, "
                     f"last {lat['by_tenth'][-1]['p50'] * 1e3:,.0f} ms; cores: broker {lat['broker_cores']:.2f}, "
                     f"worker {lat['worker_cores']:.2f}"))
    for size, m in (results.get("mmr") or {}).items():
        later = m["later_rounds_median_s"]
        rows.append((f"(4) elo-mmr round of {int(size):,} (publish to last change)",
                     f"first {m['first_round_s']:.2f} s" + (f", later median {later:.2f} s" if later is not None else ""),
                     f"{len(m['rounds_s'])} rounds"))
    cf = results.get("codeforces")
    if cf and "skipped" not in cf:
        rows.append((f"(5) Codeforces ingest, {cf['applied']:,} of {cf['contests']:,} contests", f"{cf['ingest_s']:,.0f} s",
                     cf["stopped_early"] or ""))
        for limit, s in cf["leaderboard"].items():
            value = f"p50 {s['p50'] * 1e3:,.0f} ms, p99 {s['p99'] * 1e3:,.0f} ms" if "p50" in s else s.get("error", "-")
            rows.append((f"    leaderboard limit={limit} ({cf['players']:,} players)", value, f"{s.get('count')} requests"))
        rows.append(("(6) worker peak RSS / data dir after (5)", f"{_mb(cf['worker_peak_rss_bytes'])} / {_mb(cf['data_dir_bytes'])}",
                     f"broker RSS {_mb(cf['broker_rss_bytes'])}"))
    elif cf:
        rows.append(("(5) Codeforces", "skipped", cf["skipped"]))
    return rows


def print_table(rows: list[tuple[str, str, str]]) -> None:
    width = [max(len(row[k]) for row in rows) for k in range(3)]
    for row in rows:
        print(f"{row[0]:<{width[0]}}  {row[1]:>{width[1]}}  {row[2]}")


def run(args: argparse.Namespace | list[str] | None = None) -> dict[str, Any]:
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args or [])
    bench = Bench(args)
    results: dict[str, Any] = {"quick": args.quick}
    log(f"stream bench: stages {', '.join(args.stages)}; work directory {bench.tmp}")
    stages = [("throughput", bench.throughput), ("live", bench.latency_and_mmr), ("codeforces", bench.codeforces)]
    try:
        for name, stage in stages:
            if name not in args.stages and not (name == "live" and {"latency", "mmr"} & set(args.stages)):
                continue
            try:
                results[name] = stage()
            except Exception as exc:  # one stage failing (a worker died, a timeout) does not lose the others
                log(f"{name}: FAILED: {exc}")
                results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
                bench.stop_all()
        live = results.pop("live", {})
        results.update({("live_error" if k == "error" else k): v for k, v in live.items()
                        if k in ("latency", "latency_before", "latency_baseline", "mmr", "error")})
        results["live_worker_peak_rss_bytes"] = live.get("worker_peak_rss_bytes")
    finally:
        results["worker_log_problems"] = bench.problems
        bench.close()
    rows = table(results)
    if rows:
        print_table(rows)
    for name, found in bench.problems.items():
        if found["count"]:
            kinds = "; ".join(f"{n} x {kind.strip()}" for kind, n in list(found["kinds"].items())[:3])
            print(f"worker log {name}: {found['count']} warnings/errors: {kinds}")
    return results


def main(argv: list[str] | None = None) -> int:
    return command_main(parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
