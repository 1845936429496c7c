"""The worker's local state: one RocksDB database per partition, holding exactly
the partition's last checkpoint.

Each write stores rows together with the checkpoint they make up in one atomic
step, so the database is a consistent cut at every moment: after a crash (even
of the machine) it holds some checkpoint's state, and the changelog past that
checkpoint's record is all there is to read (stream/changelog.py). The step is
a RocksDB write batch (the write-ahead log replays whole write batches or
none) or, for a write larger than a memtable (a batch of big Elo-MMR rounds, a
take-up), one table file that RocksDB ingests whole or not at all: a write
batch would hold such rows twice more while they are written, in the batch and
in the memtable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rocksdict import (BlockBasedIndexType, BlockBasedOptions, Cache, IngestExternalFileOptions, Options, Rdict,
                       SstFileWriter, WriteBatch, WriteBufferManager)

from .changelog import Checkpoint

CHECKPOINT_KEY = b"\x00checkpoint"  # row keys never start with a zero byte

# RocksDB's memory does not grow with the data: per partition two 8 MiB memtables,
# all of them together kept near MEMTABLE_BYTES (the partition written to flushes
# beyond it: a soft bound); one block cache for all partitions, holding the table
# files' index and filter blocks too (otherwise each open file keeps its own, which
# grow with the data). They are partitioned, so a big file's index and filter come
# into the cache in small blocks, as reads need them, and only their top levels stay
# pinned: whole, the filter of a big file outgrew a shard of the cache and was read
# from disk again and again (docs/performance.md, "Settings chosen by measurement").
WRITE_BUFFER_BYTES = 8 * 1024 * 1024
MEMTABLE_BYTES = 64 * 1024 * 1024
BLOCK_CACHE_BYTES = 32 * 1024 * 1024
INGEST_BYTES = WRITE_BUFFER_BYTES  # values of a write that would overflow a memtable: ingested as a table file


class LocalStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._dbs: dict[int, Rdict] = {}
        self._cache = Cache(BLOCK_CACHE_BYTES)
        self._memtables = WriteBufferManager(MEMTABLE_BYTES, False)  # no stall: a flush, never a blocked write

    def _options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        options.set_max_write_buffer_number(2)
        options.set_write_buffer_manager(self._memtables)
        # A bloom filter over each memtable's keys: every new match is looked up (is its id
        # taken?) and found nowhere, first in the memtables (docs/performance.md).
        options.set_memtable_prefix_bloom_ratio(0.1)
        options.set_memtable_whole_key_filtering(True)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_index_type(BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_metadata_block_size(4096)
        table.set_pin_top_level_index_and_filter(True)
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        return options

    def db(self, partition: int) -> Rdict:
        db = self._dbs.get(partition)
        if db is None:
            path = self.directory / str(partition)
            try:
                db = self._dbs[partition] = Rdict(str(path), options=self._options())
            except Exception as exc:  # another process holds it: say which directory
                raise RuntimeError(f"cannot open the local state {path}: {exc} (is another worker using "
                                   f"the same data directory?)") from exc
        return db

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.db(partition).get(key)

    def reader(self, partition: int) -> Callable[[bytes], bytes | None]:
        """The partition's `get`, bound once (a batch reads thousands of keys)."""
        return self.db(partition).get

    def scan(self, partition: int, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The keys with this prefix, in order, as of this call: the RocksDB iterator
        (a consistent view) is made now, not at the first `next`."""
        cursor = self.db(partition).iter()
        cursor.seek(prefix)
        return _forward(cursor, prefix)

    def scan_range(self, partition: int, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The keys in [start, end), in order, as of this call."""
        cursor = self.db(partition).iter()
        cursor.seek(start)
        return _until(cursor, end)

    def scan_back(self, partition: int, prefix: bytes, below: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` keys with this prefix below `below`, highest first."""
        cursor = self.db(partition).iter()
        cursor.seek_for_prev(below)
        found: list[tuple[bytes, bytes]] = []
        while len(found) < limit and cursor.valid():
            key = cursor.key()
            if not key.startswith(prefix):
                break
            if key < below:
                found.append((key, cursor.value()))
            cursor.prev()
        return found

    def checkpoint(self, partition: int) -> Checkpoint:
        return Checkpoint.decode(self.get(partition, CHECKPOINT_KEY))

    def write(self, partition: int, rows: dict[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        """Rows (None: delete the key) and their checkpoint, in one atomic write."""
        if sum(map(len, filter(None, rows.values()))) >= INGEST_BYTES:
            self._ingest(partition, ((key, rows[key]) for key in sorted(rows)), checkpoint)
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in rows.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(CHECKPOINT_KEY, checkpoint.encode())
        self.db(partition).write(batch)

    def wipe(self, partition: int) -> None:
        """Delete every key of the partition, its checkpoint too, in one write."""
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(b"", b"\xff" * 8)  # keys are table prefixes, then text: below eight 0xff bytes
        self.db(partition).write(batch)

    def replace(self, partition: int, rows: Iterable[tuple[bytes, bytes]], checkpoint: Checkpoint) -> None:
        """Every key of the partition replaced by `rows` (keys in increasing order) and
        the checkpoint: a wipe, then one table file ingested. Between the two the
        partition is empty, and an empty store reads its changelog again from the last base."""
        self.wipe(partition)
        self._ingest(partition, rows, checkpoint)

    def _ingest(self, partition: int, rows: Iterable[tuple[bytes, bytes | None]], checkpoint: Checkpoint) -> None:
        """Rows (keys in increasing order; None: delete the key) and the checkpoint as one
        table file, ingested: newer than everything in the database, invisible to the
        iterators already made."""
        db = self.db(partition)
        path = str(self.directory / f"{partition}.ingest.sst")  # beside the database: its directory is RocksDB's
        writer = SstFileWriter(options=self._options())
        writer.open(path)
        writer[CHECKPOINT_KEY] = checkpoint.encode()  # the lowest key: row keys never start with a zero byte
        for key, value in rows:
            if value is None:
                del writer[key]
            else:
                writer[key] = value
        writer.finish()
        options = IngestExternalFileOptions()
        options.set_move_files(True)  # linked into the database rather than copied
        try:
            db.ingest_external_file([path], options)
        finally:  # RocksDB removes the file once ingested, not after a failure
            Path(path).unlink(missing_ok=True)

    def memory(self) -> dict[str, int]:
        """RocksDB's own memory, in bytes, over the partitions open: memtables, table
        readers (what open table files hold outside the block cache), the block cache
        (data, index and filter blocks), and the part of the cache pinned."""
        found = {"memtables": 0, "table_readers": 0}
        for db in list(self._dbs.values()):
            found["memtables"] += db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
            found["table_readers"] += db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
        found["block_cache"] = self._cache.get_usage()
        found["block_cache_pinned"] = self._cache.get_pinned_usage()
        return found

    def count(self, partition: int) -> int:
        """The partition's keys, its checkpoint's aside: counted one by one (RocksDB's
        estimate counts a key once per value written until compaction)."""
        cursor = self.db(partition).iter()
        cursor.seek(b"\x01")
        found = 0
        while cursor.valid():
            found += 1
            cursor.next()
        return found

    def size(self, partition: int) -> int:
        """Bytes of the partition's database files on disk."""
        path = self.directory / str(partition)
        return sum(f.stat().st_size for f in path.glob("*") if f.is_file())

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()
        self._dbs.clear()


def _forward(cursor: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    while cursor.valid():
        key = cursor.key()
        if not key.startswith(prefix):
            return
        yield key, cursor.value()
        cursor.next()


def _until(cursor: Any, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    while cursor.valid():
        key = cursor.key()
        if key >= end:
            return
        yield key, cursor.value()
        cursor.next()
