"""A worker SIGKILLed in the middle of a long re-rate (a void near the start of
a 30,000-match league, applied again in parts of 1,000 matches, each
committed), restarted on its data directory, then on an empty one: the
re-rate resumes from its last committed part, and the league ends exactly as
the replay, with every rating-changed event published and each id with one
content."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import orjson
import pytest

from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from tests.support.corrections import run
from tests.support.kafka import ensure_topics, keyed, publish, read_all, topic_args as topics_of
from tests.support.leagues import assert_same_history, assert_same_state
from tests.support.names import unique_name
from tests.support.workers import FAST_GROUP, WorkerProcess, wait_for

pytestmark = pytest.mark.reliability
CONFIG = '[default]\nalgorithm = "elo"\n'


def test_sigkill_during_a_re_rate_resumes_it_and_ends_as_the_replay(broker, tmp_path):
    prefix = unique_name("rerate-kill")
    config_path = tmp_path / "leagues.toml"
    config_path.write_text(CONFIG)
    config = LeagueConfig.from_toml(CONFIG)
    results = list(two_player_league("chess", 300, 30_000, random.Random(3)))
    voids = [{"schema": "match-voided.v1", "league": "chess", "match_id": results[i]["match_id"], "reason": "annulled"}
             for i in (400, 900)]
    ledger, events, _ = run(results + voids, config)
    args = [*FAST_GROUP, "--rerate-part", "2000"]
    asyncio.run(ensure_topics(broker.url, prefix))
    asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(results)))

    def league() -> dict:
        status, body = worker.get("/leagues/chess")
        return body if status == 200 else {}

    worker = WorkerProcess(broker.url, topics_of(prefix), prefix, tmp_path / "a", config_path, name="w0", extra_args=args)
    killed = []
    try:
        wait_for(lambda: league().get("matches") == 30_000, 300, "the results applied", workers=[worker])
        asyncio.run(publish(broker.bootstrap, f"{prefix}.matches", keyed(voids)))
        for attempt, directory in enumerate(("a", "b")):
            # Kill it once the re-rate has committed a few parts.
            progress = wait_for(lambda: [r for r in (worker.health() or {}).get("rerating", [])
                                         if r.get("matches_reapplied", 0) >= 3000], 120, "a re-rate in progress",
                                interval=0.05, workers=[worker])
            worker.kill()
            killed.append(progress[0])
            worker = WorkerProcess(broker.url, topics_of(prefix), prefix, tmp_path / directory, config_path,
                                   name=f"w{attempt + 1}", extra_args=args)
        wait_for(lambda: league().get("rerates") == 2, 300, "both re-rates done", workers=[worker])
        assert league()["matches"] == 29_998
        assert_same_state(worker, ledger)
        assert_same_history(worker, ledger, per_league=20)
        published = asyncio.run(read_all(broker.bootstrap, f"{prefix}.changes", 8, len(events), timeout=60, drain=True))
        contents: dict[str, set[bytes]] = defaultdict(set)
        for event in published:
            contents[event["event_id"]].add(orjson.dumps(event))
        assert set(contents) == {event["event_id"] for event in events}
        assert all(len(values) == 1 for values in contents.values())
        assert all(k["matches"] > k["matches_reapplied"] for k in killed)  # each kill hit a re-rate half way
        print("killed at " + ", ".join(f"{k['matches_reapplied']:,} of {k['matches']:,}" for k in killed))
    finally:
        worker.stop()
