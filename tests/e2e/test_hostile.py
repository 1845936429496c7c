"""Hostile input against the real embedded broker and a real worker process.

A corpus of bad events is published among valid ones: each lands in the
dead-letter topic with the right reason (the dead letter valid against
schemas/dead-letter.v1.json and carrying the original payload), and the valid
events around them are applied exactly as `ratings replay` applies the same
sequence. Then every valid event is published a second time (a retrying
producer): nothing changes, and every retry is counted as a duplicate.
"""

from __future__ import annotations

import asyncio
import base64
import random
import re
from collections import Counter

import jsonschema
import orjson
import pytest

from stream_app.client import RatingsClient
from stream_app.leagues import LeagueConfig
from stream_app.inputs import MAX_EVENT_BYTES, MAX_PARTICIPANTS, BadEvent, load_schema, parse_match
from stream_app.published import MAX_DEAD_LETTER_BYTES
from stream_app.offline.replay import Ledger
from stream_app.offline.sample import multi_player_league, two_player_league

from tests.support.kafka import ensure_topics, keyed, publish, read_all, topic_args as topics_of
from tests.support.leagues import CONFIG, assert_same_state, in_league_order, league_matches, match_counts
from tests.support.names import unique_name
from tests.support.workers import WorkerProcess, wait_for


def _match(match_id: str, league: str = "chess", **extra) -> dict:
    doc = {"match_id": match_id, "league": league,
           "participants": [{"player": "hx-a", "rank": 1}, {"player": "hx-b", "rank": 2}]}
    doc.update(extra)
    return doc


def _people(*pairs) -> list[dict]:
    return [{"player": p, "rank": r} for p, r in pairs]


def _dumps(doc) -> bytes:
    return orjson.dumps(doc)


def bad_corpus() -> list[tuple[str, bytes | None, bytes | None, str, str | None]]:
    """(kind, key, value, reason, field) of every hostile input; None value: a tombstone."""
    k = b"chess"
    big_pad = "x" * (MAX_EVENT_BYTES + 10)
    many = [{"player": f"p{i}", "rank": i + 1} for i in range(MAX_PARTICIPANTS + 1)]
    corpus = [
        # encoding and syntax
        ("not utf-8", k, b"\xff\xfe\xfd garbage \x80", "invalid_encoding", None),
        ("utf-8 then a lone continuation byte", k, b'{"league": "chess\x80"}', "invalid_encoding", None),
        ("utf-16", k, '{"league": "chess"}'.encode("utf-16"), "invalid_encoding", None),
        ("not json", k, b"{not json", "invalid_json", None),
        ("empty value", k, b"", "invalid_json", None),
        ("tombstone (null value)", k, None, "invalid_json", None),
        ("truncated json", k, _dumps(_match("trunc"))[:-3], "invalid_json", None),
        ("trailing garbage", k, _dumps(_match("trail")) + b" {}", "invalid_json", None),
        ("NaN score as JSON text", k, b'{"match_id":"nan","league":"chess","participants":[{"player":"a","score":NaN},{"player":"b","score":1}]}', "invalid_json", None),
        ("Infinity score as JSON text", k, b'{"match_id":"inf","league":"chess","participants":[{"player":"a","score":Infinity},{"player":"b","score":1}]}', "invalid_json", None),
        ("-Infinity score as JSON text", k, b'{"match_id":"ninf","league":"chess","participants":[{"player":"a","score":-Infinity},{"player":"b","score":1}]}', "invalid_json", None),
        ("1e400 score (overflows a double)", k, b'{"match_id":"e400","league":"chess","participants":[{"player":"a","score":1e400},{"player":"b","score":1}]}', "invalid_json", None),
        ("nested 5000 deep", k, b'{"match_id":"deep","league":"chess","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "invalid_json", None),
        # not an object
        ("json array", k, b"[1, 2, 3]", "not_an_object", None),
        ("json string", k, b'"match"', "not_an_object", None),
        ("json number", k, b"42", "not_an_object", None),
        ("json null", k, b"null", "not_an_object", None),
        ("json true", k, b"true", "not_an_object", None),
        # missing fields
        ("empty object", k, b"{}", "schema_violation", None),
        ("no league", k, _dumps({"match_id": "nl", "participants": _people(("a", 1), ("b", 2))}), "schema_violation", "league"),
        ("no match_id", k, _dumps({"league": "chess", "participants": _people(("a", 1), ("b", 2))}), "schema_violation", "match_id"),
        ("no participants", k, _dumps({"league": "chess", "match_id": "np"}), "schema_violation", "participants"),
        ("participant without player", k, _dumps(_match("npl", participants=[{"rank": 1}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].player"),
        ("participant without rank or score", k, _dumps(_match("nrs", participants=[{"player": "a"}, {"player": "b"}])), "schema_violation", "participants[0]"),
        ("ranks for some participants only", k, _dumps(_match("mixed", participants=[{"player": "a", "rank": 1}, {"player": "b", "score": 2}])), "inconsistent_standings", "participants[1].rank"),
        # wrong types
        ("match_id a number", k, _dumps({**_match("x"), "match_id": 17}), "schema_violation", "match_id"),
        ("league an object", k, _dumps({**_match("lo"), "league": {"name": "chess"}}), "schema_violation", "league"),
        ("league a list", k, _dumps({**_match("ll"), "league": ["chess"]}), "schema_violation", "league"),
        ("match_id null", k, _dumps({**_match("x"), "match_id": None}), "schema_violation", "match_id"),
        ("player an object", k, _dumps(_match("po", participants=[{"player": {"id": "a"}, "rank": 1}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].player"),
        ("player a list", k, _dumps(_match("pl", participants=[{"player": ["a"], "rank": 1}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].player"),
        ("player a number", k, _dumps(_match("pn", participants=[{"player": 7, "rank": 1}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].player"),
        ("participants a string", k, _dumps(_match("ps", participants="a,b")), "schema_violation", "participants"),
        ("participants an object", k, _dumps(_match("pobj", participants={"a": 1, "b": 2})), "schema_violation", "participants"),
        ("participant a string", k, _dumps(_match("pstr", participants=["a", "b"])), "schema_violation", "participants[0]"),
        ("rank a string", k, _dumps(_match("rs", participants=[{"player": "a", "rank": "1"}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].rank"),
        ("rank a fraction", k, _dumps(_match("rf", participants=[{"player": "a", "rank": 1.5}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].rank"),
        ("rank a boolean", k, _dumps(_match("rb", participants=[{"player": "a", "rank": True}, {"player": "b", "rank": 2}])), "schema_violation", "participants[0].rank"),
        ("rank huge", k, b'{"match_id":"rh","league":"chess","participants":[{"player":"a","rank":123456789012345678901234567890},{"player":"b","rank":2}]}', "schema_violation", "participants[0].rank"),
        ("score a string", k, _dumps(_match("ss", participants=[{"player": "a", "score": "10"}, {"player": "b", "score": 2}])), "schema_violation", "participants[0].score"),
        ("score a list", k, _dumps(_match("sl", participants=[{"player": "a", "score": [10]}, {"player": "b", "score": 2}])), "schema_violation", "participants[0].score"),
        ("occurred_at a number", k, _dumps(_match("ot", occurred_at=1700000000)), "schema_violation", "occurred_at"),
        ("occurred_at not a time", k, _dumps(_match("ox", occurred_at="yesterday")), "schema_violation", "occurred_at"),
        # participants: how many, and who
        ("no participants (empty list)", k, _dumps(_match("empty", participants=[])), "schema_violation", "participants"),
        ("one participant", k, _dumps(_match("one", participants=_people(("a", 1)))), "schema_violation", "participants"),
        ("the same player twice", k, _dumps(_match("twice", participants=_people(("a", 1), ("a", 2)))), "duplicate_player", "participants[1].player"),
        ("the same player twice in a pairwise league", b"karting", _dumps(_match("twice-k", "karting", participants=_people(("a", 1), ("b", 2), ("a", 3)))), "duplicate_player", "participants[2].player"),
        ("rank zero", k, _dumps(_match("r0", participants=_people(("a", 0), ("b", 1)))), "schema_violation", "participants[0].rank"),
        ("rank negative", k, _dumps(_match("rneg", participants=_people(("a", 1), ("b", -3)))), "schema_violation", "participants[1].rank"),
        ("three players in a two-player league", k, _dumps(_match("three", participants=_people(("a", 1), ("b", 2), ("c", 3)))), "system_rule", "participants"),
        (f"{MAX_PARTICIPANTS + 1} participants", b"arena", _dumps(_match("many", "arena", participants=many)), "too_many_participants", "participants"),
        # ids
        ("league over 128 characters", k, _dumps(_match("long", league="L" * 129)), "schema_violation", "league"),
        ("match_id over 128 characters", k, _dumps(_match("M" * 129)), "schema_violation", "match_id"),
        ("player over 128 characters", k, _dumps(_match("plong", participants=_people(("P" * 129, 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        ("empty league", k, _dumps(_match("el", league="")), "schema_violation", "league"),
        ("league with '/'", k, _dumps(_match("slash", league="chess/../etc")), "schema_violation", "league"),
        ("league '..'", k, _dumps(_match("dotdot", league="..")), "schema_violation", "league"),
        ("league '.'", k, _dumps(_match("dot", league=".")), "schema_violation", "league"),
        ("league with a space", k, _dumps(_match("space", league="chess blitz")), "schema_violation", "league"),
        ("league with unicode", k, _dumps(_match("uni", league="schäch")), "schema_violation", "league"),
        ("league with a unit separator", k, _dumps(_match("sep", league="chess\x1fx")), "schema_violation", "league"),
        ("match_id with a newline", k, _dumps(_match("a\nb")), "schema_violation", "match_id"),
        ("match_id with '%2F'", k, _dumps(_match("a%2Fb")), "schema_violation", "match_id"),
        ("player with '/'", k, _dumps(_match("pslash", participants=_people(("a/b", 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        ("player with a newline", k, _dumps(_match("pnl", participants=_people(("a\nb", 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        ("player '..'", k, _dumps(_match("pdd", participants=_people(("..", 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        ("player with an emoji", k, _dumps(_match("pemo", participants=_people(("ann\U0001F600", 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        ("player with a NUL", k, _dumps(_match("pnul", participants=_people(("a\x00", 1), ("b", 2)))), "schema_violation", "participants[0].player"),
        # size
        (f"over {MAX_EVENT_BYTES} bytes", k, _dumps(_match("huge", pad=big_pad)), "too_large", None),
        # under the limit, but six times larger once escaped in a dead letter
        ("900 kB of control characters", k, b"\x01" * 900_000, "invalid_json", None),
        ("a 1 MB event with the same player twice", k, _dumps(_match("big-twice", pad="q" * 1_000_000, participants=_people(("a", 1), ("a", 2)))), "duplicate_player", "participants[1].player"),
    ]
    return corpus


def test_hostile_events_are_dead_lettered_and_the_valid_ones_around_them_applied(broker, tmp_path):
    prefix = unique_name("hostile")
    topic_args = topics_of(prefix)
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    config = LeagueConfig.from_toml(CONFIG)

    rng = random.Random(23)
    valid = list(two_player_league("chess", 20, 120, rng))
    valid += list(multi_player_league("karting", 12, 20, 6, rng))
    valid += list(multi_player_league("arena", 40, 6, 25, rng))
    rng.shuffle(valid)  # interleave leagues, then restore each league's own order
    ordered = in_league_order(valid)
    valid_records = keyed(ordered)

    corpus = bad_corpus()
    # A producer's retry: an event published again (exactly), and a different
    # event reusing an applied match_id: both are duplicate_match.
    retry = valid_records[10]
    twenty = dict(ordered[20])
    twenty["participants"] = [{"player": "zz-1", "rank": 2}, {"player": "zz-2", "rank": 1}]
    reused = (twenty["league"].encode(), _dumps(twenty))
    records = list(valid_records)
    positions = sorted(rng.sample(range(30, len(records)), len(corpus)), reverse=True)
    for (kind, key, value, reason, field), at in zip(reversed(corpus), positions):
        records.insert(at, (key, value))
    records.insert(len(records) // 2, retry)
    records.append(reused)
    # A valid event just under the size limit, published under a key of another
    # partition: the worker re-publishes it keyed by its league and applies it.
    from stream_app.stream.partitioner import league_partition

    near = _dumps(_match("near-limit", league="bigleague", pad="n" * (MAX_EVENT_BYTES - 300)))
    assert MAX_EVENT_BYTES - 200 < len(near) <= MAX_EVENT_BYTES
    wrong = next(k for k in (f"wrong-{i}" for i in range(100)) if league_partition(k, 8) != league_partition("bigleague", 8))
    records.insert(40, (wrong.encode(), near))
    expected = {kind: (reason, field) for kind, _, _, reason, field in corpus}
    expected["retry (same event again)"] = ("duplicate_match", "match_id")
    expected["retry (another event, same match_id)"] = ("duplicate_match", "match_id")
    # payload -> the kinds that sent it (an empty value and a tombstone both arrive as b"")
    by_payload: dict[bytes, list[str]] = {}
    for kind, _, value, _, _ in corpus:
        by_payload.setdefault(value or b"", []).append(kind)
    by_payload[retry[1]] = ["retry (same event again)"]
    by_payload[reused[1]] = ["retry (another event, same match_id)"]
    assert sum(map(len, by_payload.values())) == len(expected)

    # The replay of the same sequence (the offline tool's rules).
    ledger = Ledger(config)
    invalid = Counter()
    for _, value in records:
        try:
            ledger.apply(parse_match(value or b""))
        except BadEvent as exc:
            invalid[exc.code] += 1
    assert sum(invalid.values()) == len(corpus) and ledger.duplicates == 2
    counts = match_counts(ledger)

    worker = WorkerProcess(broker.url, topic_args, prefix, tmp_path / "w", config_path, name="hostile")
    try:
        asyncio.run(ensure_topics(broker.url, prefix))
        asyncio.run(_publish(broker.bootstrap, f"{prefix}.matches", records))
        wait_for(lambda: all(league_matches(worker, l) == n for l, n in counts.items())
                 and (worker.health() or {}).get("dead_letters") == len(expected),
                 90, "the valid events applied and the bad ones dead-lettered", workers=[worker])
        assert_same_state(worker, ledger)
        health = worker.health()
        assert health["duplicates"] == 2 and health["applied"] == sum(counts.values()) and health["forwarded"] == 1

        letters = asyncio.run(read_all(broker.bootstrap, f"{prefix}.dlq", 8, len(expected), drain=True))
        assert len(letters) == len(expected)
        validator = jsonschema.Draft202012Validator(load_schema("dead-letter.v1"), format_checker=jsonschema.FormatChecker())
        seen = {}
        truncated = set()
        for letter in letters:
            validator.validate(letter)
            if letter["payload_encoding"] == "base64":
                payload = base64.b64decode(letter["payload"])
            else:
                payload = letter["payload"].encode("utf-8")
            assert len(orjson.dumps(letter)) <= MAX_DEAD_LETTER_BYTES
            if letter.get("payload_truncated"):
                # Too big to travel whole: the longest prefix that fits, and the original size.
                candidates = [p for p, kinds in by_payload.items() if kinds and len(p) == letter["payload_bytes"]
                              and p.startswith(payload)]
                assert len(candidates) == 1 and len(payload) > 100_000, letter["payload"][:200]
                payload = candidates[0]
                truncated.add(by_payload[payload][0])
            assert by_payload.get(payload), f"a dead letter whose payload is not an original one: {letter['payload'][:200]!r}"
            kind = by_payload[payload].pop(0)
            seen[kind] = letter
            assert letter["source"]["topic"] == f"{prefix}.matches"
            assert isinstance(letter["source"]["offset"], int)
        assert set(seen) == set(expected)
        wrong = {kind: (seen[kind]["reason"], seen[kind]["field"]) for kind in expected
                 if (seen[kind]["reason"], seen[kind]["field"] if expected[kind][1] is not None else None) != expected[kind]}
        assert not wrong, "dead letters with the wrong reason or field (got vs expected): " + "; ".join(
            f"{kind}: {got} vs {expected[kind]}" for kind, got in wrong.items())
        for kind, letter in seen.items():
            assert letter["message"], kind
            if expected[kind][1] is not None:
                assert letter["message"].startswith(expected[kind][1]), (kind, letter["message"])
        assert truncated == {f"over {MAX_EVENT_BYTES} bytes", "900 kB of control characters", "a 1 MB event with the same player twice"}
        assert seen["not utf-8"]["payload_encoding"] == "base64"
        assert seen["three players in a two-player league"]["league"] == "chess"
        assert seen["retry (same event again)"]["match_id"] == ordered[10]["match_id"]

        # A retrying producer: every valid event published a second time.
        before = worker.health()
        asyncio.run(_publish(broker.bootstrap, f"{prefix}.matches", valid_records))
        wait_for(lambda: (worker.health() or {}).get("duplicates") == 2 + len(valid_records),
                 60, "every retry counted as a duplicate", workers=[worker])
        after = worker.health()
        assert after["applied"] == before["applied"]
        assert after["dead_letters"] == before["dead_letters"] + len(valid_records)
        assert_same_state(worker, ledger)
        for league, n in counts.items():
            assert league_matches(worker, league) == n
        status, text = worker.get("/metrics")
        assert status == 200
        dup_by_league = Counter(e["league"] for e in ordered)
        dup_by_league[ordered[10]["league"]] += 1  # the two retries of the first pass
        dup_by_league[ordered[20]["league"]] += 1
        for league, n in dup_by_league.items():
            algorithm = config.rule_for(league).algorithm
            line = f'ratings_duplicate_matches_total{{algorithm="{algorithm}",league="{league}"}} {float(n)}'
            assert line in text, (line, [l for l in text.splitlines() if l.startswith("ratings_duplicate")])
        reasons = Counter(reason for reason, _ in expected.values())
        for reason, n in reasons.items():
            got = sum(float(m.group(1)) for m in re.finditer(
                rf'^ratings_dead_letters_total{{[^}}]*reason="{reason}"[^}}]*}} (\S+)$', text, re.M))
            extra = len(valid_records) if reason == "duplicate_match" else 0
            assert got == n + extra, (reason, got, n + extra)
    finally:
        worker.stop()


async def _publish(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    """Big enough for the oversized event."""
    await publish(bootstrap, topic, records, max_request_size=4 * MAX_EVENT_BYTES)


def test_the_client_refuses_bad_events_before_sending(broker):
    """The producer side: RatingsClient.publish raises BadEvent (reason, field) and sends nothing;
    an oversized event gets a clear too_large error, not the Kafka client's MessageSizeTooLargeError."""
    prefix = unique_name("hostile-client")

    async def run() -> None:
        async with RatingsClient(broker.url, match_topic=f"{prefix}.m", changes_topic=f"{prefix}.c",
                                 dlq_topic=f"{prefix}.d", partitions=2) as client:
            for kind, _, value, reason, field in bad_corpus():
                if reason == "system_rule":  # the league's system is the worker's business
                    continue
                with pytest.raises(BadEvent) as caught:
                    await client.publish(value if value is not None else b"")
                assert caught.value.code == reason, kind
                if field is not None:
                    assert caught.value.field == field, kind
            with pytest.raises(BadEvent) as caught:
                await client.publish(_match("huge", pad="y" * MAX_EVENT_BYTES))
            assert caught.value.code == "too_large"
            assert f"over the limit of {MAX_EVENT_BYTES} bytes" in str(caught.value)
            sent, rejected = await client.publish_many([_match("ok-1"), _match("big", pad="z" * MAX_EVENT_BYTES), _match("ok-2")])
            assert sent == 2 and [(i, e.code) for i, e in rejected] == [(2, "too_large")]

    asyncio.run(run())
