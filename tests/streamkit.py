"""Test support: worker processes against the embedded broker, and helpers."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from stream_app.broker import free_port

ROOT = Path(__file__).resolve().parent.parent


class WorkerProcess:
    """`ratings worker` as a child process with its own port and data directory."""

    def __init__(self, broker_url: str, topics_args: list[str], app_id: str, data_dir: Path, config: Path | None = None,
                 log_dir: Path | None = None, name: str = "worker"):
        self.port = free_port()
        self.data_dir = data_dir
        self.name = name
        self.log_path = (log_dir or data_dir.parent) / f"{name}-{self.port}.log"
        args = [sys.executable, "-m", "stream_app.cli", "worker", "--broker", broker_url, *topics_args,
                "--app-id", app_id, "--data-dir", str(data_dir), "--web-port", str(self.port)]
        if config is not None:
            args += ["--config", str(config)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as reply:
                body = reply.read()
                status = reply.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(), exc.code
        except (urllib.error.URLError, OSError):
            return 0, None  # not listening (yet, or any more)
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode()

    def health(self) -> dict[str, Any] | None:
        status, body = self.get("/health", timeout=2)
        return body if status == 200 else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.5,
             workers: list[WorkerProcess] = ()) -> Any:
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
    total = 0
    for worker in workers:
        health = worker.health()
        if health is None:
            return -1
        total += health[key]
    return total


async def publish(bootstrap: str, topic: str, records: list, **producer_options) -> None:
    """Publish (key, value) records in order, bypassing the client's validation."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **producer_options)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


class SteadyPublisher(threading.Thread):
    """Publishes the events in chunks over about `seconds`, in order, in the background."""

    def __init__(self, bootstrap: str, topic: str, records: list, seconds: float = 25.0, chunks: int = 50):
        super().__init__(daemon=True)
        self.args = (bootstrap, topic, records, seconds, chunks)
        self.error: BaseException | None = None

    def run(self) -> None:
        bootstrap, topic, records, seconds, chunks = self.args
        size = max(1, len(records) // chunks)
        try:
            for start in range(0, len(records), size):
                asyncio.run(publish(bootstrap, topic, records[start:start + size]))
                time.sleep(seconds / chunks)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


