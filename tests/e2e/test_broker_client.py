"""The embedded broker, the client and `ratings produce/subscribe/broker`, against a real Tansu broker."""

from __future__ import annotations

import asyncio
import contextlib
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

from stream_app import cli
from stream_app.broker import BrokerError, EmbeddedBroker, kafka_ready
from stream_app.processes import free_port
from stream_app.client import RatingsClient, bootstrap_servers
from stream_app.inputs import BadEvent
from stream_app.security import KafkaSecurity, SecurityConfigError
from tests.support.broker_control import resume, suspend
from tests.support.workers import ROOT

PYTHON = sys.executable


def match(league: str, match_id: str, *players: str) -> dict:
    return {
        "match_id": match_id,
        "league": league,
        "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players or ("alice", "bob"))],
    }


def change(league: str, player: str, n: int) -> dict:
    return {"schema": "rating-changed.v1", "league": league, "match_id": f"m{n}", "player": player, "n": n}


async def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 10.0, settle: float = 0.5):
    """Every record of `topic` from the beginning: waits for `expected`, then `settle` s for extras."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = None
        deadline = time.monotonic() + timeout
        while not parts:
            await consumer.topics()
            parts = consumer.partitions_for_topic(topic)
            assert parts or time.monotonic() < deadline, f"topic {topic} never appeared"
            if not parts:
                await asyncio.sleep(0.1)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = []
        while len(records) < expected and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            for batch in (await consumer.getmany(timeout_ms=100)).values():
                records.extend(batch)
        return records, len(tps)
    finally:
        await consumer.stop()


async def write_topic(bootstrap: str, topic: str, events: list[dict], key: bytes = b"k") -> None:
    """Send in one go with linger: multi-record batches (where Tansu's ListOffsets is wrong)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, orjson.dumps(e), key=key) for e in events]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def collect(iterator, count: int, timeout: float = 10.0) -> list[dict]:
    out: list[dict] = []
    async with contextlib.aclosing(iterator) as events:

        async def take() -> None:
            async for event in events:
                out.append(event)
                if len(out) >= count:
                    return

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(take(), timeout)
    return out


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


# -- the client: publishing ------------------------------------------------------------


async def test_publish_keys_by_league_and_keeps_the_payload(broker, topics):
    raw = b'{"league": "go",  "match_id": "g1", "participants": [{"player": "x", "score": 3}, {"player": "y", "score": 1}], "extra": 1}'
    events = [match("chess", f"c{i}") for i in range(6)] + [match("karting", f"k{i}", "a", "b", "c") for i in range(4)]
    async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
        metadata = [await client.publish(e) for e in events]
        metadata.append(await client.publish(raw))
    assert all(m.topic == topics.match for m in metadata)

    records, partitions = await read_topic(broker.bootstrap, topics.match, len(events) + 1)
    assert partitions == 8  # created by start() with the client's partition count, not Tansu's default 4
    assert len(records) == len(events) + 1
    by_key: dict[bytes, set[int]] = {}
    for record in records:
        by_key.setdefault(record.key, set()).add(record.partition)
        # Java / Faust default partitioner: murmur2(key) % partitions
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % 8
    assert set(by_key) == {b"chess", b"karting", b"go"}
    assert all(len(p) == 1 for p in by_key.values()), by_key
    values = {r.value for r in records}
    assert raw in values  # bytes go out exactly as given, whitespace and unknown fields included
    assert {orjson.dumps(e) for e in events} <= values
    # A league's matches stay in publishing order within its partition.
    chess = [orjson.loads(r.value)["match_id"] for r in sorted(records, key=lambda r: r.offset) if r.key == b"chess"]
    assert chess == [f"c{i}" for i in range(6)]


async def test_invalid_events_raise_bad_event_and_are_not_sent(broker, topics):
    bad = [
        ({"league": "chess", "participants": []}, "schema_violation", "match_id"),
        (match("chess", "d1", "alice", "alice"), "duplicate_player", "participants[1].player"),
        (b'{"match_id": "x", "league": "chess", ', "invalid_json", None),
        (b"\xff\xfe", "invalid_encoding", None),
        (b"[1, 2]", "not_an_object", None),
        (b'{"match_id": "x", "league": "bad league", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}',
         "schema_violation", "league"),
    ]  # fmt: skip
    async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
        for event, code, field in bad:
            with pytest.raises(BadEvent) as caught:
                await client.publish(event)
            assert caught.value.code == code
            assert caught.value.field == field
            if field:
                assert field in str(caught.value)  # the message names the field and the rule
        sent, rejected = await client.publish_many(
            [match("chess", "ok1"), bad[0][0], match("chess", "ok2"), b"nope"], on_progress=lambda s, r: None
        )
    assert sent == 2
    assert [(i, e.code) for i, e in rejected] == [(2, "schema_violation"), (4, "invalid_json")]
    records, _ = await read_topic(broker.bootstrap, topics.match, 2)
    assert sorted(orjson.loads(r.value)["match_id"] for r in records) == ["ok1", "ok2"]


def test_commands_are_validated_and_keyed_by_league(broker, topics, capsys):
    """client.void and client.correct publish the commands' schemas; `ratings void` too; a bad one is refused
    naming the field (nothing is sent)."""
    async def publish() -> None:
        async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
            await client.void("chess", "c1", "annulled")
            await client.correct("go", "g1", [{"player": "x", "rank": 2}, {"player": "y", "rank": 1}], "swapped",
                                 occurred_at="2026-11-22T10:00:00Z")
            with pytest.raises(BadEvent) as caught:
                await client.void("chess", "c1", "")
            assert caught.value.field == "reason"
            with pytest.raises(BadEvent) as caught:
                await client.correct("go", "g1", [{"player": "x", "rank": 1}, {"player": "x", "rank": 2}], "typo")
            assert caught.value.code == "duplicate_player"

    asyncio.run(publish())
    assert cli.main(["void", "karting", "k9", "--reason", "jump start", "--broker", broker.url, *topics.cli_args()]) == 0
    assert "void of karting/k9 published" in capsys.readouterr().out
    assert cli.main(["void", "karting", "bad id", "--reason", "x", "--broker", broker.url, *topics.cli_args()]) == 1
    assert "match_id: must be 1 to 128 characters" in capsys.readouterr().err
    records, _ = asyncio.run(read_topic(broker.bootstrap, topics.match, 3))
    sent = {r.key: orjson.loads(r.value) for r in records}
    assert sent[b"chess"] == {"schema": "match-voided.v1", "league": "chess", "match_id": "c1", "reason": "annulled"}
    assert sent[b"go"]["schema"] == "match-corrected.v1" and sent[b"go"]["occurred_at"] == "2026-11-22T10:00:00Z"
    assert sent[b"karting"]["reason"] == "jump start"


async def test_ensure_topics_is_idempotent(broker, topics):
    client = RatingsClient(broker.url, partitions=3, **topics.client_kwargs())
    first = await client.ensure_topics()
    assert first == {topics.match: 3, topics.changes: 3, topics.dlq: 3}
    assert await client.ensure_topics() == first
    assert await client.ensure_topics(partitions=5) == first  # existing topics keep their partitions


def test_bootstrap_servers():
    assert bootstrap_servers("kafka://127.0.0.1:9092") == "127.0.0.1:9092"
    assert bootstrap_servers("kafka://a:1;b:2") == "a:1,b:2"
    assert bootstrap_servers("h1") == "h1:9092"
    with pytest.raises(ValueError):
        bootstrap_servers("http://x:1")


# -- the client: following ---------------------------------------------------------------


async def test_changes_filter_by_league_and_player(broker, topics):
    written = [change(league, player, n) for n, (league, player) in enumerate(
        [("chess", "alice"), ("chess", "bob"), ("go", "alice"), ("chess", "alice"), ("go", "carol")] * 3)]  # fmt: skip
    await write_topic(broker.bootstrap, topics.changes, written)
    client = RatingsClient(broker.url, **topics.client_kwargs())

    chess = await collect(client.changes(league="chess", from_beginning=True), 9)
    assert sorted(e["n"] for e in chess) == [e["n"] for e in written if e["league"] == "chess"]
    alice = await collect(client.changes(player="alice", from_beginning=True), 9)
    assert sorted(e["n"] for e in alice) == [e["n"] for e in written if e["player"] == "alice"]
    both = await collect(client.changes(league="chess", player="alice", from_beginning=True), 6, timeout=3)
    assert sorted(e["n"] for e in both) == [e["n"] for e in written if e["player"] == "alice" and e["league"] == "chess"]
    nobody = await collect(client.changes(league="nowhere", from_beginning=True), 1, timeout=1.5)
    assert nobody == []


async def test_changes_from_now_skips_existing_events(broker, topics):
    """Without from_beginning only later events arrive, even after multi-record batches, where
    Tansu's ListOffsets reports the end of a partition too early (a plain seek_to_end replays them)."""
    await write_topic(broker.bootstrap, topics.changes, [change("chess", f"old{i}", i) for i in range(12)])
    client = RatingsClient(broker.url, **topics.client_kwargs())
    ready = asyncio.Event()
    reader = asyncio.create_task(collect(client.changes(league="chess", on_ready=ready.set), 3, timeout=10))
    await asyncio.wait_for(ready.wait(), 10)
    await write_topic(broker.bootstrap, topics.changes, [change("chess", f"new{i}", 100 + i) for i in range(3)])
    got = await reader
    assert [e["player"] for e in got] == ["new0", "new1", "new2"]


async def test_dead_letters_filter(broker, topics):
    letters = [
        {"schema": "dead-letter.v1", "reason": "invalid_json", "league": None, "n": 0},
        {"schema": "dead-letter.v1", "reason": "system_rule", "league": "chess", "n": 1},
        {"schema": "dead-letter.v1", "reason": "duplicate_match", "league": "chess", "n": 2},
    ]
    await write_topic(broker.bootstrap, topics.dlq, letters)
    client = RatingsClient(broker.url, **topics.client_kwargs())
    got = await collect(client.dead_letters(league="chess", from_beginning=True), 2)
    assert sorted(e["n"] for e in got) == [1, 2]
    got = await collect(client.dead_letters(reason="invalid_json", from_beginning=True), 1)
    assert [e["n"] for e in got] == [0]


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


def test_produce_command_exit_status_2_without_broker(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_bytes(orjson.dumps(match("chess", "c1")) + b"\n")
    assert cli.main(["produce", str(path), "--broker", f"kafka://127.0.0.1:{free_port()}"]) == 2
    assert "cannot connect" in capsys.readouterr().err
    assert cli.main(["produce", str(tmp_path / "missing.jsonl")]) == 2


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


def test_port_already_in_use_is_an_error(broker):
    """Tansu itself does not exit when its port is taken (a worker thread panics, the process stays)."""
    with pytest.raises(BrokerError, match="in use"):
        EmbeddedBroker(port=broker.port, startup_timeout=5).start()


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
