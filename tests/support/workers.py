"""Worker processes for the tests and benchmarks, and waiting on them."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from stream_app import processes
from tests.support.brokers import refuse_without_broker
from tests.support.ports import free_port

# A 6 s session (0.5 s heartbeats): the group gives a killed or frozen worker's partitions away sooner.
FAST_GROUP = ["--session-timeout", "6", "--heartbeat-interval", "0.5"]
ROOT = Path(__file__).resolve().parent.parent.parent


class WorkerProcess(processes.WorkerProcess):
    """`ratings worker` with the test's topics, app id (consumer group) and league
    configuration; its log lands next to its data directory."""

    def __init__(self, broker_url: str, topics_args: list[str], app_id: str, data_dir: Path, config: Path | None = None,
                 log_dir: Path | None = None, name: str = "worker", extra_args: list[str] = (),
                 env: dict[str, str] | None = None):
        refuse_without_broker("a worker process started")
        self.name = name
        port = free_port()
        args = [*topics_args, "--app-id", app_id, *extra_args]
        if config is not None:
            args += ["--config", str(config)]
        super().__init__(broker_url, data_dir, (log_dir or data_dir.parent) / f"{name}-{port}.log", args=args,
                         port=port, cwd=ROOT, env=env)

    def health(self) -> dict[str, Any] | None:
        # 10 s, not the 2 s of `ratings demo`'s checks: in the full suite a busy worker took
        # over 2 s to answer now and then (a test then read None); a dead one refuses at once.
        status, body = self.get("/health", timeout=10)
        body = body if status == 200 else None
        # Under tests/deploy/test_compile.py the worker must run the compiled modules too.
        expected = os.environ.get("RATINGS_EXPECT_COMPILED")
        if body is not None and expected and body["compiled_modules"] < len(expected.split(",")):
            raise AssertionError(f"{self.name} runs {body['compiled_modules']} compiled modules, not {expected}")
        return body


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.5,
             workers: list[WorkerProcess] = ()) -> Any:
    """Poll until `condition()` is true; fail early if a worker exits, with its log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        for worker in workers:
            if not worker.alive():
                raise AssertionError(f"{worker.name} exited ({worker.proc.returncode}) while waiting for {what}:\n{worker.log_tail()}")
        time.sleep(interval)
    # What each worker was doing: SIGUSR1 logs its batch phase and every asyncio task's stack.
    for worker in workers:
        if worker.alive():
            os.kill(worker.proc.pid, signal.SIGUSR1)
    time.sleep(1.0)
    tails = "\n".join(f"--- {w.name}\n{w.log_tail(lines=150)}" for w in workers)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")


def totals(workers: list[WorkerProcess], key: str) -> int:
    """The sum of a /health counter over the workers (-1 if one does not answer)."""
    total = 0
    for worker in workers:
        health = worker.health()
        if health is None:
            return -1
        total += health[key]
    return total


def matches_served(worker: WorkerProcess) -> int:
    """The matches of every league the worker serves (one request: GET /leagues)."""
    status, body = worker.get("/leagues")
    return sum(league["matches"] for league in body["leagues"]) if status == 200 else 0


def assigned(worker: WorkerProcess) -> set[int]:
    """Partitions the worker owns and serves (empty while it rebalances or restores)."""
    health = worker.health()
    return set(health["assigned_partitions"]) if health and health["ready"] else set()


@contextmanager
def applied_by(broker, directory: Path, config: Path, docs: list[dict], prefix: str, names: str = "ab",
               expected: dict[str, dict[str, Any]] | None = None,
               extra_args: list[str] = ()) -> Iterator[list[WorkerProcess]]:
    """Workers (one per letter of `names`) sharing the partitions of fresh topics,
    once they have applied `docs`: once each league's document (GET /leagues/L)
    has the `expected` values (default: "matches", the league's match_ids
    counted); stopped afterwards."""
    import asyncio

    from tests.support.kafka import ensure_topics, keyed, publish, topic_args
    from tests.support.names import unique_name

    prefix = unique_name(prefix)
    workers = [WorkerProcess(broker.url, topic_args(prefix), prefix, directory / name, config, name=name,
                             extra_args=list(extra_args))
               for name in names]
    for worker in workers:
        worker.topic_prefix = prefix  # {prefix}.matches, .changes, .dlq
    if expected is None:
        counts: dict[str, set[str]] = {}
        for doc in docs:
            counts.setdefault(doc["league"], set()).add(doc["match_id"])
        expected = {league: {"matches": len(ids)} for league, ids in counts.items()}

    def league_has(league: str, values: dict[str, Any]) -> bool:
        status, body = workers[0].get(f"/leagues/{league}")
        return status == 200 and all(body.get(key) == value for key, value in values.items())

    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        wait_for(lambda: all(map(assigned, workers)) and set.union(*map(assigned, workers)) == set(range(8)),
                 120, "the workers to share the partitions", workers=workers)
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(docs)))
        wait_for(lambda: all(league_has(league, values) for league, values in expected.items()),
                 180, "the matches applied", workers=workers)
        yield workers
    finally:
        for worker in workers:
            worker.stop()


# What a worker logs when a log it reads started over (the broker forgot records, a topic
# was deleted): each is a partition's state written back, its input read again from its
# beginning, or a standby following from the start (or again, from its checkpoint, after
# finding the log shorter). On a broker that lost nothing, none.
STARTED_OVER_LINES = ("had lost records", "started over", "no longer holds", "following again in")


def started_over_lines(workers: list[WorkerProcess]) -> list[str]:
    """The lines of the workers' logs (every generation's, by log file) that say a log started over."""
    found = []
    for path in sorted({worker.log_path for worker in workers}):
        found += [line for line in path.read_text(errors="replace").splitlines()
                  if any(phrase in line for phrase in STARTED_OVER_LINES)]
    return found
