"""`ratings subscribe` on a quiet topic: it says it is still waiting, once a quiet
spell, and --timeout gives up by itself; the stream is closed either way. Against a
stand-in follower: no broker."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import orjson
import pytest

from stream_app import cli
from stream_app.cli import stream
from stream_app.cli.flags import DONE
from stream_app.client import EventFollower

CHANGE = {"schema": "rating-changed.v1", "league": "chess", "player": "ann", "rating_after": 1016.0}


@pytest.fixture
def one_change_then_quiet(monkeypatch) -> dict[str, bool]:
    """A follower of rating changes that is ready at once, gives one change, then nothing."""
    seen = {"closed": False}

    async def changes(self, league=None, player=None, from_beginning=False, *, on_ready=None
                      ) -> AsyncIterator[dict[str, Any]]:
        try:
            on_ready()
            yield CHANGE
            await asyncio.Event().wait()
        finally:
            seen["closed"] = True  # (the real follower stops its consumer here)

    monkeypatch.setattr(EventFollower, "changes", changes)
    return seen


def test_timeout_stops_a_quiet_subscription_saying_how_many_came(one_change_then_quiet, capsys):
    assert cli.main(["subscribe", "--limit", "3", "--timeout", "0.6"]) == DONE
    printed = capsys.readouterr()
    assert [orjson.loads(line) for line in printed.out.splitlines()] == [CHANGE]
    said = printed.err.splitlines()
    assert said[0].startswith("subscribe: reading rating-changes at ") and len(said) == 2
    assert said[1].startswith("subscribe: no new event for 0.") and said[1].endswith(
        " s (1 of --limit 3): stopped (--timeout)")
    assert one_change_then_quiet["closed"]


def test_a_quiet_spell_is_noted_once(one_change_then_quiet, monkeypatch, capsys):
    monkeypatch.setattr(stream, "QUIET_NOTE_SECONDS", 0.2)
    assert cli.main(["subscribe", "--league", "chess", "--timeout", "1.6"]) == DONE
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 3, said
    assert said[1].startswith("subscribe: no new event for 0.") and said[1].endswith(
        " s (1 so far; league=chess); still waiting: Ctrl-C stops, --timeout S gives up by itself")
    assert said[2].endswith(" s (1 so far; league=chess): stopped (--timeout)")


def test_timeout_must_be_above_zero(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["subscribe", "--timeout", "0"])
    assert exited.value.code == 2 and "--timeout: must be above 0 (got 0)" in capsys.readouterr().err
