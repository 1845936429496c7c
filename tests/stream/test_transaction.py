"""A partition's transaction during a batch (stream/transaction.py): the overlay, the
input offsets, and the changelog records a checkpoint writes. The sequence that
sends them is tested in test_commit.py, the rule that reads them back in
test_changelog.py."""

import orjson

from stream_app.stream.changelog import ZSTD_ROWS, Checkpoint, ChangelogRule, packed_rows
from stream_app.state.tables import CACHED, MATCHES, PLAYERS, TABLE_PREFIX, store_key
from stream_app.state.base import Tables
from stream_app.stream.transaction import PartitionTransaction

# The generic transaction: JSON values as they are (the worker's players table has a codec: tables_for).
TABLES = Tables(TABLE_PREFIX, CACHED)

TOPIC = "match-results"


def test_a_batch_reads_its_own_writes_and_the_changelog_gets_them_as_the_store_does():
    committed = {store_key(PLAYERS, b"l\x1fa"): orjson.dumps({"rating": 1.0})}
    state = PartitionTransaction(0, Checkpoint(epoch=3, batch=7), committed.get, TABLES)
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 1.0}
    state.put(PLAYERS, b"l\x1fa", {"rating": 2.0})
    state.put(MATCHES, b"l\x1fm1", {"seq": 1})
    state.put(PLAYERS, b"l\x1fz", None)  # a deletion
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 2.0}
    assert state.committed_value((PLAYERS, b"l\x1fa")) == {"rating": 1.0}
    records, mark, after, values = state.checkpoint_writes()
    # The local store gets the batch's writes, each encoded once; the changelog, the same bytes, packed.
    assert values == {store_key(PLAYERS, b"l\x1fa"): b'{"rating":2.0}', store_key(MATCHES, b"l\x1fm1"): b'{"seq":1}',
                      store_key(PLAYERS, b"l\x1fz"): None}
    assert [value[:17] for _, value in records] == [b"X" + bytes(7) + b"\x03" + bytes(7) + b"\x08"]
    assert list(packed_rows(ZSTD_ROWS, memoryview(records[0][1])[17:])) == list(values.items())
    assert (after.epoch, after.batch, after.rows) == (3, 8, 3)
    # Read back: the rows count only with their checkpoint.
    reader = ChangelogRule(Checkpoint(epoch=3, batch=7, changelog=9))
    reader.feed(10, *records[0])
    assert reader.take()[0] == []
    reader.feed(11, *mark)
    committed_records, checkpoint, _ = reader.take()
    assert [kind for kind, _ in committed_records] == [ZSTD_ROWS]
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.changelog, checkpoint.rows) == (3, 8, 11, 3)
    state.checkpointed(after)
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 2.0} and not state.overlay and not state.dirty


def test_offsets_at_or_below_the_checkpoint_are_applied_and_the_next_one_is_expected():
    state = PartitionTransaction(0, Checkpoint(batch=3, offsets={TOPIC: 41}), lambda k: None, TABLES)
    assert state.already_applied(TOPIC, 41) and not state.already_applied(TOPIC, 42)
    assert state.next_offset(TOPIC) == 42 and state.next_offset("other") is None
    state.note_offset(TOPIC, 42)
    assert state.already_applied(TOPIC, 42) and state.next_offset(TOPIC) == 43
    # take_offset: a record is taken once, and not at or below the checkpoint or the batch's last.
    assert not state.take_offset(TOPIC, 41) and not state.take_offset(TOPIC, 42)
    assert state.take_offset(TOPIC, 44) and not state.take_offset(TOPIC, 44) and not state.take_offset(TOPIC, 43)
    assert state.take_offset("other", 0) and state.already_applied("other", 0)
    _, _, after, _ = state.checkpoint_writes()
    assert after.offsets == {TOPIC: 44, "other": 0}


def test_a_rollback_undoes_the_writes_since_the_savepoint_and_the_changelog_gets_what_stands():
    state = PartitionTransaction(0, Checkpoint(epoch=1), lambda key: None, TABLES)
    state.savepoint(journal=True)
    state.put(PLAYERS, b"l\x1fa", {"rating": 1.0})
    state.savepoint(journal=True)
    state.put(PLAYERS, b"l\x1fa", {"rating": 2.0})
    state.put(PLAYERS, b"l\x1fb", {"rating": 3.0})
    state.rollback()
    assert state.get(PLAYERS, b"l\x1fa") == {"rating": 1.0} and state.get(PLAYERS, b"l\x1fb") is None
    # Without a journal nothing is undone: what was written stays.
    state.savepoint(journal=False)
    state.put(PLAYERS, b"l\x1fc", {"rating": 4.0})
    state.rollback()
    records, _, _, values = state.checkpoint_writes()
    assert values == {store_key(PLAYERS, b"l\x1fa"): b'{"rating":1.0}', store_key(PLAYERS, b"l\x1fc"): b'{"rating":4.0}'}
    assert [row for _, value in records for row in packed_rows(ZSTD_ROWS, memoryview(value)[17:])] == list(values.items())


def test_a_rollback_undoes_what_put_many_wrote_and_keeps_what_was_there():
    state = PartitionTransaction(0, Checkpoint(epoch=1), lambda key: None, TABLES)
    state.savepoint(journal=True)
    state.put(PLAYERS, b"l\x1fa", {"rating": 1.0})
    state.savepoint(journal=True)
    state.put_many([(PLAYERS, b"l\x1fa", {"rating": 2.0}), (PLAYERS, b"l\x1fb", {"rating": 3.0})])
    assert state.get_many(PLAYERS, [b"l\x1fb", b"l\x1fa", b"l\x1fc"]) == [{"rating": 3.0}, {"rating": 2.0}, None]
    state.rollback()
    assert state.get_many(PLAYERS, [b"l\x1fa", b"l\x1fb"]) == [{"rating": 1.0}, None]


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
    _, _, after, _ = state.checkpoint_writes()
    state.checkpointed(after)
    assert state.cache_bytes == 2 * len(value) + small and state.to_cache == []
    assert state.get(PLAYERS, b"l\x1f2") == {"rating": 1.0} and len(reads) == 4
    state.put(PLAYERS, b"l\x1f0", {"rating": 2.0})
    _, _, after, _ = state.checkpoint_writes()
    state.checkpointed(after)  # past the bytes: started over
    assert state.cache == {(PLAYERS, b"l\x1f0"): {"rating": 2.0}} and state.cache_bytes == small


class Counted:
    """A codec that counts its calls: values are (name, number) tuples, stored as 'name=number'."""

    def __init__(self):
        self.encoded = self.decoded = 0

    def encode(self, value):
        self.encoded += 1
        return f"{value[0]}={value[1]}".encode()

    def decode(self, key, raw):
        self.decoded += 1
        name, number = bytes(raw).decode().split("=")
        return (name, int(number))


def test_a_table_with_a_codec_holds_decoded_values_and_encodes_each_once_at_its_commit():
    codec = Counted()
    tables = Tables(TABLE_PREFIX, CACHED, codecs={PLAYERS: codec})
    committed = {store_key(PLAYERS, b"l\x1fa"): b"a=1"}
    state = PartitionTransaction(0, Checkpoint(epoch=1), committed.get, tables,
                                 lambda start, end: iter(sorted((k, v) for k, v in committed.items() if start <= k < end)))
    assert state.get(PLAYERS, b"l\x1fa") == ("a", 1) and state.get(PLAYERS, b"l\x1fa") == ("a", 1)
    assert codec.decoded == 1  # (a cached table: read once)
    for number in range(2, 6):  # written again and again in the batch: encoded once, at its commit
        state.put(PLAYERS, b"l\x1fa", ("a", number))
    state.put(MATCHES, b"l\x1fm1", {"seq": 1})  # no codec: JSON
    assert codec.encoded == 0
    assert state.scan(PLAYERS, b"l\x1f", b"l\x20") == [(b"l\x1fa", ("a", 5))]
    assert state.local_values() == {store_key(PLAYERS, b"l\x1fa"): b"a=5", store_key(MATCHES, b"l\x1fm1"): b'{"seq":1}'}
    assert codec.encoded == 1
    # A changelog row comes as stored: decoded into the overlay.
    state.put_stored(store_key(PLAYERS, b"l\x1fb"), b"b=7")
    assert state.get(PLAYERS, b"l\x1fb") == ("b", 7)


def test_a_committed_batch_starts_the_cache_over_only_when_its_new_keys_leave_no_room(monkeypatch):
    from stream_app.stream import transaction as transaction_module

    monkeypatch.setattr(transaction_module, "CACHE_LIMIT", 4)
    state = PartitionTransaction(0, Checkpoint(epoch=1), lambda key: None, TABLES)

    def commit(*names: bytes) -> None:
        for name in names:
            state.put(PLAYERS, b"l\x1f" + name, {"rating": 1.0})
        _, _, after, _ = state.checkpoint_writes()
        state.checkpointed(after)

    commit(b"a", b"b", b"c")
    assert len(state.cache) == 3
    commit(b"a", b"b", b"c")  # the same keys again: they replace their values, nothing starts over
    assert sorted(key for _, key in state.cache) == [b"l\x1fa", b"l\x1fb", b"l\x1fc"]
    commit(b"d", b"e")  # five keys would not fit: the batch's two start the cache anew
    assert sorted(key for _, key in state.cache) == [b"l\x1fd", b"l\x1fe"]
