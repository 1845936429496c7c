"""`ratings produce --config` and the client with a configuration refuse, before sending,
what a league's system cannot rate, as the worker would; `ratings correct` publishes
match-corrected.v1; `ratings void` and `correct` wait for what the worker did with the
command (its corrections or its dead letter). Against a stand-in producer and
stand-in followers: no broker."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

import orjson
import pytest

from stream_app import cli
from stream_app.cli.flags import DONE, REFUSED, UNREACHABLE, USAGE
from stream_app.client import EventFollower, RatingsClient
from stream_app.inputs import BadEvent, Correction, parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.rating.errors import UnknownMatch

CONFIG = """
[default]
algorithm = "elo"

[leagues."arena"]
algorithm = "weng-lin"
"""


def result(league: str, match_id: str, *players: str, teams: bool = False) -> dict[str, Any]:
    return {"league": league, "match_id": match_id,
            "participants": [{"player": p, "rank": n, **({"team": f"t{n}"} if teams else {})}
                             for n, p in enumerate(players, 1)]}


def correction(league: str, match_id: str, *players: str) -> dict[str, Any]:
    return {"schema": "match-corrected.v1", "reason": "typo", **result(league, match_id, *players)}


def worker_refusal(config: LeagueConfig, *inputs: dict[str, Any]) -> BadEvent:
    """What the worker's path (apply, here through the replay's Ledger) refuses the last of
    `inputs` with, the others applied first: the dead letter's reason and message."""
    ledger = Ledger(config)
    for doc in inputs[:-1]:
        ledger.apply(parse_input(doc))
    with pytest.raises(BadEvent) as refused:
        ledger.apply(parse_input(inputs[-1]))
    return refused.value


def test_produce_with_config_rejects_what_the_league_cannot_rate_with_the_workers_reason(producer, tmp_path, capsys):
    config = tmp_path / "leagues.toml"
    config.write_text(CONFIG)
    lines = [result("chess", "c1", "ann", "bob"),
             result("chess", "c2", "ann", "bob", "cy"),  # three players: elo rates two
             result("chess", "c3", "ann", "bob", teams=True),  # teams: elo rates individuals
             result("arena", "a1", "ann", "bob", teams=True),  # weng-lin rates teams
             correction("chess", "c1", "ann", "bob", "cy")]  # a correction's standings are checked the same
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    rules = LeagueConfig.from_toml(CONFIG)
    expected = {2: worker_refusal(rules, lines[1]), 3: worker_refusal(rules, lines[2]),
                5: worker_refusal(rules, lines[0], lines[4])}
    assert {n: e.code for n, e in expected.items()} == {2: "system_rule", 3: "system_rule", 5: "system_rule"}

    assert cli.main(["produce", str(path), "--config", str(config)]) == REFUSED
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == [f"line {n}: {expected[n]}" for n in (2, 3, 5)]
    assert err[3].startswith("produce: 2 events sent, 3 lines rejected") and "each checked against" in err[3]
    assert [orjson.loads(value)["match_id"] for _, _, value in producer.sent] == ["c1", "a1"]

    # Without the configuration the same file is sent whole, and the summary says it was not checked.
    producer.sent.clear()
    assert cli.main(["produce", str(path)]) == DONE
    summary = capsys.readouterr().err
    assert summary.startswith("produce: 5 events sent, 0 lines rejected") and "(--config FILE does)" in summary
    assert "`ratings subscribe --dead-letters`" in summary and len(producer.sent) == 5


async def test_the_client_with_a_configuration_refuses_before_sending(producer):
    rules = LeagueConfig.from_toml(CONFIG)
    client = RatingsClient(match_topic="m", config=rules)
    await client.start()
    try:
        with pytest.raises(BadEvent) as refused:
            await client.publish(result("chess", "c2", "ann", "bob", "cy"))
        with pytest.raises(BadEvent) as correcting:
            await client.correct("chess", "c1", [{"player": "ann", "rank": 1, "team": "x"},
                                                 {"player": "bob", "rank": 2, "team": "y"}], "teams now")
        await client.publish(result("arena", "a1", "ann", "bob", "cy", teams=True))
        sent, rejected = await client.publish_many([result("chess", "c3", "ann", "bob"),
                                                    result("chess", "c4", "a", "b", "c", "d")])
    finally:
        await client.stop()
    assert str(refused.value) == str(worker_refusal(rules, result("chess", "c2", "ann", "bob", "cy")))
    assert (correcting.value.code, correcting.value.field) == ("system_rule", "participants[0].team")
    assert (sent, [(n, e.code) for n, e in rejected]) == (1, [(2, "system_rule")])
    assert [orjson.loads(value)["match_id"] for _, _, value in producer.sent] == ["a1", "c3"]


# -- ratings correct ---------------------------------------------------------------------
def test_correct_publishes_a_match_corrected_command_keyed_by_league(producer, capsys):
    argv = ["correct", "karting", "race-17", "erin=1", "frank=2", "heidi=3", "grace=4", "--reason", "grace disqualified",
            "--at", "2026-11-22T11:00:00+01:00", "--wait", "0", "--match-topic", "t.matches"]
    assert cli.main(argv) == DONE
    [(topic, key, value)] = producer.sent
    assert (topic, key) == ("t.matches", b"karting")
    assert orjson.loads(value) == {
        "schema": "match-corrected.v1", "league": "karting", "match_id": "race-17", "reason": "grace disqualified",
        "occurred_at": "2026-11-22T11:00:00+01:00",
        "participants": [{"player": "erin", "rank": 1}, {"player": "frank", "rank": 2},
                         {"player": "heidi", "rank": 3}, {"player": "grace", "rank": 4}]}
    command = parse_input(value)
    assert isinstance(command, Correction) and [p.player for p in command.match.participants][-1] == "grace"
    assert capsys.readouterr().out.startswith("correction of karting/race-17 published (t.matches[3] offset 41)\n")


def test_correct_takes_scores_teams_and_weights(producer):
    assert cli.main(["correct", "tennis", "m-1002", "carol,score=4", "dave,score=6.5", "--reason", "swapped",
                     "--wait", "0"]) == DONE
    assert cli.main(["correct", "arena", "g1", "ann=1,team=red,weight=0.5", "bob=2,team=blue", "--reason", "late",
                     "--wait", "0"]) == DONE
    first, second = (orjson.loads(value) for _, _, value in producer.sent)
    assert first["participants"] == [{"player": "carol", "score": 4.0}, {"player": "dave", "score": 6.5}]
    assert "occurred_at" not in first  # the result keeps its time
    assert second["participants"] == [{"player": "ann", "rank": 1, "team": "red", "weight": 0.5},
                                      {"player": "bob", "rank": 2, "team": "blue"}]


@pytest.mark.parametrize("participants, words", [
    (["ann=first", "bob=2"], "argument PARTICIPANT: 'ann=first': rank: not an integer: 'first'"),
    (["ann=1,colour=red", "bob=2"], "argument PARTICIPANT: 'ann=1,colour=red': 'colour=red' is not FIELD=VALUE"),
    (["ann,score=nan", "bob,score=1"], "argument PARTICIPANT: 'ann,score=nan': score: must be a finite number"),
    (["ann,weight=x", "bob=2"], "'ann,weight=x': weight: not a number: 'x'"),
])
def test_correct_refuses_a_participant_it_cannot_read_as_a_usage_error(participants, words, producer, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["correct", "chess", "c1", *participants, "--reason", "x"])
    assert exited.value.code == USAGE and words in capsys.readouterr().err
    assert producer.sent == []


@pytest.mark.parametrize("argv, said", [
    (["chess", "c1", "ann=1", "--reason", "x"], "ratings correct: PARTICIPANT: must contain at least 2 items"),
    (["chess", "c1", "ann=1", "ann=2", "--reason", "x"], "ratings correct: PARTICIPANT 2 player: 'ann' already appears at "
                                                       "PARTICIPANT 1 [duplicate_player]"),
    (["chess", "c1", "ann=1", "bob=0", "--reason", "x"], "ratings correct: PARTICIPANT 2 rank: must be"),
    (["chess", "c 1", "ann=1", "bob=2", "--reason", "x"], "ratings correct: MATCH_ID: must be 1 to 128 characters"),
    (["chess", "c1", "ann=1", "bob=2", "--reason", "x", "--at", "yesterday"], "ratings correct: --at: "),
    (["chess", "c1", "ann=1", "bob=2", "cy=3", "--reason", "x", "--config", "{config}"],
     "ratings correct: PARTICIPANT: the 'elo' system rates exactly 2 participants (got 3) [system_rule]"),
])
def test_correct_refuses_an_invalid_command_in_the_command_lines_words(argv, said, producer, capsys, tmp_path):
    config = tmp_path / "leagues.toml"
    config.write_text(CONFIG)
    assert cli.main(["correct", *(a.format(config=config) for a in argv), "--wait", "0"]) == REFUSED
    err = capsys.readouterr().err
    assert err.startswith(said), err
    assert producer.starts == 0 and producer.sent == []  # refused before connecting


# -- void and correct: what the worker did ------------------------------------------------
Answer = Callable[[dict[str, Any]], list[dict[str, Any]]]  # the command sent -> the events the topic then holds


@pytest.fixture
def worker_answers(monkeypatch, producer) -> Callable[[Answer, Answer], None]:
    """Stand-in followers of the rating changes and the dead letters: each is ready at once,
    then, once the command is sent, yields what `changes` or `letters` say a worker
    published for it (the league's events only, as the real followers filter them)."""

    def install(changes: Answer, letters: Answer) -> None:
        def follow(answer: Answer) -> Callable[..., AsyncIterator[dict[str, Any]]]:
            async def events(self, league=None, *_, on_ready=None, **__) -> AsyncIterator[dict[str, Any]]:
                on_ready()
                while not producer.sent:
                    await asyncio.sleep(0.01)
                for event in answer(orjson.loads(producer.sent[-1][2])):
                    if event["league"] == league:
                        yield event
                await asyncio.Event().wait()  # then nothing more, as a quiet topic

            return events

        monkeypatch.setattr(EventFollower, "changes", follow(changes))
        monkeypatch.setattr(EventFollower, "dead_letters", follow(letters))

    return install


def nothing(command: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def unknown_match(command: dict[str, Any]) -> list[dict[str, Any]]:
    error = UnknownMatch(command["league"], command["match_id"], voided=False)
    return [{"schema": "dead-letter.v1", "reason": error.code, "message": error.message, "league": error.league,
             "match_id": error.match_id}]


def corrections(command: dict[str, Any]) -> list[dict[str, Any]]:
    other = {"league": command["league"], "match_id": "another", "player": "x", "cause": "correction"}
    mine = {"league": command["league"], "match_id": command["match_id"], "player": "ann", "cause": "correction"}
    return [other, mine]


def test_a_void_of_a_match_the_league_never_applied_is_reported_not_applied(worker_answers, capsys):
    worker_answers(nothing, unknown_match)
    assert cli.main(["void", "chess", "nope", "--reason", "typo", "--wait", "5"]) == REFUSED
    said = capsys.readouterr()
    assert said.out.startswith("void of chess/nope published (")
    assert said.err == ("ratings void: not applied: match_id: 'nope' was never applied in league 'chess' (only an "
                        "applied result can be voided or corrected) [unknown_match]\n")


def test_a_correction_applied_is_reported_applied_and_other_matches_are_not_taken_for_it(worker_answers, capsys):
    worker_answers(corrections, nothing)
    assert cli.main(["correct", "chess", "c1", "ann=2", "bob=1", "--reason", "swapped", "--wait", "5"]) == DONE
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("correction of chess/c1 published (")
    assert out[1].startswith("applied: chess re-rated with these standings; `ratings subscribe --league chess")


def test_no_answer_within_the_wait_exits_4_saying_how_to_check_later(worker_answers, capsys):
    worker_answers(nothing, lambda command: unknown_match({**command, "league": "go"}))  # another league's letter
    assert cli.main(["void", "chess", "c1", "--reason", "typo", "--wait", "0.3"]) == UNREACHABLE
    err = capsys.readouterr().err
    assert err.startswith("ratings void: no worker applied or refused it within 0.3 s. Is a worker running")
    assert "`ratings subscribe --dead-letters --league chess --from-beginning`" in err


def test_wait_must_be_zero_or_more_seconds(capsys):
    for bad, words in (("-1", "must be 0 or more seconds (got -1)"), ("soon", "not a number of seconds: 'soon'"),
                       ("inf", "must be 0 or more seconds (got inf)")):
        with pytest.raises(SystemExit) as exited:
            cli.main(["void", "chess", "c1", "--reason", "x", "--wait", bad])
        assert exited.value.code == USAGE and f"--wait: {words}" in capsys.readouterr().err


def test_a_principal_that_may_not_read_the_topics_out_still_publishes_saying_it_did_not_follow(monkeypatch, producer,
                                                                                                capsys):
    from stream_app.client.kafka import NotAuthorized

    async def refused(self, *args, **kwargs) -> AsyncIterator[dict[str, Any]]:
        raise NotAuthorized("User:producer may not read topic 'rating-changes' (TOPIC_AUTHORIZATION_FAILED)")
        yield  # (an async generator, as the real follower)

    monkeypatch.setattr(EventFollower, "changes", refused)
    monkeypatch.setattr(EventFollower, "dead_letters", refused)
    assert cli.main(["void", "chess", "c1", "--reason", "typo"]) == DONE
    out = capsys.readouterr().out.splitlines()
    assert len(producer.sent) == 1 and out[0].startswith("void of chess/c1 published (")
    assert out[1].startswith("not followed (User:producer may not read topic 'rating-changes' "
                             "(TOPIC_AUTHORIZATION_FAILED)): a worker refuses a match")


def test_a_follower_failing_while_waiting_is_said_as_the_broker_failing(worker_answers, monkeypatch, producer, capsys):
    from aiokafka.errors import KafkaConnectionError

    worker_answers(nothing, nothing)

    async def dies_after_the_send(self, *args, on_ready=None, **kwargs) -> AsyncIterator[dict[str, Any]]:
        on_ready()
        while not producer.sent:
            await asyncio.sleep(0.01)
        raise KafkaConnectionError("127.0.0.1:9092: Connection reset by peer")
        yield

    monkeypatch.setattr(EventFollower, "dead_letters", dies_after_the_send)
    assert cli.main(["void", "chess", "c1", "--reason", "typo", "--wait", "30"]) == UNREACHABLE
    err = capsys.readouterr().err
    assert err.startswith("ratings void: cannot connect to kafka://127.0.0.1:9092 (127.0.0.1:9092: Connection reset")
