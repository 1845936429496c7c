"""The exactly-once commit sequence: how a partition is taken up, and how a
batch's state and outputs reach the broker and then the local store, in the
order the rules of stream/changelog.py need (docs/design.md has the argument).

Taking a partition up (a worker start, a rebalance, after a failed batch):
1. send a fence of the next epoch to the partition's changelog;
2. read the changelog from the local checkpoint's record up to the fence,
   storing what the rule commits (in write batches, each with its checkpoint):
   a row as it is, an entry as the domain's local writes made again from it
   (`Derive`, stream/records.py);
3. if the rule accepted the fence, this worker owns the partition with the
   state read; if another fence came first with an epoch as high, try again
   above it.
Before step 1 the changelog must still hold the local checkpoint's record. If it
does not, the changelog started over (the broker forgot it, the topic was
recreated): if it holds a start written since by a newer owner, the local state
is wiped and read again from there; otherwise the worker writes its local state
back, after a start record of a new epoch, before anything else is applied.

Committing a batch, for each partition it touched, concurrently:
1. the batch's entries and rows go to the changelog; its outputs go to their
   topics at the same time;
2. once both are acknowledged, the checkpoint record goes alone;
3. once it is acknowledged, the batch's local writes and the checkpoint go into
   the local store in one write: from then on the batch is committed and its
   input applied.
A failure anywhere leaves the batch uncommitted: the local store still holds
the previous checkpoint, and the partition is taken up anew.

Every acknowledgement says where the records landed. The owner is the only
writer of its changelog partitions, so records between its own are a replaced
worker's late writes: if they include a fence of a higher epoch, this worker
has been replaced itself (`Fenced`); otherwise the rule drops them (every data
record has a key of its own: compaction never puts one in the place of another).

No Faust here: `Sender` and `ChangelogTopic` are what the sequence needs of the
broker (stream/kafka_io.py and stream/intake.py have Kafka's; the tests have
an in-memory broker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from itertools import chain, islice
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Protocol


from . import observe
from .changelog import (BASE, BASE_END, BASE_ROWS_FIRST, CHECKPOINT, ENTRY, PACKED, ROW, START, Checkpoint, ChangelogRule,
                        RecordWriter, StartedOver, base_end_record, base_record, checkpoint_payload,
                        checkpoint_record, epoch_of, fence_record, is_mark, mark_of, packed_rows, row_of, start_record)
from .partitioner import key_partition
from .store import LocalStore
from ..state.base import Tables
from .transaction import PartitionTransaction

log = logging.getLogger(__name__)

# A take-up stores what the changelog's records committed make in writes of about this many
# rows (an entry of an earlier release counted as one, though it makes about eight local
# keys): smaller writes were taken up faster (docs/performance.md, "Settings chosen by
# measurement").
FLUSH_ROWS = 16_000
# Makes a changelog entry's local writes again, through the transaction (the domain's: stream/records.py).
Derive = Callable[[PartitionTransaction], Callable[[memoryview], None]]  # an entry's writes, made again into it
# What a take-up onto an empty data directory spends, about (docs/performance.md, "Recovery"):
# an entry's local writes derived again, and a base's row read and stored (packed rows, one
# table file). A base is due by time once the entries past it cost more than the budget.
ENTRY_TAKE_UP_SECONDS = 50e-6
ROW_TAKE_UP_SECONDS = 1e-6
# Records a take-up onto an empty directory reads first from the changelog's end, looking for
# its last checkpoint (a batch's records are about that many): twice as many before each step.
BASE_SEARCH_STEP = 256
# Packed records of an open base each commit of its partition sends (about PACK_BYTES each
# before compression: 2 MiB, read, packed and compressed in about 25 ms), before the batch's
# own: a base of a million keys takes about 50 commits, and none waits for it
# (docs/performance.md, "Changelog").
BASE_RECORDS_A_COMMIT = 8
# Event-loop turns the producer gets to put the outputs on the wire before the
# records are built (the CPU-bound part of a commit): consumers see a batch's events
# sooner, most of all after a re-rate (they are sent before its checkpoint either way).
OUTPUT_HEAD_START = 3


@dataclass(slots=True)
class Output:
    """A record for an output topic, partitioned by its key."""

    kind: str  # "change", "dead_letter" or "forward": Committer.output_topics names each one's topic
    key: bytes
    value: bytes


class Fenced(Exception):
    """Another worker took the partition over with a higher epoch."""


@dataclass(slots=True)
class _OpenBase:
    """A base being written: its opening mark's offset, the batch it is the state of, and its
    packed records still to send (from a store iterator made at that batch: RocksDB's
    view as of then). The entries and packed rows committed up to that batch are in its
    transaction's checkpoint (`Checkpoint.opened`)."""

    state: Any  # the PartitionTransaction it belongs to: a take-up anew ends it
    at: int
    batch: int
    records: Iterator[tuple[bytes, bytes]]
    writer: RecordWriter
    started: float


class Sender(Protocol):
    async def partitions(self, topic: str) -> int:
        """The topic's partition count."""

    async def send(self, topic: str, partition: int,
                   records: Iterable[tuple[bytes, bytes]]) -> list[Awaitable[tuple[int, int]]]:
        """Queue records for one topic partition, in order; each awaitable gives the
        offsets of the first and last record of one record batch once acknowledged."""


class ChangelogTopic(Protocol):
    def read(self, topic: str, partition: int, start: int, end: int) -> AsyncIterator[list[tuple[int, bytes, bytes]]]:
        """The records at offsets start..end-1 of a topic partition, in order, in
        chunks of (offset, key, value)."""

    async def first_records(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], Any]:
        """For each (topic, partition): its first record at or after the offset (with
        `offset`, `key`, `value`, `timestamp`), or None if the partition ends at or
        before that offset or does not exist."""

    async def end_offset(self, topic: str, partition: int) -> int:
        """The offset after the partition's last record (a little low at worst)."""

    async def delete_before(self, topic: str, partition: int, offset: int) -> int:
        """Delete the partition's records before `offset` (Kafka's DeleteRecords): a
        read from below it starts there. Returns the partition's first offset now."""


class Committer:
    def __init__(self, store: LocalStore, sender: Sender, changelog: ChangelogTopic, changelog_topic: str,
                 output_topics: dict[str, str], tables: Tables, derive: Derive, base_after: int = 0,
                 take_up_seconds: float = 0.0):
        self.store = store
        # A partition whose changelog holds at least this many records past its last
        # completed start gets a new base (0: never), once it is due (`_base_due`).
        self.base_after = base_after
        self.take_up_seconds = take_up_seconds
        self.derive = derive
        self.tables = tables  # the partitions' key space (the transaction knows tables by prefix only)
        self.sender = sender
        self.changelog = changelog
        self.topic = changelog_topic
        self.output_topics = output_topics  # Output.kind -> topic
        # Told of each partition taken up, and of each batch's writes once in the local store (stream/reads.py).
        self.on_take_up: Callable[[int], None] = lambda partition: None
        self.on_commit: Callable[[int, dict], None] = lambda partition, overlay: None
        self.take_up_records = 0  # changelog records read by take-ups, counted as each part is stored
        self.fenced = 0  # changelog records of replaced workers seen
        self.replaced = 0  # batches that found this worker replaced
        self.started_over: list[dict[str, Any]] = []  # changelog partitions found to have started over (for /health)
        self._keys: dict[int, int] = {}  # the local keys of each partition, as last counted (`_base_due`)
        self._bases: dict[int, _OpenBase] = {}  # the bases being written, by partition
        # One take-up of a partition at a time: two reading its changelog into the local
        # store at once would each make an entry's writes (a match counted twice).
        self._taking_up: dict[int, asyncio.Lock] = {}

    # -- taking a partition up ---------------------------------------------------------
    async def take_up(self, partition: int) -> PartitionTransaction:
        """A partition newly owned: its committed state, under a new epoch. A take-up
        of the partition already under way is waited for; this one goes on from it."""
        async with self._taking_up.setdefault(partition, asyncio.Lock()):
            return await self._take_up(partition)

    async def _take_up(self, partition: int) -> PartitionTransaction:
        started = time.perf_counter()
        self._end_base(partition)  # (before the store may be wiped under its iterator)
        local = self.store.checkpoint(partition)
        rule = ChangelogRule(local)
        if local.changelog >= 0 and not await holds(self.changelog, self.topic, partition, local):
            rule = await self._start_over(partition, local)
        epoch = rule.checkpoint.epoch + 1
        read_from, records_before = rule.position, self.take_up_records
        while True:
            [ack] = await self.sender.send(self.topic, partition, [fence_record(epoch)])
            _, fence_at = await ack
            if fence_at < rule.position:  # it started over since the check above
                raise StartedOver(f"changelog partition {partition}: a fence landed at offset {fence_at}, "
                                  f"below the local checkpoint's {rule.position - 1}")
            if rule.position == 0 and local.changelog < 0:  # an empty directory: from the last base on
                self.store.wipe(partition)  # (rows a reader stored before it died, with no checkpoint)
                rule = ChangelogRule(local, start=await last_base(self.changelog, self.topic, partition, fence_at))
                read_from = rule.position
            await self.read_changelog(partition, rule, fence_at + 1)
            if rule.checkpoint.changelog == fence_at:  # the rule accepted our fence
                break
            epoch = rule.checkpoint.epoch + 1
        if self.base_after and rule.checkpoint.base > 0:
            # What a base that ended left before it, if its owner died before deleting it (or
            # the deletion failed): nothing else would, until another base is due.
            await self.clean(partition, rule.checkpoint.base)
        took = time.perf_counter() - started
        observe.TAKE_UP_SECONDS.observe(took)
        if took >= 1.0:  # a restart on its own directory reads a few records: not worth a line
            log.info("changelog partition %d taken up at epoch %d: %d records from offset %d on in %.2f s",
                     partition, epoch, self.take_up_records - records_before, read_from, took)
        self.on_take_up(partition)
        return transaction(self.store, partition, rule.checkpoint, self.tables)  # at our fence

    async def read_changelog(self, partition: int, rule: ChangelogRule, end: int) -> None:
        """Feed the rule the changelog up to `end` (exclusive), storing what it commits."""
        counted = rule.position
        async for records in self.changelog.read(self.topic, partition, rule.position, end):
            for offset, key, value in records:
                rule.feed(offset, key, value)
                if rule.wipe:  # a base or a write-back completed: its rows as one table file, then what came since
                    counted = self._store_part(partition, rule, counted)
                elif rule.pending >= FLUSH_ROWS and rule.storable:  # (a fetch holds a partition's whole log
                    counted = self._store_part(partition, rule, counted)  # of packed records: stored in parts)
        if rule.storable:  # (a take-up's own fence ends any base still open: it is stored then)
            self._store_part(partition, rule, counted)
        observe.FENCED_RECORDS.inc(rule.fenced)
        self.fenced += rule.fenced
        rule.fenced = 0

    def _store_part(self, partition: int, rule: ChangelogRule, counted: int) -> int:
        """What the rule committed, into the local store; the records read since
        `counted` are counted once stored (a take-up killed part-way goes on from there).
        Returns the position counted up to."""
        store_committed(self.store, partition, rule, self.tables, self.derive)
        self.take_up_records += rule.position - counted
        observe.TAKE_UP_RECORDS.inc(rule.position - counted)
        return rule.position

    async def _start_over(self, partition: int, local: Checkpoint) -> ChangelogRule:
        """The changelog no longer holds the local checkpoint. If a newer owner wrote a
        start since (its epoch above ours), the state is what follows it: wipe and read.
        Otherwise write the local state back, so that a take-up finds it."""
        [ack] = await self.sender.send(self.topic, partition, [fence_record(local.epoch + 1)])
        _, end = await ack
        newest = local.epoch + 1  # the fence just sent
        starts: dict[int, int] = {}  # epoch -> offset of the starts of newer owners
        bases: dict[tuple[int, int], int] = {}  # (epoch, batch) -> offset of the bases of newer owners
        start_at = None  # the last of them that completed (a write-back) or ended (a base)
        async for records in self.changelog.read(self.topic, partition, 0, end):
            for offset, _, value in records:
                if value is None:  # a tombstone
                    continue
                epoch = epoch_of(value)
                newest = max(newest, epoch)
                if value[0] == START and epoch > local.epoch:
                    starts[epoch] = offset
                elif value[0] == CHECKPOINT and epoch in starts:
                    start_at = starts[epoch]
                elif value[0] == BASE and epoch > local.epoch:
                    bases[mark_of(value)[1:]] = offset
                elif value[0] == BASE_END and mark_of(value)[1:] in bases:
                    start_at = bases[mark_of(value)[1:]]
        if start_at is not None:
            log.warning("changelog partition %d started over and holds a newer owner's state from offset %d: "
                        "the local state (epoch %d) is replaced by it", partition, start_at, local.epoch)
            self._note_started_over(partition, local, end, "replaced by a newer start")
            # The local state stands until that start completes.
            return ChangelogRule(replace(local, base=-1, entries=0, rows=0), start=start_at)
        rule = await self._write_back(partition, local, newest + 1)
        self._note_started_over(partition, local, end, "local state written back")
        return rule

    async def _write_back(self, partition: int, local: Checkpoint, epoch: int) -> ChangelogRule:
        """A start of `epoch`, then every local row as one batch and its checkpoint:
        what a take-up on an empty directory reads. Until that checkpoint is
        acknowledged none of it counts, and the local store keeps its checkpoint."""
        writer = RecordWriter(epoch, 1)
        rows = writer.packed(self.store.scan_range(partition, b"\x01", b"\xff" * 8))
        mark = checkpoint_record(epoch, 1, local.offsets, local.fingerprints)
        acks = await self.sender.send(self.topic, partition, chain([start_record(epoch)], rows, [mark]))
        first_at = last_at = None
        for ack in acks:
            first, last = await ack
            if last_at is not None and first != last_at + 1:  # another writer in between: try again later
                raise StartedOver(f"changelog partition {partition}: another writer interleaved the write-back")
            first_at = first if first_at is None else first_at
            last_at = last
        after = Checkpoint(epoch, 1, dict(local.offsets), last_at, dict(local.fingerprints), base=first_at)
        self.store.write(partition, {}, after)
        log.warning("changelog partition %d had lost records: the local state (%d rows) is written back at offsets "
                    "%d to %d under epoch %d", partition, writer.rows_packed, first_at, last_at, epoch)
        return ChangelogRule(after)

    def _note_started_over(self, partition: int, local: Checkpoint, end: int, action: str) -> None:
        observe.STARTED_OVER.labels("changelog", str(partition)).inc()
        self.started_over.append({"log": "changelog", "partition": partition, "at": time.time(),
                                  "checkpoint_offset": local.changelog, "log_end": end, "action": action})
        del self.started_over[:-64]

    # -- committing a batch ------------------------------------------------------------
    async def commit(self, states: list[PartitionTransaction], outputs: list[Output]) -> None:
        """Commit a batch: the partitions' states and the batch's outputs, as above; then
        open a base for each partition whose changelog needs one (its rows go out with the
        partition's next commits)."""
        started = time.perf_counter()
        outputs_acked = asyncio.ensure_future(asyncio.gather(*await self._send_outputs(outputs)))
        if outputs:
            outputs_acked.add_done_callback(lambda _: observe.BATCH_STAGE_SECONDS.labels("publishing").observe(
                time.perf_counter() - started))
        for _ in range(OUTPUT_HEAD_START):
            await asyncio.sleep(0)
        dirty = [state for state in states if state.dirty or self.writing_base(state)]
        # Every part finishes (or fails) before the batch does: nothing of a failed
        # batch may still be writing when input goes back to the checkpoints.
        done = await asyncio.gather(outputs_acked, *(self._checkpoint(state, outputs_acked) for state in dirty),
                                    return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result
        observe.BATCH_STAGE_SECONDS.labels("checkpointing").observe(time.perf_counter() - started)
        for state, needs_base in zip(dirty, done[1:]):
            if needs_base:
                await self.open_base(state)

    async def _checkpoint(self, state: PartitionTransaction, outputs_acked: Awaitable) -> bool:
        """The partition's part of a batch's commit (with a part of its open base, if it
        has one, before the batch's records); whether its changelog now needs a base."""
        base_records, ended = self._base_part(state, BASE_RECORDS_A_COMMIT)
        records, mark, after, values = state.checkpoint_writes()
        if base_records or records:
            await self._send(state, chain(base_records, records))
        await outputs_acked
        await self._send(state, [mark])
        after.changelog = state.changelog_next - 1
        self.store.write(state.partition, values, after)
        self.on_commit(state.partition, state.overlay)
        state.checkpointed(after)
        observe.CHECKPOINTS.inc()
        if ended is not None:
            await self._base_written(ended)
        if state.partition in self._bases:
            return False
        # The records the changelog holds from its last completed start on (those before it
        # are deleted by the base that made them void; where that failed, by the next), a
        # packed record's rows (a re-rate's) each counted.
        held = after.changelog + 1 - max(after.base, 0) + after.rows
        return bool(self.base_after) and held >= self.base_after and self._base_due(state.partition, held, after)

    # -- bases -------------------------------------------------------------------------
    def _base_due(self, partition: int, held: int, after: Checkpoint) -> bool:
        """Whether the partition needs a new base, by its changelog's records `held`, the
        entries and rows past its last start, and its local keys. The keys are counted
        again only when the last count says a base is due: a count reads them all (until
        then they are the count at the last base or take-up)."""
        keys = self._keys.get(partition)
        if keys is None or self._due(held, after, keys):
            keys = self._keys[partition] = self.store.count(partition)
        return self._due(held, after, keys)

    def _due(self, held: int, after: Checkpoint, keys: int) -> bool:
        """By size: the changelog holds twice as many records (a packed record counted as its
        rows) as the store has keys. By time: taking up what is past the last start (entries
        of earlier releases derived again, rows stored) would make a take-up onto an empty
        directory (which reads from that start) take longer than `take_up_seconds`, and
        longer than a new base would."""
        if held >= 2 * keys:
            return True
        since = after.entries * ENTRY_TAKE_UP_SECONDS + after.rows * ROW_TAKE_UP_SECONDS
        base = keys * ROW_TAKE_UP_SECONDS
        return 0 < self.take_up_seconds < since + base and since >= base

    async def open_base(self, state: PartitionTransaction) -> None:
        """Open a base of the partition's committed state, right after its batch's
        checkpoint: its opening mark now; its rows, read from the local store as it is now
        (a RocksDB iterator's view stays as of its making), go out with the partition's
        next commits, and its end mark with the last of them, whose checkpoint names the
        base. A rule that reads the base from its opening to its end replaces its state
        by the rows and applies what was committed since on top; one that does not (a
        crash, a fence between) keeps what it had. The batches wait for none of it."""
        self._end_base(state.partition)
        before = state.checkpoint
        writer = RecordWriter(before.epoch, before.batch, first=BASE_ROWS_FIRST)
        records = writer.packed(self.store.scan_range(state.partition, b"\x01", b"\xff" * 8))
        at = await self._send(state, [base_record(before.epoch, before.batch)])
        self._bases[state.partition] = _OpenBase(state, at, before.batch, records, writer, time.perf_counter())
        state.checkpoint = replace(state.checkpoint, opened=(at, before.entries, before.rows))

    def _base_part(self, state: PartitionTransaction, most: int | None) -> tuple[list[tuple[bytes, bytes]], Any]:
        """The next `most` packed records of the partition's open base (None: all of them),
        with its end mark once they are all out; then the base ended (otherwise None), and
        the transaction's checkpoint names it, with the entries committed since."""
        base = self._bases.get(state.partition)
        if base is None:
            return [], None
        if base.state is not state:  # taken up anew since: the base ended with its owner's epoch
            self._end_base(state.partition)
            return [], None
        part = list(islice(base.records, most))
        if most is not None and len(part) == most:
            return part, None
        part.append(base_end_record(base.writer.epoch, base.batch))
        del self._bases[state.partition]
        current = state.checkpoint
        assert current.opened is not None  # (set by open_base, kept by every checkpoint since)
        _, entries, rows = current.opened
        state.checkpoint = replace(current, base=base.at, entries=current.entries - entries, rows=current.rows - rows,
                                   opened=None)
        return part, base

    @property
    def writing_bases(self) -> bool:
        return bool(self._bases)

    def writing_base(self, state: PartitionTransaction) -> bool:
        """Whether the partition has a base being written by this transaction."""
        base = self._bases.get(state.partition)
        return base is not None and base.state is state

    def end_bases(self) -> None:
        """Drop every base being written (the partitions are taken up anew)."""
        for partition in list(self._bases):
            self._end_base(partition)

    def _end_base(self, partition: int) -> None:
        """Drop the partition's open base (its owner's epoch is over), and its store iterator now."""
        base = self._bases.pop(partition, None)
        if base is not None:
            base.records.close()

    async def write_base(self, state: PartitionTransaction) -> None:
        """A base written at once between two batches (what commits do in parts): opened,
        every row, its end, and an empty batch's checkpoint that names it."""
        await self.open_base(state)
        part, base = self._base_part(state, None)
        await self._send(state, part)
        before = state.checkpoint
        after = replace(before, batch=before.batch + 1)
        await self._send(state, [checkpoint_record(after.epoch, after.batch, after.offsets, after.fingerprints,
                                                   after.base)])
        after.changelog = state.changelog_next - 1
        self.store.write(state.partition, {}, after)
        state.checkpointed(after)
        await self._base_written(base)

    async def _base_written(self, base: _OpenBase) -> None:
        """A base ended, and a checkpoint that names it is acknowledged: the records before
        it are void."""
        partition, rows = base.state.partition, base.writer.rows_packed
        self._keys[partition] = rows
        observe.BASES.inc()
        observe.BASE_ROWS.inc(rows)
        written = time.perf_counter()
        cleaned = await self.clean(partition, base.at)
        log.info("changelog partition %d: a base of %d rows (the state at batch %d) at offset %d, written with the "
                 "batches after it in %.2f s; the records before it %s in %.3f s", partition, rows, base.batch,
                 base.at, written - base.started, "deleted" if cleaned else "NOT deleted",
                 time.perf_counter() - written)

    async def clean(self, partition: int, start: int) -> bool:
        """Delete the changelog's records before a completed start (a base), which it made
        void; whether the broker did. A failure only leaves them for the partition's next
        take-up or base to delete: the batches need not wait for it."""
        try:
            await self.changelog.delete_before(self.topic, partition, start)
            return True
        except Exception as exc:  # (a Crash of the tests is a BaseException: it goes through)
            observe.CLEAN_FAILURES.inc()
            log.warning("changelog partition %d: the records before the base at offset %d were not deleted (%s: %s); "
                        "the next take-up or base deletes them", partition, start, type(exc).__name__, exc)
            return False

    async def _send(self, state: PartitionTransaction, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Send records to the partition's changelog and wait for the acks; raises Fenced
        if other writers put a fence of a higher epoch between them. Returns the offset of
        the first (-1: none sent)."""
        acks = await self.sender.send(self.topic, state.partition, records)
        first_at = -1
        for ack in acks:
            first, last = await ack
            first_at = first if first_at < 0 else first_at
            if first < state.changelog_next:
                raise StartedOver(f"changelog partition {state.partition}: records landed at offset {first}, "
                                  f"below this owner's last ({state.changelog_next - 1})")
            if first != state.changelog_next:
                await self._foreign(state, state.changelog_next, first)
            state.changelog_next = last + 1
        return first_at

    async def _foreign(self, state: PartitionTransaction, start: int, end: int) -> None:
        async for records in self.changelog.read(self.topic, state.partition, start, end):
            for _, _, value in records:
                if value is None:  # a tombstone (an earlier release cleaned with them)
                    continue
                epoch = epoch_of(value)
                if epoch > state.epoch:
                    self.replaced += 1
                    raise Fenced(f"partition {state.partition}: taken over at epoch {epoch}")
                observe.FENCED_RECORDS.inc()  # a replaced worker's late write
                self.fenced += 1

    async def _send_outputs(self, outputs: list[Output]) -> list[Awaitable[tuple[int, int]]]:
        """The outputs in order, grouped per topic partition (partitioned by key)."""
        counts = {topic: await self.sender.partitions(topic) for topic in {self.output_topics[o.kind] for o in outputs}}
        groups: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        partitions: dict[tuple[str, bytes], int] = {}
        for out in outputs:
            topic = self.output_topics[out.kind]
            partition = partitions.get((topic, out.key))
            if partition is None:
                partition = partitions[(topic, out.key)] = key_partition(out.key, counts[topic])
            groups.setdefault((topic, partition), []).append((out.key, out.value))
        acks: list[Awaitable[tuple[int, int]]] = []
        for (topic, partition), records in groups.items():
            acks += await self.sender.send(topic, partition, records)
        return acks


async def holds(changelog: ChangelogTopic, topic: str, partition: int, checkpoint: Checkpoint) -> bool:
    """Whether the changelog still holds the record a local checkpoint stands at. A
    later record in its place does not count against: the record was deleted before a
    base (or, in a compacted topic, removed by the cleaner)."""
    found = (await changelog.first_records({(topic, partition): checkpoint.changelog}))[(topic, partition)]
    if found is None:
        return False
    if found.offset > checkpoint.changelog:
        return True
    if found.value is None or not is_mark(found.value):
        return False
    kind, epoch, batch = mark_of(found.value)
    return epoch == checkpoint.epoch and (kind != CHECKPOINT or batch == checkpoint.batch)


async def last_base(changelog: ChangelogTopic, topic: str, partition: int, end: int) -> int:
    """Where a rule with no state (a take-up onto an empty directory, a standby's first
    following) starts: the start named by the changelog's last checkpoint before `end`,
    or 0 if it names none. Everything before a completed start is void, so the rule
    reads from there what it would read from the beginning. The log is read backwards in growing steps: the
    last checkpoint is near its end, and the steps read a base's rows only when the base
    is the last thing written."""
    step = BASE_SEARCH_STEP
    while end > 0:
        start = max(0, end - step)
        last = None
        async for records in changelog.read(topic, partition, start, end):
            for _, _, value in records:
                if value is not None and value[0] == CHECKPOINT:
                    last = value
        if last is not None:
            return max(0, checkpoint_payload(last)[2])
        end, step = start, 2 * step
    return 0


def transaction(store: LocalStore, partition: int, checkpoint: Checkpoint, tables: Tables) -> PartitionTransaction:
    """A transaction over the partition's local store, from its checkpoint."""
    return PartitionTransaction(partition, checkpoint, store.reader(partition), tables,
                                lambda start, end: store.scan_range(partition, start, end))


def store_committed(store: LocalStore, partition: int, rule: ChangelogRule, tables: Tables, derive: Derive) -> None:
    """What the rule committed since it was last taken, into the local store with its
    checkpoint: each row as it is, each entry's local writes made again, in the
    changelog's order (after a wipe, if a start or a base completed); in one write, but
    for a base's rows, which go in first, as a table file."""
    rows = rule.table  # the packed rows a base or a write-back starts with (a take-up and a standby store it as it completes)
    records, checkpoint, wipe = rule.take()
    if rows:
        # Its rows, in key order, replace the partition's as one table file, with no dict between;
        # what was committed since a base opened then goes on top. Until then the store holds no
        # checkpoint: a reader that dies between the two starts again as on an empty directory
        # (which wipes what it finds: `Committer._take_up`, the standby).
        table = chain.from_iterable(packed_rows(kind, payload) for kind, payload in records[:rows])
        store.replace(partition, table, checkpoint if rows == len(records) else Checkpoint())
        if rows == len(records):
            return
        records = records[rows:]
    elif wipe:
        store.wipe(partition)
    values: dict[bytes, bytes | None] = {}
    if records and not any(kind == ENTRY for kind, _ in records):  # rows alone: stored as they are
        for kind, payload in records:
            values.update(packed_rows(kind, payload) if kind in PACKED else (row_of(payload),))
    elif records:
        state = transaction(store, partition, checkpoint, tables)
        apply_records(state, records, derive)
        values = state.local_values()
    store.write(partition, values, checkpoint)


def apply_records(state: PartitionTransaction, records: Iterable[tuple[int, memoryview]], derive: Derive) -> None:
    """Committed changelog records, in order, as local writes: a row as it is, an
    entry through the domain."""
    entry = derive(state)
    for kind, payload in records:
        if kind == ENTRY:
            entry(payload)
        elif kind in PACKED:
            for key, value in packed_rows(kind, payload):
                state.put_stored(key, value)
        else:
            state.put_stored(*row_of(payload))
