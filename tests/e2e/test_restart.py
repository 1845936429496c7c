"""A worker SIGKILLed and started again on its data directory takes its old place
in the group at once: it removes the member its killed process left
(stream/membership.py) instead of waiting for that member's session to end."""

from __future__ import annotations

import asyncio
import signal

from tests.support.kafka import ensure_topics, topic_args
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, assigned, wait_for


def test_a_worker_restarted_on_its_data_directory_removes_its_killed_member(broker, tmp_path):
    prefix = unique_name("restart")
    asyncio.run(ensure_topics(broker.url, prefix))
    data = tmp_path / "w"
    first = WorkerProcess(broker.url, topic_args(prefix), prefix, data, name="first")
    try:
        wait_for(lambda: assigned(first) == set(range(8)), 120, "the worker to own the partitions", workers=[first])
        member = (data / "group-member").read_text().strip()
        assert member
    finally:
        first.stop(signal.SIGKILL)
    again = WorkerProcess(broker.url, topic_args(prefix), prefix, data, name="again")
    try:
        wait_for(lambda: assigned(again) == set(range(8)), 120, "the restarted worker to own the partitions",
                 workers=[again])
        text = again.log_path.read_text(errors="replace")
        assert f"removed this data directory's previous member {member} from the group {prefix}" in text
        assert (data / "group-member").read_text().strip() not in ("", member)  # its own, now
    finally:
        again.stop()
