"""RatingsClient against a real broker: publishing (validated, keyed by league,
commands too) and following rating changes and dead letters."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka.partitioner import murmur2

from stream_app import cli
from stream_app.client import RatingsClient, bootstrap_servers
from stream_app.inputs import BadEvent
from tests.support.kafka import change, collect, match, read_topic, write_topic


# -- the client: publishing ------------------------------------------------------------


async def test_publish_keys_by_league_and_keeps_the_payload(broker, topics):
    raw = b'{"league": "go",  "match_id": "g1", "participants": [{"player": "x", "score": 3}, {"player": "y", "score": 1}], "extra": 1}'
    events = [match("chess", f"c{i}") for i in range(6)] + [match("karting", f"k{i}", "a", "b", "c") for i in range(4)]
    async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
        metadata = [await client.publish(e) for e in events]
        metadata.append(await client.publish(raw))
    assert all(m.topic == topics.match for m in metadata)

    records, partitions = await read_topic(broker.bootstrap, topics.match, len(events) + 1)
    assert partitions == 8  # created by start() with the client's partition count, not Tansu's default 4
    assert len(records) == len(events) + 1
    by_key: dict[bytes, set[int]] = {}
    for record in records:
        by_key.setdefault(record.key, set()).add(record.partition)
        # Java / Faust default partitioner: murmur2(key) % partitions
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % 8
    assert set(by_key) == {b"chess", b"karting", b"go"}
    assert all(len(p) == 1 for p in by_key.values()), by_key
    values = {r.value for r in records}
    assert raw in values  # bytes go out exactly as given, whitespace and unknown fields included
    assert {orjson.dumps(e) for e in events} <= values
    # A league's matches stay in publishing order within its partition.
    chess = [orjson.loads(r.value)["match_id"] for r in sorted(records, key=lambda r: r.offset) if r.key == b"chess"]
    assert chess == [f"c{i}" for i in range(6)]


async def test_invalid_events_raise_bad_event_and_are_not_sent(broker, topics):
    bad = [
        ({"league": "chess", "participants": []}, "schema_violation", "match_id"),
        (match("chess", "d1", "alice", "alice"), "duplicate_player", "participants[1].player"),
        (b'{"match_id": "x", "league": "chess", ', "invalid_json", None),
        (b"\xff\xfe", "invalid_encoding", None),
        (b"[1, 2]", "not_an_object", None),
        (b'{"match_id": "x", "league": "bad league", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}',
         "schema_violation", "league"),
    ]  # fmt: skip
    async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
        for event, code, field in bad:
            with pytest.raises(BadEvent) as caught:
                await client.publish(event)
            assert caught.value.code == code
            assert caught.value.field == field
            if field:
                assert field in str(caught.value)  # the message names the field and the rule
        sent, rejected = await client.publish_many(
            [match("chess", "ok1"), bad[0][0], match("chess", "ok2"), b"nope"], on_progress=lambda s, r: None
        )
    assert sent == 2
    assert [(i, e.code) for i, e in rejected] == [(2, "schema_violation"), (4, "invalid_json")]
    records, _ = await read_topic(broker.bootstrap, topics.match, 2)
    assert sorted(orjson.loads(r.value)["match_id"] for r in records) == ["ok1", "ok2"]


def test_commands_are_validated_and_keyed_by_league(broker, topics, capsys):
    """client.void and client.correct publish the commands' schemas; `ratings void` too; a bad one is refused
    naming the field (nothing is sent)."""
    async def publish() -> None:
        async with RatingsClient(broker.url, **topics.client_kwargs()) as client:
            await client.void("chess", "c1", "annulled")
            await client.correct("go", "g1", [{"player": "x", "rank": 2}, {"player": "y", "rank": 1}], "swapped",
                                 occurred_at="2026-11-22T10:00:00Z")
            with pytest.raises(BadEvent) as caught:
                await client.void("chess", "c1", "")
            assert caught.value.field == "reason"
            with pytest.raises(BadEvent) as caught:
                await client.correct("go", "g1", [{"player": "x", "rank": 1}, {"player": "x", "rank": 2}], "typo")
            assert caught.value.code == "duplicate_player"

    asyncio.run(publish())
    assert cli.main(["void", "karting", "k9", "--reason", "jump start", "--wait", "0", "--broker", broker.url,
                     *topics.cli_args()]) == 0
    said = capsys.readouterr().out
    assert "void of karting/k9 published" in said and "not followed (--wait 0)" in said
    assert cli.main(["void", "karting", "bad id", "--reason", "x", "--broker", broker.url, *topics.cli_args()]) == 1
    assert "ratings void: MATCH_ID: must be 1 to 128 characters" in capsys.readouterr().err
    records, _ = asyncio.run(read_topic(broker.bootstrap, topics.match, 3))
    sent = {r.key: orjson.loads(r.value) for r in records}
    assert sent[b"chess"] == {"schema": "match-voided.v1", "league": "chess", "match_id": "c1", "reason": "annulled"}
    assert sent[b"go"]["schema"] == "match-corrected.v1" and sent[b"go"]["occurred_at"] == "2026-11-22T10:00:00Z"
    assert sent[b"karting"]["reason"] == "jump start"


async def test_ensure_topics_is_idempotent(broker, topics):
    client = RatingsClient(broker.url, partitions=3, **topics.client_kwargs())
    first = await client.ensure_topics()
    assert first == {topics.match: 3, topics.changes: 3, topics.dlq: 3}
    assert await client.ensure_topics() == first
    assert await client.ensure_topics(partitions=5) == first  # existing topics keep their partitions


def test_bootstrap_servers():
    assert bootstrap_servers("kafka://127.0.0.1:9092") == "127.0.0.1:9092"
    assert bootstrap_servers("kafka://a:1;b:2") == "a:1,b:2"
    assert bootstrap_servers("h1") == "h1:9092"
    with pytest.raises(ValueError):
        bootstrap_servers("http://x:1")


# -- the client: following ---------------------------------------------------------------


async def test_changes_filter_by_league_and_player(broker, topics):
    written = [change(league, player, n) for n, (league, player) in enumerate(
        [("chess", "alice"), ("chess", "bob"), ("go", "alice"), ("chess", "alice"), ("go", "carol")] * 3)]  # fmt: skip
    await write_topic(broker.bootstrap, topics.changes, written)
    client = RatingsClient(broker.url, **topics.client_kwargs())

    chess = await collect(client.changes(league="chess", from_beginning=True), 9)
    assert sorted(e["n"] for e in chess) == [e["n"] for e in written if e["league"] == "chess"]
    alice = await collect(client.changes(player="alice", from_beginning=True), 9)
    assert sorted(e["n"] for e in alice) == [e["n"] for e in written if e["player"] == "alice"]
    both = await collect(client.changes(league="chess", player="alice", from_beginning=True), 6, timeout=3)
    assert sorted(e["n"] for e in both) == [e["n"] for e in written if e["player"] == "alice" and e["league"] == "chess"]
    nobody = await collect(client.changes(league="nowhere", from_beginning=True), 1, timeout=1.5)
    assert nobody == []


async def test_changes_from_now_skips_existing_events(broker, topics):
    """Without from_beginning only later events arrive, even after multi-record batches, where
    Tansu's ListOffsets reports the end of a partition too early (a plain seek_to_end replays them)."""
    await write_topic(broker.bootstrap, topics.changes, [change("chess", f"old{i}", i) for i in range(12)])
    client = RatingsClient(broker.url, **topics.client_kwargs())
    ready = asyncio.Event()
    reader = asyncio.create_task(collect(client.changes(league="chess", on_ready=ready.set), 3, timeout=10))
    await asyncio.wait_for(ready.wait(), 10)
    await write_topic(broker.bootstrap, topics.changes, [change("chess", f"new{i}", 100 + i) for i in range(3)])
    got = await reader
    assert [e["player"] for e in got] == ["new0", "new1", "new2"]


async def test_dead_letters_filter(broker, topics):
    letters = [
        {"schema": "dead-letter.v1", "reason": "invalid_json", "league": None, "n": 0},
        {"schema": "dead-letter.v1", "reason": "system_rule", "league": "chess", "n": 1},
        {"schema": "dead-letter.v1", "reason": "duplicate_match", "league": "chess", "n": 2},
    ]
    await write_topic(broker.bootstrap, topics.dlq, letters)
    client = RatingsClient(broker.url, **topics.client_kwargs())
    got = await collect(client.dead_letters(league="chess", from_beginning=True), 2)
    assert sorted(e["n"] for e in got) == [1, 2]
    got = await collect(client.dead_letters(reason="invalid_json", from_beginning=True), 1)
    assert [e["n"] for e in got] == [0]
