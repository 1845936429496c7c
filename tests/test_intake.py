"""The worker's input consumer (stream_app/intake.py) against the real broker:
it starts each partition where the worker says, stops taking input while
paused, and after a failed batch goes back to the worker's positions."""

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from conftest import unique_name
from stream_app.intake import Intake


async def _publish(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, v, key=b"k", partition=partition) for v in values])
    finally:
        await producer.stop()


async def _until(condition, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_intake_starts_at_the_given_positions_pauses_and_rereads_after_a_failed_batch(broker):
    topic = unique_name("intake")

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        finally:
            await admin.close()
        await _publish(broker.bootstrap, topic, 0, [f"a{i}".encode() for i in range(10)])
        await _publish(broker.bootstrap, topic, 1, [f"b{i}".encode() for i in range(4)])

        applied: list[tuple[int, int]] = []
        done = {0: 2, 1: None}  # the "checkpoints": partition 0 applied up to offset 2, partition 1 nothing
        fail_once = [True]

        async def apply(records):
            if fail_once[0] and any(r.partition == 0 and r.offset == 6 for r in records):
                fail_once[0] = False
                raise RuntimeError("the broker went away")  # nothing of this batch counts
            for r in records:
                applied.append((r.partition, r.offset))
                done[r.partition] = r.offset

        def position(topic_, partition):
            return None if done[partition] is None else done[partition] + 1

        intake = Intake({"bootstrap_servers": broker.bootstrap}, apply, position, max_records=3, retry_seconds=0.1)
        await intake.resume([(topic, 0), (topic, 1)])
        try:
            await _until(lambda: done[0] == 9 and done[1] == 3)
            assert intake.failures == 1
            assigned = intake.generation
            await intake.pause(timeout=5)
            seen = len(applied)
            await _publish(broker.bootstrap, topic, 1, [b"b4", b"b5"])
            # A recovery that finishes after a newer pause (the next rebalance) must not resume.
            assert await intake.resume([(topic, 0), (topic, 1)], assigned) is False
            await asyncio.sleep(1.0)
            assert len(applied) == seen  # paused: nothing taken
            # A rebalance left this worker partition 1 only.
            assert await intake.resume([(topic, 1)], intake.generation) is True
            await _until(lambda: done[1] == 5)
            await _publish(broker.bootstrap, topic, 0, [b"a10"])
            await asyncio.sleep(1.0)
        finally:
            await intake.stop(timeout=5)
        return applied

    applied = asyncio.run(scenario())
    by_partition = {p: [o for q, o in applied if q == p] for p in (0, 1)}
    # Each offset once, in order, from the given positions; the failed batch came again from the position.
    assert by_partition[0] == list(range(3, 10))
    assert by_partition[1] == list(range(6))
