"""The worker's batches without a broker: the changelog and the producer are
replaced by in-memory recorders; the Faust app and RocksDB are real."""

import asyncio
from pathlib import Path

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
    w = RatingsWorker(Settings(data_dir=tmp_path / "data", partitions=1, config_path=str(config)))
    w.app.loop = asyncio.get_running_loop()
    w.app.finalize()
    sent: list[tuple[str, bytes, bytes]] = []
    changelog: list[tuple[str, int, bytes, bytes]] = []

    async def send_outputs(outputs):
        sent.extend((w.output_topics[out.kind], out.key, out.value) for out in outputs)
        return []

    async def write(partition, writes):
        for table, key, value in writes:
            changelog.append((table, partition, key, value))
            w._db(table, partition).put(key, value)
        return {}

    w._send_outputs = send_outputs
    w._write = write
    w.sent, w.changelog = sent, changelog
    yield w
    for table in w.tables.values():
        for db in list(table.data._dbs.values()):
            db.close()


def assert_state_is_the_replay(worker, lines, league):
    ledger = Ledger(LeagueConfig.from_toml(CONFIG))
    for line in lines:
        ledger.apply(parse_match(line))
    for player, state in ledger.leagues[league].items():
        assert worker.player_record(league, player) == state.to_dict()


def events():
    return [
        {"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]},
        {"league": "chess", "match_id": "2", "participants": [{"player": "b", "rank": 1}, {"player": "c", "rank": 1}]},
        {"league": "karting", "match_id": "1", "participants": [{"player": "a", "rank": 2}, {"player": "b", "rank": 1}, {"player": "c", "rank": 3}]},
        {"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]},
    ]


async def test_a_batch_is_applied_published_and_checkpointed(worker):
    from stream_app.worker import InputRecord

    topic = worker.settings.match_topic
    lines = [orjson.dumps(event) for event in events()] + [b"not json"]
    await worker.process_batch([InputRecord(topic, 0, i, b"chess", line, 1000) for i, line in enumerate(lines)])
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


async def test_input_skipped_by_the_consumer_is_read_directly_and_applied_in_order(worker, monkeypatch):
    """A record past the checkpoint (input jumped): the worker reads the skipped
    ones from the broker and applies them first, so the state is still exactly
    the replay of every event."""

    import stream_app.worker as worker_module
    from stream_app import metrics

    topic = worker.settings.match_topic
    lines = [
        orjson.dumps({"league": "chess", "match_id": str(i), "participants": [
            {"player": "ab"[i % 2], "rank": 1}, {"player": "cd"[i % 2], "rank": 2}]})
        for i in range(6)
    ]
    log = [worker_module.InputRecord(topic, 0, offset, b"chess", line, 1000) for offset, line in enumerate(lines)]
    reads = []

    async def read_range(options, topic_, partition, start, end, timeout=60.0):
        reads.append((topic_, partition, start, end))
        return log[start:end]

    monkeypatch.setattr(worker_module, "read_range", read_range)

    def delivered(offset):
        return log[offset]

    gaps_before = metrics.INPUT_GAPS._value.get()
    await worker.process_batch([delivered(0), delivered(1)])
    await worker.process_batch([delivered(5)])  # 2, 3 and 4 never came through the consumer
    await worker.process_batch([delivered(3)])  # a late redelivery: already applied
    assert reads == [(topic, 0, 2, 5)]
    assert metrics.INPUT_GAPS._value.get() == gaps_before + 1
    assert_state_is_the_replay(worker, lines, "chess")
    assert worker.league_record("chess")["matches"] == 6
    assert worker.applied_total == 6


def test_local_tables_are_kept_after_a_clean_stop_and_wiped_after_a_crash(tmp_path):
    """Faust keeps its RocksDB tables under the data directory's v1/tables; they
    are trusted only when the previous run left the clean-stop marker."""
    import stream_app.worker as worker_module

    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    tables = Path(RatingsWorker(settings).app.conf.tabledir)
    assert tables.is_relative_to(tmp_path / "data")
    (tables / "players-0.db").mkdir(parents=True)
    (tmp_path / "data" / worker_module.CLEAN_MARKER).write_text("1\n")
    kept = RatingsWorker(settings)
    assert kept.wiped is False and tables.exists()
    assert not (tmp_path / "data" / worker_module.CLEAN_MARKER).exists()  # consumed: the next stop must earn it again
    crashed = RatingsWorker(settings)  # no marker: the run before did not stop cleanly
    assert crashed.wiped is True and not tables.exists()


async def test_standings_are_cached_until_the_league_partition_commits_again(worker):

    from stream_app.worker import InputRecord

    topic = worker.settings.match_topic
    docs = [{"league": "chess", "match_id": str(i), "participants": [
        {"player": f"p{i}", "rank": 1}, {"player": f"p{i + 1}", "rank": 2}]} for i in range(3)]

    def delivered(offset):
        return InputRecord(topic, 0, offset, b"chess", orjson.dumps(docs[offset]), 1000)

    def replayed(count):
        ledger = Ledger(LeagueConfig.from_toml(CONFIG))
        for doc in docs[:count]:
            ledger.apply(parse_match(doc))
        states = ledger.leagues["chess"]
        return sorted(((p, s.rating, s.matches) for p, s in states.items()), key=lambda r: (-r[1], r[0]))

    await worker.process_batch([delivered(0), delivered(1)])
    first = worker.standings("chess")
    assert first == replayed(2)
    assert worker.standings("chess") is first  # nothing committed since: the same rows
    await worker.process_batch([delivered(2)])
    assert worker.standings("chess") == replayed(3) != first


async def test_a_batch_of_heavy_events_is_applied_in_checkpointed_parts(worker):

    from stream_app.worker import InputRecord

    topic = worker.settings.match_topic
    docs = [{"league": "kart", "match_id": str(i), "participants": [
        {"player": f"p{j}", "rank": 1 + (i + j) % 5} for j in range(40)]} for i in range(5)]
    lines = [orjson.dumps(doc) for doc in docs]
    worker.settings.batch_max_bytes = len(lines[0]) * 2  # two events per part
    records = [InputRecord(topic, 0, i, b"kart", line, 1000) for i, line in enumerate(lines)]
    before = sum(table == "checkpoints" for table, *_ in worker.changelog)
    await worker.process_batch(records)
    checkpoints = [orjson.loads(v) for table, _, _, v in worker.changelog if table == "checkpoints"][before:]
    # A take-up record, then one checkpoint per part: events 0-1, 2-3, 4.
    assert [c["offsets"].get(topic) for c in checkpoints] == [None, 1, 3, 4]
    ledger = Ledger(LeagueConfig.from_toml(CONFIG))
    for line in lines:
        ledger.apply(parse_match(line))
    for player, state in ledger.leagues["kart"].items():
        assert worker.player_record("kart", player) == state.to_dict()


async def test_a_failed_batch_leaves_nothing_applied_and_is_applied_once_when_read_again(worker):
    """A batch that fails part-way (here: its outputs are not acknowledged) drops the
    ledgers, so the same records read again from the checkpoint count once."""
    from stream_app.worker import InputRecord

    topic = worker.settings.match_topic
    lines = [orjson.dumps({"league": "chess", "match_id": str(i), "participants": [
        {"player": "ab"[i % 2], "rank": 1}, {"player": "c", "rank": 2}]}) for i in range(4)]
    records = [InputRecord(topic, 0, i, b"chess", line, 1000) for i, line in enumerate(lines)]
    await worker._apply_input(records[:1])
    working = worker._send_outputs

    async def broker_gone(outputs):
        raise ConnectionError("no acks")

    worker._send_outputs = broker_gone
    with pytest.raises(ConnectionError):
        await worker._apply_input(records[1:3])
    assert worker.ledgers == {}
    assert worker.league_record("chess")["matches"] == 1  # the failed batch committed nothing
    worker._send_outputs = working
    assert worker._input_position(topic, 0) == 1  # where the intake goes back to
    await worker._apply_input(records[1:])
    assert_state_is_the_replay(worker, lines, "chess")
    assert worker.league_record("chess")["matches"] == 4


async def test_faust_never_activates_input_partitions(worker):
    """Faust's consumer must not fetch input for its agent: neither when partitions
    are newly assigned nor when they are resumed after recovery."""
    from faust.types import TP

    worker._keep_input_to_intake()
    consumer = worker.app.consumer
    inputs = {TP(worker.settings.match_topic, 0), TP(worker.settings.forward_topic, 0)}
    changelog = TP(worker.tables["players"].changelog_topic.get_topic_name(), 0)
    assert consumer._set_active_tps(inputs | {changelog}) == {changelog}
    consumer.pause_partitions(inputs | {changelog})
    consumer.resume_partitions(inputs | {changelog})
    assert consumer._get_active_partitions() == {changelog}
