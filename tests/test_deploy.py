"""The deployment files: Dockerfile, docker-compose.yml, Prometheus, Grafana, Kubernetes.

No Docker engine or cluster is needed: the files are parsed and checked
against each other and against the code they configure (the CLI's RATINGS_*
variables, the metric names, the security variables, the league config).
Prometheus itself runs in tests/test_prometheus.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from stream_app import metrics
from stream_app.cli import build_parser
from stream_app.config import LeagueConfig
from stream_app.security import ENV as SECURITY_ENV
from stream_app.security import KafkaSecurity

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ratings.json"
K8S = DEPLOY / "k8s"
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
    for source in ("cli.py", "cli_stream.py"):
        found |= set(re.findall(r"RATINGS_[A-Z_]+", (ROOT / "stream_app" / source).read_text()))
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
    assert kafka["image"].split(":")[0] in ("apache/kafka", "bitnami/kafka")
    env = service_env(kafka)
    roles_key = "KAFKA_PROCESS_ROLES" if "KAFKA_PROCESS_ROLES" in env else "KAFKA_CFG_PROCESS_ROLES"
    assert set(env[roles_key].split(",")) == {"broker", "controller"}
    assert "kafka:9092" in env.get("KAFKA_ADVERTISED_LISTENERS", env.get("KAFKA_CFG_ADVERTISED_LISTENERS", ""))
    assert env.get("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", env.get("KAFKA_CFG_OFFSETS_TOPIC_REPLICATION_FACTOR")) == "1"
    assert "healthcheck" in kafka


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
    """Sample names the worker exposes: stream_app/metrics.py, Faust's sensor (prefix faust_), and `up`."""
    from faust.sensors.prometheus import FaustMetrics
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    names = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            names |= _exposed(value.describe())
    registry = CollectorRegistry()
    FaustMetrics.create(registry, "faust")  # the worker's setup_prometheus_sensors(app, name_prefix="faust")
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
            assert all(n.startswith(("ratings_", "faust_")) or n == "up" for n in names)


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
    """{(kind, name): object} of every manifest in deploy/k8s (the kustomization aside)."""
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
    # Probes: /ready (503 while rebalancing or restoring) for readiness, /health otherwise.
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


def test_k8s_kustomization_lists_the_manifests_but_not_the_secret_template():
    kustomization = load_yaml(K8S / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file()
    assert "secret.example.yaml" not in kustomization["resources"]
    assert {"statefulset.yaml", "service.yaml", "configmap.yaml"} <= set(kustomization["resources"])
