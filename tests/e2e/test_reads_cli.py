"""`ratings player`, `ratings leaderboard --around` and RatingsClient's reads,
end to end: a real worker process on the embedded broker applies three
leagues (elo, elo-pairwise, elo-mmr; a player needs 5 matches to be ranked),
and what the commands and the client print or return is compared with the
API's JSON, with `ratings replay --history` of the same file, and with a
brute-force sort of the replayed players (rating descending, then name)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from stream_app import cli
from stream_app.client import ApiError, RatingsClient
from tests.support.leagues import league_events
from tests.support.openapi import checked
from tests.support.ports import free_port
from tests.support.workers import WorkerProcess, applied_by

# Its tests share the workers of a module fixture: under pytest-xdist, one process runs them all.
pytestmark = pytest.mark.xdist_group("test_reads_cli")

MIN_MATCHES = 5
CONFIG = f"""
[default]
algorithm = "elo"
min_matches = {MIN_MATCHES}

[leagues."karting"]
algorithm = "elo-pairwise"
ties = "half"
min_matches = {MIN_MATCHES}

[leagues."arena"]
algorithm = "elo-mmr"
min_matches = {MIN_MATCHES}

[leagues."go"]
algorithm = "glicko2"
min_matches = {MIN_MATCHES}

[leagues."team"]
algorithm = "weng-lin"
min_matches = {MIN_MATCHES}

[leagues."relay"]
algorithm = "elo-mmx"
min_matches = {MIN_MATCHES}
"""
SPECIAL = "ann+bo@x:1"  # every character an id may have that a URL must quote
RATINGS = [str(Path(sys.executable).with_name("ratings"))]  # the installed command


def events() -> list[dict]:
    docs = league_events(seed=21)
    # SPECIAL plays enough to be ranked; the rookie plays once (provisional).
    docs += [{"league": "chess", "match_id": f"zz-special-{i}", "participants": [
        {"player": SPECIAL, "rank": 1 + i % 2}, {"player": f"chess-p{i:04d}", "rank": 2 - i % 2}]} for i in range(7)]
    docs.append({"league": "chess", "match_id": "zz-rookie", "participants": [
        {"player": "rookie", "rank": 1}, {"player": "chess-p0010", "rank": 2}]})
    return docs


class Served:
    def __init__(self, worker: WorkerProcess, state: dict, history: dict):
        self.worker = worker
        self.url = worker.url
        self.state = state  # `ratings replay`'s output: {league: {player: {rating, matches, ...}}}
        self.history = history  # (league, player): `ratings replay --history` entries, oldest first

    def board(self, league: str) -> list[tuple[str, float]]:
        """The ranked players by brute force."""
        ranked = [(p, s["rating"]) for p, s in self.state[league].items() if s["matches"] >= MIN_MATCHES]
        return sorted(ranked, key=lambda row: (-row[1], row[0]))

    def rank(self, league: str, player: str) -> int | None:
        return next((i + 1 for i, (name, _) in enumerate(self.board(league)) if name == player), None)

    def sample(self, league: str) -> list[str]:
        """The best, a middle and the last ranked player, and an unranked one if any."""
        board = [name for name, _ in self.board(league)]
        unranked = sorted(p for p, s in self.state[league].items() if s["matches"] < MIN_MATCHES)
        return [board[0], board[len(board) // 2], board[-1], *unranked[:1]]


@pytest.fixture(scope="module")
def served(broker, tmp_path_factory):
    """A worker that has applied `events()`, and `ratings replay` of the same file."""
    tmp = tmp_path_factory.mktemp("reads-cli")
    config, matches = tmp / "leagues.toml", tmp / "matches.jsonl"
    config.write_text(CONFIG)
    docs = events()
    matches.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in docs))
    assert cli.main(["replay", "--input", str(matches), "--config", str(config), "--output", str(tmp / "state.json"),
                     "--history", str(tmp / "history.jsonl"), "--quiet"]) == 0
    state = orjson.loads((tmp / "state.json").read_bytes())
    history: dict[tuple[str, str], list[dict]] = {}
    for line in (tmp / "history.jsonl").read_bytes().splitlines():
        entry = orjson.loads(line)
        history.setdefault((entry.pop("league"), entry.pop("player")), []).append(entry)
    with applied_by(broker, tmp, config, docs, "readscli", names="w") as (worker,):
        yield Served(worker, state, history)


def ratings(capsys, *argv: str) -> tuple[int, str, str]:
    """`ratings ARGV` in this process: (exit status, stdout, stderr)."""
    status = cli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_the_input_has_what_the_checks_need(served):
    assert set(served.state) == {"chess", "karting", "arena", "go", "team", "relay"}
    assert served.rank("chess", SPECIAL) is not None and served.rank("chess", "rookie") is None
    assert all(len(served.sample(league)) == 4 for league in ("chess", "arena"))  # each has an unranked player
    for league in ("arena", "go", "team", "relay"):
        assert all("uncertainty" in state for state in served.state[league].values())


def test_player_equals_the_api_and_the_replay(served, capsys):
    for league in served.state:
        for player in [*served.sample(league), *([SPECIAL, "rookie"] if league == "chess" else [])]:
            status, out, err = ratings(capsys, "player", league, player, "--json", "--api", served.url)
            assert status == 0, err
            doc = orjson.loads(out)
            assert doc == checked(served.worker, f"/leagues/{league}/players/{player.replace('+', '%2B')}")[1]
            replayed = served.state[league][player]
            assert {key: doc[key] for key in replayed} == replayed  # rating, matches and the system's extras
            rank = served.rank(league, player)
            assert (doc["rank"], doc["eligible"], doc["provisional"]) == (rank, rank is not None, rank is None)

            status, out, err = ratings(capsys, "player", league, player, "--api", served.url)
            assert status == 0, err
            lines = out.splitlines()
            fields = {line[:16].strip(): line[16:] for line in lines[1:]}
            assert lines[0] == f"{player} in {league} ({doc['algorithm']})"
            assert fields["rating"] == f"{replayed['rating']:.1f}" and fields["matches"] == str(replayed["matches"])
            assert fields["rank"] == ("-" if rank is None else str(rank))
            assert fields["status"] == ("provisional" if rank is None else "eligible")
            assert fields["percentile"] == ("-" if rank is None else f"{doc['percentile']:.1f}")
            if "uncertainty" in replayed:
                assert fields["uncertainty"] == f"{replayed['uncertainty']:.1f}"


def test_history_holds_every_match_newest_first_as_the_replay(served, capsys):
    for league in served.state:
        for player in served.sample(league):
            matches = served.state[league][player]["matches"]
            status, out, err = ratings(capsys, "player", league, player, "--history", str(matches + 5), "--json",
                                       "--api", served.url)
            assert status == 0, err
            history = orjson.loads(out)["history"]
            assert len(history) == matches
            assert history == served.history[(league, player)][::-1]
            assert [entry["seq"] for entry in history] == list(range(matches, 0, -1))

    player = served.board("arena")[0][0]
    newest = served.history[("arena", player)][::-1][:3]
    status, out, err = ratings(capsys, "player", "arena", player, "--history", "3", "--api", served.url)
    assert status == 0, err
    lines = out.splitlines()
    rows = lines[lines.index("") + 2:]
    assert len(rows) == 3
    for row, entry in zip(rows, newest):
        assert row.split() == [str(entry["seq"]), entry["match_id"], entry["occurred_at"], str(entry["rank"]),
                               f"{entry['rating_before']:.1f}", f"{entry['rating_after']:.1f}",
                               f"{entry['rating_after'] - entry['rating_before']:+.1f}"]


async def test_history_pages_with_before_and_next_give_every_entry_once(served):
    client = RatingsClient(api=served.url)  # never started: reads need no broker
    try:
        for league, player in (("chess", SPECIAL), ("arena", served.board("arena")[0][0]), ("karting", "karting-p00003")):
            expected = served.history[(league, player)][::-1]
            pages, before = [], None
            while True:
                page = await client.history(league, player, limit=3, before=before)
                assert 0 < len(page["changes"]) <= 3
                pages.append(page["changes"])
                before = page["next"]
                if before is None:
                    break
                assert before == page["changes"][-1]["seq"]
            entries = [entry for changes in pages for entry in changes]
            assert entries == expected and len(pages) == -(-len(expected) // 3)
            assert len({entry["seq"] for entry in entries}) == len(entries)
            assert [entry async for entry in client.all_history(league, player)] == expected
            assert [entry async for entry in client.all_history(league, player, page_size=2)] == expected
            assert [entry async for entry in client.all_history(league, player, most=5, page_size=2)] == expected[:5]
        with pytest.raises(ApiError) as refused:
            await client.history("chess", "nobody")
        assert refused.value.status == 404 and refused.value.message == "player 'nobody' not found in league 'chess'"
    finally:
        await client.stop()


def test_around_has_the_player_at_the_brute_force_rank_and_marks_the_row(served, capsys):
    for league in served.state:
        board = served.board(league)
        players_total = len(served.state[league])
        wide = "uncertainty" in next(iter(served.state[league].values()))  # one more column
        for i in sorted({0, 1, len(board) // 2, len(board) - 1, *([served.rank(league, SPECIAL) - 1]
                                                                    if league == "chess" else [])}):
            player = board[i][0]
            window = [(j + 1, board[j][0], board[j][1]) for j in range(max(i - 2, 0), min(i + 3, len(board)))]
            status, out, err = ratings(capsys, "leaderboard", league, "--around", player, "--radius", "2",
                                       "--api", served.url)
            assert status == 0, err
            lines = out.splitlines()
            assert lines[0] == f"{league} ({players_total} players, {len(board)} ranked)"
            rows = [line.split() for line in lines[2:]]
            assert [row[-4 if wide else -3] for row in rows] == [name for _, name, _ in window]
            marked = [row for row in rows if row[0] == ">"]
            assert len(marked) == 1 and marked[0][1:3] == [str(i + 1), player]
            assert rows.index(marked[0]) == i - (window[0][0] - 1)
            assert [(int(row[-5 if wide else -4]), float(row[-3 if wide else -2]))
                    for row in rows] == [(rank, round(rating, 1)) for rank, _, rating in window]

            status, out, err = ratings(capsys, "leaderboard", league, "--around", player, "--radius", "2", "--json",
                                       "--api", served.url)
            assert status == 0, err
            doc = orjson.loads(out)
            around = f"/leagues/{league}/leaderboard?around={player.replace('+', '%2B')}&radius=2"
            assert doc == checked(served.worker, around)[1]
            assert [(row["rank"], row["player"], row["rating"]) for row in doc["players"]] == window
            assert doc["around"] == player and doc["offset"] == window[0][0] - 1
            assert doc["players_total"] == players_total and doc["eligible_total"] == len(board)


def test_leaderboard_pages_equal_the_brute_force_sort(served, capsys):
    board = served.board("chess")
    status, out, err = ratings(capsys, "leaderboard", "chess", "--limit", "5", "--offset", "5", "--api", served.url)
    assert status == 0, err
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows == [[str(j + 1), board[j][0], f"{board[j][1]:.1f}", str(served.state["chess"][board[j][0]]["matches"])]
                    for j in range(5, 10)]

    async def read() -> tuple[dict, dict, dict]:
        client = RatingsClient(api=served.url)
        try:
            return await client.leaderboard("chess", limit=5, offset=5), await client.leagues(), \
                await client.leaderboard_around("chess", SPECIAL, radius=0)
        finally:
            await client.stop()

    page, leagues, alone = asyncio.run(read())
    assert [(row["rank"], row["player"], row["rating"]) for row in page["players"]] == [
        (j + 1, *board[j]) for j in range(5, 10)]
    assert [(doc["league"], doc["players"]) for doc in leagues["leagues"]] == [
        (league, len(served.state[league])) for league in sorted(served.state)]
    assert [(row["rank"], row["player"]) for row in alone["players"]] == [(served.rank("chess", SPECIAL), SPECIAL)]


def test_refusals_exit_1_with_the_apis_message_and_no_worker_exits_2(served, capsys):
    status, _, err = ratings(capsys, "player", "chess", "nobody", "--api", served.url)
    assert (status, err) == (1, "ratings player: player 'nobody' not found in league 'chess' (HTTP 404)\n")
    status, _, err = ratings(capsys, "leaderboard", "nope", "--api", served.url)
    assert (status, err) == (1, "ratings leaderboard: league 'nope' not found (HTTP 404)\n")
    status, _, err = ratings(capsys, "leaderboard", "chess", "--around", "rookie", "--api", served.url)
    assert status == 1 and "is not ranked" in err and "provisional (1 of the 5 matches needed)" in err

    # The installed command, as a user runs it.
    done = subprocess.run([*RATINGS, "leaderboard", "chess", "--around", "rookie", "--web-port", str(served.worker.port)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "provisional" in done.stderr and done.stdout == ""
    done = subprocess.run([*RATINGS, "player", "chess", "chess-p0001", "--web-port", str(free_port())],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and "cannot reach the API at http://127.0.0.1:" in done.stderr


async def predict_with_client(url: str, league: str, sides: list[list[str]]) -> dict:
    client = RatingsClient(api=url)  # reads need no broker
    try:
        return await client.predict(league, sides)
    finally:
        await client.stop()


def test_predict_prints_and_returns_what_the_api_answers_for_every_system(served, capsys):
    for league in served.state:
        best, middle, last, *_ = served.sample(league)
        teams = league in ("team", "relay")
        sides = [[best, last], [middle, SPECIAL if league == "chess" else "newcomer"]] if teams else \
            [[best], [SPECIAL if league == "chess" else "newcomer"]]
        query = "&".join("team=" + ",".join(side).replace("+", "%2B") for side in sides)
        status, api = checked(served.worker, f"/leagues/{league}/predict?{query}")
        assert status == 200 and [side["players"] for side in api["sides"]] == sides
        assert sum(side["win"] for side in api["sides"]) == pytest.approx(1.0)
        for side in api["sides"]:  # the ratings the prediction used are the replay's
            for player, rating in side["ratings"].items():
                assert rating == served.state[league].get(player, {"rating": rating})["rating"]
        status, out, err = ratings(capsys, "predict", league, *(",".join(side) for side in sides), "--json",
                                   "--api", served.url)
        assert status == 0 and orjson.loads(out) == api, err
        assert asyncio.run(predict_with_client(served.url, league, sides)) == api

        status, out, err = ratings(capsys, "predict", league, *(",".join(side) for side in sides), "--api", served.url)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0] == f"{' vs '.join(','.join(side) for side in sides)} in {league} ({api['algorithm']})"
        first = lines[2].split()
        assert first[0] == sides[0][0] and first[2] == f"{api['sides'][0]['win']:.1%}"
        assert f"quality {api['quality']:.2f}" in out
        if league != "chess":
            assert "not rated yet (newcomers): newcomer" in out

    status, _, err = ratings(capsys, "predict", "chess", "chess-p0001", "--api", served.url)
    assert status == 2 and "SIDE: at least two sides, one 'SIDE' each (got 1)" in err


def shared_record(docs: list[dict], league: str, player: str, opponent: str) -> tuple[dict, dict, list[str]]:
    """By brute force over the input: player's wins, draws and losses against opponent
    on opposite sides, the matches on the same side and those won, and the shared
    match ids newest first."""
    against = {"matches": 0, "wins": 0, "draws": 0, "losses": 0}
    together = {"matches": 0, "wins": 0}
    shared = []
    for doc in docs:
        if doc["league"] != league:
            continue
        people = {p["player"]: p for p in doc["participants"]}
        if player not in people or opponent not in people:
            continue
        a, b = people[player], people[opponent]
        shared.append(doc["match_id"])
        if a.get("team") is not None and a.get("team") == b.get("team"):
            together["matches"] += 1
            together["wins"] += a["rank"] == 1
        else:
            against["matches"] += 1
            against["wins" if a["rank"] < b["rank"] else "losses" if a["rank"] > b["rank"] else "draws"] += 1
    return against, together, shared[::-1]


async def versus_with_client(url: str, league: str, player: str, opponent: str) -> dict:
    client = RatingsClient(api=url)
    try:
        return await client.versus(league, player, opponent, limit=3)
    finally:
        await client.stop()


def test_versus_counts_what_the_input_says_and_the_history_holds(served, capsys):
    docs = events()
    for league in ("chess", "karting", "team", "relay"):
        player = served.sample(league)[0]
        opponents = {p["player"] for doc in docs if doc["league"] == league
                     and player in {x["player"] for x in doc["participants"]} for p in doc["participants"]} - {player}
        for opponent in sorted(opponents)[:3]:
            against, together, shared = shared_record(docs, league, player, opponent)
            path = f"/leagues/{league}/players/{player}/versus/{opponent}?limit=3"
            status, doc = checked(served.worker, path)
            assert status == 200, doc
            assert (doc["against"], doc["together"], doc["matches"]) == (against, together, len(shared))
            assert [m["match_id"] for m in doc["recent"]] == shared[:3]
            for m in doc["recent"]:  # both players' changes, as the replay's history has them
                mine = next(e for e in served.history[(league, player)] if e["match_id"] == m["match_id"])
                theirs = next(e for e in served.history[(league, opponent)] if e["match_id"] == m["match_id"])
                assert (m["rating_before"], m["rating_after"], m["rank"]) == \
                    (mine["rating_before"], mine["rating_after"], mine["rank"])
                assert (m["opponent_rating_before"], m["opponent_rating_after"]) == \
                    (theirs["rating_before"], theirs["rating_after"])
            status, out, err = ratings(capsys, "versus", league, player, opponent, "--limit", "3", "--json",
                                       "--api", served.url)
            assert status == 0 and orjson.loads(out) == doc, err
            assert asyncio.run(versus_with_client(served.url, league, player, opponent)) == doc
        if league in ("team", "relay"):
            assert any(checked(served.worker, f"/leagues/{league}/players/{player}/versus/{o}")[1]
                       ["together"]["matches"] for o in opponents)
    status, out, err = ratings(capsys, "versus", "chess", SPECIAL, "chess-p0001", "--api", served.url)
    assert status == 0 and out.startswith(f"{SPECIAL} vs chess-p0001 in chess (elo): ") and "against each other" in out
    for path, code, words in (("/leagues/chess/players/chess-p0001/versus/chess-p0001", 400, "opponent: must be another"),
                              ("/leagues/chess/players/chess-p0001/versus/bad%20id", 400, "opponent: must be 1 to"),
                              ("/leagues/chess/players/chess-p0001/versus/nobody", 404, "player 'nobody' not found"),
                              ("/leagues/chess/players/chess-p0001/versus/chess-p0002?limit=1001", 400, "limit"),
                              ("/leagues/nope/players/a/versus/b", 404, "league 'nope' not found")):
        status, body = checked(served.worker, path)
        assert status == code and words in body["error"], body
