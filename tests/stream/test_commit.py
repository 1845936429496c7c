"""The exactly-once commit sequence (stream/commit.py), driven through the real
batch loop (stream/worker.py) with an in-memory broker that fails or crashes
at any send. After a crash the worker restarts on an empty data directory
restored from what the broker acknowledged, and takes input from its
checkpoints. Whatever the crash points, the committed state is the replay of
the input, and the published events are exactly the replay's (redeliveries
carry the same bytes)."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import orjson
import pytest

from stream_app.events import event_id, parse_match
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.offline.sample import multi_player_league, two_player_league
from stream_app.settings import Settings
from stream_app.stream.commit import FENCE_KEY
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.records import league_partition
from stream_app.stream.state import CHECKPOINT_KEY, CHECKPOINTS, LEAGUES, PLAYERS, Checkpoint, resolve
from stream_app.stream.worker import Worker
from tests.support.memory import Crash, MemoryBroker, MemoryStore

CONFIG = LeagueConfig.from_toml('[leagues."kart*"]\nalgorithm = "elo-pairwise"\n[default]\nalgorithm = "elo"\n')
PARTITIONS = 2
SETTINGS = Settings(partitions=PARTITIONS)
TOPIC = SETTINGS.match_topic


def input_log(seed: int) -> dict[int, list[InputRecord]]:
    """Match results of a few leagues with a bad line and a repeated match_id, per input partition."""
    rng = random.Random(seed)
    events = list(two_player_league("chess", 12, 120, rng)) + list(two_player_league("go", 8, 60, rng))
    events += list(multi_player_league("karting", 10, 30, 4, rng))
    rng.shuffle(events)
    for league in ("chess", "go", "karting"):  # each league keeps its own order
        mine = sorted((e for e in events if e["league"] == league), key=lambda e: e["match_id"])
        slots = [i for i, e in enumerate(events) if e["league"] == league]
        for slot, event in zip(slots, mine):
            events[slot] = event
    lines = [(e["league"], orjson.dumps(e)) for e in events]
    lines.insert(30, ("chess", b"{bad"))
    lines.insert(70, lines[10])  # a producer's retry
    log: dict[int, list[InputRecord]] = defaultdict(list)
    for league, line in lines:
        partition = league_partition(league, PARTITIONS)
        log[partition].append(InputRecord(TOPIC, partition, len(log[partition]), league.encode(), line, 1000))
    return log


def new_worker(store: MemoryStore, broker: MemoryBroker) -> Worker:
    return Worker(SETTINGS, CONFIG, store, broker, Intake({}, SETTINGS.batch_max))


def next_batch(worker: Worker, log: dict[int, list[InputRecord]], rng: random.Random) -> list[InputRecord]:
    """Input from each partition's checkpoint on, as the intake takes it (in order per partition)."""
    positions = worker.positions([(TOPIC, p) for p in log])
    batch = []
    for partition, records in log.items():
        start = positions[(TOPIC, partition)] or 0
        batch += records[start : start + rng.randint(0, 25)]
    return batch


def expected(log: dict[int, list[InputRecord]]) -> tuple[Ledger, set[str]]:
    ledger = Ledger(CONFIG)
    ids = set()
    for record in sorted((r for records in log.values() for r in records), key=lambda r: (r.partition, r.offset)):
        try:
            match = parse_match(record.value)
            if ledger.apply(match) is not None:
                ids.update(event_id(match.league, match.match_id, p.player) for p in match.participants)
        except ValueError:
            pass
    return ledger, ids


def committed(store: MemoryStore, table: str) -> dict[bytes, object]:
    out = {}
    for partition in range(PARTITIONS):
        checkpoint = Checkpoint.decode(store.get(CHECKPOINTS, partition, CHECKPOINT_KEY))
        for key, record in store.scan(table, partition):
            if key == FENCE_KEY:
                continue
            value = resolve(record, checkpoint)
            if value is not None:
                out[key] = value
    return out


def assert_committed_state_is(store: MemoryStore, ledger: Ledger) -> None:
    players = {key.decode(): value for key, value in committed(store, PLAYERS).items()}
    assert players == {f"{league}\x1f{player}": state.to_dict()
                       for league, states in ledger.leagues.items() for player, state in states.items()}
    leagues = {key.decode(): value for key, value in committed(store, LEAGUES).items()}
    assert leagues == ledger.records


@pytest.mark.parametrize("seed", range(16))
async def test_crashes_and_failures_at_any_send_neither_lose_nor_double_apply(seed):
    rng = random.Random(seed)
    log = input_log(seed % 4)
    ledger, ids = expected(log)
    broker = MemoryBroker(partitions=PARTITIONS, seed=seed)
    store = MemoryStore()
    worker = new_worker(store, broker)
    faults = {"crash": 0, "fail": 0}

    def done(worker: Worker) -> bool:
        positions = worker.positions([(TOPIC, p) for p in log])
        return all(positions[(TOPIC, p)] == len(log[p]) for p in log)

    while not done(worker):
        fault = rng.choice([None, "crash", "fail"])
        broker.crash_at = broker.sends + rng.randint(1, 10) if fault == "crash" else None
        broker.fail_at = broker.sends + rng.randint(1, 10) if fault == "fail" else None
        try:
            await worker.apply_batch(next_batch(worker, log, rng))
        except Crash:
            faults["crash"] += 1
            broker.crash_at = None
            store = MemoryStore.restored(broker)  # a new process on an empty data directory
            worker = new_worker(store, broker)
        except ConnectionError:
            faults["fail"] += 1
            worker.abandon()  # what the batch loop does after a failed batch
    assert faults["crash"] > 0 and faults["fail"] > 0
    assert_committed_state_is(store, ledger)
    # A failed send can leave the local store ahead of the changelogs (a checkpoint
    # stored but never acknowledged). A worker restored from the changelogs then
    # applies that input again, and ends in the same state.
    broker.crash_at = broker.fail_at = None
    store = MemoryStore.restored(broker)
    worker = new_worker(store, broker)
    while not done(worker):
        await worker.apply_batch(next_batch(worker, log, rng))
    assert_committed_state_is(store, ledger)
    assert_committed_state_is(MemoryStore.restored(broker), ledger)
    # Every rating change of the replay is published; a redelivered one carries the same bytes.
    by_id = defaultdict(set)
    for value in broker.values(SETTINGS.changes_topic):
        by_id[orjson.loads(value)["event_id"]].add(value)
    assert set(by_id) == ids
    assert all(len(values) == 1 for values in by_id.values())
    letters = {(l["source"]["partition"], l["source"]["offset"]): l["reason"]
               for l in map(orjson.loads, broker.values(SETTINGS.dlq_topic))}
    assert sorted(letters.values()) == ["duplicate_match", "invalid_json"]


async def test_a_crash_before_the_checkpoint_leaves_the_batch_uncommitted_and_it_is_applied_once_after_restart():
    log = input_log(1)
    partition = league_partition("chess", PARTITIONS)
    records = log[partition]
    broker = MemoryBroker(partitions=PARTITIONS)
    store = MemoryStore()
    worker = new_worker(store, broker)
    await worker.apply_batch(records[:10])
    before = committed(store, PLAYERS)
    # Crash at the checkpoint record: the outputs and every state record and fence reached the broker.
    broker.crash_on = MemoryStore().changelog_topic(CHECKPOINTS)
    with pytest.raises(Crash):
        await worker.apply_batch(records[10:20])
    broker.crash_on = broker.crash_at = None
    assert len(broker.values(SETTINGS.changes_topic)) > 0
    restored = MemoryStore.restored(broker)
    assert committed(restored, PLAYERS) == before  # the batch's records read as their previous values
    worker = new_worker(restored, broker)
    assert worker.positions([(TOPIC, partition)]) == {(TOPIC, partition): 10}
    await worker.apply_batch(records[10:20])
    ledger, _ = expected({partition: records[:20]})
    assert_committed_state_is(restored, ledger)


@pytest.mark.parametrize("held", ["outputs", "records"])
async def test_the_checkpoint_is_sent_only_once_the_outputs_and_records_are_acknowledged(held):
    log = input_log(2)
    partition = league_partition("chess", PARTITIONS)
    broker = MemoryBroker(partitions=PARTITIONS)
    store = MemoryStore()
    worker = new_worker(store, broker)
    await worker.apply_batch(log[partition][:5])
    checkpoints = store.changelog_topic(CHECKPOINTS)
    sent = len(broker.logs[(checkpoints, partition)])
    topic = SETTINGS.changes_topic if held == "outputs" else store.changelog_topic(PLAYERS)
    broker.held.add(topic)
    batch = asyncio.ensure_future(worker.apply_batch(log[partition][5:10]))
    for _ in range(200):
        await asyncio.sleep(0)
    assert not batch.done() and len(broker.logs[(checkpoints, partition)]) == sent
    broker.held.discard(topic)
    await batch
    assert len(broker.logs[(checkpoints, partition)]) == sent + 1
    assert worker.positions([(TOPIC, partition)]) == {(TOPIC, partition): 10}
