"""Every use of a private attribute of Faust or aiokafka, in one place.

Each has its reason; each was checked against faust-streaming 0.15.3 and
aiokafka 0.14.0 (constraints.txt). After upgrading either, read this file
against the new sources, then run `make test` (tests/stream/test_kafka_io.py
checks each of them against the installed versions).

What the worker needs that neither library offers publicly:
- the aiokafka producer inside Faust's (`ProducerSender`): record batches
  sent directly, one await per batch instead of Faust's per-record path;
- Faust's consumer never fetching input (`keep_input_from_faust`): input is
  read by stream/intake.py at the checkpoints;
- group offsets committed by the group member (`commit_group_offsets`):
  Faust's own commit crashes the app on any commit error;
- no topic created by asking about it (`no_topics_created_by_metadata`);
- the worker's member id in the group (`group_member_id`), so that a restart
  can remove the killed process's member at once;
- every topic's partitions from one metadata request (`topic_partitions`):
  aiokafka's `topics()` keeps only the names;
- no client connecting to a broker found silent while others answer
  (`silent_brokers_avoided`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Iterable

import aiokafka.client
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


class ProducerSender:
    """Record batches through the aiokafka producer inside Faust's (stream/commit.py's Sender)."""

    def __init__(self, app: Any):
        self.app = app

    def _producer(self) -> Any:
        # faust/transport/drivers/aiokafka.py Producer._ensure_producer: the aiokafka producer.
        return self.app.producer._ensure_producer()

    async def partitions(self, topic: str) -> int:
        return len(await self._producer().partitions_for(topic))

    async def send(self, topic: str, partition: int,
                   records: Iterable[tuple[bytes, bytes]]) -> list[Awaitable[tuple[int, int]]]:
        return await send_batches(self._producer(), topic, partition, records)


async def send_batches(producer: Any, topic: str, partition: int,
                       records: Iterable[tuple[bytes, bytes]]) -> list[Awaitable[tuple[int, int]]]:
    """Records of one topic partition as whole record batches of an aiokafka producer, in
    order; each awaitable gives the offsets of its batch's first and last record once the
    broker has acknowledged it. (Public aiokafka: the benchmark's ceiling sends this way too.)"""
    acks: list[Awaitable[tuple[int, int]]] = []
    builder, count = producer.create_batch(), 0
    for key, value in records:
        if builder.append(key=key, value=value, timestamp=None) is None:
            acks.append(_offsets(await producer.send_batch(builder, topic, partition=partition), count))
            builder, count = producer.create_batch(), 0
            builder.append(key=key, value=value, timestamp=None)  # the first record always fits
        count += 1
    if count:
        acks.append(_offsets(await producer.send_batch(builder, topic, partition=partition), count))
    return acks


async def _offsets(future: asyncio.Future, count: int) -> tuple[int, int]:
    metadata = await future
    return metadata.offset, metadata.offset + count - 1  # metadata.offset: the batch's base offset


def keep_input_from_faust(consumer: Any, input_topics: tuple[str, ...]) -> None:
    """Faust's consumer never makes an input partition active, so never fetches input
    for its agent. It activates partitions in two places: every newly assigned one
    (`_set_active_tps`, before the app pauses them for recovery) and every resumed
    one (`resume_partitions`, public, after recovery). Installed once, at app start."""
    if getattr(consumer, "_ratings_input_kept", False):
        return
    resume_partitions = consumer.resume_partitions
    # faust/transport/consumer.py Consumer._set_active_tps
    set_active_tps = consumer._set_active_tps

    def resume_all_but_input(tps: Any) -> None:
        resume_partitions({tp for tp in tps if tp.topic not in input_topics})

    def activate_all_but_input(tps: Any) -> Any:
        return set_active_tps({tp for tp in tps if tp.topic not in input_topics})

    consumer.resume_partitions = resume_all_but_input
    consumer._set_active_tps = activate_all_but_input
    consumer._ratings_input_kept = True


async def commit_group_offsets(consumer: Any, offsets: dict[tuple[str, int], int]) -> None:
    """Commit (topic, partition) -> next offset for the consumer group, through the
    aiokafka consumer of Faust's consumer thread (the group member; the broker
    refuses commits from anyone else). Only partitions the group still gives it."""
    # faust/transport/drivers/aiokafka.py: Consumer._thread (AIOKafkaConsumerThread)
    # and its _ensure_consumer(); the commit must run in that thread's event loop.
    thread = consumer._thread

    async def commit() -> None:
        member = thread._ensure_consumer()
        owned = member.assignment()
        mine = {TopicPartition(topic, partition): OffsetAndMetadata(offset, "")
                for (topic, partition), offset in offsets.items() if TopicPartition(topic, partition) in owned}
        if mine:
            await member.commit(mine)

    await thread.call_thread(commit)


class _MetadataRequestNoCreation(MetadataRequest):
    def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = False):
        super().__init__(topics, allow_auto_topic_creation)


def no_topics_created_by_metadata() -> None:
    """Every aiokafka client of this process asks for metadata without allowing the
    broker to create a missing topic. aiokafka always allows it, and a broker that
    forgot its topics (the embedded one restarted, or a topic deleted on Kafka with
    auto.create.topics.enable) then recreates them at the first question, with its
    own partition count (4 on the embedded broker, num.partitions on Kafka): leagues
    would map to other partitions. The worker creates its topics itself, with the
    configured count (stream/topics.py). aiokafka's client looks the
    request class up in its module at each metadata update (aiokafka/client.py
    `AIOKafkaClient._metadata_update`), so one assignment covers every client,
    including Faust's. Idempotent."""
    aiokafka.client.MetadataRequest = _MetadataRequestNoCreation


async def topic_partitions(consumer: Any) -> dict[str, set[int]]:
    """Every topic the broker has, with its partitions, from one metadata request of
    an aiokafka consumer's client.

    `consumer.partitions_for_topic` reads the metadata the client keeps, which holds
    only the topics it tracks (those assigned or subscribed), and `consumer.topics()`
    asks for all of them but returns only their names. The embedded broker answers the
    client's first request (for no topic) with every topic, so the two looked enough
    there; Kafka answers it with none, and a topic that exists read as missing
    (issue #43). aiokafka/client.py `AIOKafkaClient.fetch_all_metadata` (public on the
    client; the consumer's `_client` is not) gives the whole answer."""
    cluster = await consumer._client.fetch_all_metadata()
    return {topic: set(cluster.partitions_for_topic(topic) or ()) for topic in cluster.topics()}


def group_member_id(consumer: Any) -> str | None:
    """The member id the group coordinator gave Faust's consumer (None before it joined).
    A worker keeps it in its data directory: restarted there, it asks the coordinator
    to remove that member (stream/membership.py) instead of waiting out its session."""
    # faust/transport/drivers/aiokafka.py: Consumer._thread (AIOKafkaConsumerThread) and its
    # aiokafka consumer's _coordinator (aiokafka/consumer/group_coordinator.py), whose
    # member_id Faust itself reads (_on_span_generation_known).
    member = consumer._thread._consumer
    if member is None or member._coordinator is None:
        return None
    member_id = member._coordinator.member_id
    return member_id or None


async def named_topics(owner: Any, names: list[str]) -> list[tuple]:
    """The topic entries of a metadata answer for these topics, asked of a broker at
    random by an aiokafka consumer's or admin client's own client, without letting the
    broker create one. Under ACLs a topic the principal may not describe is left out of
    an answer for every topic, and said TOPIC_AUTHORIZATION_FAILED here. Neither client
    asks publicly for named topics (the admin client's describe_topics lets the broker
    create them); their `_client` is aiokafka/client.py's AIOKafkaClient, whose send()
    takes any request. Each entry: (error, name, [is_internal,] partitions)."""
    client = owner._client
    node = client.get_random_node()
    if node is None:
        return []
    answer = await client.send(node, MetadataRequest(names, allow_auto_topic_creation=False))
    return list(answer.topics)



# (host, port) of the brokers the worker's BrokerWatch found silent while others answered.
_silent: frozenset[tuple[str, int]] = frozenset()
_get_conn = aiokafka.client.AIOKafkaClient._get_conn
_hosts = aiokafka.client.AIOKafkaClient.hosts


def avoid_brokers(addresses: Iterable[tuple[str, int]]) -> None:
    """Set the brokers (host, port) every client of this process avoids from now on: none
    to avoid none. Called by stream/broker_watch.py's BrokerWatch after each check."""
    global _silent
    _silent = frozenset(addresses)


async def _conn_unless_silent(self: Any, node_id: Any, **kwargs: Any) -> Any:
    if _silent and not getattr(self, "_ratings_asks_every_broker", False) and not isinstance(node_id, str):
        broker = self.cluster.broker_metadata(node_id)
        if broker is not None and (broker.host, broker.port) in _silent:
            self.force_metadata_update()  # its leaderships move once the cluster fences it
            return None  # the caller's "node not ready": metadata, a request, the next broker
    return await _get_conn(self, node_id, **kwargs)


def _hosts_answering_first(self: Any) -> list:
    return sorted(_hosts.fget(self), key=lambda entry: (entry[0], entry[1]) in _silent)  # stable: shuffled within


def silent_brokers_avoided() -> None:
    """Every aiokafka client of this process stops connecting to a broker that the worker
    found silent while others answer, as Kafka's Java clients leave a node that failed
    out of their choice of node for a while. aiokafka asks a broker at random for
    metadata (`_metadata_update`), bootstraps in a random order (`hosts`), and sends each
    produce and fetch again to the leader of its metadata: a broker that takes
    connections but never answers (SIGSTOP, a hung disk) cost each of those a whole
    request timeout, one after another, and a 20 s freeze paused rating changes for up
    to 20.9 s although the cluster had moved the leaderships after 5 s (issue #44).
    Replaced on the class: aiokafka/client.py `AIOKafkaClient._get_conn` answers "not
    ready" for such a broker (and asks for metadata again), and `hosts` lists such
    brokers last. The BrokerWatch's own client (`asks_every_broker`) still asks it. Idempotent."""
    aiokafka.client.AIOKafkaClient._get_conn = _conn_unless_silent
    aiokafka.client.AIOKafkaClient.hosts = property(_hosts_answering_first)


def asks_every_broker(client: Any) -> Any:
    """The client, exempt from `silent_brokers_avoided` (the watch must ask them all)."""
    client._ratings_asks_every_broker = True
    return client
