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


def test_a_scan_sees_the_store_as_of_its_call_not_later_writes(tmp_path):
    store = LocalStore(tmp_path)
    store.write(0, {b"pa": b"1", b"pb": b"2", b"q": b"0"}, Checkpoint(1, 1, {}, 1))
    scan = store.scan(0, b"p")  # made before the write below: what standings builds rely on
    store.write(0, {b"pa": None, b"pc": b"3"}, Checkpoint(1, 2, {}, 2))
    assert list(scan) == [(b"pa", b"1"), (b"pb", b"2")]
    assert list(store.scan(0, b"p")) == [(b"pb", b"2"), (b"pc", b"3")]
    store.close()


def test_scan_back_pages_a_prefix_from_the_top_below_a_bound(tmp_path):
    store = LocalStore(tmp_path)
    rows = {b"h\x1fa\x1f" + i.to_bytes(8, "big"): str(i).encode() for i in range(1, 8)}
    rows[b"h\x1fb\x1f" + (1).to_bytes(8, "big")] = b"other player"
    rows[b"h\x1f"] = b"before the prefix"
    store.write(0, rows, Checkpoint())
    prefix = b"h\x1fa\x1f"
    top = prefix + b"\xff" * 8
    assert [v for _, v in store.scan_back(0, prefix, top, 3)] == [b"7", b"6", b"5"]
    assert [v for _, v in store.scan_back(0, prefix, prefix + (5).to_bytes(8, "big"), 10)] == [b"4", b"3", b"2", b"1"]
    assert store.scan_back(0, prefix, prefix + (1).to_bytes(8, "big"), 10) == []
    assert store.scan_back(0, b"h\x1fz\x1f", b"h\x1fz\x1f" + b"\xff" * 8, 10) == []
    store.close()
