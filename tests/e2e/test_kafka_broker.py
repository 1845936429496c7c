"""Apache Kafka on demand (stream_app/kafka_broker.py, `ratings kafka`): a real one-node
cluster takes records and gives them back, stops without leaving a process or its data
behind, and says what to install when Java is missing. The first run downloads Kafka
with Maven (about 15 s here); then each node takes 4 to 10 s to be ready."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from stream_app.broker import BrokerError
from stream_app.kafka_broker import KafkaCluster
from tests.support.brokers import KAFKA_MISSING
from tests.support.kafka import publish, read_records
from tests.support.ports import free_port
from tests.support.workers import ROOT

pytestmark = [pytest.mark.skipif(KAFKA_MISSING is not None, reason=str(KAFKA_MISSING)), pytest.mark.broker]


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a java left behind names its data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X") and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def gone(home: Path, timeout: float = 5.0) -> bool:
    """No process mentions the data directory any more, and the directory is removed."""
    deadline = time.monotonic() + timeout
    while processes_mentioning(str(home)) or home.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def ports(nodes: int = 1) -> list[int]:
    return [free_port() for _ in range(2 * nodes)]


def two_ports_in_a_row() -> int:
    """P with P and P + 1 free (`ratings kafka --port P` takes both): this process's ports
    come in turn, so two calls in a row usually give them."""
    first = free_port()
    for _ in range(50):
        second = free_port()
        if second == first + 1:
            return first
        first = second
    raise RuntimeError("no two free ports in a row")


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


def test_one_node_takes_keyed_records_and_gives_them_all_back():
    with KafkaCluster(ports=ports()) as kafka:
        assert kafka.running and kafka.url == f"kafka://{kafka.bootstrap}"
        asyncio.run(create_topic(kafka.bootstrap, "kafka-roundtrip", 8))
        sent = [(f"key-{i % 13}".encode(), f"value-{i}".encode()) for i in range(100)]
        assert asyncio.run(publish(kafka.bootstrap, "kafka-roundtrip", sent)) == 100
        records = asyncio.run(read_records(kafka.bootstrap, "kafka-roundtrip", 8, 100, timeout=20))
    assert sorted((key, value) for _, key, value in records) == sorted(sent)
    partitions_of = {}
    for partition, key, _ in records:
        partitions_of.setdefault(key, set()).add(partition)
    assert all(len(found) == 1 for found in partitions_of.values())  # a key stays on one partition
    assert len({p for found in partitions_of.values() for p in found}) > 1  # and the 8 are used


def test_stop_leaves_no_java_process_and_no_data_directory():
    kafka = KafkaCluster(ports=ports()).start()
    home, pid = kafka.home, kafka.pid
    assert home is not None and (home / "node-1" / "data" / "meta.properties").exists()
    assert pid in processes_mentioning(str(home))
    kafka.stop()
    assert not kafka.running and kafka.pid is None
    assert gone(home), processes_mentioning(str(home))


def stderr_until(proc: subprocess.Popen, marker: str) -> str:
    """The process's error output up to the line with `marker`."""
    assert proc.stderr is not None
    text = ""
    for line in iter(proc.stderr.readline, b""):
        text += line.decode()
        if marker in line.decode():
            return text
    raise AssertionError(f"exited with status {proc.wait()} before {marker!r}: {text}")


def test_kafka_command_prints_the_bootstrap_address_and_stops_on_ctrl_c():
    port = two_ports_in_a_row()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # SIGINT back to its default in the child, so that Python turns it into KeyboardInterrupt even
    # when this test runs where SIGINT is ignored (a background job)
    proc = subprocess.Popen([sys.executable, "-m", "stream_app.cli", "kafka", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        text = stderr_until(proc, "press Ctrl-C")
        assert f"bootstrap 127.0.0.1:{port} " in text, text
        home = Path(re.search(r"temporary directory, (\S+), removed", text).group(1))
        assert processes_mentioning(str(home))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert gone(home), processes_mentioning(str(home))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_without_java_one_line_says_to_install_openjdk_17(tmp_path, monkeypatch):
    (tmp_path / "mvn").symlink_to(shutil.which("mvn"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError) as error:
        KafkaCluster(ports=ports()).start()
    assert "\n" not in str(error.value) and "OpenJDK 17" in str(error.value), error.value


def test_a_port_in_use_is_named_before_anything_starts():
    taken, controller = ports()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        with pytest.raises(BrokerError, match=f"port {taken} on 127.0.0.1 is already in use"):
            KafkaCluster(ports=[taken, controller]).start()
