"""The seasons endpoints of the HTTP API (stream/api.py: `Api.seasons`,
`Api.season_leaderboard`, `Api.player_seasons`, and the season and tier the
league, player and leaderboard documents carry), answered from a real local
store that the batch loop filled (tests/support/memory.py stands in for the
broker): the same answers as the replay's (offline/ledger.py), and each one
what the OpenAPI document says (stream/openapi.json)."""

from __future__ import annotations

from typing import Any

import pytest

from stream_app.inputs import format_time, parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.seasons import KINDS
from stream_app.stream.api import Refused
from stream_app.stream.openapi import document
from tests.support.openapi import assert_matches
from tests.support.served import query, served

DOC = document()
CONFIG = LeagueConfig.from_toml('''
[default]
algorithm = "elo"

[leagues."chess"]
algorithm = "elo"
season = "monthly"
season_reset = {shrink = 0.5}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1000}]
min_matches = 2

[leagues."arena"]
algorithm = "glicko2"
season = "manual"
''')

SEASONS = "/leagues/{league}/seasons"
SEASON_BOARD = "/leagues/{league}/seasons/{season}/leaderboard"
PLAYER_SEASONS = "/leagues/{league}/players/{player}/seasons"


def result(league: str, match_id: str, when: str, *players: str) -> dict[str, Any]:
    """A result in which the players finish in the order given."""
    return {"league": league, "match_id": match_id, "occurred_at": when,
            "participants": [{"player": player, "rank": place} for place, player in enumerate(players, start=1)]}


def season_started(league: str, season: str, when: str, reason: str | None = None) -> dict[str, Any]:
    doc = {"schema": "season-started.v1", "league": league, "season": season, "occurred_at": when}
    return doc if reason is None else {**doc, "reason": reason}


JANUARY = [result("chess", "1", "2026-01-03T10:00:00Z", "ann", "bo"),
           result("chess", "2", "2026-01-10T10:00:00Z", "ann", "cy"),
           result("chess", "3", "2026-01-20T10:00:00Z", "bo", "cy"),
           result("chess", "4", "2026-01-25T10:00:00Z", "dee", "ann"),  # dee: one match, not ranked at its end
           result("flat", "1", "2026-01-03T10:00:00Z", "ann", "bo"),  # a league without seasons or tiers
           result("arena", "0", "2026-01-02T10:00:00Z", "bo", "ann"),
           season_started("arena", "spring", "2026-01-02T12:00:00Z", "spring split"),
           result("arena", "1", "2026-01-03T10:00:00Z", "ann", "bo")]
FEBRUARY = [result("chess", "5", "2026-02-02T10:00:00Z", "cy", "ann"),  # starts 2026-02, ends 2026-01
            result("chess", "6", "2026-02-12T10:00:00Z", "bo", "eve"),
            result("chess", "7", "2026-02-20T10:00:00Z", "eve", "cy"),
            season_started("arena", "summer", "2026-02-01T00:00:00Z")]
MARCH = [result("chess", "8", "2026-03-01T10:00:00Z", "fay", "ann")]  # starts 2026-03 (in progress)
DOCS = JANUARY + FEBRUARY + MARCH


@pytest.fixture
async def api(tmp_path):
    async with served(tmp_path, CONFIG, [JANUARY, FEBRUARY, MARCH]) as views:
        yield views


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    """The replay of the same input."""
    replayed = Ledger(CONFIG)
    for doc in DOCS:
        replayed.apply(parse_input(doc))
    return replayed


def finals(ledger: Ledger, league: str, season: str) -> list[dict[str, Any]]:
    """The replay's final standings of a season, in leaderboard order."""
    return [{key: value for key, value in row.items() if key not in ("league", "season")}
            for row in ledger.final_standings() if row["league"] == league and row["season"] == season]


def refused(call: Any, *args: Any) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args)
    return caught.value


def test_the_schedule_enum_is_the_season_kinds():
    schedule = DOC["components"]["schemas"]["SeasonList"]["properties"]["schedule"]
    assert schedule["enum"] == [*KINDS, None]


async def test_a_leagues_seasons_first_to_last(api, ledger):
    doc = api.seasons("chess")
    assert doc == {"league": "chess", "algorithm": "elo", "schedule": "monthly", "season": "2026-03", "seasons": [
        {"season": "2026-01", "number": 1, "start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z",
         "players": 4},
        {"season": "2026-02", "number": 2, "start": "2026-02-01T00:00:00Z", "end": "2026-03-01T00:00:00Z",
         "players": 4},
        {"season": "2026-03", "number": 3, "start": "2026-03-01T00:00:00Z", "end": None, "players": None}]}
    assert [season["players"] for season in doc["seasons"][:2]] == \
        [len(finals(ledger, "chess", name)) for name in ("2026-01", "2026-02")]
    assert_matches(DOC, SEASONS, 200, doc)

    manual = api.seasons("arena")  # started by commands: the first's reason kept
    assert manual == {"league": "arena", "algorithm": "glicko2", "schedule": "manual", "season": "summer", "seasons": [
        {"season": "spring", "number": 1, "start": "2026-01-02T12:00:00Z", "end": "2026-02-01T00:00:00Z",
         "players": 2, "reason": "spring split"},
        {"season": "summer", "number": 2, "start": "2026-02-01T00:00:00Z", "end": None, "players": None}]}
    assert_matches(DOC, SEASONS, 200, manual)

    flat = api.seasons("flat")
    assert flat == {"league": "flat", "algorithm": "elo", "schedule": None, "season": None, "seasons": []}
    assert_matches(DOC, SEASONS, 200, flat)


async def test_an_ended_seasons_leaderboard_is_the_replays_final_standings(api, ledger):
    for league, season, number in (("chess", "2026-01", 1), ("chess", "2026-02", 2), ("arena", "spring", 1)):
        expected = finals(ledger, league, season)
        assert expected  # (someone played in it)
        doc = api.season_leaderboard(query(), league, season)
        listed = api.seasons(league)["seasons"][number - 1]
        assert doc == {"league": league, "algorithm": api.seasons(league)["algorithm"],
                       **{key: value for key, value in listed.items() if key != "players"},
                       "players_total": len(expected),
                       "eligible_total": sum(1 for row in expected if row["rank"] is not None),
                       "offset": 0, "players": expected}, (league, season)
        assert_matches(DOC, SEASON_BOARD, 200, doc)
    january = api.season_leaderboard(query(), "chess", "2026-01")
    # The ranked by rank, then the others (dee: one match, under min_matches); tiers by rating.
    assert [(row["player"], row["rank"], row["tier"], row["matches"]) for row in january["players"]] == \
        [("ann", 1, "Silver", 3), ("bo", 2, "Silver", 2), ("cy", 3, "Bronze", 2), ("dee", None, "Silver", 1)]
    assert january["players"][3]["percentile"] is None and "uncertainty" not in january["players"][0]
    assert (january["players_total"], january["eligible_total"]) == (4, 3)
    spring = api.season_leaderboard(query(), "arena", "spring")
    assert spring["reason"] == "spring split"
    assert all("uncertainty" in row and "tier" not in row for row in spring["players"])


async def test_a_seasons_leaderboard_pages(api, ledger):
    every = finals(ledger, "chess", "2026-01")
    for offset, limit in ((0, 1), (1, 2), (2, 100), (3, 1), (4, 10), (10_000_000, 100_000)):
        doc = api.season_leaderboard(query(offset=offset, limit=limit), "chess", "2026-01")
        assert doc["players"] == every[offset:offset + limit], (offset, limit)
        assert (doc["offset"], doc["players_total"], doc["eligible_total"]) == (offset, 4, 3)
        assert_matches(DOC, SEASON_BOARD, 200, doc)
    assert len(api.season_leaderboard(query(limit=1), "chess", "2026-01")["players"]) == 1
    assert len(api.season_leaderboard(query(offset=1), "chess", "2026-01")["players"]) == 3


async def test_a_seasons_leaderboard_refuses_bad_parameters_and_unknown_or_unfinished_seasons(api):
    for params, season, name in (({"limit": 0}, "2026-01", "limit"), ({"limit": 100_001}, "2026-01", "limit"),
                                 ({"offset": -1}, "2026-01", "offset"), ({"offset": 10_000_001}, "2026-01", "offset"),
                                 ({"limit": "x"}, "2026-01", "limit"), ({}, "bad id", "season"), ({}, "..", "season")):
        exc = refused(api.season_leaderboard, query(**params), "chess", season)
        assert exc.status == 400 and exc.message.startswith(f"{name}: "), (params, season, exc.message)
        assert_matches(DOC, SEASON_BOARD, 400, {"error": exc.message})
    for league, season, words in (("nope", "2026-01", "league 'nope' not found"),
                                  ("chess", "2026-04", "season '2026-04' not found in league 'chess'"),
                                  ("chess", "spring", "season 'spring' not found in league 'chess'"),
                                  ("flat", "2026-01", "season '2026-01' not found in league 'flat'"),
                                  ("chess", "2026-03", "season '2026-03' of league 'chess' is in progress"),
                                  ("arena", "summer", "season 'summer' of league 'arena' is in progress")):
        exc = refused(api.season_leaderboard, query(), league, season)
        assert exc.status == 404 and words in exc.message, (league, season, exc.message)
        assert_matches(DOC, SEASON_BOARD, 404, {"error": exc.message})
    exc = refused(api.seasons, "nope")
    assert (exc.status, exc.message) == (404, "league 'nope' not found")
    assert_matches(DOC, SEASONS, 404, {"error": exc.message})


async def test_a_players_seasons_are_their_final_standings(api, ledger):
    starts = {season["season"]: season for season in api.seasons("chess")["seasons"]}

    def expected(player: str, seasons: tuple[str, ...]) -> list[dict[str, Any]]:
        found = []
        for name in seasons:
            row = next(row for row in finals(ledger, "chess", name) if row["player"] == player)
            found.append({"season": name, "start": starts[name]["start"], "end": starts[name]["end"],
                          **{key: value for key, value in row.items() if key != "player"}})
        return found

    for player, seasons in (("ann", ("2026-01", "2026-02")), ("dee", ("2026-01",)), ("eve", ("2026-02",)),
                            ("fay", ())):  # fay played in the season in progress only
        doc = api.player_seasons("chess", player)
        assert doc == {"league": "chess", "player": player, "algorithm": "elo",
                       "seasons": expected(player, seasons)}, player
        assert_matches(DOC, PLAYER_SEASONS, 200, doc)
    ann = api.player_seasons("chess", "ann")["seasons"]
    assert [(s["season"], s["start"], s["end"], s["rank"], s["tier"], s["matches"]) for s in ann] == [
        ("2026-01", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 1, "Silver", 3),
        ("2026-02", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 3, "Bronze", 1)]
    arena = api.player_seasons("arena", "bo")
    assert [season["season"] for season in arena["seasons"]] == ["spring"] and "uncertainty" in arena["seasons"][0]
    assert_matches(DOC, PLAYER_SEASONS, 200, arena)
    flat = api.player_seasons("flat", "ann")
    assert flat == {"league": "flat", "player": "ann", "algorithm": "elo", "seasons": []}
    assert_matches(DOC, PLAYER_SEASONS, 200, flat)
    for league, player, message in (("chess", "zed", "player 'zed' not found in league 'chess'"),
                                    ("flat", "cy", "player 'cy' not found in league 'flat'"),
                                    ("nope", "ann", "league 'nope' not found")):
        exc = refused(api.player_seasons, league, player)
        assert (exc.status, exc.message) == (404, message)
        assert_matches(DOC, PLAYER_SEASONS, 404, {"error": exc.message})


async def test_league_player_and_leaderboard_documents_carry_the_season_and_tiers(api, ledger):
    league = api.league("chess")
    assert league["season"] == "2026-03"
    assert_matches(DOC, "/leagues/{league}", 200, league)
    assert "season" not in api.league("flat")
    assert api.league("arena")["season"] == "summer"
    assert_matches(DOC, "/leagues/{league}", 200, api.league("flat"))

    ann = await api.player("chess", "ann")  # rated below 1000: Bronze
    fay = await api.player("chess", "fay")  # one match: not ranked, and Silver by rating alone
    assert ann["rating"] == ledger.state("chess", "ann").rating < 1000
    assert (ann["tier"], ann["rank"], ann["season"]) == ("Bronze", 4, "2026-03")
    assert (fay["tier"], fay["rank"], fay["season"]) == ("Silver", None, "2026-03") and fay["rating"] > 1000
    flat = await api.player("flat", "ann")
    assert "tier" not in flat and "season" not in flat
    for doc in (ann, fay, flat):
        assert_matches(DOC, "/leagues/{league}/players/{player}", 200, doc)

    board = await api.leaderboard(query(), "chess")
    assert [(row["player"], row["tier"]) for row in board["players"]] == \
        [("bo", "Silver"), ("eve", "Silver"), ("cy", "Bronze"), ("ann", "Bronze")]
    assert all((row["tier"] == "Silver") == (row["rating"] >= 1000) for row in board["players"])
    flat_board = await api.leaderboard(query(), "flat")
    assert flat_board["players"] and all("tier" not in row for row in flat_board["players"])
    for doc in (board, flat_board):
        assert_matches(DOC, "/leagues/{league}/leaderboard", 200, doc)
