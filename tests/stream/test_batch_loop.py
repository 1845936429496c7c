"""The batch loop (stream/batch_loop.py) without Faust: a real local store and an
in-memory broker (tests/support/memory.py), and in the last test the real
embedded broker for input."""

from __future__ import annotations

import asyncio

import orjson
from prometheus_client import REGISTRY

from stream_app.inputs import parse_match
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.settings import Settings
from stream_app.stream import intake as intake_module
from stream_app.stream import observe
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.reads import Reads
from stream_app.state.tables import player_state
from stream_app.stream.store import LocalStore
from stream_app.stream.batch_loop import BatchLoop
from tests.support.memory import MemoryBroker

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n[leagues."kart*"]\nalgorithm = "elo-pairwise"\n')
SETTINGS = Settings(partitions=1)
TOPIC = SETTINGS.match_topic


def new_worker(directory, settings: Settings = SETTINGS, options: dict | None = None) -> tuple[BatchLoop, LocalStore, MemoryBroker]:
    store, broker = LocalStore(directory), MemoryBroker(partitions=1)
    worker = BatchLoop(settings, CONFIG, store, broker, broker, Intake(options or {}, settings.batch_max, wait_ms=100))
    return worker, store, broker


def reads(worker: BatchLoop, store: LocalStore) -> Reads:
    return Reads(store, worker.settings.partitions, worker.handler.config)


def records(docs: list, topic: str = TOPIC) -> list[InputRecord]:
    return [InputRecord(topic, 0, i, b"chess", doc if isinstance(doc, bytes) else orjson.dumps(doc), 1000)
            for i, doc in enumerate(docs)]


def replayed(docs: list) -> Ledger:
    ledger = Ledger(CONFIG)
    for doc in docs:
        ledger.apply(parse_match(doc))
    return ledger


def assert_state_is_the_replay(view: Reads, docs: list) -> None:
    for league, players in replayed(docs).leagues.items():
        for player, state in players.items():
            assert player_state(view.player(league, player))[0] == state.to_dict()


def stage_count(stage: str) -> float:
    return REGISTRY.get_sample_value("ratings_batch_stage_seconds_count", {"stage": stage}) or 0.0


def two_player(match_id: str, a: str, b: str, league: str = "chess") -> dict:
    return {"league": league, "match_id": match_id, "participants": [{"player": a, "rank": 1}, {"player": b, "rank": 2}]}


async def test_a_batch_is_applied_published_and_checkpointed(tmp_path):
    worker, store, broker = new_worker(tmp_path)
    docs = [
        two_player("1", "a", "b"),
        {"league": "chess", "match_id": "2", "participants": [{"player": "b", "rank": 1}, {"player": "c", "rank": 1}]},
        {"league": "karting", "match_id": "1", "participants": [
            {"player": "a", "rank": 2}, {"player": "b", "rank": 1}, {"player": "c", "rank": 3}]},
        two_player("1", "a", "b"),  # a producer's retry
    ]
    stages = ("waiting", "applying", "publishing", "checkpointing")
    before = [stage_count(stage) for stage in stages]
    await worker.apply_batch(records([*docs, b"not json"]))
    assert [stage_count(stage) - n for stage, n in zip(stages, before)] == [1, 1, 1, 1]  # one part: each stage once
    view = reads(worker, store)
    assert_state_is_the_replay(view, docs[:3])
    assert view.league("chess") == {"algorithm": "elo", "matches": 2, "players": 3, "received": 2}
    # Outputs: 2 + 2 + 3 rating changes; the retry and the parse failure to the dead-letter topic.
    assert len(broker.values(SETTINGS.changes_topic)) == 7
    letters = [orjson.loads(v) for v in broker.values(SETTINGS.dlq_topic)]
    assert sorted(letter["reason"] for letter in letters) == ["duplicate_match", "invalid_json"]
    assert worker.tally.duplicates == 1 and worker.tally.dead_letters == 2 and worker.tally.applied == 3
    # The checkpoint covers every offset, and input resumes after it.
    assert store.checkpoint(0).offsets == {TOPIC: 4}
    assert worker.positions([(TOPIC, 0)]) == {(TOPIC, 0): 5}


async def test_input_skipped_by_the_consumer_is_read_directly_and_applied_in_order(monkeypatch, tmp_path):
    """A record past the checkpoint (input jumped): the worker reads the skipped
    ones from the broker and applies them first, so the state is still exactly
    the replay of every event."""
    worker, store, _ = new_worker(tmp_path)
    docs = [two_player(str(i), "ab"[i % 2], "cd"[i % 2]) for i in range(6)]
    log = records(docs)
    reads_asked = []

    async def read_range(options, topic, partition, start, end, timeout=60.0):
        reads_asked.append((topic, partition, start, end))
        return log[start:end]

    monkeypatch.setattr(intake_module, "read_range", read_range)
    gaps_before = observe.INPUT_GAPS._value.get()
    await worker.apply_batch(log[0:2])
    await worker.apply_batch([log[5]])  # 2, 3 and 4 never came through the consumer
    await worker.apply_batch([log[3]])  # a late redelivery: already applied
    assert reads_asked == [(TOPIC, 0, 2, 5)]
    assert observe.INPUT_GAPS._value.get() == gaps_before + 1
    view = reads(worker, store)
    assert_state_is_the_replay(view, docs)
    assert view.league("chess")["matches"] == 6 and worker.tally.applied == 6


def brute_force(docs: list, league: str = "chess") -> list[tuple[str, float, int]]:
    """The league's leaderboard by a sort of the replayed states: rating, then name."""
    states = replayed(docs).leagues[league]
    return sorted(((p, s.rating, s.matches) for p, s in states.items()), key=lambda r: (-r[1], r[0]))


def board(standings) -> list[tuple[str, float, int]]:
    return [(name, s.rating, s.matches) for _, name, s in standings.page(0, 10**6)]


async def test_standings_follow_each_commit_and_a_take_up_forgets_them(tmp_path):
    worker, store, _ = new_worker(tmp_path)
    view = reads(worker, store)
    worker.committer.on_commit, worker.committer.on_take_up = view.committed, view.taken_up
    docs = [two_player(str(i), f"p{i % 7}", f"p{(3 * i + 1) % 7}") for i in range(40) if i % 7 != (3 * i + 1) % 7]
    log = records(docs)
    await worker.apply_batch(log[:5])
    standings = await view.standings("chess")
    assert board(standings) == brute_force(docs[:5])
    for end in range(6, len(log), 4):
        await worker.apply_batch(log[end - 4:end])
        assert await view.standings("chess") is standings  # moved, not built again
        assert board(standings) == brute_force(docs[:end])
    assert view.builds == 1
    worker.forget()
    await worker.take_up([0])  # a take-up: the state may come from the changelog
    assert await view.standings("chess") is not standings and view.builds == 2


async def test_commits_during_a_standings_build_are_applied_after_it(monkeypatch, tmp_path):
    from stream_app.stream import reads as reads_module

    monkeypatch.setattr(reads_module, "BUILD_CHUNK", 1)  # yield after every player read
    worker, store, _ = new_worker(tmp_path)
    view = reads(worker, store)
    worker.committer.on_commit = view.committed
    docs = [two_player(str(i), f"p{i}", f"p{i + 1}") for i in range(30)]
    log = records(docs)
    await worker.apply_batch(log[:20])
    building = asyncio.ensure_future(view.standings("chess"))
    await asyncio.sleep(0)  # the build has begun: it reads the store as of now
    assert not building.done()
    await worker.apply_batch(log[20:])  # committed while the build runs
    standings = await building
    assert board(standings) == brute_force(docs)


async def test_a_batch_of_heavy_events_is_applied_in_checkpointed_parts(tmp_path):
    docs = [{"league": "kart", "match_id": str(i), "participants": [
        {"player": f"p{j}", "rank": 1 + (i + j) % 5} for j in range(40)]} for i in range(5)]
    lines = [orjson.dumps(doc) for doc in docs]
    settings = Settings(partitions=1, batch_max_bytes=len(lines[0]) * 2)  # two events per part
    worker, store, broker = new_worker(tmp_path, settings)
    await worker.apply_batch(records(lines))
    marks = [value for key, value in broker.logs[(settings.changelog_topic, 0)] if key[0] == 0]
    # A take-up's fence, then one checkpoint per part: events 0-1, 2-3, 4.
    assert [mark[:1] for mark in marks] == [b"F", b"C", b"C", b"C"]
    assert [orjson.loads(mark[17:])["offsets"][TOPIC] for mark in marks[1:]] == [1, 3, 4]
    assert_state_is_the_replay(reads(worker, store), docs)


async def test_a_failed_batch_commits_nothing_and_the_loop_applies_it_once_from_the_checkpoint(broker, topics, tmp_path):
    """The batch loop with real input: a batch whose commit fails (a send is refused)
    is forgotten, input goes back to the checkpoints, and every match counts once."""
    from aiokafka import AIOKafkaProducer

    settings = Settings(partitions=1, match_topic=topics.match, batch_max=3)
    docs = [two_player(str(i), "ab"[i % 2], "c") for i in range(9)]
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for doc in docs:
            await producer.send_and_wait(topics.match, orjson.dumps(doc), key=b"chess", partition=0)
    finally:
        await producer.stop()
    worker, store, sent = new_worker(tmp_path, settings, {"bootstrap_servers": broker.bootstrap})
    sent.fail_at = 3  # a send of the first commit (after the fence and the outputs: its rows)
    view = reads(worker, store)
    assert await worker.resume([(topics.match, 0)])
    try:
        for _ in range(400):
            if worker.positions([(topics.match, 0)])[(topics.match, 0)] == 9:
                break
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
    assert worker.failures == 1
    assert view.league("chess")["matches"] == 9
    assert_state_is_the_replay(view, docs)
    assert len({orjson.loads(v)["event_id"] for v in sent.values(SETTINGS.changes_topic)}) == 18


async def test_kept_standings_follow_a_re_rate(tmp_path):
    """Standings built before a void (kept up to date commit by commit) are rebuilt
    after it: the voided-only player is gone, the others ranked by their corrected
    ratings."""
    worker, store, _ = new_worker(tmp_path)
    view = reads(worker, store)
    worker.committer.on_commit = view.committed
    docs = [two_player("1", "ann", "bob"), two_player("2", "bob", "cat"), two_player("3", "cat", "ann"),
            two_player("4", "dan", "ann")]
    await worker.apply_batch(records(docs))
    before = await view.standings("chess")
    assert before.players_total == 4
    void = {"schema": "match-voided.v1", "league": "chess", "match_id": "4", "reason": "annulled"}
    await worker.apply_batch([InputRecord(TOPIC, 0, 4, b"chess", orjson.dumps(void), 1000)])
    after = await view.standings("chess")
    assert after is not before and after.players_total == 3 and "dan" not in after.players
    expected = replayed(docs[:3]).leagues["chess"]
    ranked = sorted(expected, key=lambda p: (-expected[p].rating, p))
    assert [name for _, name, _ in after.page(0, 10)] == ranked
    assert all(after.players[p].rating == expected[p].rating for p in ranked)


async def test_a_batch_failing_during_a_rebalance_leaves_the_take_up_to_the_next_assignment(broker, topics, tmp_path):
    """A batch that fails after a pause began (a rebalance) is not followed by a take-up of
    its partitions: they may have a new owner already, which a take-up would fence (on
    Kafka two workers once fenced each other that way). The next assignment's resume
    takes its partitions up."""
    from stream_app.stream.batch_loop import RETRY_SECONDS

    settings = Settings(partitions=1, match_topic=topics.match, batch_max=3)
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topics.match, orjson.dumps(two_player(str(i), "a", "b")), key=b"chess", partition=0)
    finally:
        await producer.stop()
    worker, _, _ = new_worker(tmp_path, settings, {"bootstrap_servers": broker.bootstrap})
    taken_up, pauses = [], []
    take_up = worker.committer.take_up  # every take-up goes through it: the resume's, a recovery's, a batch's

    async def counted(partition):
        taken_up.append(partition)
        return await take_up(partition)

    async def failing(records):
        pauses.append(asyncio.ensure_future(worker.intake.pause(5.0)))  # the rebalance begins
        await asyncio.sleep(0)
        raise RuntimeError("the commit failed")

    worker.committer.take_up, worker.apply_batch = counted, failing
    assert await worker.resume([(topics.match, 0)])
    try:
        for _ in range(200):
            if worker.failures:
                break
            await asyncio.sleep(0.05)
        assert worker.failures == 1
        await asyncio.sleep(RETRY_SECONDS + 0.5)  # past the recovery's back-off
        assert taken_up == [0]  # the resume's; before the fix a second one followed the failure
    finally:
        await asyncio.gather(*pauses)
        await worker.stop()
