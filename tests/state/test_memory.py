"""The memory backend answers the storage port as the stream's transaction does: the
same writes give the same reads, with the transaction's batches committed to a store
at random points."""

from __future__ import annotations

import random

import pytest

from stream_app.leagues import LeagueConfig
from stream_app.state.memory import MemoryPartition
from stream_app.state.tables import LEAGUES, PLAYERS, tables_for
from stream_app.stream.changelog import Checkpoint
from stream_app.stream.transaction import PartitionTransaction

TABLES = tables_for(LeagueConfig.defaults())


class DictStore:
    """Committed values by store key, as the local store keeps them (encoded)."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}

    def scan(self, start: bytes, end: bytes):
        return iter([(key, self.values[key]) for key in sorted(self.values) if start <= key < end])

    def write(self, values: dict[bytes, bytes | None]) -> None:
        for key, value in values.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value


@pytest.mark.parametrize("seed", range(8))
def test_writes_and_reads_match_the_transactions(seed):
    rng = random.Random(seed)
    memory = MemoryPartition(TABLES)
    store = DictStore()
    state = PartitionTransaction(0, Checkpoint(), store.values.get, TABLES, store.scan)
    keys = [f"l{rng.randrange(3)}\x1fk{n}".encode() for n in range(40)]
    for step in range(600):
        table = LEAGUES  # JSON values as they are
        key = rng.choice(keys)
        move = rng.random()
        if move < 0.4:
            value = None if rng.random() < 0.3 else {"n": step}
            memory.put(table, key, value)
            state.put(table, key, value)
        elif move < 0.5:  # several at once, as a match's players are written (no deletes)
            items = [(k, {"n": step, "i": i}) for i, k in enumerate(rng.sample(keys, rng.randrange(1, 5)))]
            memory.put_many([(table, k, v) for k, v in items])
            state.put_many([(table, k, v) for k, v in items])
        elif move < 0.7:
            assert memory.get(table, key) == state.get(table, key)
        elif move < 0.8:
            several = rng.sample(keys, rng.randrange(1, 5))
            assert memory.get_many(table, several) == state.get_many(table, several) == [
                memory.get(table, k) for k in several]
        elif move < 0.95:
            start, end = sorted(rng.sample(keys, 2))
            limit = rng.choice((1, 3, 10))
            whole = state.scan(table, start, end)
            assert memory.scan(table, start, end) == whole
            # With a limit the transaction may give fewer (the overlay deleted some of the
            # committed rows it read), never others.
            found, given = memory.scan(table, start, end, limit), state.scan(table, start, end, limit)
            assert found == whole[:limit] and found[:len(given)] == given
        else:  # the transaction's batch committed: reads then come from the store below
            store.write(state.local_values())
            state.checkpointed(state.checkpoint)
    assert memory.scan(LEAGUES, b"", b"\xff") == state.scan(LEAGUES, b"", b"\xff")
    assert memory.scan(PLAYERS, b"", b"\xff") == []


def test_items_keep_the_order_keys_were_first_written_and_a_deleted_key_comes_again_last():
    memory = MemoryPartition(TABLES)
    for key in (b"b", b"a", b"c"):
        memory.put(LEAGUES, key, {"k": key.decode()})
    memory.put(LEAGUES, b"a", {"k": "again"})
    assert [key for key, _ in memory.items(LEAGUES)] == [b"b", b"a", b"c"]
    memory.put(LEAGUES, b"b", None)
    memory.put(LEAGUES, b"b", {"k": "back"})
    assert [key for key, _ in memory.items(LEAGUES)] == [b"a", b"c", b"b"]
    assert memory.scan(LEAGUES, b"a", b"c") == [(b"a", {"k": "again"}), (b"b", {"k": "back"})]
