"""A partition's transaction during a batch (stream/transaction.py): the overlay, the
input offsets, and the changelog records a checkpoint writes. The sequence that
sends them is tested in test_commit.py, the rule that reads them back in
test_changelog.py."""

import orjson

from stream_app.stream.changelog import Checkpoint, ChangelogReader, new_value, old_value
from stream_app.stream.tables import MATCHES, PLAYERS, TABLES, store_key
from stream_app.stream.transaction import PartitionTransaction

TOPIC = "match-results"


def test_a_batch_reads_its_own_writes_and_commits_them_only_at_its_checkpoint():
    committed = {store_key(PLAYERS, b"l\x1fa"): orjson.dumps({"rating": 1.0})}
    state = PartitionTransaction(0, Checkpoint(epoch=3, batch=7), committed.get, TABLES)
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 1.0}
    state.put(PLAYERS, b"l\x1fa", {"rating": 2.0})
    state.put(MATCHES, b"l\x1fm1", {"seq": 1})
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 2.0}
    assert state.committed_value((PLAYERS, b"l\x1fa")) == {"rating": 1.0}
    rows, values, mark, after = state.checkpoint_writes()
    # Each row has the owner's epoch and the next batch, the new value and the one before.
    by_key = dict(rows)
    assert values == {key: new_value(record) for key, record in rows}  # what the local store gets
    record = by_key[store_key(PLAYERS, b"l\x1fa")]
    assert orjson.loads(new_value(record)) == {"rating": 2.0} and orjson.loads(old_value(record)) == {"rating": 1.0}
    assert old_value(by_key[store_key(MATCHES, b"l\x1fm1")]) is None
    assert (after.epoch, after.batch) == (3, 8)
    # Read back: the rows count only with their checkpoint.
    reader = ChangelogReader(Checkpoint(epoch=3, batch=7, changelog=9))
    for offset, (key, value) in enumerate([*rows, mark], start=10):
        reader.feed(offset, key, value)
        if offset == 11:
            assert reader.take()[0] == {}
    committed_rows, checkpoint, _ = reader.take()
    assert orjson.loads(committed_rows[store_key(PLAYERS, b"l\x1fa")]) == {"rating": 2.0}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.changelog) == (3, 8, 12)
    state.checkpointed(after)
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 2.0} and not state.overlay


def test_offsets_at_or_below_the_checkpoint_are_applied_and_the_next_one_is_expected():
    state = PartitionTransaction(0, Checkpoint(batch=3, offsets={TOPIC: 41}), lambda k: None, TABLES)
    assert state.already_applied(TOPIC, 41) and not state.already_applied(TOPIC, 42)
    assert state.next_offset(TOPIC) == 42 and state.next_offset("other") is None
    state.note_offset(TOPIC, 42)
    assert state.already_applied(TOPIC, 42) and state.next_offset(TOPIC) == 43
    _, _, _, after = state.checkpoint_writes()
    assert after.offsets == {TOPIC: 42}


def test_keys_a_replaced_worker_wrote_are_written_again_with_the_owners_values():
    committed = {store_key(PLAYERS, b"l\x1fa"): orjson.dumps({"rating": 1.0})}
    state = PartitionTransaction(0, Checkpoint(epoch=2, batch=1), committed.get, TABLES)
    state.put(PLAYERS, b"l\x1fb", {"rating": 5.0})
    again = dict(state.rows_for({store_key(PLAYERS, b"l\x1fa"), store_key(PLAYERS, b"l\x1fb"),
                                 store_key(PLAYERS, b"l\x1fz")}))
    assert orjson.loads(new_value(again[store_key(PLAYERS, b"l\x1fa")])) == {"rating": 1.0}
    assert orjson.loads(new_value(again[store_key(PLAYERS, b"l\x1fb")])) == {"rating": 5.0}
    assert new_value(again[store_key(PLAYERS, b"l\x1fz")]) is None  # the owner has none: a deletion
    state.repair = {store_key(PLAYERS, b"l\x1fa")}
    rows, values, _, _ = state.checkpoint_writes()
    assert {key for key, _ in rows} == {store_key(PLAYERS, b"l\x1fa"), store_key(PLAYERS, b"l\x1fb")}
    assert orjson.loads(values[store_key(PLAYERS, b"l\x1fa")]) == {"rating": 1.0}  # the repair, stored too
    assert not state.repair


def test_the_cache_of_committed_players_starts_over_past_its_bytes(monkeypatch):
    from stream_app.stream import transaction as transaction_module

    value = orjson.dumps({"rating": 1500.0, "history": [1.0] * 5})
    small = len(orjson.dumps({"rating": 1.0}))
    monkeypatch.setattr(transaction_module, "CACHE_BYTES", 2 * len(value) + small)
    store = {store_key(PLAYERS, b"l\x1f%d" % i): value for i in range(3)}
    reads: list[bytes] = []
    state = PartitionTransaction(0, Checkpoint(epoch=1), lambda key: reads.append(key) or store.get(key), TABLES)
    for i in (0, 1, 0, 1):  # both fit: read once each
        state.get(PLAYERS, b"l\x1f%d" % i)
    assert len(reads) == 2 and state.cache_bytes == 2 * len(value)
    state.get(PLAYERS, b"l\x1f2")  # past the bytes: the cache starts over with this one
    state.get(PLAYERS, b"l\x1f0")
    assert len(reads) == 4 and state.cache_bytes == 2 * len(value)
    # A batch's rows count, once committed, with the bytes they are stored in.
    state.put(PLAYERS, b"l\x1f2", {"rating": 1.0})
    _, _, _, after = state.checkpoint_writes()
    state.checkpointed(after)
    assert state.cache_bytes == 2 * len(value) + small and state.to_cache == []
    assert state.get(PLAYERS, b"l\x1f2") == {"rating": 1.0} and len(reads) == 4
    state.put(PLAYERS, b"l\x1f0", {"rating": 2.0})
    _, _, _, after = state.checkpoint_writes()
    state.checkpointed(after)  # past the bytes: started over
    assert state.cache == {(PLAYERS, b"l\x1f0"): {"rating": 2.0}} and state.cache_bytes == small
