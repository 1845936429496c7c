"""Security of the worker and the clients.

- The HTTP API listens on 127.0.0.1 unless configured, is read-only, caps
  `limit`, and refuses path values that are not valid ids.
- No secret is logged: a worker (and `ratings produce`) with
  RATINGS_KAFKA_PASSWORD set never shows it, in its log, /health or /metrics,
  whether it runs (PLAINTEXT: the password is unused) or fails (SASL against
  the embedded broker).
- KafkaSecurity builds the right aiokafka and Faust settings for SASL/SCRAM
  and TLS (unit level).

The embedded broker (Tansu 0.6.0) cannot serve as a SASL or TLS peer, checked
here rather than assumed: without `--authentication` it answers a SASL
handshake with UnsupportedSaslMechanism; with it, every unauthenticated
request is refused (NotAuthenticated), including `tansu user create`'s own, and
memory storage does not survive a restart, so no SCRAM user can ever be
created. `--cert`/`--key` are accepted but the listener still speaks plaintext
(a TLS ClientHello ends in "early eof"), and the two flags cannot be given
together. So the SASL/TLS paths are tested at the settings level, plus one
real connection showing a SASL client fails cleanly against a plaintext broker.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from stream_app.client import RatingsClient
from stream_app.security import KafkaSecurity, SecurityConfigError

from tests.support.kafka import ensure_topics, keyed, publish, topic_args as topics_of
from tests.support.leagues import CONFIG, league_matches
from tests.support.names import unique_name
from tests.support.ports import free_port
from tests.support.workers import ROOT, WorkerProcess, wait_for

# Its tests share the workers of a module fixture: under pytest-xdist, one process runs them all.
pytestmark = pytest.mark.xdist_group("test_security")

SECRET = "pa55-W0rd-" + os.urandom(6).hex()  # unique: found only if leaked


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """An HTTP request with the path sent exactly as given (no client-side normalization)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body or b"")
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def listening_addresses(port: int) -> set[str]:
    """Local addresses of sockets in LISTEN state on `port` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for name, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, hexport = local.split(":")
            if state != "0A" or int(hexport, 16) != port:
                continue
            if width == 8:
                found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
            else:
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 32, 8))
                found.add(socket.inet_ntop(socket.AF_INET6, raw))
    return found


def non_loopback_address() -> str | None:
    """This machine's address on its default route, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture(scope="module")
def running_worker(broker, tmp_path_factory):
    """A worker with default web settings, a password in its environment (PLAINTEXT: unused),
    debug logging, and a few applied matches."""
    tmp = tmp_path_factory.mktemp("security")
    prefix = unique_name("sec")
    topic_args = [*topics_of(prefix), "--loglevel", "debug"]
    config = tmp / "leagues.toml"
    config.write_text(CONFIG)
    saved = {k: os.environ.get(k) for k in ("RATINGS_KAFKA_USERNAME", "RATINGS_KAFKA_PASSWORD", "RATINGS_WEB_HOST")}
    os.environ["RATINGS_KAFKA_USERNAME"] = "ratings-user"
    os.environ["RATINGS_KAFKA_PASSWORD"] = SECRET
    os.environ.pop("RATINGS_WEB_HOST", None)
    try:
        worker = WorkerProcess(broker.url, topic_args, prefix, tmp / "w", config, name="sec")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    events = [{"match_id": f"m{i}", "league": "chess",
               "participants": [{"player": "ann", "rank": 1 + i % 2}, {"player": "ben", "rank": 2 - i % 2}]} for i in range(5)]
    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(events)))
        wait_for(lambda: league_matches(worker, "chess") == 5, 90, "five matches applied", workers=[worker])
        yield worker
    finally:
        worker.stop()


def test_the_api_listens_on_loopback_only_by_default(running_worker):
    addresses = listening_addresses(running_worker.port)
    assert addresses == {"127.0.0.1"}, addresses
    other = non_loopback_address()
    if other is not None:  # and it is really not reachable there
        with pytest.raises(OSError):
            socket.create_connection((other, running_worker.port), timeout=2).close()


def test_the_api_is_read_only(running_worker):
    port = running_worker.port
    board = running_worker.get("/leagues/chess/leaderboard")
    league = running_worker.get("/leagues/chess")
    paths = ["/leagues/chess/leaderboard", "/leagues/chess", "/leagues/chess/players/ann", "/leagues/new/players/x",
             "/health", "/ready", "/metrics"]
    body = orjson.dumps({"rating": 9999, "matches": 0})
    for path in paths:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, _ = request(port, method, path, body)
            assert status == 405, (method, path, status)
    assert running_worker.get("/leagues/chess/leaderboard") == board
    assert running_worker.get("/leagues/chess") == league
    assert running_worker.get("/leagues/new")[0] == 404
    # Faust's raw table views are off. (Faust's /router/ views stay: they list which
    # worker owns which table partition, never a value.)
    for path in ("/table/players/", "/table/leagues/", "/table/players/chess%1Fann", "/table/leagues/chess"):
        status, _ = request(port, "GET", path)
        assert status == 404, (path, status)
    for method in ("POST", "PUT", "DELETE"):
        assert request(port, method, "/router/")[0] == 405


def test_limit_and_offset_are_capped(running_worker):
    get = running_worker.get
    assert get("/leagues/chess/leaderboard?limit=100000")[0] == 200
    for query in ("limit=100001", "limit=0", "limit=-1", "limit=abc", "limit=1e5", "limit=99999999999999999999999",
                  "offset=-1", "offset=x", "limit=10&offset=-5"):
        status, body = get(f"/leagues/chess/leaderboard?{query}")
        assert status == 400 and "error" in body, (query, status, body)


def test_path_values_that_are_not_ids_are_refused(running_worker):
    port = running_worker.port
    bad_leagues = ["a%2Fb", "a%2fb", "%2E%2E", "%2e", "..%2F..%2Fetc", "bad%20id", "sch%C3%A4ch", "%00", "a%1Fb",
                   "L" * 129, "a%0Ab"]
    for league in bad_leagues:
        for path in (f"/leagues/{league}", f"/leagues/{league}/leaderboard", f"/leagues/{league}/players/ann"):
            status, body = request(port, "GET", path)
            assert status == 400, (path, status, body[:200])
            assert "error" in orjson.loads(body)
    for player in ["a%2Fb", "%2E%2E", "..%2F..", "x%20y", "P" * 129, "%C3%A9"]:
        status, body = request(port, "GET", f"/leagues/chess/players/{player}")
        assert status == 400, (player, status, body[:200])
    # Dot segments are not a way out either: at most a 404 for a route that does not exist.
    for path in ("/leagues/../health", "/leagues/chess/../../metrics", "/leagues/chess/players/../leaderboard"):
        status, body = request(port, "GET", path)
        assert status in (400, 404), (path, status)
    assert request(port, "GET", "/leagues/chess/players/ann")[0] == 200


def test_no_secret_in_the_log_health_or_metrics(running_worker):
    for path in ("/health", "/metrics", "/leagues/chess", "/leagues/chess/leaderboard"):
        status, body = request(running_worker.port, "GET", path)
        assert status == 200 and SECRET.encode() not in body, path
    time.sleep(1.0)  # let the debug log flush
    log = running_worker.log_path.read_text(errors="replace")
    assert "DEBUG" in log and len(log) > 1000
    assert SECRET not in log


def test_a_sasl_worker_against_the_plaintext_broker_fails_without_leaking_the_password(broker, tmp_path):
    prefix = unique_name("sasl")
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "RATINGS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
           "RATINGS_KAFKA_USERNAME": "ratings-user", "RATINGS_KAFKA_PASSWORD": SECRET}
    args = [sys.executable, "-m", "stream_app.cli", "worker", "--broker", broker.url, "--app-id", prefix,
            "--match-topic", f"{prefix}.m", "--changes-topic", f"{prefix}.c", "--dlq-topic", f"{prefix}.d",
            "--data-dir", str(tmp_path / "d"), "--web-port", str(free_port()), "--loglevel", "debug"]
    worker = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        out, _ = worker.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, 9)
        out, _ = worker.communicate()
        pytest.fail("a SASL worker against a broker without SASL should give up, not hang:\n" + out.decode()[-2000:])
    text = out.decode(errors="replace")
    assert worker.returncode != 0
    assert "UnsupportedSaslMechanism" in text or "SASL" in text, text[-2000:]
    assert SECRET not in text

    produce = subprocess.run([sys.executable, "-m", "stream_app.cli", "produce", "-", "--broker", broker.url,
                              "--match-topic", f"{prefix}.m"], cwd=ROOT, env=env, capture_output=True, timeout=90,
                             input=b'{"match_id":"m","league":"l","participants":[{"player":"a","rank":1},{"player":"b","rank":2}]}\n')
    assert produce.returncode == 4, produce  # the broker closes a SASL handshake: no broker answers
    assert SECRET.encode() not in produce.stdout + produce.stderr


def test_a_sasl_client_against_the_plaintext_broker_fails_cleanly(broker):
    security = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username="u", password=SECRET)
    client = RatingsClient(broker.url, security=security, request_timeout=5)
    assert SECRET not in repr(client) and SECRET not in str(security)

    async def run():
        from aiokafka.errors import KafkaConnectionError

        with pytest.raises(KafkaConnectionError) as caught:
            await asyncio.wait_for(client.start(), 60)
        assert SECRET not in str(caught.value)
        await client.stop()

    asyncio.run(run())


# -- KafkaSecurity: settings for aiokafka and Faust -------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A self-signed CA/server certificate and key (openssl), for SSL contexts."""
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                        "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"openssl is needed to make a test certificate: {exc}")
    return cert, key


def test_sasl_scram_over_tls_settings(tls_files):
    cert, key = tls_files
    env = {"RATINGS_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "RATINGS_KAFKA_SASL_MECHANISM": "scram_sha_512",
           "RATINGS_KAFKA_USERNAME": "svc", "RATINGS_KAFKA_PASSWORD": SECRET,
           "RATINGS_KAFKA_CA_FILE": str(cert), "RATINGS_KAFKA_CERT_FILE": str(cert), "RATINGS_KAFKA_KEY_FILE": str(key)}
    security = KafkaSecurity.from_env(env)
    assert (security.protocol, security.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert security.tls and security.sasl
    assert SECRET not in repr(security) and "'***'" in repr(security)

    kwargs = security.aiokafka_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "svc" and kwargs["sasl_plain_password"] == SECRET
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs(), "the CA file is loaded"
    # aiokafka accepts them (its constructors check the combination).
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def build():
        AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", **kwargs)
        AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", **kwargs)

    asyncio.run(build())

    import faust
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    settings = security.faust_settings()
    credentials = settings["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password, str(credentials.mechanism.value)) == ("svc", SECRET, "SCRAM-SHA-512")
    auth = credentials_to_aiokafka_auth(credentials)
    assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert auth["sasl_plain_username"] == "svc" and auth["sasl_plain_password"] == SECRET
    assert auth["ssl_context"] is not None
    app = faust.App(unique_name("sec-app"), broker="kafka://127.0.0.1:1", **settings)
    assert app.conf.broker_credentials is credentials


def test_sasl_plaintext_and_tls_only_settings(tls_files):
    cert, _ = tls_files
    import faust
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    sasl = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", username="u", password="p")
    assert sasl.aiokafka_kwargs() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
                                      "sasl_plain_username": "u", "sasl_plain_password": "p"}
    auth = credentials_to_aiokafka_auth(sasl.faust_settings()["broker_credentials"])
    assert auth["security_protocol"] == "SASL_PLAINTEXT" and auth["sasl_mechanism"] == "SCRAM-SHA-256"

    tls = KafkaSecurity(protocol="SSL", cafile=str(cert))
    kwargs = tls.aiokafka_kwargs()
    assert kwargs["security_protocol"] == "SSL" and isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert "sasl_mechanism" not in kwargs
    credentials = tls.faust_settings()["broker_credentials"]
    assert isinstance(credentials, faust.SSLCredentials)
    assert credentials_to_aiokafka_auth(credentials)["security_protocol"] == "SSL"

    assert KafkaSecurity().aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert KafkaSecurity().faust_settings() == {}
    # A password given with PLAINTEXT is never passed on.
    plain = KafkaSecurity.from_env({"RATINGS_KAFKA_PASSWORD": SECRET, "RATINGS_KAFKA_USERNAME": "u"})
    assert SECRET not in repr(plain.aiokafka_kwargs()) and plain.faust_settings() == {}


@pytest.mark.parametrize("env, message", [
    ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RATINGS_KAFKA_USERNAME": "u"}, "needs RATINGS_KAFKA_USERNAME and RATINGS_KAFKA_PASSWORD"),
    ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "RATINGS_KAFKA_PASSWORD": "p"}, "needs RATINGS_KAFKA_USERNAME"),
    ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "TLS"}, "RATINGS_KAFKA_SECURITY_PROTOCOL: must be one of"),
    ({"RATINGS_KAFKA_SASL_MECHANISM": "GSSAPI"}, "RATINGS_KAFKA_SASL_MECHANISM: must be one of"),
    ({"RATINGS_KAFKA_CA_FILE": "/etc/hostname"}, "does not use TLS"),
    ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SSL", "RATINGS_KAFKA_CA_FILE": "/nonexistent/ca.pem"}, "RATINGS_KAFKA_CA_FILE='/nonexistent/ca.pem': no such file"),
    ({"RATINGS_KAFKA_SECURITY_PROTOCOL": "SSL", "RATINGS_KAFKA_KEY_FILE": "/etc/hostname"}, "RATINGS_KAFKA_KEY_FILE is set without RATINGS_KAFKA_CERT_FILE"),
])
def test_invalid_security_settings_name_the_variable_and_never_the_password(env, message):
    env = {**env}
    if "RATINGS_KAFKA_PASSWORD" in env:
        env["RATINGS_KAFKA_PASSWORD"] = SECRET
    with pytest.raises(SecurityConfigError) as caught:
        KafkaSecurity.from_env(env)
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)
