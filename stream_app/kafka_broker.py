"""Apache Kafka on demand: `KafkaCluster` runs 1 or 3 real Kafka nodes as child processes, for
what the embedded broker (broker.py, Tansu) lacks: compaction, retention, transactions, a true
end of partition, replication. Needs Java 17 and, the first time only, Maven: the jars are
copied from Maven Central (deploy/kafka/pom.xml) into ~/.cache/stream-ratings/kafka-VERSION/lib
(or under $RATINGS_KAFKA_CACHE). Each node is KRaft broker and controller in one JVM, with a
static quorum, ready when its log says "Kafka Server started". As with EmbeddedBroker, the
nodes die with the thread that started them (PR_SET_PDEATHSIG); a stop is SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Mapping, Sequence

from .broker import BrokerError
from .processes import HOST, dies_with_this_process, free_port, port_free, sigterm_interrupts

KAFKA_VERSION = "4.1.2"
POM = Path(__file__).resolve().parent.parent / "deploy" / "kafka" / "pom.xml"
SETTINGS = POM.with_name("broker.properties")  # shared with docker-compose.yml
CACHE_VARIABLE = "RATINGS_KAFKA_CACHE"
READY_LINE = b"Kafka Server started"
SERVER_JVM = ("-Xms256m", "-Xmx768m")
TOOL_JVM = ("-XX:TieredStopAtLevel=1",)  # the StorageTool runs for a second: C1 alone starts a third faster

# Console at WARN keeps a node's log short; KafkaRaftServer at INFO writes the ready line,
# QuorumState at INFO each change of the active controller (a line per election).
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="console" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="console"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="org.apache.kafka.raft.QuorumState" level="INFO"/>
  </Loggers>
</Configuration>
"""


def kafka_lib() -> Path:
    """The directory of Kafka's jars, copied there by Maven the first time.

    A marker file holding the POM's hash says the copy finished: without it (an interrupted
    download) or with another hash (an edited POM) the directory is emptied and filled again."""
    if not POM.exists():
        raise BrokerError(f"{POM} is missing: run this from a checkout of stream-ratings")
    home = Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "stream-ratings") / f"kafka-{KAFKA_VERSION}"
    lib, marker = home / "lib", home / "complete"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()

    def complete() -> bool:
        return marker.exists() and marker.read_text().strip() == digest

    if not complete():
        home.mkdir(parents=True, exist_ok=True)
        with open(home / "lock", "w") as lock:  # test processes side by side: one downloads, the others wait
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not complete():
                marker.unlink(missing_ok=True)
                _download(lib)
                marker.write_text(digest + "\n")
    return lib


def _download(lib: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(f"mvn not found: install Maven (apt-get install maven) to download Apache Kafka "
                          f"{KAFKA_VERSION} once into {lib}")
    shutil.rmtree(lib, ignore_errors=True)
    print(f"kafka: downloading Apache Kafka {KAFKA_VERSION} with Maven into {lib} (once)", file=sys.stderr, flush=True)
    argv = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(POM),
            "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          preexec_fn=dies_with_this_process())
    if done.returncode != 0:
        raise BrokerError(f"Maven could not download Apache Kafka {KAFKA_VERSION} (check the network, or "
                          f"~/.m2/settings.xml for a proxy): {one_line_tail(done.stdout + done.stderr)}")


def one_line_tail(text: str, lines: int = 4) -> str:
    """The last lines of some output worth reading, on one line (a stack trace's frames left out)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    kept = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return " | ".join(kept[-lines:]) or "(no output)"


def _check_free(host: str, ports: Sequence[int]) -> None:
    for port in ports:
        if not 0 < port < 65536:
            raise BrokerError(f"{port} is not a TCP port (1 to 65535): choose a lower one (--port)")
        if not port_free(host, port):
            raise BrokerError(f"port {port} on {host} is already in use: stop what listens there "
                              "or choose other ports (--port)")


def broker_settings(nodes: int) -> dict[str, str]:
    """The settings every node of a cluster of `nodes` shares: deploy/kafka/broker.properties,
    and the replication of the internal and new topics."""
    replicas, min_isr = ("1", "1") if nodes == 1 else ("3", "2")  # three keep taking writes with one down
    try:
        lines = SETTINGS.read_text().splitlines()
    except OSError as exc:
        raise BrokerError(f"{SETTINGS} cannot be read ({exc.strerror}): run this from a checkout of stream-ratings")
    shared = dict(line.split("=", 1) for line in map(str.strip, lines) if line and not line.startswith("#"))
    return {
        **shared,
        "default.replication.factor": replicas,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "share.coordinator.state.topic.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.min.isr": min_isr,
    }


class KafkaNode:
    """One Kafka process, broker and controller, node id `id` (1, 2, ...); its files in `home`."""

    def __init__(self, id: int, port: int, controller_port: int, home: Path, host: str, launch: tuple[str, Path],
                 listener_ports: Mapping[str, int] | None = None):
        self.id, self.port, self.controller_port, self.home, self.host = id, port, controller_port, home, host
        self.listener_ports = dict(listener_ports or {})  # the extra listeners' (KafkaCluster `listeners`)
        self.java, self.lib = launch
        self.properties = home / "server.properties"
        self.log_config = home / "log4j2.xml"
        self.log_path = home / "kafka.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_start = 0  # where this process's output begins in the log (a restart appends)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def argv(self, main: str, *args: str) -> list[str]:
        options = SERVER_JVM if main == "kafka.Kafka" else TOOL_JVM
        return [self.java, "-cp", f"{self.lib}/*", *options, f"-Dlog4j2.configurationFile={self.log_config}",
                main, *args]

    def start(self) -> None:
        _check_free(self.host, (self.port, self.controller_port, *self.listener_ports.values()))
        self.log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(self.argv("kafka.Kafka", str(self.properties)), stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True,  # a Ctrl-C in a terminal reaches only us
                                            preexec_fn=dies_with_this_process())

    def ready(self) -> bool:
        """The ready line is in the log since this process started; BrokerError once it has exited."""
        assert self.process is not None
        with open(self.log_path, "rb") as log:
            log.seek(self.log_start)
            if READY_LINE in log.read():
                return True
        if self.process.poll() is not None:
            raise BrokerError(f"Kafka node {self.id} exited with status {self.process.returncode} while "
                              f"starting: {self.log_tail()}")
        return False

    def log_tail(self) -> str:
        try:
            return one_line_tail(self.log_path.read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def terminate(self) -> None:
        if self.running and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)  # start_new_session: the group id is the pid
                os.killpg(self.process.pid, signal.SIGCONT)  # a frozen (SIGSTOPped) node acts on it too

    def stop(self, timeout: float) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL to the group after `timeout` seconds."""
        process = self.process
        if process is None:
            return
        self.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self.process = None


_live: "weakref.WeakSet[KafkaCluster]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # an exit without stop() leaves no node and no temporary directory behind
    for cluster in list(_live):
        cluster.stop(timeout=5.0)


class KafkaCluster:
    """`nodes` (1 or 3) Apache Kafka nodes on `host`.

    >>> with KafkaCluster() as kafka:
    ...     kafka.url, kafka.bootstrap     # 'kafka://127.0.0.1:P', '127.0.0.1:P'

    `ports`: 2 x `nodes` ports, each node's client port then its controller port (default:
    free ones). `data_dir` is kept after a stop, and a start on it keeps the topics; without
    it the data is in a temporary directory that `stop()` removes. `settings`: more broker
    settings. `stop_node(id)` and `start_node(id)` take a node id, 1 to `nodes`.

    `listeners`: listeners each node opens besides PLAINTEXT (clients and brokers) and
    CONTROLLER, name -> security protocol, e.g. {"SECURE": "SASL_SSL", "MTLS": "SSL"}; their
    ports `listener_ports` (each node's, one per listener in order; default: free ones),
    their addresses `bootstrap_of(name)`. What they need (TLS files, SASL mechanisms, an
    authorizer) goes in `settings` (`listener.name.secure.*`, ...). `scram`: SCRAM users
    made when the storage is formatted, as StorageTool's --add-scram takes them,
    'SCRAM-SHA-512=[name=admin,password=...]' (the tool's command line shows them: tests only).
    """

    def __init__(self, nodes: int = 1, *, ports: Sequence[int] | None = None, data_dir: str | Path | None = None,
                 host: str = HOST, settings: Mapping[str, object] | None = None, startup_timeout: float = 60.0,
                 stop_timeout: float = 10.0, listeners: Mapping[str, str] | None = None,
                 listener_ports: Sequence[int] | None = None, scram: Sequence[str] = ()):
        if nodes not in (1, 3):
            raise ValueError(f"nodes must be 1 or 3, not {nodes}")  # a quorum of 2 survives no failure
        if ports is not None and len(ports) != 2 * nodes:
            raise ValueError(f"ports: {2 * nodes} ports (client and controller of each node), got {len(ports)}")
        self.listeners = {name.upper(): protocol.upper() for name, protocol in (listeners or {}).items()}
        if set(self.listeners) & {"PLAINTEXT", "CONTROLLER"}:
            raise ValueError("listeners: PLAINTEXT and CONTROLLER are every node's already")
        if listener_ports is not None and len(listener_ports) != len(self.listeners) * nodes:
            raise ValueError(f"listener_ports: {len(self.listeners) * nodes} ports (each listener of each node), "
                             f"got {len(listener_ports)}")
        self.requested_listener_ports, self.scram = listener_ports, list(scram)
        self.size, self.host, self.requested_ports = nodes, host, ports
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.settings = dict(settings or {})
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.nodes: list[KafkaNode] = []
        self.home: Path | None = None  # data_dir, or the temporary directory while running

    @property
    def bootstrap(self) -> str:
        if not self.nodes:
            raise BrokerError("the Kafka cluster has not been started")
        return ",".join(f"{self.host}:{node.port}" for node in self.nodes)

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    def bootstrap_of(self, listener: str) -> str:
        """The nodes' addresses on one of the extra `listeners`."""
        if not self.nodes:
            raise BrokerError("the Kafka cluster has not been started")
        if listener.upper() not in self.listeners:
            raise ValueError(f"no listener {listener!r}: the cluster's extra listeners are {sorted(self.listeners)}")
        return ",".join(f"{self.host}:{node.listener_ports[listener.upper()]}" for node in self.nodes)

    @property
    def ports(self) -> list[int]:
        """Each node's client port then its controller port, as `ports=` takes them: a
        cluster started on them after a stop is where this one was (empty, without `data_dir`)."""
        return [port for node in self.nodes for port in (node.port, node.controller_port)]

    @property
    def pids(self) -> list[int]:
        return [node.process.pid for node in self.nodes if node.running and node.process is not None]

    @property
    def pid(self) -> int | None:
        return next(iter(self.pids), None)  # the first running node's

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(node.running for node in self.nodes)

    def node(self, id: int) -> KafkaNode:
        if not 1 <= id <= len(self.nodes):
            raise ValueError(f"no Kafka node {id}: the nodes are 1 to {len(self.nodes)}")
        return self.nodes[id - 1]

    def start(self) -> "KafkaCluster":
        if self.running:
            return self
        java = shutil.which("java")  # first: every run needs it, and nothing is downloaded in vain
        if java is None:
            raise BrokerError("java not found: install OpenJDK 17: apt-get install openjdk-17-jre-headless")
        ports = list(self.requested_ports or [free_port(self.host) for _ in range(2 * self.size)])
        extra = len(self.listeners)
        more = list(self.requested_listener_ports or [free_port(self.host) for _ in range(extra * self.size)])
        _check_free(self.host, ports + more)  # before a download or a JVM
        launch = (java, kafka_lib())
        self.home = self.data_dir or Path(tempfile.mkdtemp(prefix="kafka-"))
        self.nodes = [KafkaNode(i + 1, ports[2 * i], ports[2 * i + 1], self.home / f"node-{i + 1}", self.host, launch,
                                dict(zip(self.listeners, more[extra * i:extra * (i + 1)])))
                      for i in range(self.size)]
        _live.add(self)
        try:
            self._format()
            for node in self.nodes:
                node.start()
            self._wait_ready(self.nodes)  # all at once: a node of three waits for a quorum of controllers
        except BaseException:
            self.stop()
            raise
        return self

    def _format(self) -> None:
        """Write each node's settings and format its storage (a formatted one is left as it is)."""
        voters = ",".join(f"{node.id}@{self.host}:{node.controller_port}" for node in self.nodes)
        for node in self.nodes:
            node.home.mkdir(parents=True, exist_ok=True)
            node.log_config.write_text(LOG4J2)
            node.properties.write_text("".join(f"{k}={v}\n" for k, v in self._settings(node, voters).items()))
        cluster_id = self._cluster_id() or self._storage_tool((self.nodes[0], ("random-uuid",)))[0].split()[-1]
        scram = tuple(arg for credential in self.scram for arg in ("--add-scram", credential))
        self._storage_tool(*((node, ("format", "-t", cluster_id, "-c", str(node.properties), "--ignore-formatted",
                                     *scram))
                             for node in self.nodes))

    def _settings(self, node: KafkaNode, voters: str) -> dict[str, object]:
        extra = {name: f"{name}://{self.host}:{port}" for name, port in node.listener_ports.items()}
        protocols = {"listener.security.protocol.map": ",".join(
            ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", *(f"{n}:{p}" for n, p in self.listeners.items())])
        } if extra else {}
        return {
            "process.roles": "broker,controller",
            "node.id": node.id,
            "controller.quorum.voters": voters,
            "listeners": ",".join([f"PLAINTEXT://{self.host}:{node.port}",
                                   f"CONTROLLER://{self.host}:{node.controller_port}", *extra.values()]),
            "advertised.listeners": ",".join([f"PLAINTEXT://{self.host}:{node.port}", *extra.values()]),
            **protocols,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": node.home / "data",
            **broker_settings(self.size),
            **self.settings,
        }

    def _cluster_id(self) -> str | None:
        """The id a kept data directory was formatted with: the nodes refuse any other."""
        meta = self.nodes[0].home / "data" / "meta.properties"
        found = re.search(r"^cluster\.id=(\S+)", meta.read_text() if meta.exists() else "", re.M)
        return found.group(1) if found else None

    def _storage_tool(self, *runs: tuple[KafkaNode, tuple[str, ...]]) -> list[str]:
        """kafka.tools.StorageTool once per (node, arguments), side by side (a JVM start each):
        the outputs, or BrokerError with the end of the first that failed."""
        started = []
        try:
            for node, args in runs:
                started.append(subprocess.Popen(node.argv("kafka.tools.StorageTool", *args), text=True,
                                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, preexec_fn=dies_with_this_process()))
            outputs = [process.communicate(timeout=120)[0] for process in started]
        finally:
            for process in started:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        for (node, args), process, output in zip(runs, started, outputs):
            if process.returncode != 0:
                raise BrokerError(f"Kafka's StorageTool {args[0]} failed for node {node.id} "
                                  f"(status {process.returncode}): {one_line_tail(output)}")
        return outputs

    def _wait_ready(self, nodes: list[KafkaNode]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while nodes := [node for node in nodes if not node.ready()]:
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka node {nodes[0].id} was not ready within {self.startup_timeout:.0f} s; "
                                  f"its log ends: {nodes[0].log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float | None = None) -> None:
        """Stop every node, all at once, then remove a temporary data directory."""
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.stop(self.stop_timeout if timeout is None else timeout)
        _live.discard(self)
        if self.home is not None and self.data_dir is None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def stop_node(self, id: int, timeout: float | None = None) -> None:
        """Stop node `id` (SIGTERM: a controlled shutdown); its data stays for `start_node`."""
        self.node(id).stop(self.stop_timeout if timeout is None else timeout)

    def start_node(self, id: int) -> None:
        """Start node `id` again, on its data and ports, and wait until it is ready."""
        node = self.node(id)
        if not node.running:
            node.start()
            self._wait_ready([node])

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def run_foreground(nodes: int = 1, port: int = 9092, host: str = HOST) -> int:
    """`ratings kafka`: the nodes on ports port, port+1, ... until Ctrl-C or SIGTERM. Returns the exit status."""
    cluster = KafkaCluster(nodes, ports=range(port, port + 2 * nodes), host=host)
    # Interrupts are caught from before the start (a Ctrl-C while Maven downloads or the nodes start
    # cleans up too) and before the ready line (a Ctrl-C right after it is a clean stop as well).
    with sigterm_interrupts():
        try:
            print(f"kafka: starting Apache Kafka {KAFKA_VERSION}, {nodes} node(s) on {host}", file=sys.stderr,
                  flush=True)
            with cluster:
                print(f"kafka: ready, bootstrap {cluster.bootstrap} ({cluster.url}, pids {cluster.pids})\n"
                      f"kafka: the data is in a temporary directory, {cluster.home}, removed when it stops\n"
                      "kafka: press Ctrl-C to stop it", file=sys.stderr, flush=True)
                while cluster.running:
                    time.sleep(0.5)
                ended = next(node for node in cluster.nodes if not node.running)
                raise BrokerError(f"node {ended.id} exited by itself; its log ends: {ended.log_tail()}")
        except BrokerError as exc:
            print(f"ratings kafka: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nkafka: stopped; the data directory is removed", file=sys.stderr, flush=True)
            return 0
