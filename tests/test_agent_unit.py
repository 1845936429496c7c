"""The worker's agent under Faust's test context: no broker. The changelog and
the producer are replaced by in-memory recorders; RocksDB is real."""

import asyncio

import orjson
import pytest

from stream_app.config import LeagueConfig
from stream_app.events import parse_match
from stream_app.replay import Ledger
from stream_app.worker import RatingsWorker, Settings

CONFIG = '[default]\nalgorithm = "elo"\n[leagues."kart*"]\nalgorithm = "elo-pairwise"\n'


@pytest.fixture
async def worker(tmp_path):
    config = tmp_path / "leagues.toml"
    config.write_text(CONFIG)
    w = RatingsWorker(Settings(data_dir=tmp_path / "data", partitions=1, config_path=str(config), batch_window=0.01))
    w.app.loop = asyncio.get_running_loop()
    w.app.finalize()
    sent: list[tuple[str, bytes, bytes]] = []
    changelog: list[tuple[str, int, bytes, bytes]] = []

    class Producer:
        async def send(self, topic, key, value, partition, timestamp, headers):
            sent.append((topic, key, value))
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future

    async def write(partition, writes):
        for table, key, value in writes:
            changelog.append((table, partition, key, value))
            w._db(table, partition).put(key, value)

    w.app._producer = Producer()
    w._write = write
    w.sent, w.changelog = sent, changelog
    yield w
    for table in w.tables.values():
        for db in list(table.data._dbs.values()):
            db.close()


def events():
    return [
        {"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]},
        {"league": "chess", "match_id": "2", "participants": [{"player": "b", "rank": 1}, {"player": "c", "rank": 1}]},
        {"league": "karting", "match_id": "1", "participants": [{"player": "a", "rank": 2}, {"player": "b", "rank": 1}, {"player": "c", "rank": 3}]},
        {"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]},
    ]


async def test_agent_applies_a_batch_publishes_changes_and_checkpoints(worker):
    agent = worker.app.agents["apply"]
    async with agent.test_context() as context:
        for event in events():
            await context.put(orjson.dumps(event), key=event["league"].encode())
        await context.put(b"not json", key=b"chess")
        for _ in range(100):
            if any(table == "checkpoints" for table, *_ in worker.changelog[1:]) and len(worker.sent) >= 9:
                break
            await asyncio.sleep(0.05)
    ledger = Ledger(LeagueConfig.from_toml(CONFIG))
    for event in events():
        ledger.apply(parse_match(event))
    # State: exactly the replay.
    for league, players in ledger.leagues.items():
        for player, state in players.items():
            assert worker.player_record(league, player) == state.to_dict()
    assert worker.league_record("chess") == {"algorithm": "elo", "matches": 2, "players": 3}
    # Outputs: 2 + 2 + 3 rating changes, one duplicate and one parse failure to the dead-letter topic.
    kinds = [topic for topic, _, _ in worker.sent]
    assert kinds.count("rating-changes") == 7
    letters = [orjson.loads(v) for t, _, v in worker.sent if t == "match-results-dlq"]
    assert sorted(l["reason"] for l in letters) == ["duplicate_match", "invalid_json"]
    assert worker.duplicates_total == 1 and worker.dead_letters_total == 2
    # The checkpoint comes after the records of its batch, and covers every offset.
    tables = [table for table, *_ in worker.changelog]
    assert tables[-1] == "checkpoints"
    last = orjson.loads(worker.changelog[-1][3])
    assert max(last["offsets"].values()) == 4
