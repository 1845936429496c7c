"""The service's topics: created when missing, with the configured partition
count, at a worker's start and again before it takes partitions up (a broker
that forgot its topics gets them back with the right counts: the worker never
lets a metadata request create one, stream/kafka_io.py)."""

from __future__ import annotations

from ..client.kafka import KafkaConnection
from ..settings import Settings


class TopicsMismatch(RuntimeError):
    """A topic's partition count differs from --partitions."""


async def ensure_topics(settings: Settings) -> None:
    """Create the topics if missing, and refuse to run on topics whose partition
    counts differ from --partitions (leagues would map to the wrong partitions).
    At start, and again before partitions are taken up: a broker that forgot its
    topics gets them back with the right counts."""
    counts = await KafkaConnection.of(settings).ensure_topics(
        settings.partitions, extra=[settings.forward_topic], changelogs=[settings.changelog_topic],
        required=[settings.match_topic, settings.changes_topic, settings.dlq_topic])
    for topic in (*settings.input_topics, settings.changelog_topic):  # (a hidden one raised NotAuthorized)
        if counts.get(topic) != settings.partitions:
            raise TopicsMismatch(f"topic {topic!r} has {counts.get(topic)} partitions but --partitions is "
                                 f"{settings.partitions}; they must agree")


async def check_start(settings: Settings) -> None:
    """Before a worker starts: its topics made (as `ensure_topics`), and its consumer group
    one its principal may use (NotAuthorized otherwise: the group would wait silently)."""
    await ensure_topics(settings)
    await KafkaConnection.of(settings).check_group(settings.app_id)
