"""The local store (stream/store.py): one RocksDB database per partition, each
write its rows together with their checkpoint, as a write batch or, when large,
as an ingested table file (each test that writes runs both ways)."""

import time

import pytest

from stream_app.stream import store as store_module
from stream_app.stream.changelog import Checkpoint
from stream_app.stream.store import LocalStore

MIB = 1024 * 1024


@pytest.fixture(params=["batch", "ingested"])
def way(request, monkeypatch):
    monkeypatch.setattr(store_module, "INGEST_BYTES", 1 << 62 if request.param == "batch" else 0)
    return request.param


def test_rows_and_their_checkpoint_are_stored_together_per_partition(tmp_path, way):
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


def test_a_scan_sees_the_store_as_of_its_call_not_later_writes(tmp_path, way):
    store = LocalStore(tmp_path)
    store.write(0, {b"pa": b"1", b"pb": b"2", b"q": b"0"}, Checkpoint(1, 1, {}, 1))
    scan = store.scan(0, b"p")  # made before the write below: what standings builds rely on
    store.write(0, {b"pa": None, b"pc": b"3"}, Checkpoint(1, 2, {}, 2))
    assert list(scan) == [(b"pa", b"1"), (b"pb", b"2")]
    assert list(store.scan(0, b"p")) == [(b"pb", b"2"), (b"pc", b"3")]
    store.close()


def test_scan_back_pages_a_prefix_from_the_top_below_a_bound(tmp_path, way):
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


def test_a_large_write_is_ingested_whole_over_older_values_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "INGEST_BYTES", 64)
    store = LocalStore(tmp_path)
    store.write(0, {b"pa": b"old", b"pb": b"gone", b"pc": b"kept"}, Checkpoint(1, 1, {"t": 1}, 1))  # a write batch
    scan = store.scan(0, b"p")
    rows = {b"p%03d" % i: b"x" * 10 for i in range(10)}
    rows.update({b"pa": b"new", b"pb": None, b"pz": None})  # None: deleted, present or not
    store.write(0, rows, Checkpoint(1, 2, {"t": 5}, 9))
    assert list(scan) == [(b"pa", b"old"), (b"pb", b"gone"), (b"pc", b"kept")]
    assert store.get(0, b"pa") == b"new" and store.get(0, b"pb") is None and store.get(0, b"pc") == b"kept"
    assert store.get(0, b"p007") == b"x" * 10 and store.checkpoint(0) == Checkpoint(1, 2, {"t": 5}, 9)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["0"]
    store.write(0, {b"pa": b"small"}, Checkpoint(1, 3, {"t": 6}, 10))  # a write batch over the ingested file
    store.close()
    reopened = LocalStore(tmp_path)
    assert reopened.get(0, b"pa") == b"small" and reopened.get(0, b"p009") == b"x" * 10
    assert reopened.checkpoint(0).batch == 3
    reopened.close()


def test_a_replace_leaves_exactly_the_rows_given_and_their_checkpoint(tmp_path):
    # A base taken up: what the partition held before goes, in memtables and table files alike.
    store = LocalStore(tmp_path)
    store.write(0, {b"pa": b"old", b"pq": b"gone"}, Checkpoint(1, 1, {"t": 1}, 1))
    store.db(0).flush()
    store.write(0, {b"pr": b"gone too"}, Checkpoint(1, 2, {"t": 2}, 2))
    store.write(1, {b"pa": b"other partition"}, Checkpoint(1, 1, {"t": 1}, 1))
    rows = [(b"p%05d" % i, b"v%d" % i) for i in range(20_000)] + [(b"pa", b"new")]
    rows.sort()
    store.replace(0, iter(rows), Checkpoint(2, 7, {"t": 9}, 40))
    assert list(store.scan_range(0, b"\x01", b"\xff" * 8)) == rows
    assert store.checkpoint(0) == Checkpoint(2, 7, {"t": 9}, 40) and store.get(1, b"pa") == b"other partition"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["0", "1"]  # no table file left beside
    store.close()


def test_memory_counts_the_memtables_and_keeps_index_and_filter_blocks_in_the_block_cache(tmp_path, way):
    store = LocalStore(tmp_path)
    assert store.memory() == {"memtables": 0, "table_readers": 0, "block_cache": 0, "block_cache_pinned": 0}
    rows = {b"p%06d" % i: b"v" * 100 for i in range(20_000)}
    store.write(0, rows, Checkpoint(1, 1, {"t": 1}, 1))
    if way == "batch":  # in the memtable, beyond an empty one's size
        assert store.memory()["memtables"] > 2_000_000
        store.db(0).flush(True)
    # A table file, nothing read yet: its index and bloom filter (about 30 kB for these
    # keys) are in the shared block cache, not held by the file's reader.
    memory = store.memory()
    assert memory["block_cache"] > 20_000 and memory["table_readers"] < memory["block_cache"] / 4
    assert store.get(0, b"p000007") == b"v" * 100
    store.close()


def test_the_memtables_of_all_partitions_together_are_flushed_past_their_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "INGEST_BYTES", 1 << 62)  # write batches: into the memtables

    def after_writes(directory, bound):
        monkeypatch.setattr(store_module, "MEMTABLE_BYTES", bound)
        store = LocalStore(directory)
        rows = {b"p%06d" % i: b"v" * 1000 for i in range(1000)}
        for round_ in range(4):  # 16 MB over four partitions, each under its own two 8 MiB memtables
            for partition in range(4):
                store.write(partition, {key + bytes([round_]): value for key, value in rows.items()}, Checkpoint())
        # The bound is checked at each write (the partition written to flushes) and
        # flushes run in the background: a trickle of writes goes on, as input would.
        seen = [store.memory()["memtables"]]
        deadline = time.monotonic() + 10
        while bound < 8 * MIB < seen[-1] and time.monotonic() < deadline:
            for partition in range(4):
                store.write(partition, {b"q": b"v"}, Checkpoint())
            time.sleep(0.05)
            seen.append(store.memory()["memtables"])
        files = sum(store.db(p).property_int_value("rocksdb.num-files-at-level0") or 0 for p in range(4))
        store.close()
        return files, min(seen)

    files, memtables = after_writes(tmp_path / "unbounded", 1 << 40)
    assert files == 0 and memtables > 12 * MIB
    files, memtables = after_writes(tmp_path / "bounded", 4 * MIB)
    assert files > 0 and memtables <= 8 * MIB  # a soft bound: the partition written to flushes
