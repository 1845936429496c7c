"""The command line's flags: defaults from RATINGS_* variables, checked values (no broker needed);
`ratings season-start` against a stand-in producer, `ratings replay --seasons`."""

import re
import time
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from stream_app import cli
from stream_app.cli.flags import UNREACHABLE
from stream_app.client import InputProducer, RatingsClient
from stream_app.inputs import BadEvent, SeasonStart, parse_input, parse_time


def test_common_flags_default_to_environment(monkeypatch):
    monkeypatch.setenv("RATINGS_BROKER", "kafka://elsewhere:1")
    monkeypatch.setenv("RATINGS_PARTITIONS", "3")
    monkeypatch.setenv("RATINGS_CHANGES_TOPIC", "chg")
    monkeypatch.delenv("RATINGS_MATCH_TOPIC", raising=False)
    args = cli.build_parser().parse_args(["subscribe"])
    assert (args.broker, args.partitions, args.changes_topic, args.match_topic) == (
        "kafka://elsewhere:1", 3, "chg", "match-results")
    args = cli.build_parser().parse_args(["subscribe", "--partitions", "2", "--broker", "kafka://x:2"])
    assert (args.broker, args.partitions) == ("kafka://x:2", 2)
    monkeypatch.setenv("RATINGS_PARTITIONS", "zero")
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["subscribe"])


def test_worker_batch_max_comes_from_the_flag_or_the_environment_and_must_be_positive(monkeypatch, capsys):
    from stream_app.cli import build_parser

    assert build_parser().parse_args(["worker"]).batch_max == 2000
    assert build_parser().parse_args(["worker", "--batch-max", "5000"]).batch_max == 5000
    monkeypatch.setenv("RATINGS_BATCH_MAX", "300")
    assert build_parser().parse_args(["worker"]).batch_max == 300
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "--batch-max", "0"])
    assert "--batch-max: must be at least 1 (got 0)" in capsys.readouterr().err


@pytest.mark.parametrize("flag, variable, field, default", [
    ("--session-timeout", "RATINGS_SESSION_TIMEOUT", "session_timeout", 6.0),
    ("--heartbeat-interval", "RATINGS_HEARTBEAT_INTERVAL", "heartbeat_interval", 1.0),
    ("--stop-timeout", "RATINGS_STOP_TIMEOUT", "stop_timeout", 30.0),
    ("--fetch-wait", "RATINGS_FETCH_WAIT", "fetch_wait", 0.02),
])
def test_worker_group_and_stop_seconds_reach_the_settings_and_must_be_positive(flag, variable, field, default,
                                                                               monkeypatch, capsys):
    from stream_app.cli import build_parser
    from stream_app.cli.flags import settings_from

    monkeypatch.delenv(variable, raising=False)
    assert getattr(settings_from(build_parser().parse_args(["worker"])), field) == default
    assert getattr(settings_from(build_parser().parse_args(["worker", flag, "2.5"])), field) == 2.5
    monkeypatch.setenv(variable, "7")
    assert getattr(settings_from(build_parser().parse_args(["worker"])), field) == 7.0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["worker", flag, bad])
        assert flag in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["player", "chess", "ann", "--history", "0"], "--history: must be at least 1 (got 0)"),
    (["player", "chess", "ann", "--history", "-3"], "--history: must be at least 1 (got -3)"),
    (["player", "chess", "ann", "--history", "all"], "--history: not an integer: 'all'"),
    (["player", "chess"], "the following arguments are required: PLAYER"),
    (["player", "chess", "ann", "--web-port", "70000"], "--web-port: must be a TCP port"),
    (["player", "chess", "ann", "--web-port", "6066", "--api", "http://h:1"], "not allowed with argument"),
    (["leaderboard", "chess", "--limit", "0"], "--limit: must be at least 1 (got 0)"),
    (["leaderboard", "chess", "--offset", "-1"], "--offset: must be 0 or more (got -1)"),
    (["leaderboard", "chess", "--around", "ann", "--radius", "-1"], "--radius: must be 0 or more (got -1)"),
    (["leaderboard", "chess", "--around", "ann", "--radius", "two"], "--radius: not an integer: 'two'"),
    (["leaderboard", "chess", "--season", "2026-01", "--limit", "0"], "--limit: must be at least 1 (got 0)"),
    (["leaderboard", "chess", "--season"], "--season: expected one argument"),
    (["seasons"], "the following arguments are required: LEAGUE"),
    (["seasons", "chess", "--player"], "--player/-p: expected one argument"),
])
def test_read_commands_refuse_bad_values_before_asking_the_api(argv, words, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(argv)
    assert exited.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["leaderboard", "chess", "--radius", "3"], "--radius needs --around PLAYER"),
    (["leaderboard", "chess", "--around", "ann", "--limit", "5"], "not --limit or --offset"),
    (["leaderboard", "chess", "--around", "ann", "--offset", "0"], "not --limit or --offset"),
    (["leaderboard", "chess", "--season", "2026-01", "--around", "ann"], "not --around or --radius"),
    (["leaderboard", "chess", "--season", "2026-01", "--radius", "2"], "not --around or --radius"),
])
def test_leaderboard_flags_that_do_not_go_together_exit_2_before_asking_the_api(argv, words, capsys, monkeypatch):
    monkeypatch.setenv("RATINGS_API", "http://127.0.0.1:1")  # were it asked, the error would be "cannot reach"
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "cannot reach" not in err


def test_a_malformed_api_url_stops_the_command():
    with pytest.raises(SystemExit, match="ratings player: API URL '127.0.0.1:6066': use http://HOST:PORT"):
        cli.main(["player", "chess", "ann", "--api", "127.0.0.1:6066"])


def test_the_api_is_the_flag_then_the_environment_then_port_6066(monkeypatch):
    from stream_app.cli.flags import api_base

    def base(*flags: str) -> str:
        return api_base(cli.build_parser().parse_args(["player", "chess", "ann", *flags]))

    monkeypatch.delenv("RATINGS_API", raising=False)
    monkeypatch.delenv("RATINGS_WEB_PORT", raising=False)
    assert base() == "http://127.0.0.1:6066"
    monkeypatch.setenv("RATINGS_WEB_PORT", "7001")
    assert base() == "http://127.0.0.1:7001"
    assert base("--web-port", "7002") == "http://127.0.0.1:7002"
    monkeypatch.setenv("RATINGS_API", "http://w1:6066")
    assert base() == "http://w1:6066"
    assert base("--web-port", "7002") == "http://127.0.0.1:7002"  # a flag wins over any variable
    assert base("--api", "http://w2:1") == "http://w2:1"
    monkeypatch.delenv("RATINGS_API")
    monkeypatch.setenv("RATINGS_WEB_PORT", "0")
    with pytest.raises(SystemExit, match="RATINGS_WEB_PORT: must be at least 1"):
        base()


# -- ratings season-start ----------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["season-start", "chess"], "the following arguments are required: NAME"),
    (["season-start", "chess", "s1", "--at"], "--at: expected one argument"),
    (["season-start", "chess", "s1", "--partitions", "0"], "--partitions: must be at least 1 (got 0)"),
])
def test_season_start_usage_errors_exit_2(argv, words, producer, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and words in capsys.readouterr().err
    assert producer.starts == 0


def test_season_start_flags(monkeypatch):
    monkeypatch.setenv("RATINGS_MATCH_TOPIC", "env.matches")
    args = cli.build_parser().parse_args(["season-start", "chess", "s1"])
    assert (args.league, args.season, args.at, args.reason, args.match_topic) == ("chess", "s1", None, None,
                                                                                  "env.matches")
    args = cli.build_parser().parse_args(["season-start", "chess", "s1", "--at", "2026-01-01T00:00:00Z",
                                          "--reason", "why", "--match-topic", "m"])
    assert (args.at, args.reason, args.match_topic) == ("2026-01-01T00:00:00Z", "why", "m")


def test_season_start_publishes_the_command_to_the_match_topic_keyed_by_league(producer, capsys):
    argv = ["season-start", "arena", "spring-2026", "--at", "2026-03-20T01:00:00+01:00", "--reason", "spring split",
            "--match-topic", "t.matches"]
    assert cli.main(argv) == 0
    [(topic, key, value)] = producer.sent
    assert (topic, key) == ("t.matches", b"arena")
    assert orjson.loads(value) == {"schema": "season-started.v1", "league": "arena", "season": "spring-2026",
                                   "occurred_at": "2026-03-20T01:00:00+01:00", "reason": "spring split"}
    moment = datetime(2026, 3, 20, tzinfo=timezone.utc).timestamp()
    assert parse_input(value) == SeasonStart("arena", "spring-2026", moment, "spring split")
    assert capsys.readouterr().out.startswith(
        "season spring-2026 of arena at 2026-03-20T01:00:00+01:00 published (t.matches[3] offset 41): ")


def test_season_start_defaults_to_now_in_utc_to_the_second_and_no_reason(producer):
    before = time.time()
    assert cli.main(["season-start", "arena", "s2"]) == 0
    after = time.time()
    [(_, key, value)] = producer.sent
    doc = orjson.loads(value)
    assert key == b"arena" and "reason" not in doc
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["occurred_at"]), doc["occurred_at"]
    assert before <= parse_time(doc["occurred_at"]) < after + 1  # now, rounded up to the second


@pytest.mark.parametrize("argv, words", [
    (["season-start", "arena", "bad name"], "NAME: must be 1 to 128 characters from A-Z a-z 0-9"),
    (["season-start", "arena", ".."], "NAME: must be 1 to 128 characters"),
    (["season-start", "arena", "s1", "--at", "2026-03-20"],
     "--at: must be an RFC 3339 date-time with a time zone offset, e.g. 2026-03-20T00:00:00Z (got '2026-03-20')"),
    (["season-start", "arena", "s1", "--at", "2026-03-20T00:00:00"], "--at: must be an RFC 3339 date-time"),
    (["season-start", "arena", "s1", "--at", "next monday"], "--at: must be an RFC 3339 date-time"),
    (["season-start", "bad league", "s1"], "LEAGUE: must be 1 to 128 characters"),
    (["season-start", "arena", "s1", "--reason", ""], "--reason: must be longer than or equal to 1 characters"),
    (["season-start", "arena", "s1", "--reason", "x" * 501], "--reason: must be shorter than or equal to 500"),
])
def test_season_start_refuses_a_bad_value_naming_the_argument_before_connecting(argv, words, producer, capsys):
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("ratings season-start: ") and words in err
    assert producer.starts == 0 and producer.sent == []


def test_season_start_exits_4_when_the_broker_cannot_be_reached(monkeypatch, capsys):
    from aiokafka.errors import KafkaConnectionError

    async def start(self, *, ensure_topics: bool = True) -> None:
        raise KafkaConnectionError("127.0.0.1:1: Connection refused")

    monkeypatch.setattr(InputProducer, "start", start)
    assert cli.main(["season-start", "arena", "s1", "--broker", "kafka://127.0.0.1:1"]) == UNREACHABLE
    assert capsys.readouterr().err.startswith(
        "ratings season-start: cannot connect to kafka://127.0.0.1:1 (127.0.0.1:1: Connection refused)\n")


async def test_client_start_season_sends_the_time_as_given_or_in_utc_and_validates(producer):
    client = RatingsClient(match_topic="m")
    await client.start()
    try:
        await client.start_season("arena", "s1", datetime(2026, 3, 20, 1, tzinfo=timezone(timedelta(hours=1))))
        await client.start_season("arena", "s2", "2026-04-01T00:00:00.5-02:00", reason="why")
        with pytest.raises(BadEvent) as naive:
            await client.start_season("arena", "s3", datetime(2026, 5, 1))
        with pytest.raises(BadEvent) as bad_name:
            await client.start_season("arena", "s 3", "2026-05-01T00:00:00Z")
    finally:
        await client.stop()
    assert [(topic, key, orjson.loads(value)) for topic, key, value in producer.sent] == [
        ("m", b"arena", {"schema": "season-started.v1", "league": "arena", "season": "s1",
                         "occurred_at": "2026-03-20T00:00:00Z"}),
        ("m", b"arena", {"schema": "season-started.v1", "league": "arena", "season": "s2",
                         "occurred_at": "2026-04-01T00:00:00.5-02:00", "reason": "why"}),
    ]
    assert (naive.value.field, bad_name.value.field) == ("occurred_at", "season")


# -- ratings replay --seasons -------------------------------------------------------------
MONTHLY = """
[default]
algorithm = "elo"
season = "monthly"
season_reset = {shrink = 0.5}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1000}]
"""


def test_replay_seasons_writes_every_ended_seasons_final_standings(tmp_path, capsys):
    from stream_app.leagues import LeagueConfig
    from stream_app.offline.replay import Ledger, replay

    config = tmp_path / "leagues.toml"
    config.write_text(MONTHLY)
    days = [(1, 3), (1, 17), (2, 2), (2, 20), (3, 4)]  # January and February end; March is in progress
    pairs = [("ann", "bob"), ("cy", "dee"), ("ann", "cy"), ("bob", "dee")]
    events = [{"league": league, "match_id": f"{league}-{month}-{day}-{n}",
               "occurred_at": f"2026-{month:02d}-{day:02d}T1{n}:00:00Z",
               "participants": [{"player": winner, "rank": 1}, {"player": loser, "rank": 2}]}
              for league in ("chess", "go") for month, day in days for n, (winner, loser) in enumerate(pairs)
              if not (league == "go" and month == 2)]  # go: no results in February, a season all the same
    matches = tmp_path / "matches.jsonl"
    matches.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    out = tmp_path / "seasons.jsonl"

    assert cli.main(["replay", "-i", str(matches), "-c", str(config), "--seasons", str(out),
                     "-o", str(tmp_path / "state.json")]) == 0
    written = [orjson.loads(line) for line in out.read_bytes().splitlines()]

    ledger = Ledger(LeagueConfig.load(config))
    replay(matches, ledger)
    expected = ledger.final_standings()
    assert written == expected
    seasons = {(row["league"], row["season"]) for row in written}
    assert seasons == {("chess", "2026-01"), ("chess", "2026-02"), ("go", "2026-01")}
    for league, season in seasons:
        rows = [row for row in written if (row["league"], row["season"]) == (league, season)]
        assert [row["rank"] for row in rows] == [1, 2, 3, 4]
        assert {row["player"] for row in rows} == {"ann", "bob", "cy", "dee"}
    assert [list(row) for row in written] == [
        ["league", "season", "player", "rating", "rank", "percentile", "tier", "matches"]] * len(written)
    assert all(row["tier"] == ("Silver" if row["rating"] >= 1000 else "Bronze") for row in written)
    assert {row["tier"] for row in written} == {"Bronze", "Silver"}
    assert [row["matches"] for row in written if row["league"] == "chess" and row["player"] == "ann"] == [4, 4]
    err = capsys.readouterr().err
    assert f"3 ended seasons' final standings (12 rows) written to {out}; " in err


def test_a_worker_without_a_broker_exits_with_one_line_that_says_what_to_check(tmp_path):
    import subprocess
    import sys

    from tests.support.ports import free_port
    from tests.support.workers import ROOT

    nothing_there = free_port()
    done = subprocess.run([sys.executable, "-m", "stream_app.cli", "worker", "--broker", f"kafka://127.0.0.1:{nothing_there}",
                           "--data-dir", str(tmp_path / "d"), "--web-port", str(free_port())],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"ratings worker: cannot connect to kafka://127.0.0.1:{nothing_there} (PLAINTEXT)")
    assert "Is the broker running there" in said
