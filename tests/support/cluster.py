"""A three-node Kafka cluster under faults, seen from outside: which node leads a
topic's partitions (asked with confluent-kafka's admin client), which node is the
active controller (from the nodes' logs), and when each rating-changed event
arrives (a confluent-kafka consumer in a thread), to measure the longest pause."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import orjson
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from stream_app.kafka_broker import KafkaCluster


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the node id of its leader (-1: none now)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10)
    return {p: info.leader for p, info in metadata.topics[topic].partitions.items()}


def leading_most(bootstrap: str, topic: str) -> int:
    """The node that leads most of the topic's partitions."""
    return Counter(leaders(bootstrap, topic).values()).most_common(1)[0][0]


# KafkaCluster's log configuration has org.apache.kafka.raft.QuorumState at INFO for this line.
_LEADER = re.compile(r"\[RaftManager id=(\d+)\] Completed transition to Leader\(.*?\bepoch=(\d+)")


def active_controller(cluster: KafkaCluster) -> int:
    """The node that last became the quorum's leader (the highest epoch in any log)."""
    best = (-1, -1)
    for node in cluster.nodes:
        text = node.log_path.read_text(errors="replace") if node.log_path.exists() else ""
        for found in _LEADER.finditer(text):
            best = max(best, (int(found.group(2)), int(found.group(1))))
    if best[1] < 0:
        raise AssertionError("no node's log says it became the controller")
    return best[1]


class ChangeWatch(threading.Thread):
    """Reads every partition of the rating-changed topic from its beginning as it is
    written, noting each event's record timestamp: when the worker sent it (a gap in
    this reader's own fetching, as a leader moves, does not count)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 8):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.sent: list[float] = []  # the events' record timestamps (time.time() seconds)
        self.ids: set[str] = set()
        self.copies = 0  # events read more than once (an id seen before: a batch applied again)
        self.error: BaseException | None = None
        self._finished = threading.Event()

    def run(self) -> None:
        try:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "change-watch",
                                 "enable.auto.commit": False, "isolation.level": "read_committed",
                                 "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 2000})
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            try:
                while not self._finished.is_set():
                    for message in consumer.consume(1000, timeout=0.1):
                        if message.error():
                            continue
                        event_id = orjson.loads(message.value())["event_id"]
                        if event_id in self.ids:
                            self.copies += 1
                        self.ids.add(event_id)
                        self.sent.append(message.timestamp()[1] / 1000)
            finally:
                consumer.close()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def stop(self) -> None:
        self._finished.set()
        self.join(30)

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time between two events sent in [start, end] (time.time()
        seconds), the window's edges counting as events."""
        times = [start, *sorted(t for t in self.sent if start < t < end), end]
        return max(b - a for a, b in zip(times, times[1:]))


class SteadyProducer(threading.Thread):
    """Publishes keyed records at a steady rate over about `seconds` (the rest at once
    after `hurry()`) with confluent-kafka,
    set as docs/operations.md advises a producer of match results: acks=all and
    idempotence (a retry after a lost answer is not written twice), retried through
    a leader's move for up to `delivery_seconds`, keys placed as Java's clients do."""

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], seconds: float,
                 delivery_seconds: float = 300.0):
        super().__init__(daemon=True)
        self.topic, self.records, self.seconds = topic, records, seconds
        self.config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                       "delivery.timeout.ms": int(delivery_seconds * 1000), "linger.ms": 5,
                       "partitioner": "murmur2_random"}
        self.delivered = 0
        self.failed: list[str] = []
        self.error: BaseException | None = None
        self._hurry = threading.Event()

    def hurry(self) -> None:
        """Publish what is left without waiting (the faults are over)."""
        self._hurry.set()

    def run(self) -> None:
        from confluent_kafka import Producer

        def delivered(error, _message) -> None:
            if error is None:
                self.delivered += 1
            else:
                self.failed.append(str(error))

        try:
            producer = Producer(self.config)
            started = time.monotonic()
            for i, (key, value) in enumerate(self.records):
                due = started + self.seconds * i / len(self.records)
                while (wait := due - time.monotonic()) > 0 and not self._hurry.is_set():
                    producer.poll(min(wait, 0.05))
                while True:
                    try:
                        producer.produce(self.topic, value, key, on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full while a leader moves: wait
                        producer.poll(0.1)
            left = producer.flush(self.seconds + 300)
            if left:
                self.failed.append(f"{left} records still unsent")
        except BaseException as exc:  # surfaced by the test
            self.error = exc
