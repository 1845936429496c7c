"""A real Prometheus scraping a real worker (promtool on the deploy files runs in
tests/deploy/test_prometheus_rules.py).

Needs Debian's `prometheus` package (/usr/bin/prometheus); .ci/run installs it,
elsewhere these tests are skipped when it is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from stream_app.processes import dies_with_this_process
from stream_app.client import RatingsClient
from stream_app.leagues import LeagueConfig

from tests.support.names import Topics, unique_name
from tests.support.ports import free_port
from tests.support.prometheus import INSTALL_HINT, binary
from tests.support.workers import ROOT, WorkerProcess, wait_for

DEPLOY = ROOT / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ratings.json"
LEAGUES = DEPLOY / "leagues.toml"


PROMETHEUS = binary("prometheus")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason=f"no prometheus binary on PATH: {INSTALL_HINT}")


# -- a Prometheus server ----------------------------------------------------------------


class PrometheusServer:
    """`prometheus` on a free port of 127.0.0.1, with its own config and storage in `workdir`."""

    def __init__(self, workdir: Path, config: dict[str, Any]):
        self.port = free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "prometheus.yml"
        # JSON is YAML: no YAML writer needed.
        self.config_path.write_text(json.dumps(config, indent=2))
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_this_process(),
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def ready(self) -> bool:
        if not self.alive():
            raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as exc:  # 400/422: a bad query; the body says why
            body = json.load(exc)
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 15 s; the process is reaped either way."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@pytest.fixture
def start_prometheus(tmp_path):
    servers: list[PrometheusServer] = []

    def start(config: dict[str, Any]) -> PrometheusServer:
        server = PrometheusServer(tmp_path / f"prometheus-{len(servers)}", config)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
    for server in servers:
        assert server.proc.poll() is not None, "prometheus still running after stop()"


# -- the worker, scraped ------------------------------------------------------------------


def _match(league: str, match_id: str, players: list[str]) -> dict[str, Any]:
    return {
        "league": league,
        "match_id": match_id,
        "participants": [{"player": p, "rank": i + 1} for i, p in enumerate(players)],
    }


def _events() -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Three leagues of deploy/leagues.toml's systems, a duplicate, a match the league's system rejects, and a
    void (a re-rate)."""
    events = []
    events += [_match("chess-blitz", f"c{i}", ["alice", "bob"] if i % 2 else ["bob", "carol"]) for i in range(5)]
    events += [_match("karting", f"k{i}", ["erin", "finn", "gus", "hal"][i:] + ["erin", "finn", "gus", "hal"][:i]) for i in range(3)]
    events += [_match("go", f"g{i}", ["ivy", "jon"]) for i in range(2)]
    events.append(_match("chess-blitz", "c0", ["bob", "carol"]))  # a producer's retry: duplicate_match
    events.append(_match("chess-blitz", "three", ["alice", "bob", "carol"]))  # elo rates two players: system_rule
    events.append({"schema": "match-voided.v1", "league": "chess-blitz", "match_id": "c2", "reason": "annulled"})
    applied = {"chess-blitz": 5, "karting": 3, "go": 2}
    return events, applied


async def _publish(broker_url: str, topics: Topics, events: list[dict[str, Any]]) -> None:
    async with RatingsClient(broker_url, **topics.client_kwargs()) as client:
        for event in events:  # one by one, in order: the duplicate comes after its original
            await client.publish(event)


def _by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {sample["metric"][label]: float(sample["value"][1]) for sample in result}


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel, with Grafana's interval variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable in ("$__rate_interval", "${__rate_interval}", "$__interval", "${__interval}", "$__range"):
                expr = expr.replace(variable, "1m")
            out.append((panel["title"], expr))
    return out


@needs_prometheus
def test_prometheus_scrapes_the_worker(broker, tmp_path, start_prometheus):
    prefix = unique_name("prom")
    topics = Topics(prefix)
    config = LeagueConfig.load(str(LEAGUES))
    events, applied = _events()
    worker = WorkerProcess(broker.url, topics.cli_args(), prefix, tmp_path / "worker", config=LEAGUES, name="worker")
    try:
        prometheus = start_prometheus({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(PROMETHEUS_DIR / "alerts.yml")],
            "scrape_configs": [{
                "job_name": "ratings-workers",  # the job the alerts and the dashboard name
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [f"127.0.0.1:{worker.port}"]}],
            }],
        })
        asyncio.run(_publish(broker.url, topics, events))
        wait_for(prometheus.ready, 30, "prometheus to be ready", workers=[worker])
        total = sum(applied.values())
        # Both counted: a batch's re-rates are counted as it applies them, its matches once it is committed.
        health = wait_for(lambda: (h := worker.health() or {}).get("rerates") == 1 and h.get("applied") == total and h,
                          60, f"the worker to apply {total} matches and a void", workers=[worker])
        assert health["applied"] == total and health["rerates"] == 1

        # Prometheus has scraped the worker's /metrics: every league's count, as published.
        def scraped() -> dict[str, float] | None:
            counts = _by(prometheus.query('ratings_matches_applied_total{job="ratings-workers"}'), "league")
            return counts if counts == {k: float(v) for k, v in applied.items()} else None

        wait_for(scraped, 30, "prometheus to scrape the applied matches", workers=[worker])
        samples = prometheus.query("ratings_matches_applied_total")
        assert {s["metric"]["league"]: s["metric"]["algorithm"] for s in samples} == {
            league: config.rule_for(league).algorithm for league in applied
        }
        up = prometheus.query('up{job="ratings-workers"}')
        assert [(s["metric"]["instance"], s["value"][1]) for s in up] == [(f"127.0.0.1:{worker.port}", "1")]
        assert _by(prometheus.query("ratings_duplicate_matches_total"), "league") == {"chess-blitz": 1.0}
        # A duplicate is also dead-lettered (reason duplicate_match), next to the rejected match.
        assert _by(prometheus.query("ratings_dead_letters_total"), "reason") == {"system_rule": 1.0, "duplicate_match": 1.0}
        assert _by(prometheus.query("ratings_league_players"), "league") == {"chess-blitz": 3.0, "karting": 4.0, "go": 2.0}
        assert _by(prometheus.query("ratings_worker_state == 1"), "state") == {"running": 1.0}
        assert prometheus.query("sum(ratings_rating_change_size_count)")[0]["value"][1] == str(5 * 2 + 3 * 4 + 2 * 2)
        assert prometheus.query("faust_total_rebalances"), "Faust's sensor metrics are not scraped"
        memory = _by(prometheus.query("ratings_local_store_memory_bytes"), "kind")
        assert set(memory) == {"memtables", "table_readers", "block_cache", "block_cache_pinned"}
        assert memory["memtables"] > 0  # every open database has its memtable
        # The void re-rated chess-blitz from its start (no boundary yet): c0, c1, c3 and c4 applied again.
        assert _by(prometheus.query("ratings_rerates_total"), "league") == {"chess-blitz": 1.0}
        assert _by(prometheus.query("ratings_rerate_matches_total"), "league") == {"chess-blitz": 4.0}
        assert _by(prometheus.query("ratings_rerate_remaining_matches"), "league") == {"chess-blitz": 0.0}

        # API requests are timed per endpoint.
        assert worker.get("/leagues/chess-blitz/leaderboard?limit=2")[0] == 200
        assert worker.get("/leagues/go/players/nobody")[0] == 404
        wait_for(lambda: _by(prometheus.query("ratings_http_request_seconds_count"), "endpoint") == {
            "leaderboard": 1.0, "player": 1.0}, 30, "prometheus to scrape the request latencies", workers=[worker])

        # Every dashboard query is valid PromQL on this Prometheus and finds its series
        # (rate() needs two samples in its window: wait for them).
        queries = _dashboard_queries()
        time.sleep(2.5)

        def empty_queries() -> list[str]:
            # A quantile of buckets that did not move in the window is NaN, but present.
            return [f"{title}: {expr}" for title, expr in queries if not prometheus.query(expr)]

        try:
            wait_for(lambda: not empty_queries(), 20, "every dashboard query to return series", workers=[worker])
        except AssertionError:
            raise AssertionError("dashboard queries without data:\n" + "\n".join(empty_queries())) from None
        by_league = dict(queries)["Matches applied / s by league"]
        assert set(_by(prometheus.query(by_league), "league")) == set(applied)

        # The alert rules load and evaluate on the real series; nothing fires for a healthy worker.
        def evaluated() -> list[dict[str, Any]] | None:
            rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
            never = "0001-01-01"  # lastEvaluation of a rule not evaluated yet
            return rules if rules and all(not rule["lastEvaluation"].startswith(never) for rule in rules) else None

        rules = wait_for(evaluated, 20, "the alert rules to be evaluated", workers=[worker])
        assert {rule["health"] for rule in rules} == {"ok"}, [(r["name"], r.get("lastError")) for r in rules]
        assert len(rules) >= 5
        active = [alert["labels"]["alertname"] for alert in prometheus.api("alerts")["alerts"]]
        assert active == [], active

        # Stopping the worker: the target goes down.
        worker.stop()
        wait_for(lambda: prometheus.query('up{job="ratings-workers"} == 0'), 15, "up to drop to 0")
    finally:
        worker.stop()
