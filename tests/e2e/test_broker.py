"""The embedded broker, `ratings produce/subscribe/broker` and the Kafka security settings, against a real Tansu broker
(the client's own tests: tests/client)."""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stream_app import cli
from stream_app.broker import BrokerError, EmbeddedBroker, kafka_ready
from stream_app.client import RatingsClient
from stream_app.security import KafkaSecurity, SecurityConfigError
from tests.support.broker_control import resume, suspend
from tests.support.ports import free_port
from tests.support.kafka import change, match, read_topic, write_topic
from tests.support.workers import ROOT

PYTHON = sys.executable


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# -- ratings produce / subscribe ---------------------------------------------------------------


def test_produce_command_sends_valid_lines_and_lists_rejected_ones(broker, topics, tmp_path, capsys):
    good = [match("chess", f"c{i}") for i in range(5)] + [match("go", "g1")]
    lines = [orjson.dumps(e) for e in good[:2]]
    lines += [b'{"league": "chess", "participants": []}', b"", b"not json"]  # lines 3 and 5 are rejected, 4 is blank
    lines += [orjson.dumps(e) for e in good[2:]]
    path = tmp_path / "matches.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))

    status = cli.main(["produce", str(path), "--broker", broker.url, *topics.cli_args()])
    err = capsys.readouterr().err
    assert status == 1
    assert "line 3: match_id: required field is missing (required) [schema_violation]" in err
    assert re.search(r"^line 5: event: not valid JSON .*\[invalid_json\]$", err, re.M)
    assert re.search(r"^produce: 6 events sent, 2 lines rejected \(9 lines, 1 blank\) to ", err, re.M), err
    records, _ = asyncio.run(read_topic(broker.bootstrap, topics.match, 6))
    assert sorted(r.value for r in records) == sorted(orjson.dumps(e) for e in good)

    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in good))
    assert cli.main(["produce", str(clean), "--broker", broker.url, *topics.cli_args()]) == 0
    assert re.search(r"^produce: 6 events sent, 0 lines rejected", capsys.readouterr().err, re.M)


def test_a_result_dated_days_ahead_is_taken_stamped_with_its_send_time(broker, topics, tmp_path, capsys):
    """Kafka 4 refuses a record stamped more than an hour ahead (message.timestamp.after.max.ms):
    `produce` stamps records when it sends them, so a result's own time (occurred_at) may
    be anything the schema takes."""
    from datetime import datetime, timedelta, timezone

    ahead = (datetime.now(timezone.utc) + timedelta(days=3)).isoformat(timespec="seconds")
    path = tmp_path / "ahead.jsonl"
    path.write_bytes(orjson.dumps({**match("chess", "ahead-1"), "occurred_at": ahead}) + b"\n")
    sent_at = time.time()
    assert cli.main(["produce", str(path), "--broker", broker.url, *topics.cli_args()]) == 0
    [record], _ = asyncio.run(read_topic(broker.bootstrap, topics.match, 1))
    assert orjson.loads(record.value)["occurred_at"] == ahead
    assert abs(record.timestamp / 1000 - sent_at) < 60


def test_produce_command_exit_status_4_without_broker_and_5_without_its_file(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_bytes(orjson.dumps(match("chess", "c1")) + b"\n")
    assert cli.main(["produce", str(path), "--broker", f"kafka://127.0.0.1:{free_port()}"]) == 4
    assert "cannot connect" in capsys.readouterr().err
    assert cli.main(["produce", str(tmp_path / "missing.jsonl")]) == 5


def test_subscribe_command_prints_json_lines_until_limit(broker, topics, capsys):
    asyncio.run(write_topic(broker.bootstrap, topics.changes, [change("chess", f"p{i}", i) for i in range(5)]
                            + [change("go", "p0", 9)]))  # fmt: skip
    status = cli.main(["subscribe", "--from-beginning", "--league", "chess", "--limit", "3",
                       "--broker", broker.url, *topics.cli_args()])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 3
    events = [orjson.loads(line) for line in lines]
    assert all(e["league"] == "chess" for e in events)
    assert sorted(e["n"] for e in events) == sorted(e["n"] for e in events if e["n"] < 5)


def test_subscribe_command_follows_new_events(broker, topics):
    """A separate process: lines arrive one by one (flushed), from now on, and it stops at --limit."""
    asyncio.run(write_topic(broker.bootstrap, topics.changes, [change("chess", "old", i) for i in range(8)]))
    proc = subprocess.Popen(
        [PYTHON, "-m", "stream_app.cli", "subscribe", "--player", "alice", "--limit", "2",
         "--broker", broker.url, *topics.cli_args()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stdout is not None
        line = proc.stderr.readline().decode()
        assert line.startswith(f"subscribe: reading {topics.changes} at {broker.url} from now on"), line
        asyncio.run(write_topic(broker.bootstrap, topics.changes, [change("chess", "alice", 100)]))
        first = orjson.loads(proc.stdout.readline())  # flushed at once, before the second event exists
        assert (first["player"], first["n"]) == ("alice", 100)
        asyncio.run(write_topic(broker.bootstrap, topics.changes,
                                [change("chess", "bob", 101), change("go", "alice", 102)]))  # fmt: skip
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert [orjson.loads(line)["n"] for line in out.splitlines()] == [102]


# -- the broker process ----------------------------------------------------------------


def test_broker_context_manager_starts_and_leaves_nothing_behind():
    with EmbeddedBroker() as b:
        pid = b.pid
        assert b.url == f"kafka://127.0.0.1:{b.port}" and b.bootstrap == f"127.0.0.1:{b.port}"
        assert alive(pid)
        assert kafka_ready(b.bootstrap)
        # suspend / resume: a stopped broker answers nothing, a resumed one answers again
        suspend(b)
        assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
        assert not kafka_ready(b.bootstrap, timeout=1.0)
        resume(b)
        assert kafka_ready(b.bootstrap)
        suspend(b)  # stop() must also end a suspended broker, at once (SIGCONT after SIGTERM)
        started = time.monotonic()
    assert time.monotonic() - started < 2.0  # not the 5 s SIGKILL fallback
    assert not alive(pid)
    assert b.pid is None


def test_port_already_in_use_is_an_error(embedded_broker):
    """Tansu itself does not exit when its port is taken (a worker thread panics, the process stays)."""
    with pytest.raises(BrokerError, match="in use"):
        EmbeddedBroker(port=embedded_broker.port, startup_timeout=5).start()


def test_the_broker_starts_again_on_its_port_right_after_a_stop():
    """The stopped broker's connections wait in TIME_WAIT for about a minute: the port
    is free to a server that binds as servers do (SO_REUSEADDR)."""
    with EmbeddedBroker() as first:
        port = first.port
        for _ in range(3):  # clients connect, as a worker's do
            assert kafka_ready(first.bootstrap)
    started = time.monotonic()
    with EmbeddedBroker(port=port, startup_timeout=10) as again:
        assert again.port == port and kafka_ready(again.bootstrap)
    assert time.monotonic() - started < 10


def test_broker_dies_with_its_parent_process():
    """PR_SET_PDEATHSIG: SIGKILL the Python process that started the broker; the broker goes too."""
    code = (
        "import sys, time\n"
        "from stream_app.broker import EmbeddedBroker\n"
        "b = EmbeddedBroker().start()\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, env=cli_env(), cwd=ROOT)
    broker_pid = None
    try:
        assert proc.stdout is not None
        broker_pid = int(proc.stdout.readline())
        assert alive(broker_pid)
        proc.kill()
        proc.wait()
        assert wait_dead(broker_pid), f"broker pid {broker_pid} outlived its SIGKILLed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if broker_pid is not None and alive(broker_pid):  # the failure case: do not leave an orphan behind
            os.kill(broker_pid, signal.SIGKILL)


def test_broker_command_runs_until_ctrl_c():
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "from stream_app.cli import main; sys.exit(main(sys.argv[1:]))", "broker", "--port", str(port)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=cli_env(), cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        text = ""
        while "Ctrl-C" not in text:
            line = proc.stderr.readline().decode()
            assert line, text
            text += line
        assert "memory only" in text and "loses every topic" in text
        broker_pid = int(re.search(r"pid (\d+)", text).group(1))
        assert kafka_ready(f"127.0.0.1:{port}")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert wait_dead(broker_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- security ------------------------------------------------------------------------


def test_kafka_security_from_env_and_password_never_shown():
    env = {
        "RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "RATINGS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "RATINGS_KAFKA_USERNAME": "svc-ratings",
        "RATINGS_KAFKA_PASSWORD": "s3cret-Pa55",
    }
    security = KafkaSecurity.from_env(env)
    assert (security.protocol, security.sasl_mechanism, security.username) == ("SASL_SSL", "SCRAM-SHA-512", "svc-ratings")
    for text in (repr(security), str(security), f"{security}", repr(RatingsClient(security=security))):
        assert "s3cret" not in text
        assert "svc-ratings" in text or "RatingsClient" in text
    assert "password='***'" in repr(security)

    kwargs = security.aiokafka_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_password"] == "s3cret-Pa55"
    assert kwargs["ssl_context"] is not None
    credentials = security.faust_settings()["broker_credentials"]
    assert credentials.protocol.value == "SASL_SSL" and credentials.mechanism.value == "SCRAM-SHA-512"
    assert "s3cret" not in repr(credentials)

    plain = KafkaSecurity.from_env({})
    assert plain.protocol == "PLAINTEXT" and plain.faust_settings() == {}
    assert plain.aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}
    ssl_only = KafkaSecurity.from_env({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SSL"})
    assert ssl_only.faust_settings()["broker_credentials"].protocol.value == "SSL"
    sasl_plain = KafkaSecurity.from_env({**env, "RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    assert sasl_plain.faust_settings()["broker_credentials"].protocol.value == "SASL_PLAINTEXT"
    assert "ssl_context" not in sasl_plain.aiokafka_kwargs()


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "TLS"}, "RATINGS_KAFKA_SECURITY_PROTOCOL"),
        ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RATINGS_KAFKA_PASSWORD": "x"}, "RATINGS_KAFKA_USERNAME"),
        ({"RATINGS_KAFKA_SASL_MECHANISM": "MD5"}, "RATINGS_KAFKA_SASL_MECHANISM"),
        ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SSL", "RATINGS_KAFKA_CA_FILE": "/no/such/ca.pem"}, "RATINGS_KAFKA_CA_FILE"),
        ({"RATINGS_KAFKA_CA_FILE": __file__}, "does not use TLS"),
    ],
)
def test_kafka_security_errors_name_the_variable(env, message):
    with pytest.raises(SecurityConfigError, match=message):
        KafkaSecurity.from_env(env)


def test_read_range_reads_exactly_the_records_asked_for_across_record_batches(broker):
    """The worker's reader of records Faust skipped (stream_app.stream.intake.read_range)."""
    from tests.support.names import unique_name
    from stream_app.stream.intake import read_range

    topic = unique_name("gap")

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            for chunk in range(3):  # three produce calls: three record batches
                futures = [await producer.send(topic, f"v{chunk * 10 + i}".encode(), key=b"k", partition=1)
                           for i in range(10)]
                await asyncio.gather(*futures)
        finally:
            await producer.stop()
        options = {"bootstrap_servers": broker.bootstrap}
        records = await read_range(options, topic, 1, 5, 23)
        with pytest.raises(TimeoutError, match=rf"{topic}\[1\] offsets 25 to 39"):
            await read_range(options, topic, 1, 25, 40, timeout=2.0)
        return records

    records = asyncio.run(scenario())
    assert [r.offset for r in records] == list(range(5, 23))
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(5, 23)]
    assert all(r.topic == topic and r.partition == 1 and r.key == b"k" for r in records)
    assert all(abs(r.timestamp / 1000 - time.time()) < 120 for r in records)  # milliseconds, as aiokafka has them
