"""`ratings produce --config`, `ratings correct` and `ratings void` against a real
broker and worker: what produce refuses is what the worker would dead-letter, and
the commands report what the worker did (applied, or not applied and why)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from stream_app import cli
from stream_app.cli.flags import DONE, REFUSED
from tests.support.workers import WorkerProcess, wait_for

CONFIG = '[default]\nalgorithm = "elo"\n'


def match(match_id: str, *players: str) -> dict:
    return {"league": "chess", "match_id": match_id,
            "participants": [{"player": p, "rank": n} for n, p in enumerate(players, 1)]}


def rating(worker: WorkerProcess, player: str) -> float | None:
    status, body = worker.get(f"/leagues/chess/players/{player}")
    return body["rating"] if status == 200 else None


@pytest.mark.broker
def test_commands_report_what_the_worker_did(broker, topics, tmp_path: Path, capsys):
    config = tmp_path / "leagues.toml"
    config.write_text(CONFIG)
    lines = tmp_path / "results.jsonl"
    lines.write_bytes(b"".join(orjson.dumps(m) + b"\n" for m in (match("c1", "ann", "bob"),
                                                                 match("c2", "ann", "bob", "cy"))))
    worker = WorkerProcess(broker.url, topics.cli_args(), topics.prefix, tmp_path / "w", config, name="w")
    kafka = ["--broker", broker.url, *topics.cli_args()]
    try:
        # Three players in an elo league: refused here, with the reason the worker would give.
        assert cli.main(["produce", str(lines), "--config", str(config), *kafka]) == REFUSED
        assert capsys.readouterr().err.startswith(
            "line 2: participants: the 'elo' system rates exactly 2 participants (got 3) [system_rule]\n"
            "produce: 1 events sent, 1 lines rejected")
        wait_for(lambda: rating(worker, "bob") is not None, 120, "c1 applied", workers=[worker])
        before = rating(worker, "bob")

        assert cli.main(["correct", "chess", "c1", "ann=2", "bob=1", "--reason", "swapped", "--wait", "60",
                         *kafka]) == DONE
        assert capsys.readouterr().out.splitlines()[-1].startswith("applied: chess re-rated with these standings")
        wait_for(lambda: rating(worker, "bob") == 2 * 1000 - before, 30, "the correction served", workers=[worker])

        assert cli.main(["void", "chess", "nope", "--reason", "typo", "--wait", "60", *kafka]) == REFUSED
        assert capsys.readouterr().err == (
            "ratings void: not applied: match_id: 'nope' was never applied in league 'chess' (only an applied result "
            "can be voided or corrected) [unknown_match]\n")
        assert cli.main(["void", "chess", "c1", "--reason", "annulled", "--wait", "60", *kafka]) == DONE
        assert capsys.readouterr().out.splitlines()[-1].startswith("applied: chess re-rated without it")
    finally:
        worker.stop()
