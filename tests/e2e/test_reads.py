"""What players and organisers read, end to end: two real worker processes on
the embedded broker, every league's history, ranks, percentiles, around-me
views and eligibility compared with `ratings replay` of the same input and a
brute-force sort of its players; and bad requests refused by name."""

from __future__ import annotations

import random
import time
import urllib.error
import urllib.request

import orjson
import pytest

from stream_app.inputs import format_time, parse_match, parse_time
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.offline.sample import multi_player_league, two_player_league
from stream_app.stream.openapi import document
from tests.support.openapi import checked
from tests.support.workers import applied_by

# Its tests share the workers of a module fixture: under pytest-xdist, one process runs them all.
pytestmark = pytest.mark.xdist_group("test_reads")

CONFIG = """
[default]
algorithm = "elo"
min_matches = 3
inactive_days = 1

[leagues."short"]
algorithm = "elo"
history_max = 4

[leagues."arena"]
algorithm = "elo-mmr"
max_uncertainty = 150
"""


def events() -> list[dict]:
    rng = random.Random(11)
    chess = list(two_player_league("chess", 30, 400, rng))
    start = parse_time(chess[0]["occurred_at"])
    # Players who played days before the rest (inactive at the end), and one who played once (provisional).
    early = [{"league": "chess", "match_id": f"early-{i}", "occurred_at": format_time(start - 5 * 86400 + 60 * i),
              "participants": [{"player": f"ghost{i % 3}", "rank": 1}, {"player": f"ghost{(i + 1) % 3}", "rank": 2}]}
             for i in range(9)]
    late = [{"league": "chess", "match_id": "late", "occurred_at": format_time(start + 86400),
             "participants": [{"player": "rookie", "rank": 1}, {"player": "chess-p0001", "rank": 2}]}]
    short = list(two_player_league("short", 8, 60, rng))
    arena = list(multi_player_league("arena", 60, 10, 25, rng))
    return early + chess + late + short + arena


class Expected:
    """The replay of the same events, and the standings the rules give, by brute force."""

    def __init__(self, docs: list[dict], config: LeagueConfig):
        self.config = config
        self.ledger = Ledger(config, keep_history=True)
        self.last: dict[tuple[str, str], float] = {}
        for doc in docs:
            match = parse_match(doc)
            if self.ledger.apply(match) is not None:
                for participant in match.participants:
                    self.last[(match.league, participant.player)] = match.time
        self.latest = {league: max(t for (lg, _), t in self.last.items() if lg == league) for league in self.ledger.leagues}

    def status(self, league: str, player: str) -> tuple[bool, bool]:
        """(provisional, eligible) by the rules' words."""
        options = self.config.options_for(league)
        state = self.ledger.state(league, player)
        provisional = state.matches < options.min_matches or (
            options.max_uncertainty is not None and state.uncertainty > options.max_uncertainty)
        inactive = options.inactive_days is not None and (
            self.latest[league] - self.last[(league, player)] > options.inactive_days * 86400)
        return provisional, not provisional and not inactive

    def board(self, league: str) -> list[tuple[str, float, int]]:
        players = self.ledger.leagues[league]
        ranked = [(name, s.rating, s.matches) for name, s in players.items() if self.status(league, name)[1]]
        return sorted(ranked, key=lambda row: (-row[1], row[0]))


@pytest.fixture(scope="module")
def served(broker, tmp_path_factory):
    """Two workers that have applied `events()`, and what the replay says they hold."""
    tmp = tmp_path_factory.mktemp("reads")
    config_path = tmp / "leagues.toml"
    config_path.write_text(CONFIG)
    docs = events()
    expected = Expected(docs, LeagueConfig.from_toml(CONFIG))
    with applied_by(broker, tmp, config_path, docs, "reads") as (a, b):
        yield a, b, expected


def test_every_league_is_listed_by_either_worker(served):
    a, b, expected = served
    leagues = [(league, record["algorithm"], record["matches"], record["players"])
               for league, record in sorted(expected.ledger.records.items())]
    for worker in (a, b):
        status, body = checked(worker, "/leagues")
        assert status == 200
        assert [(doc["league"], doc["algorithm"], doc["matches"], doc["players"]) for doc in body["leagues"]] == leagues
        for league, *_ in leagues:
            assert checked(worker, f"/leagues/{league}")[0] == 200


def test_history_of_every_player_equals_the_replay_page_by_page(served):
    a, b, expected = served
    for league, player in expected.ledger.histories:
        kept = expected.ledger.history(league, player)  # the last history_max of "short"'s
        pages, before = [], None
        while True:
            query = "limit=7" + (f"&before={before}" if before is not None else "")
            status, page = checked(a if len(pages) % 2 else b, f"/leagues/{league}/players/{player}/history?{query}")
            assert status == 200, page
            assert page["league"] == league and page["player"] == player and len(page["changes"]) <= 7
            pages.append(page["changes"])
            before = page["next"]
            if before is None:
                break
            assert before == page["changes"][-1]["seq"]
        served_history = [entry for changes in pages for entry in changes]
        assert served_history == kept[::-1], (league, player)
    short = expected.ledger.state("short", "short-p0001")
    assert short.matches > 4 and len(expected.ledger.history("short", "short-p0001")) == 4  # history_max dropped some


def test_leaderboards_ranks_percentiles_and_eligibility_equal_a_brute_force_sort(served):
    a, b, expected = served
    seen = {"provisional": 0, "inactive": 0, "ranked": 0}
    for league in expected.ledger.leagues:
        board = expected.board(league)
        status, body = checked(b, f"/leagues/{league}/leaderboard?limit=100000")
        assert status == 200
        assert [(row["rank"], row["player"], row["rating"], row["matches"]) for row in body["players"]] == [
            (i + 1, *row) for i, row in enumerate(board)]
        assert body["players_total"] == len(expected.ledger.leagues[league]) and body["eligible_total"] == len(board)
        rank = {name: i + 1 for i, (name, _, _) in enumerate(board)}
        for player, state in expected.ledger.leagues[league].items():
            status, doc = checked(a, f"/leagues/{league}/players/{player}")
            assert status == 200
            provisional, eligible = expected.status(league, player)
            assert (doc["provisional"], doc["eligible"], doc["rank"]) == (provisional, eligible, rank.get(player))
            assert doc["rating"] == state.rating and doc["matches"] == state.matches
            if eligible:
                lower = sum(1 for _, rating, _ in board if rating < state.rating)
                assert doc["percentile"] == pytest.approx(100.0 * lower / len(board))
                seen["ranked"] += 1
            else:
                assert doc["percentile"] is None
                seen["provisional" if provisional else "inactive"] += 1
    assert min(seen.values()) > 0, seen  # the input exercises every rule


def test_around_a_player_gives_the_radius_above_and_below(served):
    a, _, expected = served
    board = expected.board("chess")
    for i in (0, 1, len(board) // 2, len(board) - 1):
        player = board[i][0]
        status, body = checked(a, f"/leagues/chess/leaderboard?around={player}&radius=3")
        assert status == 200 and body["around"] == player
        first = max(i - 3, 0)
        assert [(row["rank"], row["player"]) for row in body["players"]] == [
            (j + 1, board[j][0]) for j in range(first, min(i + 4, len(board)))]
        assert body["offset"] == first
    status, body = checked(a, "/leagues/chess/leaderboard?around=rookie")
    assert status == 404 and "provisional" in body["error"]
    status, body = checked(a, "/leagues/chess/leaderboard?around=ghost0")
    assert status == 404 and "inactive" in body["error"]


@pytest.mark.parametrize("path, status, words", [
    ("/leagues/chess/leaderboard?limit=0", 400, ["limit", "1 to 100000"]),
    ("/leagues/chess/leaderboard?limit=ten", 400, ["limit", "integer"]),
    ("/leagues/chess/leaderboard?offset=-1", 400, ["offset"]),
    ("/leagues/chess/leaderboard?around=chess-p0001&radius=1001", 400, ["radius", "0 to 1000"]),
    ("/leagues/chess/leaderboard?around=chess-p0001&radius=-1", 400, ["radius"]),
    ("/leagues/chess/leaderboard?around=bad%20id", 400, ["around", "characters"]),
    ("/leagues/chess/players/chess-p0001/history?limit=1001", 400, ["limit", "1 to 1000"]),
    ("/leagues/chess/players/chess-p0001/history?before=0", 400, ["before"]),
    ("/leagues/chess/players/chess-p0001/history?before=x", 400, ["before", "integer"]),
    ("/leagues/chess/players/bad%20id/history", 400, ["player", "characters"]),
    ("/leagues/bad%20id/players/chess-p0001", 400, ["league", "characters"]),
    ("/leagues/nope/players/chess-p0001/history", 404, ["league 'nope' not found"]),
    ("/leagues/chess/players/nobody/history", 404, ["player 'nobody' not found"]),
    ("/leagues/chess/players/nobody", 404, ["player 'nobody' not found"]),
    ("/leagues/chess/leaderboard?around=nobody", 404, ["player 'nobody' not found"]),
    ("/leagues/chess/predict", 400, ["team", "at least two sides"]),
    ("/leagues/chess/predict?team=chess-p0001", 400, ["team", "at least two sides"]),
    ("/leagues/chess/predict?team=chess-p0001&team=chess-p0001", 400, ["team", "on sides 1 and 2"]),
    ("/leagues/chess/predict?team=chess-p0001&team=", 400, ["team", "side 2", "empty id"]),
    ("/leagues/chess/predict?team=chess-p0001&team=bad%20id", 400, ["team", "side 2", "characters"]),
    ("/leagues/chess/predict?team=chess-p0001,chess-p0002&team=chess-p0003", 400, ["team", "individuals"]),
    ("/leagues/chess/predict?team=a&team=" + ",".join(f"p{i}" for i in range(1000)), 400, ["team", "at most 1,000"]),
    ("/leagues/nope/predict?team=a&team=b", 404, ["league 'nope' not found"]),
])
def test_bad_requests_are_refused_naming_the_field_and_the_rule(served, path, status, words):
    a, b, _ = served
    for worker in (a, b):  # the owner, and a worker that forwards
        got, body = checked(worker, path)
        assert got == status and all(word in body["error"] for word in words), body


def test_predictions_equal_the_engine_on_the_replayed_states_from_either_worker(served):
    a, b, expected = served
    from stream_app.predict import predict

    for league, sides in (("chess", [["chess-p0001"], ["chess-p0002"]]), ("chess", [["chess-p0003"], ["newcomer"]]),
                          ("arena", [["arena-p00001"], ["arena-p00002"], ["arena-p00003"]])):
        system = expected.config.system_for(league)
        states = {player: expected.ledger.state(league, player) for side in sides for player in side}
        want = predict(system, league, sides, states)
        query = "&".join(f"team={','.join(side)}" for side in sides)
        answers = [checked(worker, f"/leagues/{league}/predict?{query}") for worker in (a, b)]  # owner and forwarder
        assert answers[0] == answers[1] == (200, want)
        assert sum(side["win"] for side in want["sides"]) == pytest.approx(1.0)
    assert want["newcomers"] == [] and answers[0][1]["sides"][0]["players"] == ["arena-p00001"]


def test_request_latency_is_measured_per_endpoint(served):
    a, b, _ = served
    for path in ("/leagues", "/leagues/chess/leaderboard?limit=1", "/leagues/chess/players/chess-p0001",
                 "/leagues/chess/players/chess-p0001/history"):  # each endpoint asked here: not left to other tests
        assert a.get(path)[0] == 200, path
    text = a.get("/metrics")[1]
    for endpoint in ("leagues", "leaderboard", "player", "history"):
        assert f'ratings_http_request_seconds_count{{endpoint="{endpoint}"}}' in text
    # A league's standings are built once by its owner, then kept: more reads build nothing.
    a.get("/leagues/chess/leaderboard")
    built = a.health()["standings_built"] + b.health()["standings_built"]
    for worker in (a, b, a):
        assert worker.get("/leagues/chess/leaderboard?limit=5")[0] == 200
        assert worker.get("/leagues/chess/players/chess-p0001")[0] == 200
    assert built >= 1 and a.health()["standings_built"] + b.health()["standings_built"] == built


def test_every_worker_serves_the_openapi_document_and_its_own_answers_match_it(served):
    a, b, _ = served
    for worker in (a, b):
        with urllib.request.urlopen(worker.url + "/openapi.json", timeout=10) as reply:
            assert reply.status == 200 and reply.headers.get_content_type() == "application/json"
            assert orjson.loads(reply.read()) == document()
        assert checked(worker, "/health")[0] == checked(worker, "/ready")[0] == 200


@pytest.mark.parametrize("path", ["/nope", "/leagues/chess/players", "/leagues/chess/players/chess-p0001/history/x"])
def test_a_path_the_api_does_not_have_is_a_json_404(served, path):
    a, _, _ = served
    request = urllib.request.Request(a.url + path)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404 and refused.value.headers.get_content_type() == "application/json"
    assert orjson.loads(refused.value.read()) == {
        "error": f"no such path: {path} (GET /openapi.json lists the API's paths)"}


def test_a_method_other_than_get_is_a_json_405(served):
    a, _, _ = served
    request = urllib.request.Request(a.url + "/leagues/chess", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405 and refused.value.headers.get_content_type() == "application/json"
    assert orjson.loads(refused.value.read())["error"].startswith("method POST not allowed on /leagues/chess")


def test_health_gives_its_start_time_in_rfc_3339_like_every_other_time(served):
    a, _, _ = served
    status, health = checked(a, "/health")  # the schema's Time: a string, format date-time
    started = parse_time(health["started_at"])
    assert status == 200 and health["started_at"].endswith("Z") and started == int(started)
    assert abs(started - time.time()) < 3600


def test_a_rebalance_is_one_line_in_each_workers_log_and_no_table(served):
    """Both workers were in the group (so a rebalance happened): each logged what it was
    assigned in one line a time; none of Faust's tables of partitions or topics."""
    a, b, _ = served
    for worker in (a, b):
        text = worker.log_path.read_text()
        assigned = [line for line in text.splitlines() if "Setting newly assigned partitions" in line]
        assert assigned and all(line.endswith(f"for group {worker.topic_prefix} ") or
                                line.endswith(f"for group {worker.topic_prefix}") for line in assigned), assigned
        assert "+----" not in text and "Updating subscribed topics" not in text and "Subscribed to topic" not in text
    assert any(".matches " in line for line in b.log_path.read_text().splitlines()
               if "Setting newly assigned partitions" in line)
