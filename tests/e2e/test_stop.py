"""A worker stops on SIGTERM within its grace period even when its broker is
gone (Faust's consumer would wait for the broker without end); its local state
stays at its last checkpoint, so the next start on the same data directory
reads only the changelog past it."""

from __future__ import annotations

import asyncio
import time

from tests.support.brokers import start_broker
from tests.support.kafka import ensure_topics, topic_args
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, wait_for

STOP_TIMEOUT = 4.0


def test_a_worker_whose_broker_is_gone_stops_on_sigterm_within_its_grace_period(tmp_path):
    prefix = unique_name("stop")
    with start_broker() as broker:
        asyncio.run(ensure_topics(broker.url, prefix))
        worker = WorkerProcess(broker.url, topic_args(prefix), prefix, tmp_path / "w", name="w",
                               extra_args=["--stop-timeout", str(STOP_TIMEOUT)])
        try:
            wait_for(lambda: (worker.health() or {}).get("ready"), 120, "the worker to be ready", workers=[worker])
            broker.stop()
            time.sleep(2)
            started = time.monotonic()
            code = worker.stop(timeout=60)
            took = time.monotonic() - started
        finally:
            worker.stop(timeout=5)
    grace = STOP_TIMEOUT + 5.0
    assert took < grace + 3.0, f"stopping took {took:.1f} s (exit status {code}):\n{worker.log_tail()}"
    print(f"stopped {took:.1f} s after SIGTERM with the broker gone (exit status {code})")
