"""The command line's flags: defaults from RATINGS_* variables, checked values (no broker needed)."""

import pytest

from stream_app import cli


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
])
def test_read_commands_refuse_bad_values_before_asking_the_api(argv, words, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(argv)
    assert exited.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["leaderboard", "chess", "--radius", "3"], "--radius needs --around PLAYER"),
    (["leaderboard", "chess", "--around", "ann", "--limit", "5"], "not --limit or --offset"),
    (["leaderboard", "chess", "--around", "ann", "--offset", "0"], "not --limit or --offset"),
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
