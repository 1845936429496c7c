"""Standby partitions (stream/standby.py): a worker follows the changelog of
partitions another worker owns into its own local store (RocksDB). The owner is
the real batch loop and commit sequence over the in-memory broker; the standby's
Kafka consumer and topic reader are stand-ins reading that broker's logs."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from types import SimpleNamespace

import orjson
from aiokafka.errors import OffsetOutOfRangeError
import pytest

from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.inputs import parse_match
from stream_app.offline.sample import two_player_league
from stream_app.settings import Settings
from stream_app.stream import changelog as changelog_module
from stream_app.stream import commit as commit_module
from stream_app.stream import standby as standby_module
from stream_app.stream.batch_loop import BatchLoop
from stream_app.stream.changelog import Checkpoint
from stream_app.stream.commit import Fenced
from stream_app.stream import intake as intake_module
from stream_app.stream.intake import InputRecord, Intake, KafkaChangelog
from stream_app.stream.partitioner import league_partition
from stream_app.stream.records import RecordHandler
from stream_app.stream.standby import Standby
from stream_app.stream.store import CHECKPOINT_KEY, LocalStore
from stream_app.state.tables import PLAYERS, TABLE_PREFIX, player_state, tables_for
from tests.support.memory import CountingReader, MemoryBroker, StalledSender

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
SETTINGS = Settings(partitions=2)
TOPIC, CHANGELOG = SETTINGS.match_topic, SETTINGS.changelog_topic
LEAGUES = {league_partition(league, 2): league for league in ("chess", "go")}
assert sorted(LEAGUES) == [0, 1]


def inputs(partition: int, count: int = 60) -> list[InputRecord]:
    docs = list(two_player_league(LEAGUES[partition], 10, count, random.Random(partition)))
    return [InputRecord(TOPIC, partition, i, doc["league"].encode(), orjson.dumps(doc), 1000) for i, doc in enumerate(docs)]


class MemoryChangelog(KafkaChangelog):
    """The worker's changelog reader over the broker's logs: its own reads and checks the
    broker's, its following (KafkaChangelog.follow) the worker's code over MemoryConsumer."""

    def __init__(self, memory: MemoryBroker):
        super().__init__({})
        self.memory = memory

    def read(self, topic, partition, start, end):
        return self.memory.read(topic, partition, start, end)

    async def first_records(self, wanted):
        return await self.memory.first_records(wanted)

    async def end_offset(self, topic, partition):
        return await self.memory.end_offset(topic, partition)

    async def delete_before(self, topic, partition, offset):
        return await self.memory.delete_before(topic, partition, offset)


class MemoryConsumer:
    """What KafkaChangelog.follow uses of aiokafka's consumer, over the broker's logs (fetches of 5 records)."""

    def __init__(self, memory: MemoryBroker):
        self.memory, self.at = memory, {}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def assign(self, tps) -> None:
        self.at = {tp: 0 for tp in tps}

    def seek(self, tp, offset: int) -> None:
        self.at[tp] = offset
        self.memory.seeks.append(offset)

    async def beginning_offsets(self, tps) -> dict:
        return {tp: self.memory.firsts.get((tp.topic, tp.partition), 0) for tp in tps}

    def highwater(self, tp) -> int:
        return len(self.memory.logs[(tp.topic, tp.partition)])

    async def getmany(self, timeout_ms: int = 0) -> dict:
        await asyncio.sleep(0.001)
        fetched = {}
        for tp, start in self.at.items():
            if self.memory.fail_after is not None and start >= self.memory.fail_after:
                self.memory.fail_after = None
                raise ConnectionError("the broker went away")
            if start < self.memory.firsts.get((tp.topic, tp.partition), 0):  # as Kafka: deleted, out of range
                raise OffsetOutOfRangeError({tp: start})
            chunk = self.memory.logs[(tp.topic, tp.partition)][start:start + 5]
            if chunk:  # (a compacted log's gaps are None)
                fetched[tp] = [SimpleNamespace(offset=start + i, key=record[0], value=record[1])
                               for i, record in enumerate(chunk) if record]
                self.at[tp] = start + len(chunk)
        return fetched


@pytest.fixture
def memory(monkeypatch) -> MemoryBroker:
    memory = MemoryBroker(partitions=2)
    memory.fail_after, memory.seeks, memory.consumers = None, [], 0  # a fetch from this offset on fails once

    def consumer(**options):
        memory.consumers += 1
        return MemoryConsumer(memory)

    monkeypatch.setattr(intake_module, "AIOKafkaConsumer", consumer)  # (the follower's, KafkaChangelog.follow)
    monkeypatch.setattr(standby_module, "KafkaChangelog", lambda options: MemoryChangelog(memory))
    monkeypatch.setattr(standby_module, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(standby_module, "RETRY_SECONDS", 0.01)
    return memory


def worker(store: LocalStore, sender, reader=None) -> BatchLoop:
    broker = sender if isinstance(sender, MemoryBroker) else sender.broker
    return BatchLoop(SETTINGS, CONFIG, store, sender, reader or broker, Intake({}, SETTINGS.batch_max))


@pytest.fixture
async def pair(memory, tmp_path):
    """An owner (a worker with its own store) and a standby on another store, deriving
    the entries of earlier releases as a worker does (stream/records.py); stopped at the end."""
    store = LocalStore(tmp_path / "standby")
    standby = Standby(store, {}, CHANGELOG, tables_for(CONFIG), RecordHandler(CONFIG, 2, SETTINGS.forward_topic).deriver)
    yield worker(LocalStore(tmp_path / "owner"), memory), store, standby
    await standby.stop()


def rows(store: LocalStore, partition: int) -> dict[bytes, bytes]:
    """Every key of the partition's local store, its checkpoint too, without what a
    checkpoint keeps locally only (a standby counts the changelog records it read, its
    owner those it wrote: a replaced owner's late ones only the first)."""
    found = dict(store.scan(partition, b""))
    if CHECKPOINT_KEY in found:
        found[CHECKPOINT_KEY] = replace(Checkpoint.decode(found[CHECKPOINT_KEY]), entries=0, rows=0).encode()
    return found


async def until(condition, what: str, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def caught_up(store: LocalStore, owner: BatchLoop, *partitions: int) -> None:
    await until(lambda: all(rows(store, p) == rows(owner.store, p) for p in partitions or (0,)),
                "the standby's store to equal the owner's")


async def settle(seconds: float = 0.1) -> None:
    await asyncio.sleep(seconds)


def assert_is_replay(store: LocalStore, partition: int, records: list[InputRecord]) -> None:
    ledger = Ledger(CONFIG)
    for record in records:
        ledger.apply(parse_match(record.value))
    players = {key[1:].decode(): player_state(orjson.loads(value))[0]
               for key, value in store.scan(partition, TABLE_PREFIX[PLAYERS])}
    assert players and players == {f"{league}\x1f{p}": orjson.loads(orjson.dumps(s.to_dict()))
                                   for league, states in ledger.leagues.items() for p, s in states.items()}


async def test_following_keeps_the_local_store_equal_to_the_owners_committed_state(memory, pair):
    owner, store, standby = pair
    standby.follow({0, 1})
    assert standby.partitions == [0, 1]
    log = {p: inputs(p) for p in (0, 1)}
    for step in range(0, 60, 15):
        await owner.apply_batch(log[0][step:step + 15] + log[1][step:step + 15])
        await caught_up(store, owner, 0, 1)
    assert standby.records == sum(len(memory.logs[(CHANGELOG, p)]) for p in (0, 1))
    await until(lambda: standby.behind == 0, "nothing left to read at a take-up")
    for p in (0, 1):
        assert_is_replay(store, p, log[p])


async def test_a_standby_left_behind_follows_through_a_base_and_its_deletion(memory, pair):
    """The standby stops; the owner writes a base and deletes what came before it, the
    standby's checkpoint's record among them: following again, its fetch is out of range
    (as Kafka's), it reads on from the base, wipes at the base's end, and ends with
    the owner's tables."""
    owner, store, standby = pair
    docs = [orjson.loads(record.value) for record in inputs(0)][:40]
    # A void after the standby stopped deletes keys (the match's log row, its index): a
    # reader that missed the void's rows (deleted before the base) keeps them unless the
    # base wipes its state.
    docs.insert(25, {"schema": "match-voided.v1", "league": docs[3]["league"], "match_id": docs[3]["match_id"],
                     "reason": "test"})
    log = [InputRecord(TOPIC, 0, i, doc["league"].encode(), orjson.dumps(doc), 1000) for i, doc in enumerate(docs)]
    await owner.apply_batch(log[:20])
    standby.follow([0])
    await caught_up(store, owner)
    await standby.stop()
    behind = store.checkpoint(0).changelog
    stopped = {key for key in rows(store, 0) if key[:1] != b"\x00"}
    await owner.apply_batch(log[20:30])
    await owner.committer.write_base(owner.partitions[0])
    await owner.apply_batch(log[30:])
    assert memory.logs[(CHANGELOG, 0)][behind] is None  # the base deleted the standby's checkpoint record
    seeks = len(memory.seeks)
    standby.follow([0])

    def tables(store: LocalStore) -> dict[bytes, bytes]:
        return {key: value for key, value in rows(store, 0).items() if key[:1] != b"\x00"}

    await until(lambda: store.checkpoint(0).changelog == owner.store.checkpoint(0).changelog, "the standby's catch-up")
    assert tables(store) == tables(owner.store)
    assert store.checkpoint(0).offsets == owner.store.checkpoint(0).offsets
    gone = set(stopped) - set(tables(owner.store))  # keys the void deleted
    assert gone and not gone & set(tables(store))
    assert owner.store.checkpoint(0).base in memory.seeks[seeks:]  # on from the base, where the log starts


async def test_a_standby_with_nothing_yet_follows_from_the_last_base_on(memory, pair, monkeypatch):
    """A standby on an empty store starts where the changelog's last checkpoint says the
    last base is (the cleaner has not run), not at the beginning, and ends with the
    owner's store."""
    monkeypatch.setattr(commit_module, "BASE_SEARCH_STEP", 8)
    owner, store, standby = pair
    log = inputs(0)
    await owner.apply_batch(log[:40])
    await owner.committer.write_base(owner.partitions[0])
    await owner.apply_batch(log[40:])  # its checkpoint names the base
    based = owner.store.checkpoint(0).base
    assert based >= 2  # the first 40 inputs' rows and their marks before it
    standby.follow([0])
    await caught_up(store, owner)
    assert standby.records == len(memory.logs[(CHANGELOG, 0)]) - based


async def test_a_take_up_after_following_reads_only_the_changelog_past_the_standbys_checkpoint(memory, pair, tmp_path):
    owner, store, standby = pair
    log = inputs(0)
    standby.follow([0])
    for step in range(0, 40, 10):
        await owner.apply_batch(log[step:step + 10])
    await caught_up(store, owner)
    await standby.stop()
    followed = store.checkpoint(0).changelog
    await owner.apply_batch(log[40:50])  # committed after the standby stopped
    changelog = memory.logs[(CHANGELOG, 0)]
    unread = len(changelog) - (followed + 1)
    successor = worker(store, memory, CountingReader(memory, CHANGELOG))
    await successor.take_up([0])
    assert successor.committer.changelog.read_records == unread + 1 > 1  # the tail, and its own fence
    scratch = worker(LocalStore(tmp_path / "empty"), memory, CountingReader(memory, CHANGELOG))
    await scratch.take_up([0])
    # All of it (no base: from the beginning), after a look for the last base near its end.
    assert scratch.committer.changelog.read_records >= len(changelog) > unread + 1
    successor.forget()
    await successor.apply_batch(log[50:])
    assert_is_replay(store, 0, log)


async def test_stop_stores_what_was_read_since_the_last_flush(memory, pair, monkeypatch):
    monkeypatch.setattr(standby_module, "FLUSH_SECONDS", 1e9)  # no flush while following
    owner, store, standby = pair
    await owner.apply_batch(inputs(0)[:30])
    standby.follow([0])
    await until(lambda: standby.records == len(memory.logs[(CHANGELOG, 0)]), "the changelog read")
    await settle()
    assert rows(store, 0) == {}  # all read, nothing stored yet
    assert standby.behind == len(memory.logs[(CHANGELOG, 0)])  # a take-up would read it all
    await standby.stop()
    assert standby.behind is None
    assert rows(store, 0) == rows(owner.store, 0)


async def test_a_flush_comes_every_flush_records_while_following(pair, monkeypatch):
    monkeypatch.setattr(standby_module, "FLUSH_SECONDS", 1e9)
    monkeypatch.setattr(standby_module, "FLUSH_ROWS", 1)
    owner, store, standby = pair
    standby.follow([0])
    await owner.apply_batch(inputs(0)[:30])
    await caught_up(store, owner)


async def following_twenty(pair) -> tuple[list, dict]:
    """The owner commits 20 inputs of partition 0, which the standby follows up to them:
    the partition's inputs and the standby's rows then."""
    owner, store, standby = pair
    log = inputs(0)
    await owner.apply_batch(log[:20])
    standby.follow([0])
    await caught_up(store, owner)
    return log, rows(store, 0)


async def test_a_batch_is_not_applied_until_its_checkpoint_arrives(memory, pair):
    owner, store, standby = pair
    log, committed = await following_twenty(pair)
    memory.held.add(SETTINGS.changes_topic)  # the outputs wait: the batch's rows land, its checkpoint not
    batch = asyncio.ensure_future(owner.apply_batch(log[20:40]))
    changelog = memory.logs[(CHANGELOG, 0)]
    await until(lambda: changelog[-1][1][:1] == b"X" and standby.records == len(changelog), "the rows read")
    await settle()
    assert not batch.done() and rows(store, 0) == committed
    memory.held.discard(SETTINGS.changes_topic)
    await batch
    await caught_up(store, owner)
    assert rows(store, 0) != committed
    assert_is_replay(store, 0, log[:40])


async def test_a_partition_dropped_from_the_standby_set_is_no_longer_followed(pair):
    owner, store, standby = pair
    log = {p: inputs(p) for p in (0, 1)}
    standby.follow({0, 1})
    await owner.apply_batch(log[0][:20] + log[1][:20])
    await caught_up(store, owner, 0, 1)
    kept = rows(store, 0)
    await standby.stop()
    standby.follow({1})  # a rebalance: partition 0 is no longer this worker's standby
    await owner.apply_batch(log[0][20:40] + log[1][20:40])
    await caught_up(store, owner, 1)
    await settle()
    assert standby.partitions == [1] and rows(store, 0) == kept != rows(owner.store, 0)
    await standby.stop()
    assert standby.partitions == []
    behind = rows(store, 1)
    await owner.apply_batch(log[1][40:])
    await settle()
    assert rows(store, 1) == behind != rows(owner.store, 1)


async def test_a_new_owners_fence_wins_over_the_replaced_owners_late_writes(memory, pair, tmp_path):
    _, store, standby = pair
    log = inputs(0)
    stalled = StalledSender(memory)
    a = worker(LocalStore(tmp_path / "a"), stalled)
    await a.apply_batch(log[:10])
    standby.follow([0])
    stalled.running.clear()
    zombie = asyncio.ensure_future(a.apply_batch(log[10:20]))
    await settle(0.01)
    b = worker(LocalStore(tmp_path / "b"), memory)
    await b.take_up([0])
    stalled.running.set()
    with pytest.raises(Fenced):  # A's entries landed after B's fence
        await zombie
    await b.apply_batch(log[10:13])
    await caught_up(store, b)
    assert store.checkpoint(0).epoch == 2
    assert_is_replay(store, 0, log[:13])


async def test_a_changelog_that_started_over_under_the_standby_is_followed_again(memory, pair):
    owner, store, standby = pair
    log, copy = await following_twenty(pair)
    memory.logs[(CHANGELOG, 0)].clear()  # the broker forgot the changelog
    await settle(0.2)
    assert rows(store, 0) == copy  # kept until the owner writes its state back
    owner.forget()
    await owner.take_up([0])
    assert [f["action"] for f in owner.committer.started_over] == ["local state written back"]
    await owner.apply_batch(log[20:40])
    await caught_up(store, owner)
    assert memory.consumers > 1  # it stopped at the log's new end, and followed again
    assert_is_replay(store, 0, log[:40])


async def test_a_standby_whose_checkpoint_the_changelog_lost_takes_the_written_back_state(memory, pair):
    owner, store, standby = pair
    log = inputs(0)
    for step in range(0, 20, 2):  # small batches: the standby's checkpoint lies far into the changelog
        await owner.apply_batch(log[step:step + 2])
    standby.follow([0])
    await caught_up(store, owner)
    await standby.stop()
    stale = rows(store, 0)
    await owner.apply_batch(log[20:40])  # while this worker was not following
    memory.logs[(CHANGELOG, 0)].clear()  # the broker forgot the changelog
    standby.follow([0])
    await settle()
    assert rows(store, 0) == stale  # nothing to take its place yet: kept
    owner.forget()
    await owner.take_up([0])  # writes its newer state back, after a start
    await caught_up(store, owner)
    assert rows(store, 0) != stale
    assert_is_replay(store, 0, log[:40])


async def test_following_is_retried_from_the_local_checkpoint_when_the_broker_goes_away(memory, pair, monkeypatch):
    monkeypatch.setattr(changelog_module, "PACK_BYTES", 512)  # a batch's rows in several records
    owner, store, standby = pair
    for step in range(0, 30, 10):
        await owner.apply_batch(inputs(0)[step:step + 10])
    first = next(i for i, (_, value) in enumerate(memory.logs[(CHANGELOG, 0)]) if value[:1] == b"C")
    memory.fail_after = first + 3  # the first batch's checkpoint is read, the second's not (some of its rows)
    standby.follow([0])
    await caught_up(store, owner)
    assert memory.consumers == 2 and memory.seeks == [0, first + 1] and memory.fail_after is None


async def test_following_nothing_starts_no_task(memory, pair):
    _, _, standby = pair
    standby.follow(set())
    await settle(0.02)
    assert standby.partitions == [] and memory.consumers == 0
