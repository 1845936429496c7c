"""Worker processes for the tests and benchmarks, and waiting on them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from stream_app import processes

# A 6 s session (0.5 s heartbeats): the group gives a killed or frozen worker's partitions away sooner.
FAST_GROUP = ["--session-timeout", "6", "--heartbeat-interval", "0.5"]
ROOT = Path(__file__).resolve().parent.parent.parent


class WorkerProcess(processes.WorkerProcess):
    """`ratings worker` with the test's topics, app id (consumer group) and league
    configuration; its log lands next to its data directory."""

    def __init__(self, broker_url: str, topics_args: list[str], app_id: str, data_dir: Path, config: Path | None = None,
                 log_dir: Path | None = None, name: str = "worker", extra_args: list[str] = ()):
        self.name = name
        port = processes.free_port()
        args = [*topics_args, "--app-id", app_id, *extra_args]
        if config is not None:
            args += ["--config", str(config)]
        super().__init__(broker_url, data_dir, (log_dir or data_dir.parent) / f"{name}-{port}.log", args=args,
                         port=port, cwd=ROOT)


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
    tails = "\n".join(f"--- {w.name}\n{w.log_tail()}" for w in workers)
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


def assigned(worker: WorkerProcess) -> set[int]:
    """Partitions the worker owns and serves (empty while it rebalances or restores)."""
    health = worker.health()
    return set(health["assigned_partitions"]) if health and health["ready"] else set()
