"""The HTTP API's views (stream/api.py) over the reads of a real local store
(stream/reads.py), filled by the batch loop: the leaderboard, a player, a
history, a prediction and a head-to-head equal the replay of the same input;
each bad parameter is a 400 naming it, each unknown id a 404; every answer is
what the OpenAPI document says."""

from __future__ import annotations

import random

import pytest

from stream_app.inputs import parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.offline.sample import two_player_league
from stream_app.stream.api import Refused
from stream_app.stream.openapi import document
from tests.support.openapi import assert_matches
from tests.support.served import query, served

DOC = document()
CONFIG = LeagueConfig.from_toml('''
[leagues."chess"]
algorithm = "elo"
min_matches = 8
history_max = 12

[leagues."go"]
algorithm = "glicko2"
''')
CHESS = list(two_player_league("chess", 60, 300, random.Random(4)))
GO = list(two_player_league("go", 12, 80, random.Random(5), spacing=3600))


@pytest.fixture
async def api(tmp_path):
    async with served(tmp_path, CONFIG, [CHESS[:150], GO, CHESS[150:]]) as views:
        yield views


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    replayed = Ledger(CONFIG, keep_history=True)
    for doc in CHESS + GO:
        replayed.apply(parse_input(doc))
    return replayed


def refused(call, *args) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args)
    return caught.value


async def arefused(call, *args) -> Refused:
    with pytest.raises(Refused) as caught:
        await call(*args)
    return caught.value


async def test_the_leaderboard_pages_through_the_ranked_players_in_the_replays_order(api, ledger):
    states = ledger.leagues["chess"]
    ranked = sorted(((s.rating, p) for p, s in states.items() if s.matches >= 8), key=lambda x: (-x[0], x[1]))
    assert 0 < len(ranked) < len(states)  # some provisional players: left out
    rows = []
    for offset in range(0, len(ranked) + 7, 7):
        page = await api.leaderboard(query(limit=7, offset=offset), "chess")
        assert_matches(DOC, "/leagues/{league}/leaderboard", 200, page)
        assert page["offset"] == offset and page["eligible_total"] == len(ranked)
        assert page["players_total"] == len(states)
        rows += page["players"]
    assert [(row["rating"], row["player"]) for row in rows] == ranked
    assert [row["rank"] for row in rows] == list(range(1, len(ranked) + 1))


async def test_the_leaderboard_around_a_player_and_why_one_is_not_ranked(api, ledger):
    states = ledger.leagues["chess"]
    middle = (await api.leaderboard(query(limit=1, offset=10), "chess"))["players"][0]
    around = await api.leaderboard(query(around=middle["player"], radius=2), "chess")
    assert [row["rank"] for row in around["players"]] == [9, 10, 11, 12, 13] and around["around"] == middle["player"]
    assert_matches(DOC, "/leagues/{league}/leaderboard", 200, around)
    provisional = next(p for p, s in sorted(states.items()) if s.matches < 8)
    error = await arefused(api.leaderboard, query(around=provisional), "chess")
    assert error.status == 404 and "provisional" in error.message and "of the 8 matches" in error.message
    assert (await arefused(api.leaderboard, query(around="nobody"), "chess")).status == 404
    for bad, name in ((query(limit=0), "limit"), (query(limit="x"), "limit"), (query(offset=-1), "offset"),
                      (query(around="a b"), "around"), (query(around="chess-p0000", radius=1001), "radius")):
        error = await arefused(api.leaderboard, bad, "chess")
        assert error.status == 400 and error.message.startswith(f"{name}: "), error.message
    assert (await arefused(api.leaderboard, query(), "nowhere")).status == 404


async def test_a_player_is_the_replays_with_rank_and_status(api, ledger):
    for league in ("chess", "go"):
        for name, state in sorted(ledger.leagues[league].items())[:6]:
            doc = await api.player(league, name)
            assert_matches(DOC, "/leagues/{league}/players/{player}", 200, doc)
            assert {key: doc[key] for key in state.public()} == state.public()
            assert doc["provisional"] is (league == "chess" and state.matches < 8)
            assert (doc["rank"] is None) is doc["provisional"]
    assert (await arefused(api.player, "chess", "nobody")).status == 404
    assert (await arefused(api.player, "nowhere", "chess-p0000")).status == 404


def test_a_history_pages_newest_first_and_keeps_history_max(api, ledger):
    name = max(ledger.leagues["chess"], key=lambda p: ledger.leagues["chess"][p].matches)
    assert ledger.leagues["chess"][name].matches > 12  # more than the league keeps
    changes, before = [], None
    while True:
        page = api.history(query(limit=15, **({} if before is None else {"before": before})), "chess", name)
        assert_matches(DOC, "/leagues/{league}/players/{player}/history", 200, page)
        changes += page["changes"]
        before = page["next"]
        if before is None:
            break
    assert changes == list(reversed(ledger.history("chess", name)))
    assert len(changes) == 12
    assert refused(api.history, query(limit=1001), "chess", name).message.startswith("limit: ")
    assert refused(api.history, query(before=0), "chess", name).message.startswith("before: ")
    assert refused(api.history, query(), "chess", "nobody").status == 404


def test_a_prediction_and_a_head_to_head(api, ledger):
    a, b = sorted(ledger.leagues["go"])[:2]
    doc = api.predict(query(team=[a, b]), "go")
    assert_matches(DOC, "/leagues/{league}/predict", 200, doc)
    assert sum(side["win"] for side in doc["sides"]) == pytest.approx(1.0)
    assert [side["ratings"] for side in doc["sides"]] == [{a: ledger.leagues["go"][a].rating},
                                                          {b: ledger.leagues["go"][b].rating}]
    error = refused(api.predict, query(team=[a]), "go")
    assert error.status == 400 and error.message.startswith("team")
    versus = api.versus(query(), "go", a, b)
    assert_matches(DOC, "/leagues/{league}/players/{player}/versus/{opponent}", 200, versus)
    shared = [doc for doc in GO if {a, b} == {p["player"] for p in doc["participants"]}]
    assert versus["matches"] == len(shared)
    assert refused(api.versus, query(), "go", a, a).status == 400
    assert refused(api.versus, query(), "go", a, "nobody").status == 404


def test_every_league_with_its_counts(api, ledger):
    for league, record in ledger.records.items():
        doc = api.league(league)
        assert_matches(DOC, "/leagues/{league}", 200, doc)
        assert (doc["matches"], doc["players"], doc["rerates"]) == (record["matches"], record["players"], 0)
    assert refused(api.league, "nowhere").status == 404


@pytest.mark.parametrize("text", ["+10", "\u0661\u0660", "\uff11\uff10", " 10", "10 ", "1_0", "-0", "1e1", "", "0x10"])
def test_an_integer_parameter_is_written_in_ascii_digits_only(api, text):
    """Python's int() takes each of these as 10 (or 0): the API refuses them, naming the field."""
    exc = refused(api.history, query(limit=text), "chess", "chess-p0001")
    assert exc.status == 400 and exc.message == f"limit: must be an integer from 1 to 1000 (got {text!r})"
    assert api.history(query(limit="010"), "chess", "chess-p0001")["changes"]  # leading zeros are still digits


async def test_offset_and_before_have_bounds_a_person_can_read(api):
    """Far above any league's players and any player's history, and written out in the message."""
    from stream_app.stream.api import MAX_OFFSET, MAX_SEQ

    assert (MAX_OFFSET, MAX_SEQ) == (10_000_000, 1_000_000_000)
    page = await api.leaderboard(query(offset=MAX_OFFSET), "chess")
    assert page["players"] == [] and page["offset"] == MAX_OFFSET
    exc = await arefused(api.leaderboard, query(offset=MAX_OFFSET + 1), "chess")
    assert exc.message == "offset: must be an integer from 0 to 10000000 (got '10000001')"
    assert api.history(query(before=MAX_SEQ), "chess", "chess-p0001")["changes"]
    exc = refused(api.history, query(before=2**63), "chess", "chess-p0001")
    assert exc.message == f"before: must be an integer from 1 to 1000000000 (got '{2**63}')"
