"""TLS, SASL/SCRAM and least privilege on a real Kafka node (issue #44, parts 2 and 3).

One Apache Kafka 4.1.2 node (tests/support/secure_kafka.py) with a SASL_SSL listener
(SCRAM-SHA-512), an SSL listener requiring client certificates, certificates made here,
and the StandardAuthorizer with allow.everyone.if.no.acl.found=false. The topics and
ACLs are the ones docs/operations.md lists ("Access control"), read from it and applied
as they are, so the documentation is what is tested. Each program runs as its own
principal, configured only by the documented RATINGS_KAFKA_* variables:

- a worker (ratings-worker) applies what `ratings produce` (ratings-producer) sends, and
  `ratings subscribe` (ratings-subscriber, READ and DESCRIBE on rating-changes only)
  prints the changes; RatingsClient publishes and follows the same way; the worker logs
  no error, opens no connection again and again, and shows no password;
- a wrong password and a CA that did not sign the broker's certificate each give one
  line saying so, with the documented exit status, from subscribe, produce and worker;
- mutual TLS: a client with a certificate publishes, one without is told it needs one;
- least privilege: a producer without WRITE, and a subscriber without READ (with or
  without DESCRIBE), are refused at once, in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from stream_app.client import RatingsClient
from stream_app.client.kafka import CHANGELOG_CONFIGS, KafkaSecurityError
from stream_app.security import KafkaSecurity
from tests.support.brokers import KAFKA_MISSING
from tests.support.ports import free_port
from tests.support.secure_kafka import SecureKafka, secure_kafka  # noqa: F401 - the session's node
from tests.support.workers import ROOT, WorkerProcess, assigned, wait_for

pytestmark = [pytest.mark.skipif(KAFKA_MISSING is not None, reason=str(KAFKA_MISSING)), pytest.mark.broker,
              pytest.mark.xdist_group("test_kafka_security")]  # one node and one worker for the module

DOC = ROOT / "docs" / "operations.md"
WORKER, PRODUCER, SUBSCRIBER = "ratings-worker", "ratings-producer", "ratings-subscriber"
NOBODY = "ratings-nobody"  # no ACL at all
DESCRIBER = "ratings-describer"  # DESCRIBE on match-results and rating-changes, nothing else
GROUPLESS = "ratings-groupless"  # the worker's ACLs on its topics, none on its group
WRONG = "wrong-" + os.urandom(6).hex()  # a password nobody has: found in an output only if leaked
TOPIC_ARGS = ["--match-topic", "match-results", "--changes-topic", "rating-changes", "--dlq-topic", "match-results-dlq"]


# -- what docs/operations.md says to run ------------------------------------------------------
def documented_commands() -> tuple[list[list[str]], list[list[str]]]:
    """The `$TOPICS ...` and `$ACL ...` lines of the shell block of "Access control (ACLs)", split."""
    text = DOC.read_text()
    section = text[text.index("### Access control (ACLs)"):]
    block = section[section.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    topics = [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("$TOPICS ")]
    acls = [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("$ACL ")]
    return topics, acls


def options(args: list[str]) -> dict[str, list[str]]:
    """--name value pairs, each name's values in order."""
    found: dict[str, list[str]] = {}
    for name, value in zip(args[::2], args[1::2]):
        assert name.startswith("--"), args
        found.setdefault(name[2:], []).append(value)
    return found


def apply_documented(kafka: SecureKafka) -> None:
    """The documented topics (one replica here: one node) and ACLs, and those of DESCRIBER and GROUPLESS."""
    topics, acls = documented_commands()
    assert len(topics) == 5 and len(acls) == 8, (topics, acls)
    specs = [options(args) for args in topics]
    [changelog] = [spec for spec in specs if spec["topic"][0].endswith("-changelog")]
    assert dict(config.split("=", 1) for config in changelog["config"]) == CHANGELOG_CONFIGS  # as the worker creates it
    kafka.create_topics((spec["topic"][0], int(spec["partitions"][0]),
                         dict(config.split("=", 1) for config in spec.get("config", []))) for spec in specs)
    grants = [(f"User:{DESCRIBER}", "TOPIC", topic, ["DESCRIBE"], False)
              for topic in ("match-results", "rating-changes")]
    for spec in map(options, acls):
        kind, name = ("TOPIC", spec["topic"][0]) if "topic" in spec else ("GROUP", spec["group"][0])
        operations = [re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper() for op in spec["operation"]]  # DescribeConfigs
        grants.append((spec["allow-principal"][0], kind, name, operations,
                       spec.get("resource-pattern-type") == ["prefixed"]))
        if spec["allow-principal"] == [f"User:{WORKER}"] and kind == "TOPIC":
            grants.append((f"User:{GROUPLESS}", *grants[-1][1:]))
    kafka.allow(grants)


# -- the deployment: the node, its users and ACLs, one worker -----------------------------------
@dataclass
class Deployment:
    kafka: SecureKafka
    worker: WorkerProcess
    ready_at: float  # time.time() when the worker owned every partition

    @property
    def url(self) -> str:
        return f"kafka://{self.kafka.secure}"


@pytest.fixture(scope="module")
def deployment(secure_kafka, tmp_path_factory):  # noqa: F811 - the fixture imported above
    kafka = secure_kafka
    assert {WORKER, PRODUCER, SUBSCRIBER, NOBODY, DESCRIBER, GROUPLESS} <= set(kafka.passwords)
    apply_documented(kafka)
    tmp = tmp_path_factory.mktemp("kafka-security")
    worker = WorkerProcess(f"kafka://{kafka.secure}", TOPIC_ARGS, "ratings", tmp / "w", name="secure-worker",
                           env=clean_env(kafka.env(WORKER)))
    try:
        wait_for(lambda: assigned(worker) == set(range(8)), 90, "the worker to own the partitions", workers=[worker])
        yield Deployment(kafka, worker, time.time())
    finally:
        worker.stop()


def clean_env(security: dict[str, str]) -> dict[str, str]:
    """This process's environment without any RATINGS_KAFKA_* of its own, plus `security`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_KAFKA_")}
    return {**env, "PYTHONUNBUFFERED": "1", **security}


def ratings(args: list[str], security: dict[str, str], stdin: bytes | None = None,
            out: Path | None = None, err: Path | None = None) -> subprocess.Popen:
    """`ratings ARGS` as a child process (started, not awaited), its output piped or into files."""
    with contextlib.ExitStack() as files:
        process = subprocess.Popen([sys.executable, "-m", "stream_app.cli", *args], cwd=ROOT, env=clean_env(security),
                                   stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                   stdout=files.enter_context(open(out, "wb")) if out else subprocess.PIPE,
                                   stderr=files.enter_context(open(err, "wb")) if err else subprocess.PIPE,
                                   start_new_session=True)
    process.started = time.monotonic()  # type: ignore[attr-defined]
    process.stdin_bytes = stdin  # type: ignore[attr-defined]
    return process


def finish(process: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, float]:
    """(exit status, stdout and stderr as text, seconds since the start); killed after `timeout`."""
    try:
        out, err = process.communicate(process.stdin_bytes, timeout=timeout)  # type: ignore[attr-defined]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        out, err = process.communicate()
        raise AssertionError(f"{process.args[3:5]} did not end within {timeout:g} s:\n{(out or b'') + (err or b'')!r}")
    text = (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")
    return process.returncode, text, time.monotonic() - process.started  # type: ignore[attr-defined]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def match(match_id: str, league: str = "chess", winner: str = "ann", loser: str = "ben") -> dict:
    return {"match_id": match_id, "league": league,
            "participants": [{"player": winner, "rank": 1}, {"player": loser, "rank": 2}]}


def league_matches(worker: WorkerProcess, league: str) -> int:
    status, body = worker.get(f"/leagues/{league}")
    return body["matches"] if status == 200 else 0


def secrets(kafka: SecureKafka) -> list[str]:
    return [WRONG, kafka.admin_password, *kafka.passwords.values()]


# -- SASL_SSL end to end ---------------------------------------------------------------------
def test_the_worker_applies_what_ratings_produce_sends_and_subscribe_prints_the_changes(deployment, tmp_path):
    kafka, worker = deployment.kafka, deployment.worker
    out, err = tmp_path / "subscribe.out", tmp_path / "subscribe.err"
    subscribe = ratings(["subscribe", "--broker", deployment.url, "--league", "chess", "--limit", "6"],
                        kafka.env(SUBSCRIBER), out=out, err=err)
    try:
        wait_for(lambda: "subscribe: reading rating-changes" in err.read_text() or subscribe.poll() is not None, 60,
                 "ratings subscribe to be reading", interval=0.1)
        assert subscribe.poll() is None, err.read_text()
        matches = b"".join(orjson.dumps(match(f"c{i}", winner="ann" if i % 2 else "ben",
                                              loser="ben" if i % 2 else "ann")) + b"\n" for i in range(3))
        status, said, _ = finish(ratings(["produce", "-", "--broker", deployment.url], kafka.env(PRODUCER), matches))
        assert status == 0, said
        assert len(lines(said)) == 1 and lines(said)[0].startswith("produce: 3 events sent"), said  # no warning
        wait_for(lambda: league_matches(worker, "chess") == 3, 60, "the three matches applied", workers=[worker])
        assert subscribe.wait(60) == 0, err.read_text()
    finally:
        if subscribe.poll() is None:
            os.killpg(subscribe.pid, 9)
            subscribe.wait()
    changes = [orjson.loads(line) for line in out.read_text().splitlines()]
    assert len(changes) == 6
    assert {change["match_id"] for change in changes} == {"c0", "c1", "c2"}
    assert {change["player"] for change in changes} == {"ann", "ben"}
    assert all(change["league"] == "chess" for change in changes)
    assert len(lines(err.read_text())) == 1  # the line saying it reads: no warning, no error


def test_ratings_client_publishes_and_follows_as_its_principals(deployment):
    kafka, worker = deployment.kafka, deployment.worker
    producer = RatingsClient(deployment.url, security=KafkaSecurity.from_env(kafka.env(PRODUCER)), request_timeout=10)
    follower = RatingsClient(deployment.url, security=KafkaSecurity.from_env(kafka.env(SUBSCRIBER)), request_timeout=10)

    async def run() -> list[dict]:
        reading = asyncio.Event()

        async def follow() -> list[dict]:
            found = []
            async with contextlib.aclosing(follower.changes(league="go", on_ready=reading.set)) as changes:
                async for change in changes:
                    found.append(change)
                    if len(found) == 2:
                        break
            return found

        task = asyncio.create_task(follow())
        try:
            await asyncio.wait_for(reading.wait(), 30)
            async with producer:
                sent = await producer.publish(match("g1", league="go", winner="cho", loser="lee"))
                assert sent.topic == "match-results"
            return await asyncio.wait_for(task, 30)
        finally:
            task.cancel()
            await follower.stop()

    changes = asyncio.run(run())
    assert {(change["match_id"], change["player"]) for change in changes} == {("g1", "cho"), ("g1", "lee")}
    # The events are acknowledged before the batch's local write (the commit sequence): the
    # API shows the match a moment after a follower has its events.
    wait_for(lambda: league_matches(worker, "go") == 1, 10, "the match served by the API", workers=[worker])


# -- a wrong password, a CA that did not sign the broker's certificate --------------------------
def test_a_wrong_password_or_an_untrusted_ca_is_one_line_naming_the_cause(deployment, tmp_path):
    kafka, url = deployment.kafka, deployment.url
    other_ca = kafka.untrusted_ca.cert

    def worker_args(name: str) -> list[str]:
        return ["worker", "--broker", url, *TOPIC_ARGS, "--app-id", "refused", "--data-dir", str(tmp_path / name),
                "--web-port", str(free_port())]

    def refused(user: str) -> str:
        return (f"refused SASL user '{user}' with SCRAM-SHA-512 (SASL_AUTHENTICATION_FAILED: a wrong password or an "
                "unknown user): check RATINGS_KAFKA_USERNAME and RATINGS_KAFKA_PASSWORD")

    cases = {  # name: (arguments, environment, exit status, what the line says)
        "subscribe, wrong password": (["subscribe", "--broker", url], kafka.env(SUBSCRIBER, password=WRONG), 3,
                                      refused(SUBSCRIBER)),
        "produce, wrong password": (["produce", "-", "--broker", url], kafka.env(PRODUCER, password=WRONG), 3,
                                    refused(PRODUCER)),
        "worker, wrong password": (worker_args("w1"), kafka.env(WORKER, password=WRONG), 1, refused(WORKER)),
        "subscribe, other CA": (["subscribe", "--broker", url], kafka.env(SUBSCRIBER, ca=other_ca), 3,
                                # (OpenSSL's reason in the brackets: "self-signed certificate in certificate chain")
                                f"RATINGS_KAFKA_CA_FILE='{other_ca}' does not hold the CA that signed it"),
        "worker, other CA": (worker_args("w2"), kafka.env(WORKER, ca=other_ca), 1, "is not trusted"),
    }
    started = {name: ratings(args, env, b"" if args[0] == "produce" else None)
               for name, (args, env, _, _) in cases.items()}
    for name, process in started.items():
        status, said, seconds = finish(process)
        _, _, expected_status, expected = cases[name]
        assert status == expected_status, (name, said)
        assert len(lines(said)) == 1, (name, said)  # one line: no aiokafka line, no traceback
        assert expected in said, (name, said)
        assert ("is not trusted (" in said) == ("CA" in name), (name, said)
        assert seconds < 30, (name, seconds)
        assert not any(secret in said for secret in secrets(kafka)), name
    assert all(not (tmp_path / name / "state").exists() for name in ("w1", "w2"))  # stopped before anything


# -- mutual TLS ------------------------------------------------------------------------------
def test_mutual_tls_a_client_certificate_is_required_and_its_subject_is_the_principal(deployment):
    kafka, worker = deployment.kafka, deployment.worker
    url = f"kafka://{kafka.mtls}"

    async def publish() -> None:
        async with RatingsClient(url, security=KafkaSecurity.from_env(kafka.mtls_env()), request_timeout=10) as client:
            await client.publish(match("t1", league="mtls"))

    asyncio.run(publish())  # as User:ratings-producer (the certificate's CN): its ACLs apply
    wait_for(lambda: league_matches(worker, "mtls") == 1, 60, "the match sent over mutual TLS applied",
             workers=[worker])

    status, said, seconds = finish(ratings(["subscribe", "--broker", url], kafka.mtls_env(certificate=False)))
    assert status == 3 and seconds < 30, said
    [line] = lines(said)  # the TLS alert in the brackets: SSLV3_ALERT_BAD_CERTIFICATE from Java 17
    assert line.startswith(f"ratings subscribe: {url}: the broker at {kafka.mtls} requires a client certificate ("), \
        line
    assert line.endswith("): set RATINGS_KAFKA_CERT_FILE and RATINGS_KAFKA_KEY_FILE"), line

    async def without_certificate() -> str:
        client = RatingsClient(url, security=KafkaSecurity.from_env(kafka.mtls_env(certificate=False)),
                               request_timeout=10)
        try:
            with pytest.raises(KafkaSecurityError) as refused:
                await client.start()
        finally:
            await client.stop()
        return str(refused.value)

    assert "requires a client certificate" in asyncio.run(without_certificate())


# -- least privilege -------------------------------------------------------------------------
def test_without_the_acls_produce_and_subscribe_are_refused_at_once_in_one_line(deployment):
    kafka, url = deployment.kafka, deployment.url
    cases = {  # name: (arguments, principal, exit status, the line)
        "produce without WRITE": (
            ["produce", "-", "--broker", url], DESCRIBER, 3,
            f"ratings produce: {url}: SASL user '{DESCRIBER}' may not write to topic "
            "'match-results' (TOPIC_AUTHORIZATION_FAILED): it needs the ACLs WRITE and DESCRIBE on it"),
        "subscribe without any ACL": (
            ["subscribe", "--broker", url], NOBODY, 3,
            f"ratings subscribe: {url}: SASL user '{NOBODY}' may not read topic 'rating-changes' "
            "(TOPIC_AUTHORIZATION_FAILED): it needs the ACLs READ and DESCRIBE on it"),
        "subscribe with DESCRIBE, without READ": (
            ["subscribe", "--broker", url], DESCRIBER, 3,
            f"ratings subscribe: {url}: SASL user '{DESCRIBER}' may not read topic 'rating-changes' "
            "(TOPIC_AUTHORIZATION_FAILED): it needs the ACLs READ and DESCRIBE on it"),
    }
    started = {name: ratings(args, kafka.env(user), orjson.dumps(match("x1")) + b"\n" if args[0] == "produce" else None)
               for name, (args, user, _, _) in cases.items()}
    for name, process in started.items():
        status, said, seconds = finish(process)
        _, _, expected_status, expected = cases[name]
        assert status == expected_status, (name, said)
        assert len(lines(said)) == 1 and lines(said)[0].startswith(expected), (name, said)
        assert seconds < 30, (name, seconds)  # at once: a Python start and a few requests (it used to wait forever)


def test_a_worker_without_its_acls_is_refused_at_start_in_one_line(deployment, tmp_path):
    """Without READ on its group the worker used to wait silently, never given a partition;
    without DESCRIBE on its match topic it said the topic had "None partitions"."""
    url = deployment.url
    cases = {  # name: (principal, the line's start)
        "no ACL at all": (NOBODY, f"ratings worker: SASL user '{NOBODY}' may not describe topic '"),
        "its topics, not its group": (
            GROUPLESS, f"ratings worker: SASL user '{GROUPLESS}' may not use consumer group 'ratings' "
            "(GROUP_AUTHORIZATION_FAILED): a worker needs the ACL READ on its group"),
    }
    started = {name: ratings(["worker", "--broker", url, *TOPIC_ARGS, "--app-id", "ratings", "--data-dir",
                              str(tmp_path / user), "--web-port", str(free_port())], deployment.kafka.env(user))
               for name, (user, _) in cases.items()}
    for name, process in started.items():
        status, said, seconds = finish(process)
        expected = cases[name][1]
        assert status == 1, (name, said)
        assert len(lines(said)) == 1 and lines(said)[0].startswith(expected), (name, said)
        assert "(TOPIC_AUTHORIZATION_FAILED)" in said or "group" in name, (name, said)
        assert seconds < 30, (name, seconds)
    assert assigned(deployment.worker) == set(range(8))  # the group's worker kept its partitions


# -- the worker under its ACLs ---------------------------------------------------------------------
def test_the_worker_logs_no_error_asks_nothing_again_and_shows_no_password(deployment):
    """Its ACLs are enough: no authorization error, no warning; and it does not open new
    connections again and again (without DescribeConfigs on its changelog it opened two
    authenticated connections a second, asking for min.insync.replicas)."""
    worker = deployment.worker
    wait_for(lambda: time.time() > deployment.ready_at + 6, 10, "six seconds of the worker running", interval=0.2)
    log = worker.log_path.read_text(errors="replace")
    assert f"Authenticated as {WORKER} via SCRAM-SHA-512" in log  # the log shows each new connection
    logins = [time.mktime(time.strptime(found, "%Y-%m-%d %H:%M:%S"))
              for found in re.findall(rf"^\[(\S+ \S+),\d+\] .*Authenticated as {WORKER} ", log, re.M)]
    later = [at for at in logins if at > deployment.ready_at + 3]
    assert len(later) <= 2, f"{len(later)} new connections after the start: {later}"
    # (A group's first coordinator lookup on a new broker fails while Kafka makes __consumer_offsets.)
    problems = [line for line in log.splitlines() if re.search(r"\] \[(WARNING|ERROR|CRITICAL)\]|Traceback", line)
                and not re.search(r"GroupCoordinatorNotAvailable|Marking the coordinator dead", line)]
    assert problems == [], problems
    for path in ("/health", "/metrics"):
        status, body = worker.get(path)
        assert status == 200 and not any(secret in str(body) for secret in secrets(deployment.kafka)), path
    assert worker.health()["status"] == "ok"
    assert not any(secret in log for secret in secrets(deployment.kafka))
