"""Freezing a broker for fault injection: SIGSTOP of its process group (Kafka's first
node, or the embedded broker) keeps its connections open but answers nothing;
SIGCONT thaws it. Either broker's stop() ends a frozen one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from stream_app.broker import BrokerError, EmbeddedBroker
from stream_app.kafka_broker import KafkaCluster


def suspend(broker: EmbeddedBroker | KafkaCluster) -> None:
    """SIGSTOP the broker; returns once every thread of it is stopped (signals are delivered asynchronously)."""
    pid = broker.pid
    if pid is None or not broker.running:
        raise BrokerError("the broker is not running")
    os.killpg(pid, signal.SIGSTOP)  # the broker runs in its own session: the group id is its pid
    wait_for(lambda: all_threads_stopped(pid) is not False, 2.0)


def resume(broker: EmbeddedBroker | KafkaCluster) -> None:
    """SIGCONT a suspended broker; returns once its threads run again."""
    pid = broker.pid
    if pid is None:
        return
    os.killpg(pid, signal.SIGCONT)
    wait_for(lambda: all_threads_stopped(pid) is not True, 2.0)


def all_threads_stopped(pid: int) -> bool | None:
    """True if every thread of `pid` is stopped (state T), False if one is not, None if /proc cannot tell."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks]
    except (OSError, IndexError):
        return None
    return bool(states) and all(state in ("T", "t") for state in states)


def wait_for(condition, timeout: float) -> bool:
    """Poll `condition` every 5 ms until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
