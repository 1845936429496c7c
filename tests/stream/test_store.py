"""The local store (stream/store.py): one RocksDB database per partition, each
write its rows together with their checkpoint."""

import pytest

from stream_app.stream.changelog import Checkpoint
from stream_app.stream.store import LocalStore


def test_rows_and_their_checkpoint_are_stored_together_per_partition(tmp_path):
    store = LocalStore(tmp_path)
    store.write(1, {b"pl\x1fb": b"2", b"pl\x1fa": b"1", b"ml\x1fa": b"3"}, Checkpoint(1, 4, {"t": 9}, 17))
    assert store.get(1, b"pl\x1fa") == b"1" and store.get(0, b"pl\x1fa") is None
    assert list(store.scan(1, b"pl\x1f")) == [(b"pl\x1fa", b"1"), (b"pl\x1fb", b"2")]
    assert store.checkpoint(1) == Checkpoint(1, 4, {"t": 9}, 17) and store.checkpoint(0) == Checkpoint()
    store.write(1, {b"pl\x1fa": None}, Checkpoint(1, 5, {"t": 10}, 20))  # None: the key goes
    assert store.get(1, b"pl\x1fa") is None and store.checkpoint(1).batch == 5
    store.close()
    reopened = LocalStore(tmp_path)
    assert reopened.get(1, b"pl\x1fb") == b"2" and reopened.checkpoint(1).changelog == 20
    assert reopened.size(1) > 0
    reopened.close()


def test_a_data_directory_in_use_by_another_store_is_refused_with_its_path(tmp_path):
    first = LocalStore(tmp_path)
    first.write(0, {}, Checkpoint())
    with pytest.raises(RuntimeError, match="another worker"):
        LocalStore(tmp_path).db(0)
    first.close()
