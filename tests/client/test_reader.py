"""RatingsClient's reads of the HTTP API and the commands built on them, against
a small stand-in API in this process (no broker, no worker): quoting, the 503
retries, the errors and exit statuses, paging, and what the commands print.
The real API is read in tests/e2e/test_reads_cli.py."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

import orjson
import pytest
from aiohttp import web

from stream_app import cli
from stream_app.client.reader import ApiReader
from stream_app.client import ApiError, ApiUnreachable, EventFollower, InputProducer, RatingsClient
from stream_app.settings import Settings
from stream_app.cli.flags import REFUSED, UNREACHABLE, USAGE
from tests.support.ports import free_port
from tests.support.stand_ins import FakeApi


def history_of(n: int) -> Callable[[web.Request], tuple[int, Any]]:
    """A player with n history entries (seq 1..n), paged as the API pages them."""
    def answer(request: web.Request) -> tuple[int, Any]:
        limit = int(request.query.get("limit", 100))
        before = int(request.query.get("before", n + 1))
        seqs = list(range(min(before - 1, n), 0, -1))
        page = seqs[:limit]
        return 200, {"league": "chess", "player": "ann", "changes": [{"seq": s} for s in page],
                     "next": page[-1] if len(seqs) > limit else None}
    return answer


async def test_reads_need_no_broker_and_quote_ids_in_paths_and_queries():
    with FakeApi(lambda request: (200, {"path": request.path})) as api:
        client = RatingsClient("kafka://127.0.0.1:1", api=api.url + "/")  # nothing listens on the broker's port
        try:
            assert await client.player("a:b+c@d", "x.y-z_1") == {"path": "/leagues/a:b+c@d/players/x.y-z_1"}
            await client.leaderboard_around("chess", "ann+bob", radius=0)
            await client.history("chess", "ann", limit=7, before=9)
            await client.history("chess", "ann")
            await client.leaderboard("bad id/x", limit=5, offset=10)
        finally:
            await client.stop()
    assert api.seen == [
        "/leagues/a%3Ab%2Bc%40d/players/x.y-z_1",
        "/leagues/chess/leaderboard?around=ann%2Bbob&radius=0",
        "/leagues/chess/players/ann/history?limit=7&before=9",
        "/leagues/chess/players/ann/history?limit=100",
        "/leagues/bad%20id%2Fx/leaderboard?limit=5&offset=10",
    ]


@pytest.mark.parametrize("part, own, least", [(ApiReader, {"close"}, 12), (InputProducer, {"start", "stop"}, 6),
                                              (EventFollower, set(), 2)])
def test_the_client_offers_every_method_of_its_parts_with_the_same_parameters(part, own, least):
    methods = {name: fn for name, fn in inspect.getmembers(part, inspect.isfunction)
               if not name.startswith("_") and name not in own}
    assert len(methods) >= least
    for name, method in methods.items():
        offered = getattr(RatingsClient, name)
        assert inspect.signature(offered).parameters == inspect.signature(method).parameters, name


async def test_the_reader_alone_reads_as_the_client_does():
    with FakeApi(lambda request: (200, {"path": request.path_qs})) as api:
        reader = ApiReader(api.url)
        client = RatingsClient(api=api.url)
        try:
            for read in (lambda r: r.season_leaderboard("ladder", "S1", limit=3),
                         lambda r: r.versus("chess", "ann", "bob", limit=2), lambda r: r.predict("go", [["a"], ["b", "c"]]),
                         lambda r: r.player_seasons("ladder", "ann"), lambda r: r.seasons("ladder")):
                assert await read(reader) == await read(client)
        finally:
            await reader.close()
            await client.stop()
    assert len(api.seen) == 10 and api.seen[0] == "/leagues/ladder/seasons/S1/leaderboard?limit=3&offset=0"


async def test_a_503_is_retried_with_a_back_off_then_raised():
    replies = iter([(503, {"error": "rebalancing"})] * 2 + [(200, {"ok": 1})] + [(503, {"error": "rebalancing"})] * 9)
    with FakeApi(lambda request: next(replies)) as api:
        client = RatingsClient(api=api.url, api_retries=3)
        client.reader.backoff = 0.01
        try:
            assert await client.league("chess") == {"ok": 1}
            assert len(api.seen) == 3
            with pytest.raises(ApiError) as raised:
                await client.league("chess")
        finally:
            await client.stop()
    assert len(api.seen) == 3 + 4  # the first try and 3 retries
    assert (raised.value.status, raised.value.message) == (503, "rebalancing")


async def test_refusals_carry_the_status_and_the_apis_error_and_are_not_retried():
    replies = iter([(404, {"error": "player 'nobody' not found in league 'chess'"}), (400, b"<html>bad</html>"),
                    (200, b"not json")])
    with FakeApi(lambda request: next(replies)) as api:
        client = RatingsClient(api=api.url)
        try:
            with pytest.raises(ApiError) as missing:
                await client.player("chess", "nobody")
            with pytest.raises(ApiError) as bad:
                await client.history("chess", "ann", limit=5000)
            with pytest.raises(ApiError) as foreign:
                await client.leagues()
        finally:
            await client.stop()
    assert (missing.value.status, missing.value.message) == (404, "player 'nobody' not found in league 'chess'")
    assert str(missing.value) == "player 'nobody' not found in league 'chess' (HTTP 404)"
    assert (bad.value.status, bad.value.message) == (400, "<html>bad</html>")
    assert foreign.value.status == 200 and "not JSON" in foreign.value.message
    assert len(api.seen) == 3


async def test_no_worker_listening_raises_api_unreachable_at_once():
    client = RatingsClient(api=f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ApiUnreachable) as raised:
            await client.leaderboard("chess")
    finally:
        await client.stop()
    assert raised.value.status is None and str(raised.value) == f"cannot reach the API at {client.api}: Connection refused"
    assert isinstance(raised.value, ApiError)


async def test_all_history_follows_next_and_stops_at_most():
    with FakeApi(history_of(2500)) as api:
        client = RatingsClient(api=api.url)
        try:
            every = [c["seq"] async for c in client.all_history("chess", "ann")]
            some = [c["seq"] async for c in client.all_history("chess", "ann", most=1200)]
        finally:
            await client.stop()
    assert every == list(range(2500, 0, -1))
    assert some == list(range(2500, 1300, -1))
    assert api.seen[3:] == ["/leagues/chess/players/ann/history?limit=1000",
                            "/leagues/chess/players/ann/history?limit=200&before=1501"]


async def test_stop_closes_the_session_and_a_later_read_opens_another():
    with FakeApi(lambda request: (200, {})) as api:
        client = RatingsClient(api=api.url)
        await client.leagues()
        session = client.reader._http
        await client.stop()
        assert session.closed and client.reader._http is None
        await client.leagues()
        await client.stop()
    assert len(api.seen) == 2


def test_the_api_url_comes_from_the_constructor_or_the_settings():
    assert RatingsClient().api is None
    assert RatingsClient.from_settings(Settings(web_port=7001)).api == "http://127.0.0.1:7001"
    assert RatingsClient.from_settings(Settings(web_host="0.0.0.0", web_port=7002)).api == "http://127.0.0.1:7002"
    assert RatingsClient.from_settings(Settings(advertised_url="http://w1:6066")).api == "http://w1:6066"
    assert RatingsClient.from_settings(Settings(), api="https://ratings.example/").api == "https://ratings.example"
    for bad in ("127.0.0.1:6066", "ftp://host", "http://"):
        with pytest.raises(ValueError, match="use http://HOST:PORT"):
            RatingsClient(api=bad)
    with pytest.raises(ValueError, match="no API URL"):
        asyncio.run(RatingsClient().leagues())


# -- the commands --------------------------------------------------------------------
BOARD = {"league": "arena", "algorithm": "elo-mmr", "players_total": 9, "eligible_total": 7, "offset": 2,
         "around": "cy", "players": [{"rank": 3, "player": "bo", "rating": 1612.34, "matches": 14, "uncertainty": 81.2},
                                     {"rank": 4, "player": "cy", "rating": 1600.0, "matches": 3, "uncertainty": 90.0}]}
PLAYER = {"league": "arena", "player": "cy", "algorithm": "elo-mmr", "rating": 1600.0, "uncertainty": 90.04,
          "display_rating": 1330.0, "matches": 3, "rank": 4, "percentile": 42.857, "eligible": True,
          "provisional": False, "last_occurred_at": "2026-01-02T03:04:05Z"}
CHANGES = [{"seq": 3, "match_id": "m-9", "occurred_at": "2026-01-02T03:04:05Z", "rank": 1, "rating_before": 1580.0,
            "rating_after": 1600.0, "uncertainty": 90.0, "cause": "match"},
           {"seq": 2, "match_id": "m-5", "occurred_at": None, "rank": 7, "rating_before": 1590.0,
            "rating_after": 1580.0, "uncertainty": 95.0, "cause": "match"}]


def arena(request: web.Request) -> tuple[int, Any]:
    if request.path.endswith("/leaderboard"):
        return 200, BOARD
    if request.path.endswith("/history"):
        return 200, {"league": "arena", "player": "cy", "changes": CHANGES[:int(request.query["limit"])], "next": None}
    if request.path == "/leagues/arena/players/cy":
        return 200, PLAYER
    return 404, {"error": f"not found: {request.path}"}


def test_leaderboard_around_marks_the_player_and_counts_the_ranked(capsys):
    with FakeApi(arena) as api:
        assert cli.main(["leaderboard", "arena", "--around", "cy", "--radius", "1", "--api", api.url]) == 0
    assert api.seen == ["/leagues/arena/leaderboard?around=cy&radius=1"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "arena (9 players, 7 ranked)"
    assert lines[1].split() == ["#", "player", "rating", "matches", "uncertainty"]
    assert lines[2].split() == ["3", "bo", "1612.3", "14", "81.2"]
    assert lines[3].split() == [">", "4", "cy", "1600.0", "3", "90.0"]


def test_player_prints_the_state_and_the_newest_history(capsys):
    with FakeApi(arena) as api:
        assert cli.main(["player", "arena", "cy", "--history", "2", "--api", api.url]) == 0
        out = capsys.readouterr().out
        assert cli.main(["player", "arena", "cy", "--json", "--api", api.url]) == 0
        assert orjson.loads(capsys.readouterr().out) == PLAYER
    assert api.seen[1] == "/leagues/arena/players/cy/history?limit=2"
    lines = out.splitlines()
    fields = {line[:16].strip(): line[16:] for line in lines[1:9]}
    assert lines[0].split() == ["cy", "in", "arena", "(elo-mmr)"]
    assert fields == {"rating": "1600.0", "matches": "3", "uncertainty": "90.0", "display_rating": "1330.0",
                      "rank": "4", "percentile": "42.9", "status": "eligible", "last match": "2026-01-02T03:04:05Z"}
    assert lines[9] == "" and lines[10].split() == ["seq", "match_id", "occurred_at", "rank", "before", "after", "change"]
    assert lines[11].split() == ["3", "m-9", "2026-01-02T03:04:05Z", "1", "1580.0", "1600.0", "+20.0"]
    assert lines[12].split() == ["2", "m-5", "-", "7", "1590.0", "1580.0", "-10.0"]
    assert len(lines) == 13


def test_a_refusal_exits_1_with_the_apis_message_and_no_answer_exits_4_not_the_usage_errors_2(capsys, monkeypatch):
    monkeypatch.setattr(ApiReader, "backoff", 0.01)  # the 503's retries, quickly
    with FakeApi(arena) as api:
        assert cli.main(["player", "arena", "nobody", "--api", api.url]) == REFUSED
    assert capsys.readouterr().err == "ratings player: not found: /leagues/arena/players/nobody (HTTP 404)\n"
    assert cli.main(["leaderboard", "arena", "--web-port", str(free_port())]) == UNREACHABLE == 4
    assert "ratings leaderboard: cannot reach the API at http://127.0.0.1:" in capsys.readouterr().err
    with FakeApi(lambda request: (503, {"error": "rebalancing"})) as api:
        assert cli.main(["player", "arena", "cy", "--api", api.url]) == UNREACHABLE
    assert "(HTTP 503): the workers are rebalancing" in capsys.readouterr().err


# -- predict and versus ------------------------------------------------------------------
PREDICTION = {"league": "arena", "algorithm": "elo", "rank_probability": 0.5, "draw": -1e-9, "quality": 1.0,
              "newcomers": [],
              "sides": [{"players": ["ann"], "ratings": {"ann": -0.04}, "win": 0.5, "rank": 1,
                         "change": {"win": {"ann": 16.0}, "draw": {"ann": -0.04}, "loss": {"ann": -16.0}}},
                        {"players": ["bob"], "ratings": {"bob": 0.0}, "win": 0.5, "rank": 1,
                         "change": {"win": {"bob": 16.0}, "draw": {"bob": 0.04}, "loss": {"bob": -16.0}}}]}


def test_predict_shows_no_negative_zero(capsys):
    with FakeApi(lambda request: (200, PREDICTION)) as api:
        assert cli.main(["predict", "arena", "ann", "bob", "--api", api.url]) == 0
    out = capsys.readouterr().out
    assert "-0.0" not in out
    ann = next(line for line in out.splitlines() if line.startswith("ann ("))
    assert ann.split() == ["ann", "(0.0)", "50.0%", "1", "+16.0", "+0.0", "-16.0"]
    assert "a draw 0.0%" in out


def test_predict_says_sides_where_the_api_says_team(capsys):
    refusal = "team: side 1: the 'elo' system rates individuals, not teams (one player per side)"
    with FakeApi(lambda request: (400, {"error": refusal})) as api:
        assert cli.main(["predict", "arena", "ann,cy", "bob", "--api", api.url]) == REFUSED
        assert capsys.readouterr().err == ("ratings predict: side 1: the 'elo' system rates individuals, not teams "
                                           "(one player per side) (HTTP 400)\n")
        # The sides' own rules are checked here, naming SIDE, before the API is asked.
        assert cli.main(["predict", "arena", "ann", "--api", api.url]) == USAGE
        assert capsys.readouterr().err == "ratings predict: SIDE: at least two sides, one 'SIDE' each (got 1)\n"
        assert cli.main(["predict", "arena", "ann", "bob,ann", "--api", api.url]) == USAGE
        assert capsys.readouterr().err == "ratings predict: SIDE: player 'ann' is on sides 1 and 2\n"
    assert len(api.seen) == 1


def versus_of(player: str, opponent: str) -> dict[str, Any]:
    return {"league": "karting", "player": player, "opponent": opponent, "algorithm": "elo-pairwise", "matches": 1,
            "against": {"matches": 1, "wins": 1, "draws": 0, "losses": 0}, "together": {"matches": 0, "wins": 0},
            "recent": [{"match_id": "race-1", "occurred_at": None, "side": "against", "rank": 1, "opponent_rank": 2,
                        "rating_before": 0.0, "rating_after": 4.0, "opponent_rating_before": 0.0,
                        "opponent_rating_after": -0.04}]}


def test_versus_headings_keep_ids_with_a_common_prefix_apart(capsys):
    player, opponent = "karting-p0001-long-name", "karting-p0001-long-other"
    with FakeApi(lambda request: (200, versus_of(player, opponent))) as api:
        assert cli.main(["versus", "karting", player, opponent, "--api", api.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    heading, row = lines[-2], lines[-1]
    assert heading.split()[-2:] == [player, opponent]
    # Each change sits under its player's id, right-aligned to the same column end.
    assert heading.index(player) + len(player) == row.index("+4.0") + len("+4.0")
    assert heading.endswith(opponent) and row.endswith("+0.0")
    assert "-0.0" not in "\n".join(lines)


# -- seasons ---------------------------------------------------------------------------
SEASONS = {"league": "arena", "algorithm": "glicko2", "schedule": "manual", "season": "summer",
           "seasons": [{"season": "spring-2026", "number": 1, "start": "2026-03-20T00:00:00Z",
                        "end": "2026-06-21T00:00:00Z", "players": 12, "reason": "spring split"},
                       {"season": "summer", "number": 2, "start": "2026-06-21T00:00:00Z", "end": None,
                        "players": None}]}
SEASON_BOARD = {"league": "arena", "algorithm": "glicko2", "season": "spring-2026", "number": 1,
                "start": "2026-03-20T00:00:00Z", "end": "2026-06-21T00:00:00Z", "players": 12, "reason": "spring split",
                "players_total": 12, "eligible_total": 10, "offset": 9,
                "players": [{"player": "bo", "rating": 1512.34, "uncertainty": 61.2, "rank": 10, "percentile": 0.0,
                             "tier": "Bronze", "matches": 14},
                            {"player": "cy", "rating": 1700.0, "uncertainty": 250.0, "rank": None, "percentile": None,
                             "tier": None, "matches": 2}]}
PLAYER_SEASONS = {"league": "arena", "player": "bo", "algorithm": "glicko2",
                  "seasons": [{"season": "spring-2026", "start": "2026-03-20T00:00:00Z", "end": "2026-06-21T00:00:00Z",
                               "rating": 1512.34, "uncertainty": 61.2, "rank": 10, "percentile": 0.0, "tier": "Bronze",
                               "matches": 14},
                              {"season": "w", "start": "2026-06-21T00:00:00Z", "end": "2026-07-01T00:00:00Z",
                               "rating": 1490.0, "uncertainty": 70.0, "rank": None, "percentile": None,
                               "tier": "Bronze", "matches": 1}]}


def seasons_api(request: web.Request) -> tuple[int, Any]:
    path = request.path
    if path == "/leagues/arena/seasons":
        return 200, SEASONS
    if path == "/leagues/plain/seasons":
        return 200, {"league": "plain", "algorithm": "elo", "schedule": None, "season": None, "seasons": []}
    if path == "/leagues/arena/seasons/spring-2026/leaderboard":
        return 200, SEASON_BOARD
    if path == "/leagues/arena/seasons/summer/leaderboard":
        return 404, {"error": "season 'summer' of league 'arena' is in progress: its standings are the league's "
                              "leaderboard until it ends"}
    if path == "/leagues/arena/players/bo/seasons":
        return 200, PLAYER_SEASONS
    if path == "/leagues/arena/players/new/seasons":
        return 200, {"league": "arena", "player": "new", "algorithm": "glicko2", "seasons": []}
    return 404, {"error": f"not found: {path}"}


async def test_season_reads_quote_ids_and_send_the_page():
    with FakeApi(lambda request: (200, {"path": request.path, "query": dict(request.query)})) as api:
        client = RatingsClient(api=api.url)
        try:
            assert await client.seasons("a:b") == {"path": "/leagues/a:b/seasons", "query": {}}
            board = await client.season_leaderboard("chess", "2026+Q1", limit=5, offset=10)
            assert board == {"path": "/leagues/chess/seasons/2026+Q1/leaderboard",
                             "query": {"limit": "5", "offset": "10"}}
            await client.season_leaderboard("chess", "spring/2026")
            assert await client.player_seasons("chess", "ann@x") == {"path": "/leagues/chess/players/ann@x/seasons",
                                                                     "query": {}}
        finally:
            await client.stop()
    assert api.seen == [
        "/leagues/a%3Ab/seasons",
        "/leagues/chess/seasons/2026%2BQ1/leaderboard?limit=5&offset=10",
        "/leagues/chess/seasons/spring%2F2026/leaderboard?limit=100&offset=0",
        "/leagues/chess/players/ann%40x/seasons",
    ]


async def test_a_season_in_progress_has_no_final_standings_yet():
    with FakeApi(seasons_api) as api:
        client = RatingsClient(api=api.url)
        try:
            assert await client.seasons("arena") == SEASONS
            assert await client.player_seasons("arena", "bo") == PLAYER_SEASONS
            assert await client.season_leaderboard("arena", "spring-2026") == SEASON_BOARD
            with pytest.raises(ApiError) as raised:
                await client.season_leaderboard("arena", "summer")
        finally:
            await client.stop()
    assert raised.value.status == 404 and "'summer' of league 'arena' is in progress" in raised.value.message


def test_seasons_lists_the_seasons_and_the_one_in_progress(capsys):
    with FakeApi(seasons_api) as api:
        assert cli.main(["seasons", "arena", "--api", api.url]) == 0
        out = capsys.readouterr().out
        assert cli.main(["seasons", "arena", "--json", "--api", api.url]) == 0
        assert orjson.loads(capsys.readouterr().out) == SEASONS
        assert cli.main(["seasons", "plain", "--api", api.url]) == 0
        plain = capsys.readouterr().out
    assert api.seen[0] == "/leagues/arena/seasons"
    lines = out.splitlines()
    assert lines[0] == "arena (glicko2): 2 manual seasons, in progress: summer"
    assert lines[1].split() == ["#", "season", "start", "end", "players", "reason"]
    assert lines[2].split() == ["1", "spring-2026", "2026-03-20T00:00:00Z", "2026-06-21T00:00:00Z", "12", "spring",
                                "split"]
    assert lines[3].split() == ["2", "summer", "2026-06-21T00:00:00Z", "in", "progress", "-"]
    assert len(lines) == 4
    assert plain == "plain (elo) has no seasons: its configuration sets no `season`\n"


def test_leaderboard_season_prints_the_final_standings_unranked_last(capsys):
    with FakeApi(seasons_api) as api:
        assert cli.main(["leaderboard", "arena", "--season", "spring-2026", "--limit", "2", "--offset", "9",
                         "--api", api.url]) == 0
        out = capsys.readouterr().out
        assert cli.main(["leaderboard", "arena", "--season", "spring-2026", "--json", "--api", api.url]) == 0
        assert orjson.loads(capsys.readouterr().out) == SEASON_BOARD
        assert cli.main(["leaderboard", "arena", "--season", "summer", "--api", api.url]) == 1
        err = capsys.readouterr().err
    assert api.seen[:2] == ["/leagues/arena/seasons/spring-2026/leaderboard?limit=2&offset=9",
                            "/leagues/arena/seasons/spring-2026/leaderboard?limit=20&offset=0"]
    lines = out.splitlines()
    assert lines[0] == "arena season spring-2026 (2026-03-20T00:00:00Z to 2026-06-21T00:00:00Z; 12 players, 10 ranked)"
    assert lines[1].split() == ["#", "player", "rating", "matches", "uncertainty", "tier"]
    assert lines[2].split() == ["10", "bo", "1512.3", "14", "61.2", "Bronze"]
    assert lines[3].split() == ["-", "cy", "1700.0", "2", "250.0", "-"]
    assert len(lines) == 4
    assert err.startswith("ratings leaderboard: season 'summer' of league 'arena' is in progress")
    assert err.endswith("(HTTP 404)\n")


def test_seasons_player_prints_each_ended_seasons_final_standing(capsys):
    with FakeApi(seasons_api) as api:
        assert cli.main(["seasons", "arena", "--player", "bo", "--api", api.url]) == 0
        out = capsys.readouterr().out
        assert cli.main(["seasons", "arena", "-p", "new", "--api", api.url]) == 0
        none = capsys.readouterr().out
        assert cli.main(["seasons", "arena", "-p", "bo", "--json", "--api", api.url]) == 0
        assert orjson.loads(capsys.readouterr().out) == PLAYER_SEASONS
    assert api.seen[:2] == ["/leagues/arena/players/bo/seasons", "/leagues/arena/players/new/seasons"]
    lines = out.splitlines()
    assert lines[0] == "bo in arena (glicko2): final standings in 2 ended seasons"
    assert lines[1].split() == ["season", "start", "end", "rank", "percentile", "rating", "matches", "uncertainty",
                                "tier"]
    assert lines[2].split() == ["spring-2026", "2026-03-20T00:00:00Z", "2026-06-21T00:00:00Z", "10", "0.0", "1512.3",
                                "14", "61.2", "Bronze"]
    assert lines[3].split() == ["w", "2026-06-21T00:00:00Z", "2026-07-01T00:00:00Z", "-", "-", "1490.0", "1", "70.0",
                                "Bronze"]
    assert len(lines) == 4
    assert none == "new in arena (glicko2): final standings in 0 ended seasons\n"


def test_leaderboard_shows_the_tiers_of_a_league_that_has_them(capsys):
    board = {**BOARD, "players": [{**BOARD["players"][0], "tier": "Gold"}, {**BOARD["players"][1], "tier": None}]}
    with FakeApi(lambda request: (200, board)) as api:
        assert cli.main(["leaderboard", "arena", "--api", api.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["#", "player", "rating", "matches", "uncertainty", "tier"]
    assert lines[2].split() == ["3", "bo", "1612.3", "14", "81.2", "Gold"]
    assert lines[3].split() == ["4", "cy", "1600.0", "3", "90.0", "-"]
