"""The leagues the end-to-end and reliability tests stream, their replay,
and the check that a worker serves exactly the replay's state."""

from __future__ import annotations

import random
import time
from pathlib import Path

import orjson

from stream_app.inputs import parse_match
from stream_app.published import event_id
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.standings import Standing, Standings
from stream_app.offline.sample import multi_player_league, two_player_league

from .sample_teams import team_league

CONFIG = """
[default]
algorithm = "elo"

[leagues."kart*"]
algorithm = "elo-pairwise"
ties = "half"

[leagues."arena*"]
algorithm = "elo-mmr"

[leagues."go*"]
algorithm = "glicko2"

[leagues."team*"]
algorithm = "weng-lin"
model = "bradley-terry-full"

[leagues."relay*"]
algorithm = "elo-mmx"
"""


def config_file(directory: Path) -> Path:
    """CONFIG as a worker's league configuration file in `directory`."""
    path = directory / "leagues.toml"
    path.write_text(CONFIG)
    return path


def interleave(leagues: list[list[dict]], rng: random.Random) -> list[dict]:
    """The leagues' events in a random interleaving; each league keeps its own order."""
    merged, cursors = [], [0] * len(leagues)
    while any(c < len(l) for c, l in zip(cursors, leagues)):
        i = rng.choice([k for k, l in enumerate(leagues) if cursors[k] < len(l)])
        merged.append(leagues[i][cursors[i]])
        cursors[i] += 1
    return merged


def league_events(seed: int, scale: int = 1) -> list[dict]:
    """Six leagues, one per system of CONFIG: chess (elo), karting (pairwise), arena
    (elo-mmr), go (glicko2, a match every 6 hours: deviations grow between a
    player's matches), team (weng-lin teams) and relay (elo-mmx teams)."""
    rng = random.Random(seed)
    events = list(two_player_league("chess", 40, 300 * scale, rng))
    events += list(multi_player_league("karting", 20, 40 * scale, 6, rng))
    events += list(multi_player_league("arena", 80, 12 * scale, 50, rng))
    events += list(two_player_league("go", 24, 80 * scale, rng, spacing=6 * 3600))
    events += list(team_league("team", 30, 40 * scale, 3, rng))
    events += list(team_league("relay", 24, 30 * scale, 2, rng, teams=(2, 5)))
    rng.shuffle(events)  # leagues interleave; each league keeps its own order below
    return in_league_order(events)


def in_league_order(events: list[dict]) -> list[dict]:
    """The leagues interleaved as they are in `events`, each league's matches in match_id order."""
    by_league: dict[str, list] = {}
    for event in events:
        by_league.setdefault(event["league"], []).append(event)
    for items in by_league.values():
        items.sort(key=lambda e: e["match_id"])
    cursors = {league: iter(items) for league, items in by_league.items()}
    return [next(cursors[event["league"]]) for event in events]


def stream_events(seed: int, matches: int = 20_000) -> list[dict]:
    """`matches` matches over 20 leagues: 14 two-player `elo`, 4 six-player
    `elo-pairwise`, 2 forty-player `elo-mmr`, interleaved at random."""
    rng = random.Random(seed)
    kart, arena = matches * 3 // 200, matches // 125
    chess = [(matches - 4 * kart - 2 * arena) // 14] * 14
    chess[0] += matches - 4 * kart - 2 * arena - sum(chess)  # what the division left over
    leagues = [list(two_player_league(f"chess-{i}", 30, n, rng)) for i, n in enumerate(chess)]
    leagues += [list(multi_player_league(f"kart-{i}", 16, kart, 6, rng)) for i in range(4)]
    leagues += [list(multi_player_league(f"arena-{i}", 60, arena, 40, rng)) for i in range(2)]
    return interleave(leagues, rng)


def replay_state(lines: list[bytes], config: LeagueConfig) -> tuple[Ledger, int]:
    """The replay of the lines, with `changes_published` counted; and the number of invalid lines."""
    ledger = Ledger(config)
    ledger.changes_published = 0
    bad = 0
    for line in lines:
        try:
            changes = ledger.apply(parse_match(line))
        except ValueError:
            bad += 1
            continue
        ledger.changes_published += len(changes or [])
    return ledger, bad


def replay_with_event_ids(events: list[dict], config: LeagueConfig) -> tuple[Ledger, set[str]]:
    """The replay of the events, and the id of every rating-changed event it implies;
    the ledger keeps each player's history."""
    ledger = Ledger(config, keep_history=True)
    ids: set[str] = set()
    for event in events:
        match = parse_match(orjson.dumps(event))
        if ledger.apply(match) is not None:
            ids.update(event_id(match.league, match.match_id, p.player) for p in match.participants)
    return ledger, ids


def match_counts(ledger: Ledger) -> dict[str, int]:
    return {league: record["matches"] for league, record in ledger.records.items()}


def league_matches(worker, league: str) -> int:
    status, body = worker.get(f"/leagues/{league}")
    return body["matches"] if status == 200 else -1


def get_when_ready(worker, path: str, timeout: float = 60.0):
    """(status, body) of GET path, asked again while the worker answers 503: it is
    rebalancing or taking partitions up, and the API says to retry shortly."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = worker.get(path)
        if status != 503 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def assert_same_state(worker, ledger: Ledger) -> None:
    """Every league's leaderboard, served by the worker, is the replay's exactly."""
    for league, players in ledger.snapshot().items():
        status, board = get_when_ready(worker, f"/leagues/{league}/leaderboard?limit=100000")
        assert status == 200, board
        served = {row["player"]: (row["rating"], row["matches"], row.get("uncertainty")) for row in board["players"]}
        expected = {p: (v["rating"], v["matches"], v.get("uncertainty")) for p, v in players.items()
                    if ranked(ledger, league, p)}
        assert served == expected, f"{league}: stream and replay differ"
        ranks = [row["rank"] for row in board["players"]]
        assert ranks == list(range(1, len(ranks) + 1))
        ratings = [row["rating"] for row in board["players"]]
        assert ratings == sorted(ratings, reverse=True)


def ranked(ledger: Ledger, league: str, player: str) -> bool:
    """Whether the leaderboard ranks the player (a league with seasons knows each
    player's last match time: inactivity may leave them out)."""
    standings = Standings(ledger.config.options_for(league), ledger.records[league].get("latest_time"))
    state = ledger.leagues[league][player]
    return standings.eligible(Standing(state.rating, state.matches, state.uncertainty,
                                       ledger.last_times.get(league, {}).get(player)))


def assert_same_history(worker, ledger: Ledger, per_league: int = 2) -> None:
    """The first players of each league (by name): their whole history, served by the
    worker, is the replay's (`replay_with_event_ids`), newest first, each entry once."""
    for league, players in ledger.leagues.items():
        for player in sorted(players)[:per_league]:
            entries, before = [], None
            while True:
                query = "limit=1000" + ("" if before is None else f"&before={before}")
                status, page = get_when_ready(worker, f"/leagues/{league}/players/{player}/history?{query}")
                assert status == 200, page
                entries += page["changes"]
                before = page["next"]
                if before is None:
                    break
            assert entries == ledger.history(league, player)[::-1], f"{league}/{player}: history differs from the replay"
