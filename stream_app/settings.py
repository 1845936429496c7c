"""Every default of the service in one place: the worker, the client and the
command line all start from `Settings()`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Settings:
    broker: str = "kafka://127.0.0.1:9092"
    partitions: int = 8  # of the topics the service creates; a league lives on one partition
    match_topic: str = "match-results"
    changes_topic: str = "rating-changes"
    dlq_topic: str = "match-results-dlq"
    data_dir: Path = Path("data")
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    advertised_url: str | None = None  # how other workers reach this one (default http://web_host:web_port)
    config_path: str | None = None  # the league configuration (TOML); None: every league uses elo
    app_id: str = "ratings"  # the consumer group and the prefix of the state's changelog topic
    batch_max: int = 2000  # input records taken at once
    batch_max_bytes: int = 512 * 1024  # input applied between two checkpoints
    rerate_part: int = 200_000  # participant results a re-rate applies between two checkpoints
    # A partition's changelog gets a new base once it holds this many records past its
    # last cleaning, and twice as many as the local store has keys (0: never; docs/design.md).
    base_after: int = 10_000
    # ... and once taking its changelog up onto an empty data directory would take longer
    # than this, by the entries past its last base (an estimate: docs/design.md; 0: never).
    take_up_seconds: float = 10.0
    batch_wait: float = 0.1  # longest wait for input when there is none (s)
    # How long the broker may hold a fetch of input that has not arrived yet (s). Kafka
    # answers as soon as a record arrives; the embedded broker only when this is over,
    # so it is a floor under the latency there (aiokafka's default, 0.5 s, made the
    # latency at a low rate worse than at a high one: docs/performance.md, "Settings
    # chosen by measurement").
    fetch_wait: float = 0.02
    stop_timeout: float = 30.0  # a batch in progress gets this long to finish at a rebalance or stop (s)
    session_timeout: float = 6.0  # the consumer group's session timeout (s)
    heartbeat_interval: float = 1.0
    # A broker request unanswered this long is given up and sent again, to the partition's
    # leader then: a frozen broker (SIGSTOP, a long GC pause) holds a batch this long at
    # most, once the cluster has moved its partitions (docs/operations.md). Faust's default
    # for its producer, 1,200 s, held every batch until the broker woke.
    request_timeout: float = 6.0
    security: Any = None  # stream_app.security.KafkaSecurity; None: plaintext

    @property
    def forward_topic(self) -> str:
        """Where records found on the wrong partition for their league go, re-keyed."""
        return f"{self.match_topic}-by-league"

    @property
    def changelog_topic(self) -> str:
        """The partitions' state, partitioned like the input (stream/changelog.py)."""
        return f"{self.app_id}-state-changelog"

    @property
    def input_topics(self) -> tuple[str, str]:
        return self.match_topic, self.forward_topic


DEFAULTS = Settings()


def bootstrap_servers(broker: str) -> str:
    """'kafka://h1:9092;h2:9092' (Faust's form) or 'h1:9092,h2:9092' -> 'h1:9092,h2:9092'."""
    hosts = []
    for part in broker.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "://" in part:
            scheme, part = part.split("://", 1)
            if scheme not in ("kafka", "aiokafka", "tcp"):
                raise ValueError(f"broker URL {broker!r}: unsupported scheme {scheme!r} (use kafka://HOST:PORT)")
        part = part.rstrip("/")
        if ":" not in part:
            part += ":9092"
        hosts.append(part)
    if not hosts:
        raise ValueError(f"broker URL {broker!r}: no host")
    return ",".join(hosts)
