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
    ("--session-timeout", "RATINGS_SESSION_TIMEOUT", "session_timeout", 10.0),
    ("--heartbeat-interval", "RATINGS_HEARTBEAT_INTERVAL", "heartbeat_interval", 1.0),
    ("--stop-timeout", "RATINGS_STOP_TIMEOUT", "stop_timeout", 30.0),
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
