"""Tools for the stream benchmark: worker processes, publishing, a collector of
rating-changed events running in its own thread, process memory and sizes.

Everything runs against an embedded broker (stream_app.broker.EmbeddedBroker)
started by the benchmark itself; workers are `ratings worker` child processes in
their own process groups, stopped by group (stream_app.processes.WorkerProcess);
match results are published by the package's client (stream_app.client), and a
stage's topics are a worker's Settings.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from itertools import islice
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

import orjson

from stream_app.broker import EmbeddedBroker
from stream_app.client import RatingsClient
from stream_app.kafka_broker import KafkaCluster
from stream_app.processes import WorkerProcess, free_port
from stream_app.settings import DEFAULTS, Settings

PARTITIONS = 8
ROOT = Path(__file__).resolve().parent.parent


def compiled_copy(directory: Path) -> dict[str, str]:
    """The per-match path compiled by mypyc into `directory` (deploy/compile.py): the
    environment in which a process runs it (the benchmarks' own modules after it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile", ROOT / "deploy" / "compile.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    started = time.monotonic()
    script.build(directory)
    log(f"compiled {len(script.MODULES)} modules with mypyc in {time.monotonic() - started:.0f} s")
    # PYTHONSAFEPATH: a process started in the checkout does not put it first on the path.
    return {"PYTHONPATH": f"{directory}{os.pathsep}{ROOT}", "PYTHONSAFEPATH": "1"}


def source_copy(revision: str, directory: Path) -> dict[str, str]:
    """The package as git `revision` has it, in `directory`: the environment in which a
    process runs it (the benchmarks' own modules after it)."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", revision, "stream_app", "schemas"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    shutil.move(str(directory / "schemas"), str(directory / "stream_app" / "schemas"))  # where an installed package has them
    log(f"the package at {revision} in {directory}")
    return {"PYTHONPATH": f"{directory}{os.pathsep}{ROOT}", "PYTHONSAFEPATH": "1"}


BROKERS = ("embedded", "kafka")
Broker = EmbeddedBroker | KafkaCluster


def add_broker_flag(parser: Any) -> None:
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="each stage's broker: the embedded one (Tansu, in memory) or one Apache Kafka node "
                        "(needs Java 17 and Maven; default %(default)s)")


def start_broker(kind: str, directory: Path, index: int) -> Broker:
    """A running broker of `kind` ("embedded": Tansu, in memory; "kafka": one Apache Kafka
    node, stream_app/kafka_broker.py) for a stage; its log and data under `directory`."""
    if kind == "kafka":
        return KafkaCluster(data_dir=directory / f"kafka-{index}").start()
    return EmbeddedBroker(log=directory / f"broker-{index}.log").start()


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


async def publish(broker: str, topic: str, events: Iterable[dict[str, Any] | bytes]) -> int:
    """Match results (or commands: dicts or JSON) onto `topic` as an application publishes
    them, with the package's client: validated, keyed by league, pipelined. Returns how
    many were sent; an invalid one is an error of the benchmark."""
    client = RatingsClient(broker, match_topic=topic)
    await client.start(ensure_topics=False)
    try:
        sent, rejected = await client.publish_many(events)
    finally:
        await client.stop()
    if rejected:
        number, error = rejected[0]
        raise ValueError(f"{len(rejected):,} invalid events, the first (number {number}): {error}")
    return sent


async def send_paced(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]], rate: int,
                     chunks_per_s: int = 100, linger_ms: int = 0, on_send: Callable[[int], None] | None = None,
                     stop: threading.Event | None = None) -> float:
    """Send keyed records at `rate` a second, in `chunks_per_s` chunks a second on a
    fixed schedule, until they run out or `stop` is set; on_send(i) is called just
    before record i goes out. Returns the seconds taken."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=linger_ms, enable_idempotence=False)
    await producer.start()
    loop = asyncio.get_running_loop()
    chunk = max(1, rate // chunks_per_s)
    source = iter(records)
    pending: list[asyncio.Future] = []
    sent = 0
    try:
        start = loop.time()
        while stop is None or not stop.is_set():
            part = list(islice(source, chunk))
            if not part:
                break
            delay = start + sent / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            for key, value in part:
                if on_send is not None:
                    on_send(sent)
                pending.append(await producer.send(topic, value, key=key))
                sent += 1
            if len(pending) > 5 * chunk:
                await asyncio.gather(*pending[:-chunk])
                pending = pending[-chunk:]
        await asyncio.gather(*pending)
        return loop.time() - start
    finally:
        await producer.stop()


def stage_topics(prefix: str) -> Settings:
    """A stage's own topics, the shipped names after `prefix.` (tput.match-results, ...),
    with `prefix` as the consumer group."""
    return Settings(partitions=PARTITIONS, app_id=prefix, match_topic=f"{prefix}.{DEFAULTS.match_topic}",
                    changes_topic=f"{prefix}.{DEFAULTS.changes_topic}", dlq_topic=f"{prefix}.{DEFAULTS.dlq_topic}")


def topic_flags(topics: Settings) -> list[str]:
    """The `ratings worker` flags of these topics."""
    return ["--match-topic", topics.match_topic, "--changes-topic", topics.changes_topic,
            "--dlq-topic", topics.dlq_topic]


async def create_topics(broker_url: str, topics: Settings) -> None:
    """The worker's topics with 8 partitions (the input must exist before anything is published)."""
    client = RatingsClient(broker_url, match_topic=topics.match_topic, changes_topic=topics.changes_topic,
                           dlq_topic=topics.dlq_topic, partitions=PARTITIONS)
    await client.ensure_topics(PARTITIONS, extra=[topics.forward_topic])


# -- processes ---------------------------------------------------------------------------


def vm_hwm(pid: int) -> int | None:
    """Peak resident set size of a process in bytes (VmHWM), None if it is gone."""
    return _status_field(pid, "VmHWM")


def vm_rss(pid: int) -> int | None:
    return _status_field(pid, "VmRSS")


def cpu_seconds(pid: int | None) -> float | None:
    """CPU time (user + system, all threads) a process has used so far; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, TypeError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_field(pid: int, name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def dir_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


class BenchWorker(WorkerProcess):
    """`ratings worker` on a stage's topics, run from `code` (this checkout by default), with
    what the benchmarks read of it: progress, log marks, problems. Its log is
    log_dir/NAME-PORT.log."""

    def __init__(self, broker_url: str, topics: Settings, app_id: str, data_dir: Path, config: Path | None,
                 log_dir: Path, name: str, extra_args: list[str] = (), env: dict[str, str] | None = None,
                 code: Path = ROOT):
        self.started, self.name, port = time.time(), name, free_port()
        flags = [*topic_flags(topics), "--app-id", app_id, *extra_args, *(["--config", str(config)] if config else [])]
        super().__init__(broker_url, data_dir, log_dir / f"{name}-{port}.log", args=flags, port=port, cwd=code, env=env)

    def wait(self, condition: Callable[[dict[str, Any]], Any], timeout: float, what: str,
             progress: Callable[[dict[str, Any]], str] | None = None, every: float = 15.0,
             interval: float = 0.2) -> dict[str, Any]:
        """Poll /health until condition(health) holds; print progress(health) every `every` s."""
        deadline = time.monotonic() + timeout
        next_note = time.monotonic() + every
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) waiting for {what}:\n{self.log_tail()}")
            health = self.health()
            if health is not None and condition(health):
                return health
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{self.name}: no {what} after {timeout:.0f} s (health {health}):\n{self.log_tail()}")
            if progress is not None and health is not None and now > next_note:
                log(f"  {self.name}: {progress(health)}")
                next_note = now + every
            time.sleep(interval)

    def log_problems(self, most: int = 8) -> dict[str, Any]:
        """Warnings and errors of the log, grouped by message with digits folded to N."""
        import re

        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return {"count": 0, "kinds": {}}
        kinds: dict[str, int] = {}
        count = 0
        for line in text.splitlines():
            if any(mark in line for mark in ("[WARNING]", "[ERROR]", "[CRITICAL]", "Traceback")):
                count += 1
                kind = re.sub(r"[0-9]+", "N", re.sub(r"^\[[^]]*\] \[[0-9]+\] ", "", line))[:160]
                kinds[kind] = kinds.get(kind, 0) + 1
        ranked = dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:most])
        return {"count": count, "kinds": ranked}

    def log_marks(self, marks: dict[str, str], until: str) -> dict[str, float]:
        """Seconds from the start of the process to the last line containing each mark
        before the first line containing `until` (and to that line, as `until`)."""
        from datetime import datetime

        found: dict[str, float] = {}
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return found
        for line in lines:
            if not line.startswith("[20"):
                continue
            try:
                moment = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            for name, mark in marks.items():
                if mark in line:
                    found[name] = round(moment - self.started, 3)
            if until in line:
                found["until"] = round(moment - self.started, 3)
                break
        return found


# -- reading rating-changed events ---------------------------------------------------------


class Collector(threading.Thread):
    """Reads a topic from the beginning in a thread of its own (own event loop) and
    calls on_event(event, arrival_time) for each JSON record; stop() ends it."""

    def __init__(self, bootstrap: str, topic: str, on_event: Callable[[dict[str, Any], float], None],
                 max_wait_ms: int = 10):
        super().__init__(daemon=True, name=f"collect-{topic}")
        self.bootstrap, self.topic, self.on_event, self.max_wait_ms = bootstrap, topic, on_event, max_wait_ms
        self.records = 0
        self.error: BaseException | None = None
        self.positioned = threading.Event()
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._consume())
        except BaseException as exc:  # surfaced by check()
            self.error = exc
            self.positioned.set()

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None,
                                    fetch_max_wait_ms=self.max_wait_ms, max_partition_fetch_bytes=4 * 1024 * 1024)
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self.positioned.set()
            while not self._halt.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
                now = time.time()
                for records in batches.values():
                    for record in records:
                        self.records += 1
                        self.on_event(orjson.loads(record.value), now)
        finally:
            await consumer.stop()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"collector of {self.topic} failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def wait_until(condition: Callable[[], Any], timeout: float, what: str, collector: Collector | None = None,
               worker: BenchWorker | None = None, progress: Callable[[], str] | None = None, every: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    next_note = time.monotonic() + every
    while not condition():
        if collector is not None:
            collector.check()
        if worker is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"{worker.name} exited ({worker.proc.returncode}) waiting for {what}:\n{worker.log_tail()}")
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f} s" + (f":\n{worker.log_tail()}" if worker else ""))
        if progress is not None and now > next_note:
            log(f"  {progress()}")
            next_note = now + every
        time.sleep(0.02)


def percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    if not values:
        return {"count": 0}
    array = np.asarray(values)
    return {"count": int(array.size), "p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99)),
            "max": float(array.max()), "mean": float(array.mean())}


def run_peer(module: str, bootstrap: str, input_topic: str, output_topic: str, matches: int, workdir: Path,
             timeout: float, group: str, guarantee: str) -> dict[str, Any]:
    """Run a peer application of the Elo job (bench/quix_app.py, bench/faust_app.py: their
    common flags) as a child process in its own process group until it has processed
    `matches` matches and exited; return its last JSON line plus `peak_rss_bytes` (VmHWM,
    sampled while it runs), `wall_s` and `log`. Raises with the tail of its log if it
    fails, or takes longer than `timeout` seconds (killed then)."""
    from stream_app.processes import dies_with_this_process

    workdir.mkdir(parents=True, exist_ok=True)
    name = module.rsplit(".", 1)[-1].replace("_", "-")
    what = f"{module} ({guarantee}, {matches:,} matches)"
    flags = ["--broker", bootstrap, "--input", input_topic, "--output", output_topic, "--state-dir",
             str(workdir / "state"), "--matches", str(matches), "--group", group, "--guarantee", guarantee]
    out_path, log_path = workdir / f"{name}.out", workdir / f"{name}.log"
    started = time.monotonic()
    # Files, not pipes: nobody reads its log while it runs, and a full pipe would block it.
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", module, *flags], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True, preexec_fn=dies_with_this_process())
    peak = 0
    try:
        while True:
            try:
                code = proc.wait(0.1)
                break
            except subprocess.TimeoutExpired:
                peak = max(peak, vm_hwm(proc.pid) or 0)
                if time.monotonic() - started > timeout:
                    raise TimeoutError(f"{what} did not finish in {timeout:.0f} s (killed):\n{_tail(log_path)}") from None
    finally:
        if proc.poll() is None:  # timed out, or this process is being interrupted
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    lines = [line for line in out_path.read_text(errors="replace").splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise RuntimeError(f"{what} exited with status {code}{'' if lines else ' and no result line'}:\n"
                           f"{_tail(log_path)}")
    return {**json.loads(lines[-1]), "peak_rss_bytes": peak, "wall_s": wall, "log": str(log_path)}


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def batch_stages(worker: Any) -> dict[str, tuple[float, float]]:
    """The worker's batch stages so far (ratings_batch_stage_seconds): stage -> (seconds, batches)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = worker.get("/metrics")
    if status != 200:
        return {}
    stages: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "ratings_batch_stage_seconds":
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_count")):
                    stages.setdefault(sample.labels["stage"], [0.0, 0.0])[sample.name.endswith("_count")] = sample.value
    return {stage: (total, count) for stage, (total, count) in stages.items()}


def stage_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Mean seconds of each batch stage between two readings of batch_stages, and the batches counted."""
    means: dict[str, Any] = {}
    for stage, (total, count) in after.items():
        total0, count0 = before.get(stage, (0.0, 0.0))
        if count > count0:
            means[stage] = {"mean_s": (total - total0) / (count - count0), "batches": int(count - count0)}
    return means


# -- profiling -----------------------------------------------------------------------------


def py_spy_binary() -> str | None:
    candidate = Path(sys.executable).parent / "py-spy"
    if candidate.is_file():
        return str(candidate)
    from shutil import which

    return which("py-spy")


def profile(pid: int, seconds: float, output: Path, rate: int = 50) -> dict[str, Any]:
    """py-spy record (non-blocking, idle frames and thread ids included) for `seconds`;
    summarised per thread by summarise_collapsed."""
    binary = py_spy_binary()
    if binary is None:
        return {"skipped": "py-spy not installed (.venv/bin/pip install py-spy)"}
    argv = [binary, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
            "--format", "raw", "--nonblocking", "--idle", "--threads", "--output", str(output)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0 or not output.exists():
        return {"skipped": f"py-spy failed ({done.returncode}): {done.stderr.strip()[-300:]}"}
    return summarise_collapsed(output)


IDLE_LEAVES = ("select (selectors.py)", "poll (selectors.py)", "wait (threading.py)")
# Frames every stack goes through: left out of the inclusive list.
PLUMBING = ("asyncio/", "threading.py", "mode/", "<frozen runpy>", "stream_app/cli/", "run_worker (", "<module>")


def summarise_collapsed(path: Path, most: int = 12) -> dict[str, Any]:
    """Per thread: samples, the share idle (in select/poll), and where the busy samples are:
    self time by leaf function and inclusive time by function (plumbing left out)."""
    threads: dict[str, dict[str, Any]] = {}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith(("thread", "process")) else "?"
        frames = [_short(frame) for frame in frames[1:] if not frame.startswith(("thread", "process"))]
        entry = threads.setdefault(thread, {"samples": 0, "idle": 0, "self": {}, "inclusive": {}, "names": set(),
                                            "packages": {}})
        entry["samples"] += count
        entry["names"].update(frame for frame in frames if frame.startswith(("run_worker", "WorkerThread.run")))
        if not frames or any(mark in frames[-1] for mark in IDLE_LEAVES):
            entry["idle"] += count
            continue
        entry["self"][frames[-1]] = entry["self"].get(frames[-1], 0) + count
        package = _package(frames[-1])
        entry["packages"][package] = entry["packages"].get(package, 0) + count
        for frame in set(frames):
            if not any(mark in frame for mark in PLUMBING):
                entry["inclusive"][frame] = entry["inclusive"].get(frame, 0) + count

    def top(table: dict[str, int], total: int) -> list[tuple[str, float]]:
        ranked = sorted(table.items(), key=lambda kv: -kv[1])[:most]
        return [(name, round(100.0 * count / max(total, 1), 1)) for name, count in ranked]

    out: dict[str, Any] = {"raw": str(path), "threads": {}}
    for thread, entry in sorted(threads.items(), key=lambda kv: -kv[1]["samples"]):
        total = entry["samples"]
        label = "main (event loop)" if any(n.startswith("run_worker") for n in entry["names"]) else (
            "consumer thread" if entry["names"] else thread)
        out["threads"][f"{label} {thread}"] = {
            "samples": total, "idle_percent": round(100.0 * entry["idle"] / max(total, 1), 1),
            "self_by_package_percent": top(entry["packages"], total),
            "self_percent": top(entry["self"], total), "inclusive_percent": top(entry["inclusive"], total),
        }
    return out


def _short(frame: str) -> str:
    """'apply_batch (/work/main/stream_app/stream/batch_loop.py:70)' -> 'apply_batch (stream_app/stream/batch_loop.py)'."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3.11/", str(ROOT) + "/"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})"


def _package(frame: str) -> str:
    """'Topic.publish_message (faust/topics.py)' -> 'faust'; a standard module -> its name."""
    where = frame.rpartition(" (")[2].rstrip(")")
    return where.split("/", 1)[0].removesuffix(".py") if where else "?"


class PhaseSampler(threading.Thread):
    """Samples the worker's /health `phase` (what its agent is doing) a few times a second:
    a cheap picture of where the agent's wall time goes. Digits are folded to N."""

    def __init__(self, worker: BenchWorker, interval: float = 0.2):
        super().__init__(daemon=True, name=f"phases-{worker.name}")
        self.worker, self.interval = worker, interval
        self.counts: dict[str, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        import re

        while not self._halt.wait(self.interval):
            health = self.worker.health()
            if health is not None:
                phase = re.sub(r"[0-9]+", "N", str(health.get("phase")))
                self.counts[phase] = self.counts.get(phase, 0) + 1

    def stop(self) -> dict[str, float]:
        self._halt.set()
        self.join(10)
        total = sum(self.counts.values()) or 1
        return {phase: round(100.0 * n / total, 1) for phase, n in sorted(self.counts.items(), key=lambda kv: -kv[1])}


def command_main(parse_args: Callable[[list[str] | None], Any], run: Callable[[Any], dict], argv: list[str] | None) -> int:
    """A benchmark run as a command: its flags, then the run; `--output` gets the results."""
    import json
    import signal
    import sys

    args = parse_args(argv)
    # Stopped with SIGTERM, or SIGINT in the background (where it is ignored by default),
    # the benchmark still stops its workers and brokers (finally clauses run on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results = run(args)
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.output}")
    return 0


# -- the batch loop on a real store, the broker in memory (the worker's own figures) ------
BATCH = 2_000  # input records per batch, as the intake hands them over under load


def two_player_records(matches: int, players: int) -> list[Any]:
    """Two-player matches of one league as the match topic's input records."""
    from stream_app.offline.sample import two_player_league
    from stream_app.stream.intake import InputRecord

    rng = random.Random(3)
    lines = [orjson.dumps(e) for e in two_player_league("league", players, matches, rng)]
    return [InputRecord("matches", 0, i, b"league", line, 0) for i, line in enumerate(lines)]


async def batch_loop(directory: Path, config: Any, records: list[Any], **settings: Any) -> tuple[float, Any, Any, str]:
    """The records applied by the batch loop in batches of BATCH, on a real store in
    `directory` and a RecordingBroker (`settings`: the worker's, besides its defaults):
    (seconds, store, broker, changelog topic)."""
    from stream_app.settings import Settings
    from stream_app.stream.intake import Intake
    from stream_app.stream.store import LocalStore
    from stream_app.stream.batch_loop import BatchLoop

    store, broker = LocalStore(directory), RecordingBroker()
    settings = Settings(partitions=1, match_topic="matches", **settings)
    worker = BatchLoop(settings, config, store, broker, broker, Intake({}, BATCH))
    started = time.perf_counter()
    for first in range(0, len(records), BATCH):
        await worker.apply_batch(records[first:first + BATCH])
    while worker.committer.writing_bases:  # as an idle worker: a base being written goes on to its end
        await worker.apply_batch([])
    return time.perf_counter() - started, store, broker, settings.changelog_topic


class RecordingBroker:
    """The broker as the batch loop's commit sequence sees it (a Sender and a ChangelogTopic,
    stream/commit.py), in memory: every send lands at once, in order, and the topics'
    records stay in `logs` for the benchmarks to count (those a base deleted too: `firsts`
    has each partition's first offset). Its sends cost nothing, so what is timed is the
    worker's own work."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[tuple[bytes, bytes]]] = defaultdict(list)
        self.firsts: dict[tuple[str, int], int] = {}

    async def partitions(self, topic: str) -> int:
        return 1

    async def send(self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes]]) -> list[Any]:
        log = self.logs[(topic, partition)]
        first = len(log)
        log.extend(records)
        landed = asyncio.get_running_loop().create_future()
        landed.set_result((first, len(log) - 1))  # the offsets of the first and the last record
        return [landed]

    async def read(self, topic: str, partition: int, start: int, end: int) -> AsyncIterator[list[tuple[int, bytes, bytes]]]:
        log = self.logs[(topic, partition)]
        yield [(offset, *log[offset]) for offset in range(max(start, self.firsts.get((topic, partition), 0)), end)]

    async def delete_before(self, topic: str, partition: int, offset: int) -> int:
        self.firsts[(topic, partition)] = max(offset, self.firsts.get((topic, partition), 0))
        return self.firsts[(topic, partition)]

    async def first_records(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], Any]:
        from stream_app.stream.intake import InputRecord

        return {(topic, partition): InputRecord(topic, partition, offset, *self.logs[(topic, partition)][offset], None)
                if offset < len(self.logs[(topic, partition)]) else None for (topic, partition), offset in wanted.items()}
