"""Every `ratings` command but the worker and the demo, facing what a new user meets
first: no broker, no worker, a file missing, unreadable or unwritable, an unknown
league. Each ends with a few lines that say what is wrong and what to do, the exit
status of the README's table, and no traceback. In this process, but for two runs of
the installed command (what aiokafka logs, and says at exit, only shows there)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream_app import cli
from stream_app.cli.flags import FILE_ERROR, REFUSED, UNREACHABLE, USAGE
from stream_app.offline.synth import synthetic_rounds
from tests.support.ports import free_port
from tests.support.stand_ins import FakeApi
from tests.support.workers import ROOT

RESULT = {"league": "chess", "match_id": "c1",
          "participants": [{"player": "ann", "rank": 1}, {"player": "bob", "rank": 2}]}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """A file of results, one of a tuner's rounds, a missing one, a directory (which no
    command can read, even as root), and a path in a missing directory (unwritable)."""
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps(RESULT) + b"\n")
    rounds = tmp_path / "rounds.jsonl"
    rounds.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in synthetic_rounds(20, 12, seed=1)))
    (tmp_path / "a-directory").mkdir()
    return {"results": str(results), "rounds": str(rounds), "missing": str(tmp_path / "missing.jsonl"),
            "directory": str(tmp_path / "a-directory"), "unwritable": str(tmp_path / "no-such-dir" / "out")}


def ratings(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    """The exit status and everything printed, as a shell would see them: a SystemExit
    with a message prints it and exits 1."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        status = exc.code if isinstance(exc.code, int) else 1
    printed = capsys.readouterr()
    return status, printed.out + printed.err


def assert_said(status: int, said: str, expected: int, *words: str) -> None:
    assert status == expected, said
    assert "Traceback" not in said and "Error(" not in said, said  # no traceback, no exception's repr
    assert 1 <= len(said.strip().splitlines()) <= 3, said  # a few lines
    for word in words:
        assert word in said, said


# -- no broker ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["produce", "{results}"],
    ["void", "chess", "c1", "--reason", "typo"],
    ["correct", "chess", "c1", "ann=2", "bob=1", "--reason", "swapped"],
    ["season-start", "chess", "spring"],
    ["subscribe"],
    ["subscribe", "--dead-letters", "--limit", "1"],
])
def test_no_broker_says_where_it_looked_and_how_to_start_one(argv, files, capsys):
    nothing_there = f"kafka://127.0.0.1:{free_port()}"
    status, said = ratings(capsys, *(a.format(**files) for a in argv), "--broker", nothing_there)
    assert_said(status, said, UNREACHABLE, f"ratings {argv[0]}: cannot connect to {nothing_there} (",
                "Connection refused", "Is a broker running there? Start one with `ratings broker`",
                "--broker or RATINGS_BROKER")


# -- no worker ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["leaderboard", "chess"],
    ["leaderboard", "chess", "--season", "2026-01"],
    ["leaderboard", "chess", "--around", "ann"],
    ["player", "chess", "ann", "--history", "3"],
    ["seasons", "chess"],
    ["seasons", "chess", "--player", "ann"],
    ["predict", "chess", "ann", "bob"],
    ["versus", "chess", "ann", "bob"],
])
def test_no_worker_says_where_it_looked_and_how_to_name_another(argv, capsys):
    port = free_port()
    status, said = ratings(capsys, *argv, "--web-port", str(port))
    assert_said(status, said, UNREACHABLE, f"ratings {argv[0]}: cannot reach the API at http://127.0.0.1:{port}: "
                "Connection refused", "Is a worker running there?", "--web-port or --api (RATINGS_API)")


# -- an unknown league -------------------------------------------------------------------
def unknown_league(request: Any) -> tuple[int, dict[str, str]]:
    return 404, {"error": "league 'nope' not found"}  # the API's answer


@pytest.mark.parametrize("argv", [
    ["leaderboard", "nope"],
    ["leaderboard", "nope", "--season", "2026-01"],
    ["player", "nope", "ann"],
    ["seasons", "nope"],
    ["seasons", "nope", "--player", "ann"],
    ["predict", "nope", "ann", "bob"],
    ["versus", "nope", "ann", "bob"],
])
def test_an_unknown_league_is_the_apis_refusal_in_one_line(argv, capsys):
    with FakeApi(unknown_league) as api:
        status, said = ratings(capsys, *argv, "--api", api.url)
    assert_said(status, said, REFUSED, f"ratings {argv[0]}: league 'nope' not found (HTTP 404)")


def test_an_unknown_league_of_an_offline_command(files, tmp_path, capsys):
    status, said = ratings(capsys, "plot", "-i", files["results"], "--league", "nope", "-o", str(tmp_path / "p.png"))
    assert_said(status, said, REFUSED, "ratings plot: no applied match of league 'nope' in ")
    # tune's --league chooses among the file's leagues before anything runs: a usage error.
    status, said = ratings(capsys, "tune", "-i", files["rounds"], "-p", "k=1:2", "--league", "nope")
    assert_said(status, said, USAGE, "ratings tune: league 'nope' has no results in the file")


# -- files -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, file", [
    (["produce", "{missing}"], "missing"),
    (["produce", "{directory}"], "directory"),
    (["produce", "{results}", "--config", "{missing}"], "missing"),
    (["correct", "chess", "c1", "ann=2", "bob=1", "--reason", "x", "--config", "{directory}"], "directory"),
    (["replay", "-i", "{missing}"], "missing"),
    (["replay", "-i", "{directory}"], "directory"),
    (["replay", "-i", "{results}", "-c", "{missing}"], "missing"),
    (["replay", "-i", "{results}", "-o", "{unwritable}"], "unwritable"),
    (["replay", "-i", "{results}", "--history", "{unwritable}"], "unwritable"),
    (["replay", "-i", "{results}", "--seasons", "{unwritable}"], "unwritable"),
    (["replay", "-i", "{results}", "-o", "{directory}/state.json", "--metrics-json", "{unwritable}"], "unwritable"),
    (["plot", "-i", "{missing}", "--league", "chess", "-o", "{directory}/p.png"], "missing"),
    (["plot", "-i", "{results}", "--league", "chess", "-o", "{unwritable}.png"], "unwritable"),
    (["tune", "-i", "{missing}", "-p", "k=1:2"], "missing"),
    (["tune", "-i", "{rounds}", "-p", "k=1:2", "--trials", "1", "-o", "{unwritable}"], "unwritable"),
    (["synth", "--players", "4", "--rounds", "1", "-o", "{unwritable}"], "unwritable"),
    (["sample", "-o", "{unwritable}"], "unwritable"),
])
def test_a_file_that_cannot_be_read_or_written_is_named_with_why(argv, file, files, capsys):
    why = {"missing": "No such file or directory", "directory": "Is a directory",
           "unwritable": "No such file or directory"}[file]
    status, said = ratings(capsys, *(a.format(**files) for a in argv))
    assert_said(status, said.splitlines()[-1], FILE_ERROR, f"ratings {argv[0]}: {files[file]}", f": {why}")
    assert "Traceback" not in said


# -- the installed command ---------------------------------------------------------------
def test_the_installed_command_says_no_more_than_its_lines_and_nothing_at_exit():
    """aiokafka logs a line per broker it cannot reach, and warns at exit of a consumer
    not closed: neither reaches the user."""
    nothing_there = f"kafka://127.0.0.1:{free_port()}"
    runs = {name: subprocess.Popen([sys.executable, "-m", "stream_app.cli", *argv, "--broker", nothing_there],
                                   cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name, argv in (("subscribe", ["subscribe"]), ("void", ["void", "chess", "c1", "--reason", "x"]))}
    for name, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == UNREACHABLE, err
        assert out == "" and err.splitlines() == [
            f"ratings {name}: cannot connect to {nothing_there} ({nothing_there[8:]}: Connection refused)",
            "  Is a broker running there? Start one with `ratings broker`, or name yours with --broker or "
            "RATINGS_BROKER."], err


@pytest.mark.parametrize("flag", ["-o", "--history", "--seasons", "--metrics-json"])
def test_a_replay_refuses_a_file_it_could_not_write_before_it_reads_its_input(flag, files, tmp_path):
    """The input is a pipe nobody writes to: reading it would wait for ever. The replay
    must name the file it could not write first, at once."""
    pipe = tmp_path / "input"
    os.mkfifo(pipe)
    done = subprocess.run([sys.executable, "-m", "stream_app.cli", "replay", "-i", str(pipe), flag, files["unwritable"]],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert_said(done.returncode, done.stderr, FILE_ERROR, f"ratings replay: {files['unwritable']}: No such file or directory")
