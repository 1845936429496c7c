"""The service's topics: created when missing, with the configured partition
count, at a worker's start and again before it takes partitions up (a broker
that forgot its topics gets them back with the right counts: the worker never
lets a metadata request create one, stream/kafka_io.py)."""

from __future__ import annotations

import logging
from typing import Any

from ..client.kafka import KafkaConnection
from ..settings import Settings


log = logging.getLogger(__name__)


class TopicsMismatch(RuntimeError):
    """A topic's partition count differs from --partitions, or the changelog's settings
    would let Kafka delete the state."""


async def ensure_topics(settings: Settings, admin: Any = None) -> None:
    """Create the topics if missing, and refuse to run on topics whose partition
    counts differ from --partitions (leagues would map to the wrong partitions), or on
    a changelog Kafka would delete by age or size. At start, and again before
    partitions are taken up: a broker that forgot its topics gets them back with the
    right counts. One admin client asks everything (`admin`, or one started here)."""
    connection = KafkaConnection.of(settings)
    async with connection.admin(admin) as admin:
        await _ensure_topics(settings, connection, admin)


async def _ensure_topics(settings: Settings, connection: KafkaConnection, admin: Any) -> None:
    counts = await connection.ensure_topics(
        settings.partitions, extra=[settings.forward_topic], changelogs=[settings.changelog_topic],
        required=[settings.match_topic, settings.changes_topic, settings.dlq_topic], admin=admin)
    for topic in (*settings.input_topics, settings.changelog_topic):  # (a hidden one raised NotAuthorized)
        if counts.get(topic) != settings.partitions:
            raise TopicsMismatch(f"topic {topic!r} has {counts.get(topic)} partitions but --partitions is "
                                 f"{settings.partitions}; they must agree")
    problem = changelog_problem(settings.changelog_topic,
                                await connection.topic_configs(settings.changelog_topic, admin))
    if problem is not None:
        raise TopicsMismatch(problem)


def changelog_problem(topic: str, configs: dict[str, str]) -> str | None:
    """What is wrong with the changelog's settings as described (None: nothing). Under a
    policy with "delete", a retention by age or size would delete the state's records
    (the service creates it with neither: client/kafka.py's CHANGELOG_CONFIGS). A policy
    without it is allowed, with a warning: a base cannot delete the records before it."""
    policy = configs.get("cleanup.policy")
    if policy is None:
        return None
    fix = f"kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config"
    if "delete" in policy.split(","):
        kept = [f"{name}={configs[name]}" for name in ("retention.ms", "retention.bytes")
                if configs.get(name, "-1") != "-1"]
        if kept:
            return (f"changelog topic {topic!r} has cleanup.policy={policy} with {' and '.join(kept)}: Kafka would "
                    f"delete the state's records by age or size; set both to -1 ({fix} "
                    "retention.ms=-1,retention.bytes=-1)")
    else:
        log.warning("changelog topic %r has cleanup.policy=%s: a base cannot delete the records before it "
                    "(Kafka's DeleteRecords needs 'delete'), so the changelog keeps growing; set it with %s "
                    "'cleanup.policy=delete,retention.ms=-1,retention.bytes=-1'", topic, policy, fix)
    return None


async def check_start(settings: Settings) -> None:
    """Before a worker starts: its topics made (as `ensure_topics`), and its consumer group
    one its principal may use (NotAuthorized otherwise: the group would wait silently)."""
    connection = KafkaConnection.of(settings)
    async with connection.admin() as admin:
        await ensure_topics(settings, admin)
        await connection.check_group(settings.app_id, admin)
