"""Recovery: how fast a worker is applying again after a crash.

(a) One `elo` league of P players after M matches; the worker SIGKILLed and
    restarted on its data directory: start to ready, start to its first applied
    match, changelog records read.
(b) The same on an empty data directory: everything comes back from the changelog.
    Baseline, same run: a plain aiokafka consumer reading the whole changelog
    topic (the broker's own speed); the take-up's records/s is put against it.
(c) Failover: two workers share 8 partitions under a steady stream, each the
    standby of the other's; one is SIGKILLed: seconds until every partition it
    owned is applying again on the survivor, and the survivor's memory.

Workers run with the shipped defaults (a 6 s session timeout, 1 s heartbeats).
A worker restarted on its data directory removes the killed one's member from
the group at once (stream/membership.py); a new one waits for the dead
member's session to expire first.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from concurrent.futures import ThreadPoolExecutor
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from stream_app.settings import DEFAULTS, Settings

from .streamtools import (PARTITIONS, BenchWorker, Broker, add_broker_flag, compiled_copy, create_topics, dir_size, log,
                          publish, send_paced, stage_topics, start_broker, vm_hwm)

LEAGUE = "big"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.recovery_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", help="players:matches for (a) and (b), comma separated "
                   "(default 200000:300000,1000000:600000; quick 20000:30000)")
    p.add_argument("--quick", action="store_true", help="small sizes and a short failover")
    p.add_argument("--failover-rate", type=int, default=2000, help="matches/s during (c) (default %(default)s)")
    p.add_argument("--compiled", action="store_true",
                   help="workers on the per-match path compiled by mypyc (deploy/compile.py; needs a C compiler)")
    add_broker_flag(p)
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    args = p.parse_args(argv)
    args.sizes = args.sizes or ("20000:30000" if args.quick else "200000:300000,1000000:600000")
    return args


def league_matches(players: int, matches: int, prefix: str, rng: random.Random) -> list[bytes]:
    """`matches` two-player matches in one league: the first players/2 bring every player in, the rest pair at random."""
    events = []
    for j in range(matches):
        a, b = (2 * j, 2 * j + 1) if 2 * j + 1 < players else rng.sample(range(players), 2)
        doc = {"match_id": f"{prefix}{j}", "league": LEAGUE,
               "participants": [{"player": f"p{a}", "rank": 1}, {"player": f"p{b}", "rank": 2}]}
        events.append(orjson.dumps(doc))
    return events


async def consume_all(bootstrap: str, topic: str) -> tuple[int, float, int]:
    """Read every record of a topic with a plain consumer (large fetches, no processing):
    (records, seconds, the sum of the partitions' end offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from stream_app.stream.intake import RANGE_FETCH

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **RANGE_FETCH)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the embedded broker reports an end up to one record batch short
        count, idle, started = 0, 0, time.perf_counter()
        last = started
        while idle < 3:  # three empty fetches in a row: the end (the broker under-reports ends)
            batches = await consumer.getmany(timeout_ms=300)
            got = sum(len(records) for records in batches.values())
            count += got
            if got:
                idle, last = 0, time.perf_counter()
            else:
                idle += 1
        return count, last - started, sum(ends.values())
    finally:
        await consumer.stop()


class RecoveryBench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="recovery-bench-"))
        self.workers: list[BenchWorker] = []
        self.brokers: list[Broker] = []
        # --compiled: every worker runs the per-match path compiled by mypyc (deploy/compile.py)
        self.env = compiled_copy(self.tmp / "compiled") if args.compiled else None

    def broker(self) -> Broker:
        broker = start_broker(self.args.broker, self.tmp, len(self.brokers))
        self.brokers.append(broker)
        return broker

    def worker(self, broker: Broker, topics: Settings, name: str, data: str) -> BenchWorker:
        worker = BenchWorker(broker.url, topics, topics.app_id, self.tmp / data, None, self.tmp, name, env=self.env)
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.stop()
        for broker in self.brokers:
            broker.stop()
        if not self.args.keep:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- (a) and (b) ---------------------------------------------------------------------

    def restart(self, players: int, matches: int) -> dict[str, Any]:
        broker = self.broker()
        topics = stage_topics(f"rec{players}")
        asyncio.run(create_topics(broker.url, topics))
        rng = random.Random(players)
        asyncio.run(publish(broker.bootstrap, topics.match_topic, league_matches(players, matches, "m", rng)))
        builder = self.worker(broker, topics, f"rec{players}-build", f"rec{players}-a")
        health = builder.wait(lambda h: h["applied"] >= matches, matches / 500 + 600, f"{matches:,} applied",
                              lambda h: f"{players:,} players: building, {h['applied']:,} of {matches:,} applied")
        build_s = time.time() - health["first_applied_at"]
        log(f"{players:,} players: {matches:,} matches applied in {build_s:.0f} s")
        builder.kill()
        changelog = topics.changelog_topic
        read, read_s, records = asyncio.run(consume_all(broker.bootstrap, changelog))
        log(f"{players:,} players: the changelog holds {read:,} records; a plain consumer reads them in {read_s:.2f} s "
            f"({read / read_s:,.0f}/s)")
        result: dict[str, Any] = {"players": players, "matches": matches, "build_s": build_s,
                                  "changelog_records": read, "changelog_end_offsets": records,
                                  "baseline_consume_s": read_s, "baseline_records_per_s": read / read_s,
                                  "data_dir_bytes": dir_size(builder.data_dir)}
        for case, data in (("same_dir", f"rec{players}-a"), ("empty_dir", f"rec{players}-b")):
            # A few new matches wait in the topic: the restarted worker's first applied match.
            asyncio.run(publish(broker.bootstrap, topics.match_topic, league_matches(players, 5, f"{case}-", rng)))
            worker = self.worker(broker, topics, f"rec{players}-{case}", data)
            ready = worker.wait(lambda h: h["ready"], 600, "ready", interval=0.05)
            ready_s = time.time() - worker.started
            health = worker.wait(lambda h: h["applied"] >= 5, 300, "the new matches applied", interval=0.05)
            first_s = health["first_applied_at"] - worker.started
            _, league = worker.get(f"/leagues/{LEAGUE}", timeout=60)
            taken_up, take_up_s = ready["take_up_records"], ready["take_up_seconds"]
            row = {"start_to_ready_s": ready_s, "start_to_first_applied_s": first_s, "take_up_s": take_up_s,
                   "take_up_records": taken_up, "take_up_records_per_s": taken_up / take_up_s if take_up_s else None,
                   "ratio_to_plain_consumer": (taken_up / take_up_s) / (read / read_s) if take_up_s else None,
                   "players_served": league.get("players") if isinstance(league, dict) else None,
                   "peak_rss_bytes": vm_hwm(worker.pid)}
            log(f"{players:,} players, restart on the {case.replace('_', ' ')}: ready {ready_s:.1f} s, first match "
                f"{first_s:.1f} s after start; take-up {take_up_s:.2f} s for {taken_up:,} records"
                + (f" ({row['take_up_records_per_s']:,.0f}/s, {row['ratio_to_plain_consumer']:.2f} of the plain consumer)"
                   if take_up_s else ""))
            result[case] = row
            worker.kill()
        broker.stop()
        return result

    # -- (c) -----------------------------------------------------------------------------

    def failover(self) -> dict[str, Any]:
        broker = self.broker()
        topics = stage_topics("failover")
        asyncio.run(create_topics(broker.url, topics))
        seconds = 40.0 if self.args.quick else 90.0
        rng = random.Random(3)
        count = int(self.args.failover_rate * seconds)
        records = []
        for j in range(count):
            league = f"f{j % 40:02d}"
            a, b = rng.sample(range(2000), 2)
            doc = {"match_id": f"m{j}", "league": league,
                   "participants": [{"player": f"p{a}", "rank": 1}, {"player": f"p{b}", "rank": 2}]}
            records.append((league.encode(), orjson.dumps(doc)))
        a, b = self.worker(broker, topics, "fo-a", "fo-a"), self.worker(broker, topics, "fo-b", "fo-b")

        def split(h_a: dict, h_b: dict) -> bool:
            return bool(h_a and h_b and h_a["ready"] and h_b["ready"] and h_a["assigned_partitions"]
                        and set(h_b["standby_partitions"]) == set(h_a["assigned_partitions"]))

        deadline = time.monotonic() + 180
        while not split(a.health() or {}, b.health() or {}):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the two workers never split the partitions:\n{a.log_tail()}\n{b.log_tail()}")
            time.sleep(0.5)
        # Paced over `seconds` in a thread of its own; its result raises what failed in it.
        pool = ThreadPoolExecutor(1, thread_name_prefix="failover-publisher")
        publisher = pool.submit(asyncio.run,
                                send_paced(broker.bootstrap, topics.match_topic, records, self.args.failover_rate))
        pool.shutdown(wait=False)
        time.sleep(seconds / 3)
        owned = set(a.health()["assigned_partitions"])
        a.kill()
        killed = time.time()
        health = b.wait(lambda h: h["ready"] and set(h["assigned_partitions"]) == set(range(PARTITIONS)), 120,
                        "every partition on the survivor", interval=0.05)
        took = time.time() - killed
        applied_then = health["applied"]
        b.wait(lambda h: h["applied"] > applied_then, 60, "matches applied after the takeover", interval=0.05)
        applying = time.time() - killed
        publisher.result(seconds + 60)
        result = {"rate": self.args.failover_rate, "owned_by_killed": sorted(owned), "kill_to_owning_s": took,
                  "kill_to_applying_s": applying, "take_up_s": health["take_up_seconds"],
                  "take_up_records": health["take_up_records"], "survivor_peak_rss_bytes": vm_hwm(b.pid),
                  "session_timeout_s": DEFAULTS.session_timeout}
        log(f"failover at {self.args.failover_rate:,}/s: partitions {sorted(owned)} owned again after {took:.1f} s, "
            f"applying after {applying:.1f} s (take-up {health['take_up_seconds']:.2f} s, "
            f"{health['take_up_records']:,} changelog records read); survivor peak RSS "
            f"{(vm_hwm(b.pid) or 0) / 2**20:.0f} MiB")
        b.stop()
        broker.stop()
        return result


def run(args: argparse.Namespace | list[str] | None = None) -> dict[str, Any]:
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args or [])
    bench = RecoveryBench(args)
    results: dict[str, Any] = {"quick": args.quick, "restarts": []}
    try:
        for size in args.sizes.split(","):
            players, matches = (int(x) for x in size.split(":"))
            results["restarts"].append(bench.restart(players, matches))
        results["failover"] = bench.failover()
    finally:
        bench.close()
    for r in results["restarts"]:
        for case in ("same_dir", "empty_dir"):
            c = r[case]
            print(f"{r['players']:>9,} players, {case:>9}: ready {c['start_to_ready_s']:5.1f} s, first match "
                  f"{c['start_to_first_applied_s']:5.1f} s, take-up {c['take_up_s']:6.2f} s, "
                  f"{c['take_up_records']:>9,} records" + (f", {c['ratio_to_plain_consumer']:.2f} of a plain consumer"
                                                             f" ({r['baseline_records_per_s']:,.0f}/s)"
                                                             if c["ratio_to_plain_consumer"] else ""))
    f = results["failover"]
    print(f"failover: applying again {f['kill_to_applying_s']:.1f} s after the kill (session timeout {DEFAULTS.session_timeout:.0f} s)")
    return results


def main(argv: list[str] | None = None) -> int:
    import json

    results = run(parse_args(argv))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
