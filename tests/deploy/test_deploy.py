"""The deployment files: Dockerfile, docker-compose.yml, Prometheus, Grafana, Kubernetes.

No Docker engine or cluster is needed: the files are parsed and checked
against each other and against the code they configure (the CLI's RATINGS_*
variables, the metric names, the security variables, the league config), and
run through validators that work offline: Debian's docker-compose (1.29)
`config` for the compose file (skipped when the binary is missing; .ci/run
installs it) and kubernetes-validate's bundled schemas for the Kubernetes
manifests. kubernetes-validate has no schema for the Prometheus operator's
ServiceMonitor (a custom resource): its structure is checked here by hand.
Prometheus itself runs in tests/e2e/test_prometheus.py, promtool in
tests/deploy/test_prometheus_rules.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from stream_app import kafka_broker
from stream_app.stream import observe as metrics
from stream_app.cli import build_parser
from stream_app.cli.flags import settings_from
from stream_app.client.kafka import CHANGELOG_CONFIGS
from stream_app.leagues import LeagueConfig
from stream_app.security import ENV as SECURITY_ENV
from stream_app.security import KafkaSecurity
from tests.support.workers import ROOT

DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ratings.json"
K8S = DEPLOY / "kubernetes"
WORKERS = ("worker-1", "worker-2")
TOPICS = ("match-results", "rating-changes", "match-results-dlq", "match-results-by-league")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def worker_args(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """`ratings worker` parsed with `env` as the environment (the flags' defaults come from it)."""
    for name in [n for n in os.environ if n.startswith("RATINGS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    return build_parser().parse_args(["worker"])


def cli_variables() -> set[str]:
    """RATINGS_* variables the command line reads (named in the flags' help, '[RATINGS_X]')."""
    found: set[str] = set()
    for source in (ROOT / "stream_app" / "cli").glob("*.py"):
        found |= set(re.findall(r"RATINGS_[A-Z_]+", source.read_text()))
    return found


# -- Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comment lines dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue  # Docker drops comment lines, also inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    return out


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instr, args in instructions:
        if instr == "FROM":
            result.append([])
        assert result, f"{instr} before the first FROM"
        result[-1].append((instr, args))
    return result


def env_pairs(args: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in shlex.split(args))


@pytest.fixture(scope="module")
def docker() -> list[list[tuple[str, str]]]:
    return stages(dockerfile_instructions(DOCKERFILE.read_text()))


def final(docker: list[list[tuple[str, str]]], instr: str) -> list[str]:
    return [args for i, args in docker[-1] if i == instr]


def test_dockerfile_bases_are_python_3_11_slim(docker):
    assert len(docker) >= 1
    for stage in docker:
        image = stage[0][1].split()[0]
        assert image.startswith("python:3.11-slim"), image
    assert docker[-1][0][1].split()[0] == "python:3.11-slim"


def test_dockerfile_runs_as_a_non_root_user(docker):
    users = final(docker, "USER")
    assert users, "the final stage has no USER: the worker would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    # The user is created in the final stage with that uid, owning the data directory.
    creates = " ".join(final(docker, "RUN"))
    assert re.search(rf"useradd\b.*--uid {user}\b", creates), creates
    assert re.search(r"chown \S+ /data", creates), "/data is not given to the user"
    # Nothing in the final stage runs as root after the switch.
    order = [instr for instr, _ in docker[-1]]
    assert "RUN" not in order[order.index("USER"):]


def test_dockerfile_installs_the_project_with_pinned_versions(docker):
    runs = [args for stage in docker for instr, args in stage if instr == "RUN"]
    installs = [r for r in runs if re.search(r"pip install[^&]*-c constraints\.txt \.", r)]
    assert installs, "no `pip install -c constraints.txt .`"
    copies = " ".join(args for stage in docker for instr, args in stage if instr == "COPY")
    assert "constraints.txt" in copies and "pyproject.toml" in copies
    # The runtime stage takes the installed venv from the build stage.
    assert any(args.startswith("--from=") for args in final(docker, "COPY"))


def test_dockerfile_copies_only_files_that_exist_and_are_not_ignored(docker):
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")
    }
    for stage in docker:
        for instr, args in stage:
            if instr != "COPY" or args.startswith("--from="):
                continue
            *sources, _dest = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such file in the build context"
                assert PurePosixPath(source).parts[0] not in ignored, f"COPY {source}: excluded by .dockerignore"
    # The package's build needs these (pyproject: readme, force-included schemas, the package).
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = " ".join(args for stage in docker for instr, args in stage if instr == "COPY")
    assert pyproject["project"]["readme"] in copied
    for path in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]:
        assert path in copied
    for package in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert package in copied


def test_dockerfile_entrypoint_is_the_ratings_worker(docker):
    assert json.loads(final(docker, "ENTRYPOINT")[-1]) == ["ratings"]
    assert json.loads(final(docker, "CMD")[-1]) == ["worker"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "ratings" in pyproject["project"]["scripts"]


def test_dockerfile_environment_reaches_the_worker(docker, monkeypatch):
    env: dict[str, str] = {}
    for args in final(docker, "ENV"):
        env.update(env_pairs(args))
    assert env["RATINGS_WEB_HOST"] == "0.0.0.0"
    assert env["RATINGS_DATA_DIR"] == "/data"
    assert {k for k in env if k.startswith("RATINGS_")} <= cli_variables()
    ratings_env = {k: v for k, v in env.items() if k.startswith("RATINGS_")}
    args = worker_args(ratings_env, monkeypatch)
    assert (args.web_host, args.data_dir) == ("0.0.0.0", "/data")
    volumes = [path for args_ in final(docker, "VOLUME")
               for path in (json.loads(args_) if args_.startswith("[") else args_.split())]
    assert "/data" in volumes, volumes
    exposed = {p.split("/")[0] for args_ in final(docker, "EXPOSE") for p in args_.split()}
    assert str(args.web_port) in exposed, (args.web_port, exposed)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        code = self.server.status if self.path == "/health" else 404  # type: ignore[attr-defined]
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("status, healthy", [(200, True), (500, False)])
def test_dockerfile_healthcheck_asks_the_worker_health(docker, status, healthy):
    check = final(docker, "HEALTHCHECK")[-1]
    assert " CMD [" in f" {check}", "HEALTHCHECK should use the exec form"
    command = json.loads(check[check.index("CMD") + 3:].strip())
    assert command[0] == "python" and "/health" in " ".join(command)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    server.status = status  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        run = subprocess.run([sys.executable, *command[1:]], capture_output=True, timeout=30,
                             env={"RATINGS_WEB_PORT": str(server.server_address[1]), "PATH": "/usr/bin:/bin"})
    finally:
        server.shutdown()
        server.server_close()
    assert (run.returncode == 0) == healthy, run.stderr.decode()


# -- docker-compose.yml -------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_has_the_services(compose):
    services = compose["services"]
    assert {"kafka", "topics", *WORKERS, "prometheus", "grafana"} <= set(services)
    assert not any("zookeeper" in name for name in services)


def test_compose_kafka_is_a_single_kraft_node(compose):
    kafka = compose["services"]["kafka"]
    env = service_env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "healthcheck" in kafka


def test_compose_kafka_is_the_version_and_settings_the_tests_run(compose):
    """One set of broker settings: the compose file's Kafka (image and KAFKA_* settings) is
    what `ratings kafka` and the tests run (deploy/kafka/broker.properties, pom.xml)."""
    pom = kafka_broker.POM.read_text()
    assert re.search(r"<kafka.version>([^<]+)</kafka.version>", pom).group(1) == kafka_broker.KAFKA_VERSION
    for name in ("kafka", "topics"):
        assert compose["services"][name]["image"] == f"apache/kafka:{kafka_broker.KAFKA_VERSION}", name
    env = service_env(compose["services"]["kafka"])
    tested = {f"KAFKA_{key.upper().replace('.', '_')}": value for key, value in kafka_broker.broker_settings(1).items()}
    assert {key: env.get(key) for key in tested} == tested
    assert len(tested) >= 13  # the file was read: partitions, rebalance delay, message size, replication, ...


def test_compose_topic_job_creates_the_topics_with_the_workers_partitions(compose):
    job = compose["services"]["topics"]
    script = " ".join(job["command"]) if isinstance(job["command"], list) else job["command"]
    for topic in TOPICS:
        assert topic in script, topic
    assert "--partitions 8" in script and "--if-not-exists" in script
    assert job["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in WORKERS:
        env = service_env(compose["services"][name])
        assert env["RATINGS_PARTITIONS"] == "8"
        match = env.get("RATINGS_MATCH_TOPIC", "match-results")
        # The worker's own topics, including the re-keying topic it derives from the match topic.
        for topic in (match, env.get("RATINGS_CHANGES_TOPIC", "rating-changes"),
                      env.get("RATINGS_DLQ_TOPIC", "match-results-dlq"), f"{match}-by-league"):
            assert topic in TOPICS
        assert compose["services"][name]["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_compose_workers(compose, monkeypatch):
    ports, volumes = set(), set()
    for name in WORKERS:
        service = compose["services"][name]
        build = service["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        env = service_env(service)
        assert env["RATINGS_BROKER"] == "kafka://kafka:9092"
        assert set(k for k in env if k.startswith("RATINGS_")) <= cli_variables()
        args = worker_args({k: v for k, v in env.items() if k.startswith("RATINGS_")}, monkeypatch)
        assert args.broker == "kafka://kafka:9092" and args.web_host == "0.0.0.0"
        ports.add(args.web_port)
        # Peers route API requests to http://<service>:<port>.
        assert env["RATINGS_ADVERTISED_URL"] == f"http://{name}:{args.web_port}"
        mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"]}
        data = mounts[args.data_dir]
        assert not data.startswith(".") and data in compose["volumes"], f"{name}: /data should be a named volume"
        volumes.add(data)
        config_dir = mounts[args.config]
        assert (ROOT / config_dir).resolve() == (DEPLOY / "leagues.toml").resolve()
        LeagueConfig.load(str(ROOT / config_dir))
        assert f"{args.web_port}:{args.web_port}" in " ".join(service.get("ports", []))
    assert len(ports) == len(WORKERS), "the workers need different web ports"
    assert len(volumes) == len(WORKERS), "the workers need separate data volumes"


def test_compose_bind_mounts_exist(compose):
    for name, service in compose["services"].items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"


def created_topics(script: str) -> dict[str, list[str]]:
    """{topic: the words of its `kafka-topics.sh --create` command} in the topic job's script,
    its `for X in ...; do ... done` loops unrolled ($$ is compose's escape for the shell's $)."""
    text = script.replace("\\\n", " ")
    loop = r"for (\w+) in ([^;]+); do(.*?)\bdone"
    commands = re.sub(loop, "", text, flags=re.S).splitlines()
    for var, items, body in re.findall(loop, text, re.S):
        commands += [line for item in items.split() for line in body.replace(f"$${var}", item).splitlines()]
    created: dict[str, list[str]] = {}
    for command in commands:
        if "--create" in command:
            words = shlex.split(command)
            created[words[words.index("--topic") + 1]] = words
    return created


def test_compose_topic_job_creates_the_changelog_as_the_worker_does(compose, monkeypatch):
    job = compose["services"]["topics"]
    created = created_topics(job["command"][0] if isinstance(job["command"], list) else job["command"])
    args = worker_args({k: v for k, v in service_env(compose["services"][WORKERS[0]]).items() if k.startswith("RATINGS_")},
                       monkeypatch)
    changelogs = {settings_from(args).changelog_topic}
    assert set(created) == set(TOPICS) | changelogs
    for topic, words in created.items():
        assert words[words.index("--partitions") + 1] == str(args.partitions), topic
        configs = [words[i + 1] for i, word in enumerate(words) if word == "--config"]
        assert configs == ([f"{k}={v}" for k, v in CHANGELOG_CONFIGS.items()] if topic in changelogs else []), topic


def test_compose_health_checks_and_start_order(compose, docker):
    services = compose["services"]

    def has_health_check(name: str) -> bool:
        service = services[name]
        if "healthcheck" in service:
            return not service["healthcheck"].get("disable", False) and bool(service["healthcheck"]["test"])
        # Built from deploy/Dockerfile: the image's HEALTHCHECK.
        return "build" in service and bool(final(docker, "HEALTHCHECK"))

    for name, service in services.items():
        one_shot = service.get("restart") == "no"
        assert one_shot or has_health_check(name), f"{name} has no health check"
        for dependency, condition in (service.get("depends_on") or {}).items():
            condition = condition["condition"]
            if condition == "service_healthy":
                assert has_health_check(dependency), f"{name} waits for {dependency}, which has no health check"
            elif condition == "service_completed_successfully":
                assert services[dependency].get("restart") == "no", f"{dependency} is not a one-shot job"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


DOCKER_COMPOSE = shutil.which("docker-compose")
needs_docker_compose = pytest.mark.skipif(
    DOCKER_COMPOSE is None,
    reason="no docker-compose binary on PATH: install Debian's docker-compose package "
           "(apt-get install docker-compose); .ci/run does it in CI")


def docker_compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` on `path` (relative paths from the repository root): needs no Docker engine."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPOSE_", "DOCKER_")) and k != "GRAFANA_ADMIN_PASSWORD"}
    return subprocess.run([DOCKER_COMPOSE, "--project-directory", str(ROOT), "-f", str(path), "config"],
                          capture_output=True, text=True, timeout=120, env=env)


@needs_docker_compose
def test_docker_compose_config_accepts_the_compose_file(compose):
    run = docker_compose_config(COMPOSE)
    assert run.returncode == 0, run.stderr
    resolved = yaml.safe_load(run.stdout)["services"]
    assert set(resolved) == set(compose["services"])
    # The shared worker settings (YAML anchors and merges) reached both workers, with their own on top.
    for name in WORKERS:
        worker = resolved[name]
        assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert (Path(worker["build"]["context"]) / worker["build"]["dockerfile"]).resolve() == DOCKERFILE
        assert worker["environment"]["RATINGS_BROKER"] == "kafka://kafka:9092"
        assert worker["environment"]["RATINGS_ADVERTISED_URL"].startswith(f"http://{name}:")
    # ${GRAFANA_ADMIN_PASSWORD:-admin} is interpolated.
    assert resolved["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "admin"


BROKEN_COMPOSE = {
    "unchanged": (lambda c: None, None),  # the control: the rewritten copy itself passes
    "depends on a missing service": (
        lambda c: c["services"]["worker-1"]["depends_on"].update({"kafak": {"condition": "service_healthy"}}),
        "kafak"),
    "misspelt key": (lambda c: c["services"]["prometheus"].update({"helthcheck": {"test": ["CMD", "true"]}}),
                     "helthcheck"),
    "bad health check interval": (lambda c: c["services"]["kafka"]["healthcheck"].update({"interval": "5 seconds"}),
                                  "interval"),
}


@needs_docker_compose
@pytest.mark.parametrize("case", BROKEN_COMPOSE)
def test_docker_compose_config_rejects_a_broken_copy(compose, tmp_path, case):
    mutate, complaint = BROKEN_COMPOSE[case]
    broken = copy.deepcopy(compose)
    mutate(broken)
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    run = docker_compose_config(path)
    if complaint is None:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode != 0, f"docker-compose config accepted a compose file with a {case}"
        assert complaint in run.stderr, run.stderr


def test_prometheus_scrapes_both_compose_workers_every_5_seconds(compose, monkeypatch):
    config = load_yaml(PROMETHEUS_YML)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["ratings-workers"]
    assert job.get("scrape_interval", config["global"]["scrape_interval"]) == "5s"
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    expected = set()
    for name in WORKERS:
        args = worker_args({k: v for k, v in service_env(compose["services"][name]).items() if k.startswith("RATINGS_")},
                           monkeypatch)
        expected.add(f"{name}:{args.web_port}")
    assert targets == expected
    for rule_file in config["rule_files"]:
        assert (PROMETHEUS_YML.parent / rule_file).is_file()
    mounts = compose["services"]["prometheus"]["volumes"]
    assert any(m.startswith("./deploy/prometheus:/etc/prometheus") for m in mounts)
    assert "--config.file=/etc/prometheus/prometheus.yml" in compose["services"]["prometheus"]["command"]


def test_alert_rules_use_the_workers_metrics():
    rules = [rule for group in load_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"] for rule in group["rules"]]
    assert len(rules) >= 4
    for rule in rules:
        assert rule["alert"] and rule["labels"]["severity"] in ("info", "warning", "critical")
        assert metric_names(rule["expr"]) <= known_metric_names(), rule["alert"]
    used = set().union(*(metric_names(rule["expr"]) for rule in rules))
    for name in ("up", "ratings_consumer_lag", "ratings_dead_letters_total", "ratings_worker_state",
                 "ratings_matches_applied_total"):
        assert name in used, name


def test_every_alert_has_a_unit_test_where_it_fires():
    """alerts.test.yml (run by promtool in tests/deploy/test_prometheus_rules.py) has a case where each alert fires."""
    alerts = {rule["alert"] for group in load_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"]
              for rule in group["rules"]}
    tests = load_yaml(DEPLOY / "prometheus" / "alerts.test.yml")["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case["exp_alerts"]}
    assert fired == alerts
    # What the issue asks for: worker down, lag growing, dead letters, no matches applied, recovery too slow.
    assert {"RatingsWorkerDown", "RatingsConsumerLagGrowing", "RatingsDeadLetters", "RatingsProcessingStalled",
            "RatingsTakeUpTooSlow"} <= alerts


# -- Grafana ----------------------------------------------------------------------------------


PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan", "atan2",
}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (functions, keywords, labels, strings and ranges left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def test_metric_names_extraction():
    assert metric_names('sum by (league) (rate(ratings_matches_applied_total{league="x"}[$__rate_interval]))') == {
        "ratings_matches_applied_total"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) > 30 and on (job) up == 0") == {
        "a_bucket", "up"}
    assert metric_names("a / ignoring(x) b or c * 0") == {"a", "b", "c"}


def _exposed(families: Any) -> set[str]:
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
    return {family.name + suffix for family in families for suffix in suffixes.get(family.type, ("",))}


def known_metric_names() -> set[str]:
    """Sample names the worker exposes: stream_app/stream/observe.py, Faust's sensor (prefix faust_),
    prometheus_client's process metrics (prefix process_, on Linux) and `up`."""
    from faust.sensors.prometheus import FaustMetrics
    from prometheus_client import CollectorRegistry, ProcessCollector
    from prometheus_client.metrics import MetricWrapperBase

    names = set()
    for value in vars(metrics).values():
        if isinstance(value, (MetricWrapperBase, metrics.BatchHistogram)):
            names |= _exposed(value.describe())
    registry = CollectorRegistry()
    FaustMetrics.create(registry, "faust")  # the worker's setup_prometheus_sensors(app, name_prefix="faust")
    ProcessCollector(registry=registry)  # in the default registry the worker serves
    names |= _exposed(registry.collect())
    return names | {"up"}  # Prometheus' own, per target


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_dashboard_panels_query_only_existing_metrics(dashboard):
    known = known_metric_names()
    assert "ratings_matches_applied_total" in known and "faust_total_rebalances" in known
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']!r}"
            unknown = names - known
            assert not unknown, f"{panel['title']}: unknown metrics {sorted(unknown)} in {target['expr']!r}"
            assert all(n.startswith(("ratings_", "faust_", "process_")) or n == "up" for n in names)


def test_dashboard_shows_what_operators_need(dashboard):
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard["panels"]}
    everything = " ".join(exprs.values())

    def panel_with(*parts: str) -> str:
        found = [title for title, expr in exprs.items() if all(part in expr for part in parts)]
        assert found, f"no panel with {parts}"
        return found[0]

    panel_with("ratings_matches_applied_total", "by (league)")
    panel_with("ratings_duplicate_matches_total")
    panel_with("ratings_dead_letters_total", "by (reason)")
    latency = panel_with("ratings_processing_latency_seconds_bucket")
    assert "histogram_quantile(0.5," in exprs[latency] and "histogram_quantile(0.99," in exprs[latency]
    panel_with("ratings_rating_change_size")
    panel_with("ratings_league_players", "league")
    panel_with("ratings_consumer_lag", "partition")
    panel_with("ratings_worker_state")
    panel_with("process_resident_memory_bytes", "ratings_local_store_memory_bytes")
    assert "$__rate_interval" in everything


def test_dashboard_layout_and_datasource(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (area & cells), f"{panel['title']} overlaps another panel"
        cells |= area
        for item in (panel, *panel["targets"]):
            assert item["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    # Its default is the provisioned datasource.
    provisioned = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert variable["current"]["value"] in {d["uid"] for d in provisioned}


def test_grafana_provisioning_matches_compose(compose):
    grafana = compose["services"]["grafana"]
    mounts = {m.split(":")[0]: m.split(":")[1] for m in grafana["volumes"]}
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    (prometheus,) = [d for d in datasources if d["type"] == "prometheus"]
    assert prometheus["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]
    providers = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "ratings.yml")["providers"]
    (provider,) = providers
    assert provider["type"] == "file"
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert DASHBOARD.parent == ROOT / "deploy/grafana/dashboards"


# -- Kubernetes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    """{(kind, name): object} of every manifest in deploy/kubernetes (the kustomization aside)."""
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def _quantity(text: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "m": 1e-3, "": 1}
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", str(text)).groups()
    return float(number) * units[unit]


def test_k8s_statefulset(k8s, monkeypatch):
    (sts,) = [o for (kind, _), o in k8s.items() if kind == "StatefulSet"]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    # Headless service: stable pod DNS names.
    service = k8s[("Service", spec["serviceName"])]
    assert service["spec"]["clusterIP"] == "None"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    # Settings from the ConfigMap, reaching the CLI.
    config_maps = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    env = {}
    for name in config_maps:
        env.update(k8s[("ConfigMap", name)]["data"])
    assert set(k for k in env if k.startswith("RATINGS_")) <= cli_variables()
    args = worker_args(env, monkeypatch)
    assert args.web_host == "0.0.0.0" and args.partitions == 8
    # The data dir is a volumeClaimTemplate; the league config a ConfigMap file.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    assert mounts[args.data_dir] in claims
    config_path = PurePosixPath(args.config)
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[str(config_path.parent)])
    leagues = k8s[("ConfigMap", volume["configMap"]["name"])]
    assert config_path.name in [i["path"] for i in volume["configMap"]["items"]]
    text = leagues["data"][next(i["key"] for i in volume["configMap"]["items"] if i["path"] == config_path.name)]
    LeagueConfig.from_toml(text, "leagues.toml")
    assert text == (DEPLOY / "leagues.toml").read_text(), "the ConfigMap's leagues.toml differs from deploy/leagues.toml"
    # Probes: /ready (503 while rebalancing or taking partitions up) for readiness, /health otherwise.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert "readinessProbe" in container and "livenessProbe" in container
    for probe in [p for p in ("startupProbe", "readinessProbe", "livenessProbe") if p in container]:
        get = container[probe]["httpGet"]
        assert get["path"] == ("/ready" if probe == "readinessProbe" else "/health")
        assert ports.get(get["port"], get["port"]) == args.web_port
    # Credentials: the Secret, optional.
    secrets = [e["secretRef"] for e in container["envFrom"] if "secretRef" in e]
    assert [s["name"] for s in secrets] == ["ratings-kafka-credentials"] and secrets[0]["optional"] is True
    # Resources for a 1-2 GiB worker.
    resources = container["resources"]
    assert 2**30 <= _quantity(resources["requests"]["memory"]) <= _quantity(resources["limits"]["memory"]) <= 2 * 2**30
    assert _quantity(resources["requests"]["cpu"]) <= _quantity(resources["limits"]["cpu"])
    # The image's user; the worker as its command.
    assert pod["securityContext"]["runAsNonRoot"] is True
    docker_user = [a for i, a in stages(dockerfile_instructions(DOCKERFILE.read_text()))[-1] if i == "USER"][-1]
    assert str(pod["securityContext"]["runAsUser"]) == docker_user.split(":")[0]
    assert container["args"] == ["worker"]
    # Peers reach each other through the headless service.
    canonical = next(e["value"] for e in container["env"] if e["name"] == "RATINGS_ADVERTISED_URL")
    assert f".{spec['serviceName']}." in canonical and canonical.endswith(f":{args.web_port}")


def test_k8s_secret_template(k8s):
    secret = k8s[("Secret", "ratings-kafka-credentials")]
    data = secret["stringData"]
    assert set(data) <= set(SECURITY_ENV.values())
    security = KafkaSecurity.from_env(data, check_files=False)
    assert security.sasl
    assert data["RATINGS_KAFKA_PASSWORD"] == data["RATINGS_KAFKA_USERNAME"] == "CHANGE-ME"  # placeholders only


def test_k8s_kustomization_lists_the_manifests_but_not_the_templates_or_the_custom_resource():
    kustomization = load_yaml(K8S / "kustomization.yaml")
    on_disk = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    # The Secret is a template; the ServiceMonitor needs the Prometheus operator's CRDs.
    assert set(kustomization["resources"]) == on_disk - {"secret.example.yaml", "servicemonitor.yaml"}
    assert {"statefulset.yaml", "service.yaml", "configmap.yaml"} <= set(kustomization["resources"])


# Fields of the monitoring.coreos.com/v1 ServiceMonitor that the manifest may use (a subset of the
# operator's CRD, written here by hand: kubernetes-validate has no schema for custom resources).
SERVICE_MONITOR_SPEC = {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels", "podTargetLabels"}
SERVICE_MONITOR_ENDPOINT = {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings",
                            "metricRelabelings"}
RELABEL_CONFIG = {"action", "sourceLabels", "separator", "targetLabel", "regex", "replacement", "modulus"}


def _duration(text: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    assert match, f"not a Prometheus duration: {text!r}"
    return int(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def test_k8s_service_monitor_scrapes_each_worker_once_as_the_alerts_expect(k8s, monkeypatch):
    (monitor,) = [o for (kind, _), o in k8s.items() if kind == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_SPEC
    # It selects the headless Service only (selecting ratings-api too would scrape every pod twice).
    (sts,) = [o for (kind, _), o in k8s.items() if kind == "StatefulSet"]
    wanted = spec["selector"]["matchLabels"]
    selected = [name for (kind, name), o in k8s.items()
                if kind == "Service" and wanted.items() <= o["metadata"]["labels"].items()]
    assert selected == [sts["spec"]["serviceName"]]
    service = k8s[("Service", selected[0])]
    assert service["spec"]["publishNotReadyAddresses"] is True  # a worker taking partitions up is scraped too
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= SERVICE_MONITOR_ENDPOINT
    # The named port is the Service's, which leads to the worker's web port.
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = k8s[("ConfigMap", "ratings-worker-env")]["data"]
    assert container_ports[port["targetPort"]] == worker_args(env, monkeypatch).web_port
    scrape = {job["job_name"]: job for job in load_yaml(PROMETHEUS_YML)["scrape_configs"]}["ratings-workers"]
    assert endpoint.get("path", "/metrics") == scrape.get("metrics_path", "/metrics")
    assert _duration(endpoint["scrapeTimeout"]) < _duration(endpoint["interval"]) <= 60
    # The job label is the one alerts.yml selects (job="ratings-workers"), not the operator's default
    # (the Service's name); the instance label is the pod.
    for relabel in endpoint["relabelings"]:
        assert set(relabel) <= RELABEL_CONFIG and relabel.get("action", "replace") == "replace"
    targets = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert targets["job"]["replacement"] == "ratings-workers" == scrape["job_name"]
    assert 'job="ratings-workers"' in (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert targets["instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]


# The oldest and the newest Kubernetes schemas kubernetes-validate ships (offline, in the package).
K8S_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
CUSTOM_RESOURCES = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_validate_passes_the_manifests(k8s, version):
    failures, unchecked = [], set()
    for (kind, name), doc in k8s.items():
        try:
            kubernetes_validate.validate(doc, version, strict=True)  # strict: unknown fields are errors
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.add((doc["apiVersion"], kind))
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{kind}/{name}: {exc.message} at {'.'.join(map(str, exc.path))}")
    assert not failures, "\n".join(failures)
    # Only the custom resource has no schema (its structure: the test above).
    assert unchecked == CUSTOM_RESOURCES


def _unknown_field(sts: dict[str, Any]) -> None:
    container = sts["spec"]["template"]["spec"]["containers"][0]
    container["readynessProbe"] = container.pop("readinessProbe")


BROKEN_STATEFULSET = {
    "unknown field": _unknown_field,
    "replicas not a number": lambda sts: sts["spec"].update(replicas="two"),
    "container without a name": lambda sts: sts["spec"]["template"]["spec"]["containers"][0].pop("name"),
    "access modes not a list": lambda sts: sts["spec"]["volumeClaimTemplates"][0]["spec"].update(
        accessModes="ReadWriteOnce"),
}


@pytest.mark.parametrize("case", BROKEN_STATEFULSET)
def test_kubernetes_validate_rejects_a_broken_statefulset(k8s, case):
    (sts,) = [o for (kind, _), o in k8s.items() if kind == "StatefulSet"]
    broken = copy.deepcopy(sts)
    BROKEN_STATEFULSET[case](broken)
    kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_kubernetes_validate_command(tmp_path):
    """The command a user runs: `kubernetes-validate --strict deploy/kubernetes/*.yaml`."""
    def run(*paths: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", *map(str, paths)],
                              capture_output=True, text=True, timeout=120)

    manifests = sorted(K8S.glob("*.yaml"))
    good = run(*manifests)
    output = good.stdout + good.stderr
    assert good.returncode == 0, output
    assert "passed for resource statefulset/ratings-worker" in output
    assert not re.search(r"^ERROR", output, re.M)
    # Only the kustomization and the ServiceMonitor are reported as unchecked.
    warned = set(re.findall(r"^WARN (\S+)", output, re.M))
    assert {Path(p).name for p in warned} == {"kustomization.yaml", "servicemonitor.yaml"}, output
    broken = tmp_path / "statefulset.yaml"
    broken.write_text((K8S / "statefulset.yaml").read_text().replace("readinessProbe:", "readynessProbe:"))
    bad = run(broken)
    assert bad.returncode != 0 and "'readynessProbe' was unexpected" in bad.stdout + bad.stderr
