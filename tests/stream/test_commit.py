"""The exactly-once commit sequence (stream/commit.py), driven through the real
batch loop (stream/batch_loop.py) on a real local store (RocksDB) with an
in-memory broker that fails or crashes at any send. After a crash the worker
restarts on its data directory, or on an empty one, takes its partitions up
from the changelog and input from their checkpoints. Whatever the crash
points, the committed state (local, and as the changelog says) is the replay
of the input, and the published events are exactly the replay's (redeliveries
carry the same bytes)."""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from prometheus_client import REGISTRY

from stream_app.inputs import BadEvent, parse_input, parse_match
from stream_app.published import event_id
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.offline.sample import multi_player_league, two_player_league
from stream_app.settings import Settings
from stream_app.stream.changelog import (BASE, BASE_END, BASE_ROWS_FIRST, CHECKPOINT, DATA_START, FENCE, START,
                                         ZSTD_ROWS, ChangelogRule, Checkpoint, checkpoint_payload, checkpoint_record,
                                         fence_record, mark_of, packed_count, packed_rows)
from stream_app.stream import changelog as changelog_module
from stream_app.stream import commit as commit_module
from stream_app.stream.commit import (ENTRY_TAKE_UP_SECONDS, ROW_TAKE_UP_SECONDS, Committer, Fenced,
                                      store_committed)
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.partitioner import league_partition
from stream_app.stream.records import RecordHandler
from stream_app.rating.history import history_entry
from stream_app.state.tables import (FINALS, HISTORY, LEAGUES, PLAYERS, SEASONS, TABLE_PREFIX, history_prefix,
                                     player_state, season_key, tables_for)
from stream_app.stream.store import LocalStore
from stream_app.stream.batch_loop import BatchLoop
from tests.support.corrections import CONFIG as CORRECTIONS_CONFIG
from tests.support.corrections import corrected_leagues, run
from tests.support.changelog import entry_record, old_row
from tests.support.memory import CountingReader, Crash, MemoryBroker, StalledSender

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


CHANGELOG = SETTINGS.changelog_topic


def new_worker(store: LocalStore, broker: MemoryBroker, settings: Settings = SETTINGS) -> BatchLoop:
    return BatchLoop(settings, CONFIG, store, broker, broker, Intake({}, settings.batch_max))


def reopened(store: LocalStore) -> LocalStore:
    """The same data directory in a new process."""
    store.close()
    return LocalStore(store.directory)


def next_batch(worker: BatchLoop, log: dict[int, list[InputRecord]], rng: random.Random) -> list[InputRecord]:
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


def committed(store: LocalStore, table: str) -> dict[bytes, object]:
    """A table's rows in the local store, all partitions."""
    prefix = TABLE_PREFIX[table]
    return {key[1:]: orjson.loads(value) for partition in range(PARTITIONS)
            for key, value in store.scan(partition, prefix)}


def changelog_says(broker: MemoryBroker, config: LeagueConfig = CONFIG) -> dict[str, dict]:
    """The tables as the changelog makes them again: every partition read from its
    start into an empty store."""
    with tempfile.TemporaryDirectory() as directory:
        store = LocalStore(Path(directory))
        derive = RecordHandler(config, PARTITIONS, SETTINGS.forward_topic).deriver
        for partition in range(PARTITIONS):
            rule = ChangelogRule()
            for offset, key, value in broker.records(CHANGELOG, partition):
                rule.feed(offset, key, value)
            store_committed(store, partition, rule, tables_for(config), derive)
        tables = local(store)
        store.close()
    return tables


def assert_committed_state_is(state: dict[str, dict], ledger: Ledger, records: bool = True) -> None:
    players = {key.decode(): player_state(value)[0] for key, value in state[PLAYERS].items()}
    assert players == {f"{league}\x1f{player}": orjson.loads(orjson.dumps(state.to_dict()))
                       for league, states in ledger.leagues.items() for player, state in states.items()}
    if records:
        leagues = {key.decode(): value for key, value in state[LEAGUES].items()}
        assert leagues == ledger.records


def local(store: LocalStore) -> dict[str, dict]:
    return {table: committed(store, table) for table in (PLAYERS, LEAGUES)}


def made_again(broker: MemoryBroker, partition: int, end: int, directory: Path) -> dict[bytes, bytes]:
    """Every key of a partition's local store as its changelog up to `end` makes it."""
    store = LocalStore(directory)
    rule = ChangelogRule()
    for offset, key, value in broker.records(CHANGELOG, partition):
        if offset < end:
            rule.feed(offset, key, value)
    store_committed(store, partition, rule, tables_for(CONFIG), RecordHandler(CONFIG, PARTITIONS, SETTINGS.forward_topic).deriver)
    rows = dict(store.scan(partition, b""))
    store.close()
    return rows


def logged(broker: MemoryBroker, config: LeagueConfig = CONFIG) -> dict[str, dict]:
    return changelog_says(broker, config)


@pytest.mark.parametrize("seed", range(16))
async def test_crashes_and_failures_at_any_send_neither_lose_nor_double_apply(seed, tmp_path):
    rng = random.Random(seed)
    log = input_log(seed % 4)
    ledger, ids = expected(log)
    broker = MemoryBroker(partitions=PARTITIONS, seed=seed)
    broker.add_input(log)
    store = LocalStore(tmp_path / "0")
    worker = new_worker(store, broker)
    faults = {"crash": 0, "fail": 0}

    def done(worker: BatchLoop) -> bool:
        positions = worker.positions([(TOPIC, p) for p in log])
        return all(positions[(TOPIC, p)] == len(log[p]) for p in log)

    while not done(worker):
        fault = rng.choice([None, "crash", "fail"])
        broker.crash_at = broker.sends + rng.randint(1, 5) if fault == "crash" else None
        broker.fail_at = broker.sends + rng.randint(1, 5) if fault == "fail" else None
        try:
            await worker.apply_batch(next_batch(worker, log, rng))
        except Crash:
            faults["crash"] += 1
            broker.crash_at = None
            # A new process, on the same data directory or (now and then) an empty one.
            store = reopened(store) if rng.random() < 0.7 else LocalStore(tmp_path / str(faults["crash"]))
            worker = new_worker(store, broker)
        except ConnectionError:
            faults["fail"] += 1
            worker.forget()  # what the batch loop does after a failed batch
    assert faults["crash"] > 0 and faults["fail"] > 0
    assert_committed_state_is(local(store), ledger)
    assert_committed_state_is(logged(broker), ledger)
    broker.compact(CHANGELOG)  # the log cleaner keeps what the rule commits
    assert_committed_state_is(logged(broker), ledger)
    # Every rating change of the replay is published; a redelivered one carries the same bytes.
    by_id = defaultdict(set)
    for value in broker.values(SETTINGS.changes_topic):
        by_id[orjson.loads(value)["event_id"]].add(value)
    assert set(by_id) == ids
    assert all(len(values) == 1 for values in by_id.values())
    letters = {(l["source"]["partition"], l["source"]["offset"]): l["reason"]
               for l in map(orjson.loads, broker.values(SETTINGS.dlq_topic))}
    assert sorted(letters.values()) == ["duplicate_match", "invalid_json"]


def marks(broker: MemoryBroker, partition: int) -> list[bytes]:
    """The kinds of the fences and checkpoints in a changelog partition, in order."""
    return [value[:1] for key, value in broker.logs[(CHANGELOG, partition)] if key[:1] == b"\x00"]


@pytest.mark.parametrize("restart", ["same directory", "empty directory"])
async def test_a_crash_before_the_checkpoint_leaves_the_batch_uncommitted_and_it_is_applied_once_after_restart(
        restart, tmp_path):
    log = input_log(1)
    partition = league_partition("chess", PARTITIONS)
    records = log[partition]
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    store = LocalStore(tmp_path / "a")
    worker = new_worker(store, broker)
    await worker.apply_batch(records[:10])
    before = committed(store, PLAYERS)
    # Crash at the checkpoint record: the outputs and every row reached the broker.
    send = broker.send

    async def crash_at_the_checkpoint(topic, partition, records):
        records = list(records)
        if topic == CHANGELOG and records[-1][0][:1] == b"\x00":
            broker.crash_at = broker.sends + 1
        return await send(topic, partition, records)

    broker.send = crash_at_the_checkpoint
    with pytest.raises(Crash):
        await worker.apply_batch(records[10:20])
    broker.send = send
    broker.crash_at = None
    assert len(broker.values(SETTINGS.changes_topic)) > 0
    assert broker.logs[(CHANGELOG, partition)][-1][1][:1] == b"X"  # the batch's rows, no checkpoint
    store = reopened(store) if restart == "same directory" else LocalStore(tmp_path / "b")
    if restart == "same directory":
        assert committed(store, PLAYERS) == before  # the local store never saw the batch
    worker = new_worker(store, broker)
    await worker.take_up([partition])
    assert committed(store, PLAYERS) == before  # the batch's rows were never committed
    assert worker.positions([(TOPIC, partition)]) == {(TOPIC, partition): 10}
    await worker.apply_batch(records[10:20])
    ledger, _ = expected({partition: records[:20]})
    assert_committed_state_is(local(store), ledger)
    assert_committed_state_is(logged(broker), ledger)


@pytest.mark.parametrize("held", ["outputs", "rows"])
async def test_the_checkpoint_is_sent_only_once_the_outputs_and_rows_are_acknowledged(held, tmp_path):
    log = input_log(2)
    partition = league_partition("chess", PARTITIONS)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    store = LocalStore(tmp_path)
    worker = new_worker(store, broker)
    await worker.apply_batch(log[partition][:5])
    sent = marks(broker, partition)
    assert sent == [b"F", b"C"]  # the take-up's fence, the first batch's checkpoint
    topic = SETTINGS.changes_topic if held == "outputs" else CHANGELOG
    broker.held.add(topic)
    batch = asyncio.ensure_future(worker.apply_batch(log[partition][5:10]))
    for _ in range(200):
        await asyncio.sleep(0)
    assert not batch.done() and marks(broker, partition) == sent
    assert store.checkpoint(partition).offsets == {TOPIC: 4}  # the local store waits too
    broker.held.discard(topic)
    await batch
    assert marks(broker, partition) == [*sent, b"C"]
    assert store.checkpoint(partition).offsets == {TOPIC: 9}
    assert worker.positions([(TOPIC, partition)]) == {(TOPIC, partition): 10}


@pytest.mark.parametrize("lands", ["after the new owner's batch", "between the new owner's fence and batch"])
async def test_a_replaced_workers_stalled_batch_landing_late_changes_nothing(lands, tmp_path):
    """Worker A stalls in the middle of a batch; B takes the partition over and
    applies the same input; then A's sends land. A learns it was fenced, B writes
    again what A wrote over, and the state (local and as the changelog says) and
    the published events are exactly the replay's."""
    log = input_log(3)
    partition = league_partition("chess", PARTITIONS)
    records = log[partition]
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    stalled = StalledSender(broker)
    a = BatchLoop(SETTINGS, CONFIG, LocalStore(tmp_path / "a"), stalled, broker, Intake({}, SETTINGS.batch_max))
    await a.apply_batch(records[:10])
    stalled.running.clear()
    zombie = asyncio.ensure_future(a.apply_batch(records[10:20]))
    await asyncio.sleep(0.01)
    assert not zombie.done()

    store = LocalStore(tmp_path / "b")
    b = new_worker(store, broker)
    await b.take_up([partition])
    if lands == "between the new owner's fence and batch":
        stalled.running.set()
        with pytest.raises(Fenced):
            await zombie
        fenced_records = sum(1 for key, value in broker.logs[(CHANGELOG, partition)] if value[:1] == b"X"
                             and int.from_bytes(value[1:9], "big") == 1)
    # B's first batch is smaller than A's stalled one: A wrote keys B's batch does not write.
    await b.apply_batch(records[10:13])
    if lands == "between the new owner's fence and batch":
        # A's rows landed after B's fence (the rule drops them). Each record has a key of
        # its own, so a compacted changelog (the last record of each key) still holds B's.
        assert fenced_records > 0
        changelog = broker.logs[(CHANGELOG, partition)]
        fence = [value for _, value in changelog].index(fence_record(2)[1])
        late = [key for key, value in changelog[fence:] if value[:1] == b"X" and value[1:9] == (1).to_bytes(8, "big")]
        keys = [key for key, _ in changelog]
        assert late and len(set(keys)) == len(keys)
    if lands == "after the new owner's batch":
        stalled.running.set()
        with pytest.raises(Fenced):
            await zombie
    await b.apply_batch(records[13:])
    assert b.partitions[partition].epoch == 2  # B was never fenced itself
    ledger, ids = expected({partition: records})
    assert_committed_state_is(local(store), ledger)
    assert_committed_state_is(logged(broker), ledger)
    broker.compact(CHANGELOG)
    assert_committed_state_is(logged(broker), ledger)
    by_id = defaultdict(set)
    for value in broker.values(SETTINGS.changes_topic):
        by_id[orjson.loads(value)["event_id"]].add(value)
    assert set(by_id) == ids and all(len(values) == 1 for values in by_id.values())


@pytest.mark.parametrize("seed", range(4))
async def test_a_crash_in_the_middle_of_a_restore_keeps_what_was_read_and_the_next_take_up_goes_on(
        seed, tmp_path, monkeypatch):
    """A worker restoring from the changelog into an empty data directory is killed
    part-way; its local store is then some accepted checkpoint (never a mix), and a
    restart on the same directory reads on from there and ends at the changelog's state."""
    from stream_app.stream import commit

    monkeypatch.setattr(commit, "FLUSH_ROWS", 5)  # a write batch every few rows: many consistent cuts
    log = input_log(seed)
    ledger, _ = expected(log)
    broker = MemoryBroker(partitions=PARTITIONS, seed=seed)
    broker.add_input(log)
    writer = new_worker(LocalStore(tmp_path / "writer"), broker)
    rng = random.Random(seed)
    batch = next_batch(writer, log, rng)
    while batch or not all(writer.positions([(TOPIC, p)])[(TOPIC, p)] == len(log[p]) for p in log):
        await writer.apply_batch(batch)
        batch = next_batch(writer, log, rng)
    store = LocalStore(tmp_path / "restoring")
    crashes = 0
    for attempt in range(50):
        broker.chunks_read = 0
        broker.crash_reading_at = rng.randint(1, 8) if attempt < 6 else None
        worker = new_worker(store, broker)
        try:
            await worker.take_up(list(log))
            break
        except Crash:
            crashes += 1
            store = reopened(store)
            for partition in log:  # what a killed restore left: the changelog's state as of its checkpoint
                checkpoint = store.checkpoint(partition)
                if checkpoint.changelog < 0:
                    assert not list(store.scan(partition, b""))  # nothing stored yet
                    continue
                again = made_again(broker, partition, checkpoint.changelog + 1, tmp_path / f"again-{attempt}")
                assert dict(store.scan(partition, b"")) == again
    assert crashes >= 3
    assert_committed_state_is(local(store), ledger)


async def test_two_take_ups_of_a_partition_at_once_make_its_state_once(tmp_path, monkeypatch):
    """Two take-ups of one partition started together (a rebalance's and a batch loop's)
    read the changelog into one local store: the second goes on from the first's
    checkpoint, and every entry's writes are made once (a league's match count too)."""
    from stream_app.stream import commit

    monkeypatch.setattr(commit, "FLUSH_ROWS", 5)  # many writes: the two would interleave
    log = input_log(3)
    ledger, _ = expected(log)
    broker = MemoryBroker(partitions=PARTITIONS, seed=3)
    broker.add_input(log)
    writer = new_worker(LocalStore(tmp_path / "writer"), broker)
    rng = random.Random(3)
    batch = next_batch(writer, log, rng)
    while batch:
        await writer.apply_batch(batch)
        batch = next_batch(writer, log, rng)
    store = LocalStore(tmp_path / "taking-up")
    worker = new_worker(store, broker)
    states = await asyncio.gather(*(worker.committer.take_up(p) for p in log for _ in range(2)))
    assert_committed_state_is(local(store), ledger)
    for p in log:  # the second take-up's epoch is above the first's: it holds the partition
        first, second = (state.checkpoint for state in states if state.partition == p)
        assert second.epoch == first.epoch + 1 and store.checkpoint(p) == second


CORRECTED = LeagueConfig.from_toml(CORRECTIONS_CONFIG)


def corrections_log(docs: list[dict]) -> dict[int, list[InputRecord]]:
    """The docs as input records, per partition."""
    log: dict[int, list[InputRecord]] = defaultdict(list)
    for doc in docs:
        partition = league_partition(doc["league"], PARTITIONS)
        log[partition].append(InputRecord(TOPIC, partition, len(log[partition]), doc["league"].encode(),
                                          orjson.dumps(doc), 1000))
    return log


@pytest.mark.slow  # twelve runs of re-rates under crashes, 20 s of CPU: make test runs them, make check does not
@pytest.mark.parametrize("bases", [False, True], ids=["growing changelog", "bases"])
@pytest.mark.parametrize("seed", range(6))
async def test_re_rates_under_crashes_and_failures_end_as_the_replay_with_each_event_once(seed, bases, tmp_path,
                                                                                          monkeypatch):
    """Voids, corrections and late results (re-rates of whole leagues, several per
    batch; on even seeds in parts of 10 participant results, each committed) with
    crashes at any send: the committed players, leagues and histories are the
    replay's, and every event (corrections included) is published, each id with
    one content. With bases, each written over several commits (small packed records)
    and deleting the records before it once it ends (a crash may fall anywhere
    between), and a restart may find a directory left long ago (a standby's, say),
    whose checkpoint's records a base deleted."""
    if bases:
        monkeypatch.setattr(changelog_module, "PACK_BYTES", 8192)
        monkeypatch.setattr(commit_module, "BASE_RECORDS_A_COMMIT", 2)
    rng = random.Random(seed)
    settings = Settings(partitions=PARTITIONS, rerate_part=10 if seed % 2 == 0 else 10**9,
                        base_after=40 if bases else 0)
    docs = corrected_leagues(seed)
    log = corrections_log(docs)
    ledger, events, _ = run(docs, CORRECTED)
    assert ledger.rerates > 20
    broker = MemoryBroker(partitions=PARTITIONS, seed=seed)
    broker.add_input(log)
    store = LocalStore(tmp_path / "0")

    def worker_on(store: LocalStore) -> BatchLoop:
        return BatchLoop(settings, CORRECTED, store, broker, broker, Intake({}, SETTINGS.batch_max))

    worker = worker_on(store)
    crashes = 0
    left: Path | None = None  # a copy of a data directory, taken early
    bases_before = counted("ratings_changelog_bases_total")
    while any(worker.positions([(TOPIC, p)])[(TOPIC, p)] != len(log[p]) for p in log):
        broker.crash_at = broker.sends + rng.randint(1, 8) if rng.random() < 0.3 else None
        if bases and left is None and rng.random() < 0.1:
            store.close()
            left = tmp_path / f"left-{broker.sends}"
            shutil.copytree(store.directory, left)
            store = LocalStore(store.directory)
            worker = worker_on(store)
        try:
            await worker.apply_batch(next_batch(worker, log, rng))
        except Crash:
            crashes += 1
            broker.crash_at = None
            worker.committer.end_bases()  # (a base's store iterator dies with its process)
            choice = rng.random()
            if left is not None and choice < 0.2:
                store.close()
                store, left = LocalStore(left), None
            else:
                store = reopened(store) if choice < 0.7 else LocalStore(tmp_path / str(crashes))
            worker = worker_on(store)
    broker.crash_at = None
    # A re-rate begun by the last records: the partitions are taken up (as an
    # assignment does), since after the last crash the worker may not have
    # seen a record of the partition holding the job.
    await worker.take_up(set(range(PARTITIONS)))
    await worker.finish_rerates()
    assert crashes > 0
    assert_committed_state_is(local(store), ledger, records=False)
    assert_committed_state_is(logged(broker, CORRECTED), ledger, records=False)
    # Bases opened (each over several commits: a crash, or a take-up anew, abandons one);
    # those that ended deleted the records before them.
    opened = sum(value[0] == BASE for p in log for _, _, value in broker.records(CHANGELOG, p))
    assert (opened > 0) == bases
    assert (broker.deletions > 0) == (counted("ratings_changelog_bases_total") > bases_before)
    served = {key.decode(): value for key, value in committed(store, LEAGUES).items()}
    for league, record in ledger.records.items():
        assert {k: served[league].get(k) for k in ("matches", "players", "latest_time", "revision")} == \
               {k: record.get(k) for k in ("matches", "players", "latest_time", "revision")}
    history = committed(store, HISTORY)
    for league, players in ledger.leagues.items():
        for player in players:
            prefix = history_prefix(league, player)
            stored = [history_entry(v) for k, v in sorted(history.items()) if k.startswith(prefix)]
            assert stored == ledger.history(league, player), (league, player)
    assert_seasons_are(store, ledger)
    published: dict[str, set[bytes]] = defaultdict(set)
    for value in broker.values(SETTINGS.changes_topic):
        published[orjson.loads(value)["event_id"]].add(value)
    assert set(published) == {event["event_id"] for event in events}
    assert all(len(values) == 1 for values in published.values())
    assert {key: orjson.loads(next(iter(values))) for key, values in published.items()} == \
           {event["event_id"]: event for event in events}  # each event as the replay has it, tiers included
    assert {"correction", "season_reset"} <= {event.get("cause") for event in events}
    assert any(event.get("tier_after") == "Top 10%" for event in events)


def assert_seasons_are(store: LocalStore, ledger: Ledger) -> None:
    """The committed seasons and final standings are the replay's."""
    seasons, finals = committed(store, SEASONS), committed(store, FINALS)
    assert len(seasons) == sum(map(len, ledger.season_rows.values())) > 0
    for league, rows in ledger.season_rows.items():
        assert [seasons[season_key(league, n)] for n in range(1, len(rows) + 1)] == rows, league
        for number in range(1, len(rows) + 1):
            prefix = season_key(league, number)
            kept = {key[len(prefix):].decode(): row for key, row in finals.items() if key.startswith(prefix)}
            assert kept == {row[0]: row for row in ledger.finals.get((league, number), [])}, (league, number)


def sent_again(records: list[InputRecord], timestamp: int, start: int = 0) -> list[InputRecord]:
    """The records as a producer sends them again to a topic that started over."""
    return [InputRecord(r.topic, r.partition, start + i, r.key, r.value, timestamp) for i, r in enumerate(records)]


@pytest.mark.parametrize("seed", range(3))
async def test_a_broker_that_forgets_everything_loses_nothing_and_applies_nothing_twice(seed, tmp_path):
    """The broker restarts empty under a worker with applied state. Taking its partitions
    up again, the worker writes its state back to the changelog (a restore on an empty
    directory gets it all) and reads input from the new beginning: results sent again
    are duplicates, new ones are applied once."""
    log = input_log(seed)
    broker = MemoryBroker(partitions=PARTITIONS, seed=seed)
    broker.add_input(log)
    store = LocalStore(tmp_path / "a")
    worker = new_worker(store, broker)
    half = {p: len(records) // 2 for p, records in log.items()}
    for p, records in log.items():
        await worker.apply_batch(records[:half[p]])
    broker.forget()
    # Producers send again the last ten results applied, then the ones never applied.
    again = {p: sent_again(records[half[p] - 10:], 2000) for p, records in log.items()}
    broker.add_input(again)
    worker.forget()  # what a failed batch or a rebalance does
    await worker.take_up(list(log))
    assert {p: worker.positions([(TOPIC, p)])[(TOPIC, p)] for p in log} == {p: None for p in log}
    assert sorted(f["partition"] for f in worker.started_over) == sorted(log)
    assert sorted(f["partition"] for f in worker.committer.started_over) == sorted(log)
    for p, records in again.items():
        await worker.apply_batch(records)
    ledger, _ = expected(log)
    assert_committed_state_is(local(store), ledger)
    assert_committed_state_is(logged(broker), ledger)
    reasons = [orjson.loads(value)["reason"] for value in broker.values(SETTINGS.dlq_topic)]
    repeated = sum(1 for p in log for r in log[p][half[p] - 10:half[p]] if parse_ok(r.value))
    assert reasons.count("duplicate_match") >= repeated
    # A worker on an empty directory restores it all from the changelog written back.
    fresh = LocalStore(tmp_path / "b")
    other = new_worker(fresh, broker)
    await other.take_up(list(log))
    assert_committed_state_is(local(fresh), ledger)
    assert other.positions([(TOPIC, p) for p in log]) == worker.positions([(TOPIC, p) for p in log])


def parse_ok(value: bytes) -> bool:
    try:
        parse_match(value)
        return True
    except ValueError:
        return False


async def test_an_input_topic_sent_again_past_the_checkpoint_is_told_apart_by_its_fingerprint(tmp_path):
    """A topic that started over and already holds more records than were applied: the
    offsets alone look fine, the record at the checkpoint's offset is another."""
    log = input_log(5)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    store = LocalStore(tmp_path / "a")
    worker = new_worker(store, broker)
    for records in log.values():
        await worker.apply_batch(records[:20])
    broker.inputs.clear()  # the input topic recreated; the changelog kept
    again = {p: sent_again(records, 3000) for p, records in log.items()}
    broker.add_input(again)
    worker.forget()
    await worker.take_up(list(log))
    assert worker.positions([(TOPIC, p) for p in log]) == {(TOPIC, p): None for p in log}
    assert all(TOPIC not in store.checkpoint(p).offsets for p in log)  # checkpointed at once: said only once
    assert worker.committer.started_over == []  # the changelog held the checkpoints
    for records in again.values():
        await worker.apply_batch(records)
    ledger, _ = expected(log)
    assert_committed_state_is(local(store), ledger)
    # Unchanged input is not taken for a topic that started over.
    worker.forget()
    await worker.take_up(list(log))
    assert len(worker.started_over) == len(log)
    assert worker.positions([(TOPIC, p) for p in log]) == {(TOPIC, p): len(again[p]) for p in log}


async def test_a_stale_local_state_gives_way_to_a_newer_owners_write_back(tmp_path):
    """Worker A applied, then B took over and applied more; the broker forgot the changelog;
    B wrote its state back. A, back with its older local state, must not write that back:
    it wipes it and reads B's."""
    log = input_log(2)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    partition = league_partition("chess", PARTITIONS)
    records = log[partition]
    a_store = LocalStore(tmp_path / "a")
    a = new_worker(a_store, broker)
    await a.apply_batch(records[:10])
    b_store = LocalStore(tmp_path / "b")
    b = new_worker(b_store, broker)
    await b.apply_batch(records[10:30])  # takes the partition up from the changelog (epoch 2)
    broker.logs.clear()  # the changelog forgotten (the input kept)
    b.forget()
    await b.take_up([partition])  # writes B's state back
    assert [f["action"] for f in b.committer.started_over] == ["local state written back"]
    a.forget()
    await a.take_up([partition])
    assert [f["action"] for f in a.committer.started_over] == ["replaced by a newer start"]
    await a.apply_batch(records[30:])
    ledger, _ = expected({partition: records})
    assert_committed_state_is(local(a_store), ledger)
    assert_committed_state_is(logged(broker), ledger)


async def test_input_removed_by_retention_before_it_was_applied_is_skipped_and_said(tmp_path):
    log = input_log(6)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    partition = league_partition("chess", PARTITIONS)
    store = LocalStore(tmp_path / "a")
    worker = new_worker(store, broker)
    await worker.apply_batch(log[partition][:10])
    broker.input_start[(TOPIC, partition)] = 25  # records 10 to 24 expired unread
    worker.forget()
    await worker.take_up([partition])
    assert worker.positions([(TOPIC, partition)]) == {(TOPIC, partition): 25}
    assert [(f["partition"], f["reason"]) for f in worker.started_over] == [
        (partition, "records removed before they were applied")]
    await worker.apply_batch(log[partition][25:])
    ledger, _ = expected({partition: log[partition][:10] + log[partition][25:]})
    assert_committed_state_is(local(store), ledger)


async def test_a_changelog_of_earlier_releases_is_taken_up_in_place_and_packed_rows_follow_it(tmp_path):
    """Upgrading in place (docs/operations.md): a changelog that holds rows of the format
    before entries (and a batch of them that never completed), then entries, is taken up
    by this release, which applies the rest of the input after it as packed rows; taken up
    on an empty directory, the old rows, the entries (their writes derived again) and the
    packed rows end at the replay."""
    log = input_log(2)
    first = {p: records[:40] for p, records in log.items()}
    # What the releases before left: the committed state after the first 40 records of each
    # partition, as rows of the format before entries (made here by this release on a
    # scratch broker), and a checkpoint; then an entry a result, for the next 20 records.
    scratch = new_worker(LocalStore(tmp_path / "scratch"), MemoryBroker(partitions=PARTITIONS))
    await scratch.apply_batch([r for records in first.values() for r in records])
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    for p in log:
        rows = [(key, value) for key, value in scratch.store.scan(p, b"") if key[:1] != b"\x00"]
        # A batch that never completed wrote a player, and compaction (which keeps each key's
        # last record) dropped that player's committed row: the value before must stand.
        key, value = next((k, v) for k, v in rows if k[:1] == TABLE_PREFIX[PLAYERS])
        changelog = broker.logs[(CHANGELOG, p)]
        changelog.append(fence_record(1))
        changelog += [old_row(1, 1, k, v, None) for k, v in rows if k != key]
        changelog.append(checkpoint_record(1, 1, {TOPIC: 39}))
        changelog.append(old_row(1, 2, key, b'{"rating":0.0,"matches":99}', value))
        changelog.append(fence_record(2))
        ledger, _ = expected({p: first[p]})
        for batch, record in enumerate(log[p][40:60], start=1):
            try:
                item = parse_input(record.value)
                changes = ledger.apply(item)
            except BadEvent:  # dead-lettered: its offset applied, nothing written
                changes = None
            if changes:
                changelog.append(entry_record(2, batch, item, changes))
            changelog.append(checkpoint_record(2, batch, {TOPIC: record.offset}))
        assert sum(value[:1] == b"E" for _, value in changelog) > 10
    store = LocalStore(tmp_path / "new")
    worker = new_worker(store, broker)
    await worker.take_up(list(log))
    assert {p: worker.positions([(TOPIC, p)])[(TOPIC, p)] for p in log} == {p: 60 for p in log}
    assert_committed_state_is(local(store), expected({p: records[:60] for p, records in log.items()})[0])
    rng = random.Random(2)
    while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
        await worker.apply_batch(batch)
    ledger, _ = expected(log)
    assert_committed_state_is(local(store), ledger)
    assert {value[:1] for p in log for _, value in broker.logs[(CHANGELOG, p)]} == {b"D", b"E", b"X", b"C", b"F"}
    assert_committed_state_is(logged(broker), ledger)


def local_keys(store: LocalStore, partition: int) -> int:
    return sum(1 for key, _ in store.scan(partition, b"") if key[:1] != b"\x00")


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def held(broker: MemoryBroker, partition: int) -> int:
    """Changelog records a partition holds (those deleted before a base aside), a batch's
    packed record (a re-rate's rows) counted as its rows, as its owner counts them for
    when a base is due (a base's as records: it is the state)."""
    return sum(map(counted_as, broker.records(CHANGELOG, partition)))


def counted_as(record: tuple[int, bytes, bytes]) -> int:
    _, key, value = record
    return packed_count(value[DATA_START:]) if value[0] == ZSTD_ROWS and not is_base_row(key) else 1


def is_base_row(key: bytes) -> bool:
    """A packed record of a base (numbered from BASE_ROWS_FIRST in its batch)."""
    return int.from_bytes(key[-4:], "big") >= BASE_ROWS_FIRST


def since_open_base(broker: MemoryBroker, partition: int) -> int:
    """If the partition has a base open: the records written since the batch it is the state
    of began (that batch made it due), counted as `held` counts them; 0 if not."""
    records = broker.records(CHANGELOG, partition)
    marks = [offset for offset, _, value in records if value[0] in (BASE, BASE_END, CHECKPOINT)]
    kinds = {offset: value[0] for offset, _, value in records}
    opened = [offset for offset in marks if kinds[offset] in (BASE, BASE_END)]
    if not opened or kinds[opened[-1]] == BASE_END:
        return 0
    before = [offset for offset in marks if offset < opened[-1] and kinds[offset] == CHECKPOINT]
    start = before[-2] + 1 if len(before) >= 2 else 0
    return sum(counted_as(record) for record in records if record[0] >= start)


BASED = Settings(partitions=PARTITIONS, base_after=40)


async def test_with_bases_the_changelog_holds_at_most_twice_the_local_keys(tmp_path):
    """Results, voids and corrections (whose re-rates write rows for every key they
    change): with a base whenever a partition's changelog got as many data records as its
    state has keys (at least 40 here), each deleting the records before it once it ends
    (with the partition's next commit), the changelog never holds more than twice the
    local keys (and a few marks), and what came since a base opened, and read
    from its start into an empty store it is still the replay's state. Without bases
    it holds several times more."""
    docs = corrected_leagues(2, scale=3)
    log = corrections_log(docs)
    ledger, _, _ = run(docs, CORRECTED)
    sizes = {}
    for based in (True, False):
        broker = MemoryBroker(partitions=PARTITIONS)
        broker.add_input(log)
        store = LocalStore(tmp_path / str(based))
        worker = BatchLoop(BASED if based else Settings(partitions=PARTITIONS, base_after=0), CORRECTED, store, broker, broker,
                           Intake({}, SETTINGS.batch_max))
        bases = counted("ratings_changelog_bases_total")
        rng = random.Random(0)
        while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
            await worker.apply_batch(batch)
            if based:
                for p in log:
                    assert held(broker, p) <= 2 * local_keys(store, p) + 3 + since_open_base(broker, p), (
                        p, held(broker, p), local_keys(store, p), since_open_base(broker, p))
        sizes[based] = sum(held(broker, p) for p in log), sum(local_keys(store, p) for p in log)
        assert (counted("ratings_changelog_bases_total") - bases >= 2) == based
        assert (broker.deletions >= 2) == based
        assert_committed_state_is(local(store), ledger, records=False)
        assert_committed_state_is(logged(broker, CORRECTED), ledger, records=False)
    assert sizes[False][0] > 3 * sizes[True][0] and sizes[False][1] == sizes[True][1], sizes


async def test_records_a_failed_deletion_left_wait_for_the_next_base_without_making_it_due(tmp_path):
    """The broker does not delete the records before a base (down, or unable: the embedded
    broker): the base stands, the failure is counted, the batches go on without a base at
    each (what is held counts from the last base), and the next base deletes everything
    before itself."""
    log = corrections_log(corrected_leagues(4))
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    store = LocalStore(tmp_path)
    worker = BatchLoop(Settings(partitions=PARTITIONS, base_after=0), CORRECTED, store, broker, broker,
                       Intake({}, SETTINGS.batch_max))
    rng = random.Random(4)
    for _ in range(30):  # no base yet: the changelog holds several times the local keys
        await worker.apply_batch(next_batch(worker, log, rng))
    left = {p: len(log[p]) - 1 - store.checkpoint(p).offsets.get(TOPIC, -1) for p in log}
    partition = max((p for p in log if left[p] >= 30), key=lambda p: store.checkpoint(p).changelog)
    broker.refuse_deletion = ConnectionError("the broker went away")
    failures = counted("ratings_changelog_clean_failures_total")
    await worker.committer.write_base(worker.partitions[partition])
    based = store.checkpoint(partition)
    assert counted("ratings_changelog_clean_failures_total") == failures + 1
    assert broker.records(CHANGELOG, partition)[0][0] == 0 < based.base  # nothing deleted
    assert held(broker, partition) > 2 * local_keys(store, partition)
    worker.committer.base_after = 40
    bases = counted("ratings_changelog_bases_total")
    for _ in range(3):  # three batches of the partition on
        await worker.apply_batch([r for r in next_batch(worker, log, random.Random(0)) if r.partition == partition])
    assert store.checkpoint(partition).batch == based.batch + 3
    assert counted("ratings_changelog_bases_total") == bases
    broker.refuse_deletion = None
    await worker.committer.write_base(worker.partitions[partition])
    assert broker.records(CHANGELOG, partition)[0][0] == store.checkpoint(partition).base > based.base
    assert held(broker, partition) <= local_keys(store, partition) + 3


async def test_a_base_is_written_between_the_batches_after_it_and_every_reader_ends_with_its_owner(
        tmp_path, monkeypatch):
    """A base's rows go out with its partition's next commits, a few at a time (here four
    small packed records a commit): the batches after it wait for none of it, and their
    records lie between the base's opening and its end. A take-up onto an empty directory
    while a base is open (from the last base that ended), one after it ended (from it), and
    the whole log read by the rule, are each the owner's state."""
    monkeypatch.setattr(changelog_module, "PACK_BYTES", 8192)
    monkeypatch.setattr(commit_module, "BASE_RECORDS_A_COMMIT", 4)
    monkeypatch.setattr(commit_module, "BASE_SEARCH_STEP", 8)
    docs = corrected_leagues(2, scale=3)
    log = corrections_log(docs)
    ledger, _, _ = run(docs, CORRECTED)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    bases = counted("ratings_changelog_bases_total")
    store = LocalStore(tmp_path / "owner")
    worker = BatchLoop(BASED, CORRECTED, store, broker, broker, Intake({}, SETTINGS.batch_max))
    rng = random.Random(2)
    taken_while_open = 0
    while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
        await worker.apply_batch(batch)
        for p in log:  # a checkpoint stored past an open base's opening keeps where it is
            stored, opening = store.checkpoint(p), open_base_at(broker, p)
            if opening is not None and stored.changelog > opening:
                assert stored.opened is not None and stored.opened[0] == opening
            elif opening is None:
                assert stored.opened is None
        open_now = [p for p in log if since_open_base(broker, p)]
        if open_now and taken_while_open < 2:  # an empty directory takes the partition up now
            taken_while_open += 1
            empty = LocalStore(tmp_path / f"empty-{taken_while_open}")
            reader = BatchLoop(BASED, CORRECTED, empty, broker, broker, Intake({}, SETTINGS.batch_max))
            await reader.committer.take_up(open_now[0])  # (its fence ends the owner's epoch: the owner takes up anew)
            assert tables_of(empty, open_now[0]) == tables_of(store, open_now[0])
            empty.close()
            worker.forget()
    assert taken_while_open == 2
    assert worker.committer.writing_bases  # the input ends with a base open (here)...
    while worker.committer.writing_bases:  # ...which goes on with empty batches, as when no input comes
        await worker.apply_batch([])
    for p in log:
        assert since_open_base(broker, p) == 0 and held(broker, p) <= 2 * local_keys(store, p) + 3
    between = 0  # batches' rows that came between a base's opening and its end
    for p in log:
        opened = None
        for offset, _, value in broker.records(CHANGELOG, p):
            kind, epoch, batch = mark_of(value)
            if kind == BASE:
                opened = (epoch, batch)
            elif kind == BASE_END:
                opened = None
            elif opened and kind == ZSTD_ROWS and (epoch, batch) > opened:
                between += packed_count(value[DATA_START:])
    assert between > 50
    assert counted("ratings_changelog_bases_total") - bases >= 2
    assert_committed_state_is(local(store), ledger, records=False)
    assert_committed_state_is(logged(broker, CORRECTED), ledger, records=False)
    empty = LocalStore(tmp_path / "after")
    reader = BatchLoop(BASED, CORRECTED, empty, broker, broker, Intake({}, SETTINGS.batch_max))
    await reader.take_up(list(log))
    for p in log:
        assert tables_of(empty, p) == tables_of(store, p)


def open_base_at(broker: MemoryBroker, partition: int) -> int | None:
    """The offset of the partition's open base's opening (None: none open; a base ends with
    its end mark, or with its writer's epoch)."""
    opening = epoch_of = None
    for offset, _, value in broker.records(CHANGELOG, partition):
        kind, epoch, _ = mark_of(value)
        if kind == BASE:
            opening, epoch_of = offset, epoch
        elif kind == BASE_END or (kind == FENCE and epoch_of is not None and epoch > epoch_of):
            opening = epoch_of = None
    return opening


def tables_of(store: LocalStore, partition: int) -> dict[bytes, bytes]:
    return dict(store.scan_range(partition, b"\x01", b"\xff" * 8))


def test_a_base_is_due_by_size_or_once_what_is_held_would_make_a_take_up_too_long():
    committer = Committer(None, None, None, CHANGELOG, {}, None, None, base_after=1, take_up_seconds=10)
    keys = round(3 / ROW_TAKE_UP_SECONDS)  # a base taken up in 3 s
    none = Checkpoint()
    assert committer._due(2 * keys, none, keys)  # by size
    six, eight = round(6 / ENTRY_TAKE_UP_SECONDS), round(8 / ENTRY_TAKE_UP_SECONDS)  # seconds of entries
    assert not committer._due(six, Checkpoint(entries=six), keys)  # 6 s of entries and 3 of a base: within 10
    assert committer._due(eight, Checkpoint(entries=eight), keys)  # 8 and 3
    assert not committer._due(eight, none, keys)  # as many records, but marks: nothing to take up
    rows = round(8 / ROW_TAKE_UP_SECONDS)  # 8 s of rows (a packed record's each), and 3 of a base
    assert committer._due(rows, Checkpoint(rows=rows), keys + 1)  # (under twice the keys: not by size)
    assert not committer._due(rows // 2, Checkpoint(rows=rows // 2), keys + 1)
    # 15 s of entries against a base of 20 s: over the budget, but a base would not be faster.
    fifteen = round(15 / ENTRY_TAKE_UP_SECONDS)
    assert not committer._due(fifteen, Checkpoint(entries=fifteen), round(20 / ROW_TAKE_UP_SECONDS))
    committer.take_up_seconds = 0  # by size only
    assert not committer._due(eight, Checkpoint(entries=eight), keys) and committer._due(2 * keys, none, keys)


@pytest.mark.parametrize("budget", [0, 1e-4])
async def test_results_alone_get_bases_by_time_and_a_take_up_from_one_equals_the_replay(budget, tmp_path,
                                                                                        monkeypatch):
    """Results alone never hold twice the local keys in rows: only the take-up budget
    makes a base due, and an empty directory then takes the base and the rows after it up."""
    monkeypatch.setattr(commit_module, "BASE_SEARCH_STEP", 8)  # the partitions' logs are short
    log = input_log(7)
    ledger, _ = expected(log)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    settings = Settings(partitions=PARTITIONS, base_after=40, take_up_seconds=budget)
    store = LocalStore(tmp_path / "a")
    worker = new_worker(store, broker, settings)
    bases = counted("ratings_changelog_bases_total")
    rng = random.Random(7)
    while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
        await worker.apply_batch(batch)
    assert (counted("ratings_changelog_bases_total") - bases >= 2) == bool(budget)
    # Each partition's log starts at its last base: what was before it is deleted.
    assert all(broker.records(CHANGELOG, p)[0][0] == store.checkpoint(p).base > 0 for p in log) == bool(budget)
    # Onto an empty directory: from the last base on, found near the end.
    empty = LocalStore(tmp_path / "b")
    reader = CountingReader(broker, CHANGELOG)
    taker = BatchLoop(settings, CONFIG, empty, broker, reader, Intake({}, settings.batch_max))
    await taker.take_up(list(log))
    written = sum(len(broker.logs[(CHANGELOG, p)]) for p in log)  # the records deleted before the bases too
    from_bases = sum(len(broker.records(CHANGELOG, p)) - max(0, store.checkpoint(p).base) for p in log)
    assert (reader.read_records < written) == bool(budget) and from_bases <= reader.read_records
    for p in log:
        assert list(empty.scan_range(p, b"\x01", b"\xff" * 8)) == list(store.scan_range(p, b"\x01", b"\xff" * 8))
    assert_committed_state_is(local(empty), ledger)


async def test_a_crash_between_a_base_and_its_deletion_loses_nothing_and_the_next_take_up_deletes(
        tmp_path, monkeypatch):
    docs = corrected_leagues(3)
    log = corrections_log(docs)
    ledger, _, _ = run(docs, CORRECTED)
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)

    def worker_on(store: LocalStore) -> BatchLoop:
        return BatchLoop(BASED, CORRECTED, store, broker, broker, Intake({}, SETTINGS.batch_max))

    store = LocalStore(tmp_path / "a")
    worker = worker_on(store)
    clean = Committer.clean

    based = []

    async def crash(self, partition, start):
        based.append(partition)
        raise Crash("between the base and its deletion")

    monkeypatch.setattr(Committer, "clean", crash)
    rng = random.Random(3)
    with pytest.raises(Crash):
        while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
            await worker.apply_batch(batch)
    monkeypatch.setattr(Committer, "clean", clean)
    [partition] = based
    based_at = store.checkpoint(partition)
    assert based_at.base > 0  # the base is committed...
    assert broker.records(CHANGELOG, partition)[0][0] == 0  # ...and nothing before it deleted
    # Its opening is where the log's last checkpoint, the one of the batch it ended with, says.
    *_, (last_at, _, last) = broker.records(CHANGELOG, partition)
    assert last_at == based_at.changelog and checkpoint_payload(last)[2] == based_at.base
    kind, epoch, of_batch = mark_of(broker.records(CHANGELOG, partition)[based_at.base][2])
    assert (kind, epoch) == (BASE, based_at.epoch) and of_batch < based_at.batch
    base = [value for _, key, value in broker.records(CHANGELOG, partition)
            if value[0] == ZSTD_ROWS and mark_of(value)[1:] == (epoch, of_batch) and is_base_row(key)]
    keys = [key for value in base for key, _ in packed_rows(ZSTD_ROWS, value[DATA_START:])]
    assert keys == sorted(set(keys)) and len(keys) > 100  # the state at that batch, in key order
    assert not any(value is None for p in log for _, _, value in broker.records(CHANGELOG, p))
    before = held(broker, partition)
    # Restarted on an empty directory, then on its own: the base stands, and what was
    # left before it goes at the next base.
    crashed = store
    for directory in ("b", "a"):
        if directory == "b":
            store = LocalStore(tmp_path / "b")
        else:
            store.close()
            store = reopened(crashed)
        worker = worker_on(store)
        await worker.take_up(list(log))
        assert {p: store.checkpoint(p).changelog for p in log}[partition] >= based_at.changelog
        # The take-up deleted what the crashed base left before it.
        assert broker.records(CHANGELOG, partition)[0][0] == based_at.base
    while batch := next_batch(worker, log, rng) or next_batch(worker, log, rng):
        await worker.apply_batch(batch)
    await worker.take_up(set(range(PARTITIONS)))
    await worker.finish_rerates()
    await worker.committer.write_base(worker.partitions[partition])  # the next base, come early if not yet
    # It deleted everything before itself: what the crashed base left too.
    assert broker.records(CHANGELOG, partition)[0][0] == store.checkpoint(partition).base > based_at.changelog
    assert held(broker, partition) <= 2 * local_keys(store, partition) + 3 < before + 2 * local_keys(store, partition)
    assert_committed_state_is(local(store), ledger, records=False)
    assert_committed_state_is(logged(broker, CORRECTED), ledger, records=False)


async def test_a_take_up_that_dies_inside_the_base_it_started_at_stores_none_of_it(tmp_path, monkeypatch):
    """A take-up onto an empty directory starts at the last base; one that dies (here: its
    read crashes after k chunks, for each k) before that base's end has stored nothing
    past the base's opening (what it committed meanwhile stands on a void state), so the
    take-up again from its directory reads the whole base and ends with the owner's
    tables. (A checkpoint inside the base made it drop the base's rows: the state before
    the base was lost.)"""
    monkeypatch.setattr(changelog_module, "PACK_BYTES", 4096)
    monkeypatch.setattr(commit_module, "BASE_RECORDS_A_COMMIT", 2)
    monkeypatch.setattr(commit_module, "FLUSH_ROWS", 3)
    monkeypatch.setattr(commit_module, "BASE_SEARCH_STEP", 8)
    log = corrections_log(corrected_leagues(5))
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    owner_store = LocalStore(tmp_path / "owner")
    owner = BatchLoop(BASED, CORRECTED, owner_store, broker, broker, Intake({}, SETTINGS.batch_max))
    rng = random.Random(5)
    writing: list[int] = []
    while batch := next_batch(owner, log, rng) or next_batch(owner, log, rng):
        await owner.apply_batch(batch)
        now = [p for p, state in owner.partitions.items() if owner.committer.writing_base(state)]
        ended = [p for p in writing if p not in now]
        if ended:  # a base ended, with batches of input between its opening and its end
            break
        writing = now
    partition = ended[0]
    base_at = owner_store.checkpoint(partition).base
    end_at = next(offset for offset, _, value in broker.records(CHANGELOG, partition)
                  if offset > base_at and value[0] == BASE_END)
    assert base_at > 0 and end_at - base_at > 20  # a base of many records, with batches in it
    owner.forget()
    inside = 0
    for k in range(1, 5 + (end_at - base_at) // 7):
        store = LocalStore(tmp_path / f"reader-{k}")
        reader = BatchLoop(BASED, CORRECTED, store, broker, broker, Intake({}, SETTINGS.batch_max))
        broker.chunks_read, broker.crash_reading_at = 0, k
        try:
            await reader.committer.take_up(partition)
        except Crash:
            pass
        broker.crash_reading_at = None
        died_at = store.checkpoint(partition).changelog
        assert not base_at <= died_at < end_at, (k, died_at)
        inside += died_at < 0 and broker.chunks_read > 2
        await BatchLoop(BASED, CORRECTED, store, broker, broker, Intake({}, SETTINGS.batch_max)).committer.take_up(
            partition)
        assert tables_of(store, partition) == tables_of(owner_store, partition), k
        store.close()
    assert inside > 0  # some of the reads died inside the base


async def test_a_stale_directory_after_the_log_started_over_takes_a_newer_base_not_its_own_state(tmp_path,
                                                                                                  monkeypatch):
    """The broker lost the changelog; its owner wrote its state back, then bases deleted the
    write-back's start. A worker on a directory copied long before, whose checkpoint's offset
    lies inside the new log, finds the newer owner's base (not a start only) and takes its
    state: it does not write its stale state back over it."""
    log = {0: input_log(1)[0]}
    broker = MemoryBroker(partitions=PARTITIONS)
    broker.add_input(log)
    settings = Settings(partitions=PARTITIONS, base_after=20)
    monkeypatch.setattr(Committer, "_due", lambda self, held, after, keys: True)  # a base every 20 records held
    records = log[0]

    def worker_on(store: LocalStore) -> BatchLoop:
        return BatchLoop(settings, CONFIG, store, broker, broker, Intake({}, settings.batch_max))

    store = LocalStore(tmp_path / "a")
    owner = worker_on(store)
    for i in range(24):
        await owner.apply_batch(records[i:i + 1])
    store.close()
    shutil.copytree(tmp_path / "a", tmp_path / "stale")
    stale = LocalStore(tmp_path / "stale").checkpoint(0)
    store = LocalStore(tmp_path / "a")
    owner = worker_on(store)
    for i in range(24, 36):
        await owner.apply_batch(records[i:i + 1])
    broker.logs[(CHANGELOG, 0)].clear()  # the broker lost the changelog
    owner.forget()
    await owner.take_up([0])
    assert owner.committer.started_over[-1]["action"] == "local state written back"
    i = 36
    while not (broker.records(CHANGELOG, 0)[0][0] > 1 and len(broker.logs[(CHANGELOG, 0)]) > stale.changelog + 1):
        await owner.apply_batch(records[i:i + 1])
        i += 1
        while owner.committer.writing_bases:
            await owner.apply_batch([])
    assert broker.records(CHANGELOG, 0)[0][0] <= stale.changelog  # the stale offset lies inside the new log
    assert not any(value[0] == START for _, _, value in broker.records(CHANGELOG, 0))  # the write-back's is gone
    owner.forget()
    stale_store = LocalStore(tmp_path / "stale")
    await worker_on(stale_store).take_up([0])
    assert stale_store.checkpoint(0).offsets == store.checkpoint(0).offsets
    assert tables_of(stale_store, 0) == tables_of(store, 0)


async def test_the_parts_of_a_re_rate_carry_another_partitions_base_on(tmp_path, monkeypatch):
    """Each part of a long re-rate is committed; a partition with nothing in the batch whose
    base is being written goes on with those commits (its base's next part each time), so
    the base ends during the re-rate instead of waiting, with its store iterator open, for
    the batch to end. A take-up onto an empty directory from that base is its owner's state."""
    monkeypatch.setattr(changelog_module, "PACK_BYTES", 2048)
    monkeypatch.setattr(commit_module, "BASE_RECORDS_A_COMMIT", 1)
    settings = Settings(partitions=PARTITIONS, rerate_part=4, base_after=20, take_up_seconds=1e-4)
    rng = random.Random(3)
    leagues = {}
    for name in ("chess", "go", "shogi", "xiangqi"):  # one league on each partition
        leagues.setdefault(league_partition(name, PARTITIONS), name)
    based, rerated = (leagues[p] for p in range(PARTITIONS))
    log: dict[int, list[InputRecord]] = defaultdict(list)

    def add(partition: int, docs: list[dict]) -> list[InputRecord]:
        records = [InputRecord(TOPIC, partition, len(log[partition]) + i, doc["league"].encode(), orjson.dumps(doc),
                               1000) for i, doc in enumerate(docs)]
        log[partition] += records
        return records

    rerated_results = list(two_player_league(rerated, 12, 60, rng))
    broker = MemoryBroker(partitions=PARTITIONS)
    store = LocalStore(tmp_path / "owner")
    worker = BatchLoop(settings, CONFIG, store, broker, broker, Intake({}, settings.batch_max))
    await worker.apply_batch(add(1, rerated_results))
    while worker.committer.writing_bases:
        await worker.apply_batch([])
    await worker.apply_batch(add(0, list(two_player_league(based, 30, 80, rng))))
    owner = worker.partitions[0]
    assert worker.committer.writing_base(owner)  # a base of several records, one a commit
    void = {"schema": "match-voided.v1", "league": rerated, "match_id": rerated_results[0]["match_id"],
            "reason": "entered twice"}
    await worker.apply_batch(add(1, [void]))  # the re-rate's first part
    assert worker.handler.rerating(worker.partitions[1]) and worker.committer.writing_base(owner)
    parts = counted("ratings_checkpoints_total")
    after = {"league": rerated, "match_id": "after-the-void", "participants": rerated_results[0]["participants"]}
    await worker.apply_batch(add(1, [after]))  # its input waits: the rest of the re-rate comes first
    assert counted("ratings_checkpoints_total") - parts > 20  # the re-rate's parts, each committed
    assert not worker.committer.writing_base(owner)  # the base ended with them
    assert since_open_base(broker, 0) == 0
    empty = LocalStore(tmp_path / "empty")
    reader = BatchLoop(settings, CONFIG, empty, broker, broker, Intake({}, settings.batch_max))
    await reader.committer.take_up(0)
    assert tables_of(empty, 0) == tables_of(store, 0)
