"""A worker SIGKILLed in the middle of a season change: a league of some 40,000
players starts a season by command (every player reset and archived in one
batch, sent as rows with 40,000 events); the worker is killed while that
batch's events are reaching the broker, restarted on its data directory, and
for the next season on an empty one. The league ends exactly as the replay:
ratings, seasons, final standings, and every event once."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict

import orjson
import pytest

from stream_app.inputs import format_time, parse_time
from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from tests.support.corrections import run
from tests.support.kafka import ensure_topics, keyed, publish, read_all, records_in, topic_args as topics_of
from tests.support.leagues import assert_same_state
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, wait_for

pytestmark = pytest.mark.reliability
CONFIG = """
[leagues."ladder"]
algorithm = "elo"
season = "manual"
season_reset = {shrink = 0.5, toward = "mean"}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1000}, {name = "Top 1%", top_percent = 1}]
floor = 950
"""


def season(name: str, after: dict) -> dict:
    start = format_time(parse_time(after["occurred_at"]) + 30)
    return {"schema": "season-started.v1", "league": "ladder", "season": name, "occurred_at": start, "reason": "test"}


def test_sigkill_during_a_season_change_ends_as_the_replay(broker, tmp_path):
    prefix = unique_name("season-kill")
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    config = LeagueConfig.from_toml(CONFIG)
    results = list(two_player_league("ladder", 60_000, 40_300, random.Random(7)))
    first, second, third = results[:40_000], results[40_000:40_150], results[40_150:]
    parts = [first, [season("S1", first[-1]), *second], [season("S2", second[-1]), *third]]
    ledger, events, refused = run([doc for part in parts for doc in part], config)
    assert refused == [] and len(ledger.leagues["ladder"]) > 40_000
    changes = f"{prefix}.changes"
    asyncio.run(ensure_topics(broker.url, prefix))
    asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(first)))

    def league() -> dict:
        status, body = worker.get("/leagues/ladder")
        return body if status == 200 else {}

    worker = WorkerProcess(broker.url, topics_of(prefix), prefix, tmp_path / "a", config_path, name="w0",
                           extra_args=FAST_GROUP)
    mid_way = []
    try:
        wait_for(lambda: league().get("matches") == 40_000, 300, "the first results applied", workers=[worker])
        for attempt, (part, name) in enumerate(((parts[1], "S1"), (parts[2], "S2"))):
            before = asyncio.run(records_in(broker.bootstrap, changes))
            asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(part)))
            # Kill it once the season's events are on their way: its batch is not committed before they all are.
            deadline = time.monotonic() + 120
            while asyncio.run(records_in(broker.bootstrap, changes)) < before + 2_000:
                assert time.monotonic() < deadline, "the season's events never came"
                time.sleep(0.02)
            committed = league().get("season")
            worker.kill()
            mid_way.append(committed != name)
            worker = WorkerProcess(broker.url, topics_of(prefix), prefix, tmp_path / ("a" if attempt == 0 else "b"),
                                   config_path, name=f"w{attempt + 1}", extra_args=FAST_GROUP)
            expected = ledger.records["ladder"]["matches"] if attempt else 40_150
            wait_for(lambda: league().get("matches") == expected and league().get("season") == name, 300,
                     f"season {name} and its results applied", workers=[worker])
        assert any(mid_way), "no kill came before its season's batch committed"
        assert_same_state(worker, ledger)
        status, doc = worker.get("/leagues/ladder/seasons")
        assert status == 200 and [(s["season"], s["players"]) for s in doc["seasons"]] == \
               [(row["name"], row.get("players")) for row in ledger.season_rows["ladder"]]
        status, board = worker.get("/leagues/ladder/seasons/S1/leaderboard?limit=100000")
        assert status == 200
        assert board["players"] == [{k: v for k, v in row.items() if k not in ("league", "season")}
                                    for row in ledger.final_standings() if row["season"] == "S1"]
        published = asyncio.run(read_all(broker.bootstrap, changes, 8, len(events), timeout=120, drain=True))
        contents: dict[str, set[bytes]] = defaultdict(set)
        for event in published:
            contents[event["event_id"]].add(orjson.dumps(event))
        assert set(contents) == {event["event_id"] for event in events}
        assert all(len(values) == 1 for values in contents.values())
        assert sum(event.get("cause") == "season_reset" for event in events) > 80_000
        print(f"killed before the season's batch committed: {mid_way}")
    finally:
        worker.stop()
