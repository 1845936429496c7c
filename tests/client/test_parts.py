"""The client's parts each work alone on a KafkaConnection: the producer publishes
inputs keyed by league; a follower reads them back (its changes topic pointed at
the match topic), filtered, in each league's order; both through Apache Kafka and
the embedded broker."""

from __future__ import annotations

import pytest

from stream_app.client import EventFollower, InputProducer, KafkaConnection
from stream_app.inputs import BadEvent
from stream_app.stream.partitioner import league_partition
from tests.support.kafka import collect
from tests.support.names import unique_name


def result(league: str, match_id: str) -> dict:
    return {"league": league, "match_id": match_id,
            "participants": [{"player": "ann", "rank": 1}, {"player": "ben", "rank": 2}]}


@pytest.mark.broker
@pytest.mark.parametrize("which", ["broker", "embedded_broker"])
async def test_the_producer_alone_publishes_and_the_follower_alone_follows(request, which):
    # On Kafka the follower once waited for ever for a topic that exists (issue #43).
    broker = request.getfixturevalue(which)
    name = unique_name("parts")
    matches = f"{name}.matches"
    sending = KafkaConnection(broker.url, matches, f"{name}.changes", f"{name}.dlq", partitions=4)
    # The follower reads the match topic as if it were the changes topic.
    reading = KafkaConnection(broker.url, f"{name}.x", matches, f"{name}.y", partitions=4)
    counts = await sending.ensure_topics()
    assert counts == {matches: 4, f"{name}.changes": 4, f"{name}.dlq": 4}
    producer = InputProducer(sending)
    with pytest.raises(RuntimeError, match="not started"):
        await producer.publish(result("chess", "early"))
    await producer.start(ensure_topics=False)
    try:
        metadata = [await producer.publish(result(league, f"{league}-{i}")) for i in range(5) for league in ("chess", "go")]
        await producer.void("chess", "chess-1", "a typo")
        await producer.start_season("go", "S2", "2026-02-01T00:00:00Z")
        with pytest.raises(BadEvent):
            await producer.publish({"league": "chess", "match_id": "m", "participants": []})
    finally:
        await producer.stop()
    assert {(m.topic, m.partition) for m in metadata} == {(matches, league_partition(l, 4)) for l in ("chess", "go")}

    chess = await collect(EventFollower(reading).changes(league="chess", from_beginning=True), 6, 15)
    assert [e.get("match_id") for e in chess] == [f"chess-{i}" for i in range(5)] + ["chess-1"]
    assert chess[-1]["schema"] == "match-voided.v1"
    go = await collect(EventFollower(reading).changes(league="go", from_beginning=True), 6, 15)
    assert [e.get("match_id", e.get("season")) for e in go] == [f"go-{i}" for i in range(5)] + ["S2"]
