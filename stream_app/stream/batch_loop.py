"""The batch loop: take a batch of input, apply it, commit it.

This is what a Faust agent would be. Faust owns the consumer group and calls
`pause` and `resume` at rebalances (stream/app.py); `resume` takes each owned
partition up (stream/commit.py: a fence, then the changelog past the local
checkpoint); input comes from the worker's own consumer (stream/intake.py),
starting after each partition's checkpoint; every record goes through
stream/records.py (which applies matches through apply.apply_match, as the
replay does); every batch ends with a commit (stream/commit.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from ..leagues import LeagueConfig
from ..settings import Settings
from . import intake as input_
from . import observe
from .changelog import Checkpoint, StartedOver, input_fingerprint
from .commit import ChangelogTopic, Committer, Sender
from .intake import Intake, Positions
from .records import Outcome, RecordHandler, is_duplicate
from ..state.tables import JOBS, tables_for
from .transaction import PartitionTransaction
from .store import LocalStore
from .tasks import cancel

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0  # after a failed batch; doubled after each failure in a row
RETRY_MAX_SECONDS = 30.0
# While applying a batch, let the event loop run other tasks (the API's requests)
# this often: reads of committed state never wait for a whole batch.
YIELD_SECONDS = 0.005


class BatchLoop:
    def __init__(self, settings: Settings, config: LeagueConfig, store: LocalStore, sender: Sender,
                 changelog: ChangelogTopic, intake: Intake):
        self.settings = settings
        self.store = store
        self.intake = intake
        self.handler = RecordHandler(config, settings.partitions, settings.forward_topic, settings.rerate_part)
        outputs = {"change": settings.changes_topic, "dead_letter": settings.dlq_topic, "forward": settings.forward_topic}
        # What a take-up needs to make the tables again from the changelog (a standby's too).
        self.deriving = (tables_for(config), self.handler.deriver)
        self.committer = Committer(store, sender, changelog, settings.changelog_topic, outputs, *self.deriving,
                                   base_after=settings.base_after, take_up_seconds=settings.take_up_seconds)
        self.tally = observe.Tally(config)
        self.partitions: dict[int, PartitionTransaction] = {}  # taken up since the last rebalance
        self.failures = 0
        self.resumed = False  # every owned partition is taken up and input flows
        self.take_up_seconds: float | None = None  # the last take-up of the partitions owned
        self.phase = "idle"  # shown by /health and SIGUSR1: diagnosing a stall
        self.rerates = Rerates(self.tally)
        self.pausing = False  # a pause is under way: a re-rate stops at its next part
        # Makes the service's topics exist with their partition counts (stream/app.py), before
        # partitions are taken up: after a broker forgot them, nothing else creates them.
        self.ensure_topics: Callable[[], Awaitable[None]] | None = None
        self.started_over: list[dict[str, Any]] = []  # input partitions found to have started over (for /health)
        self.trouble: str | None = None  # why the partitions cannot be taken up, while they cannot (for /health)
        # Set when more brokers answer (stream/broker_watch.py): a recovery backing off tries at once.
        self.wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        delay = RETRY_SECONDS
        while True:
            # The assignment this batch belongs to: a recovery after it fails is that
            # assignment's, and none if a rebalance came meanwhile (its resume takes up).
            generation = self.intake.generation
            try:
                async with self.intake.busy():  # a pause waits for a re-rate's part as for a batch
                    await self.finish_rerates()
                async with self.intake.batch(idle=self.committer.writing_bases) as records:
                    generation = self.intake.generation
                    await self.apply_batch(records)
                delay = RETRY_SECONDS
            except Paused:
                self.forget()  # taken up anew, and the re-rate resumed, when input resumes
            except Exception as exc:
                # The batch's writes stay uncommitted (stream/transaction.py): take the partitions
                # up anew and read input again from their checkpoints, after a back-off.
                self.failures += 1
                self.forget()
                if isinstance(exc, StartedOver):
                    log.warning("%s: the partitions are taken up anew in %.0f s", exc, delay)
                else:
                    log.exception("a batch failed: input resumes from the checkpoints in %.0f s "
                              "(or as soon as another broker answers)", delay)
                await self._recover(delay, generation)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            finally:
                self.phase = "waiting for a batch"

    async def _recover(self, delay: float, generation: int) -> None:
        """After a failed batch of the assignment of `generation`, in `delay` seconds:
        take its partitions up anew (which checks that their changelogs and input still
        hold what was applied), then input from their checkpoints. Retried, backing off,
        while the broker is away. A pause (a rebalance) since the batch began ends it:
        the new assignment's resume takes its partitions up. (Taking up the partitions
        of an assignment already over fenced their new owner: both workers failed.)"""
        self.wake.clear()
        while await self.intake.wait(delay, generation, self.wake):
            self.wake.clear()
            owned = self.intake.owned_partitions
            try:
                async with self.intake.busy():  # a pause (a rebalance) waits for it, as for a batch
                    await self.take_up({partition for _, partition in owned})
                    await self.intake.rewind(self.positions(owned), generation)
                self.trouble = None
                return
            except Exception as exc:
                self.forget()
                self.trouble = f"taking partitions up failed: {exc}"
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                log.warning("taking the partitions up again failed (%s): again in %.0f s", exc, delay)

    async def apply_batch(self, records: list[Any]) -> None:
        """Apply a batch of input records (in order per partition), in parts of about
        `batch_max_bytes` of input, each committed: a batch is bounded by records, not
        by work, and 2,000 rounds of thousands of participants would otherwise hold
        the event loop for minutes with nothing committed."""
        if not records:  # no input: the bases being written go on
            await self._commit_bases()
            return
        self.tally.input(records)
        oldest = min((record.timestamp for record in records if record.timestamp), default=None)
        if oldest is not None:
            observe.BATCH_STAGE_SECONDS.labels("waiting").observe(max(0.0, time.time() - oldest / 1000))
        start, size = 0, 0
        for i, record in enumerate(records):
            size += len(record.value or b"")
            if size >= self.settings.batch_max_bytes and i + 1 < len(records):
                await self._apply_part(records[start : i + 1])
                start, size = i + 1, 0
        await self._apply_part(records[start:])

    async def _apply_part(self, records: list[Any]) -> None:
        started = time.perf_counter()
        outputs: dict[int, list] = {}  # by partition: a re-rate commits its partition on its own
        applied: list = []
        touched: dict[int, PartitionTransaction] = {}
        applying = self.phase = f"applying a batch of {len(records)}"
        clock = time.perf_counter
        yield_at = clock() + YIELD_SECONDS
        for received in records:
            if clock() >= yield_at:
                await asyncio.sleep(0)
                yield_at = clock() + YIELD_SECONDS
            state = touched.get(received.partition)
            if state is None:
                state = touched[received.partition] = await self._take_up(received.partition)
                self.phase = applying
            mine = outputs.setdefault(received.partition, [])
            expected = state.next_offset(received.topic)
            for record in (await self._with_skipped(state, received, expected)
                           if expected is not None and received.offset > expected else (received,)):
                if self.handler.rerating(state):  # a re-rate holds the partition: its input waits
                    await self._finish_rerates(state, mine)
                    self.phase = applying
                self._handle(state, record, mine, applied)
        self.phase = f"committing {len(touched)} partitions"
        observe.BATCH_STAGE_SECONDS.labels("applying").observe(time.perf_counter() - started)
        # (with the partitions that had no input but a base being written: it goes on with them)
        writing = [state for state in self.partitions.values()
                   if state.partition not in touched and self.committer.writing_base(state)]
        await self.committer.commit([*touched.values(), *writing], [out for part in outputs.values() for out in part])
        self.tally.applied_batch(applied, time.time())
        observe.BATCH_SECONDS.observe(time.perf_counter() - started)

    async def _commit_bases(self) -> None:
        """An empty batch of each partition whose base is being written, with the base's next part."""
        writing = [state for state in self.partitions.values() if self.committer.writing_base(state)]
        if writing:
            self.phase = f"writing the bases of partitions {', '.join(str(state.partition) for state in writing)}"
            await self.committer.commit(writing, [])

    def _handle(self, state: PartitionTransaction, record: Any, outputs: list, applied: list) -> None:
        started = time.perf_counter()
        outcome = self.handler.handle(state, record.topic, record.partition, record.offset, record.key, record.value)
        if outcome.redelivered:
            observe.REDELIVERED.inc()
            return
        state.note_input(record)
        outputs.extend(outcome.outputs)
        if outcome.forwarded:
            self.tally.forward()
        if outcome.dead_letter is not None:
            error = outcome.dead_letter
            self.tally.dead_letter(error.code, error.league, is_duplicate(error))
        if outcome.applied is not None:
            applied.append((outcome.applied, record.timestamp))
        if outcome.pending is not None or outcome.rerated is not None:  # a re-rate began (or ended)
            self.rerates.progress(state, outcome, started)

    # -- re-rates in parts --------------------------------------------------------------
    async def finish_rerates(self) -> None:
        """Finish the re-rates of the partitions taken up (found at their take-up): each
        holds its partition's input until it is done. Only those: after a pause or a
        failed batch none are, and taking up the last assignment's partitions here
        would fence their new owner, and race the next resume's take-up of the same
        partition into the local store (each entry's writes made twice)."""
        for partition, state in sorted(self.partitions.items()):
            if self.handler.rerating(state):
                outputs: list = []
                await self._finish_rerates(state, outputs)
                await self.committer.commit([state], outputs)

    async def _finish_rerates(self, state: PartitionTransaction, outputs: list) -> None:
        """Commit the partition, then apply its re-rates part by part, committing each
        part; the last part's writes and events stay in the batch in progress."""
        while rerating := self.handler.rerating(state):
            league = min(rerating)
            self.phase = f"re-rating league {league}: {self.rerates.describe(league)}"
            await self.committer.commit([state, *self._idle_bases(state)], outputs)
            outputs.clear()
            if self.pausing:
                raise Paused(f"partition {state.partition}: paused between two parts of a re-rate")
            started = time.perf_counter()
            outcome = self.handler.proceed(state, league)
            outputs.extend(outcome.outputs)
            self.rerates.progress(state, outcome, started, continued=True)

    def _idle_bases(self, rerating: PartitionTransaction) -> list[PartitionTransaction]:
        """The other partitions writing a base with nothing of the batch in progress: each
        part of a re-rate carries their bases on (held until the batch ends, a long re-rate
        would keep their store iterators, and the memory they pin, for all its parts)."""
        return [state for state in self.partitions.values()
                if state is not rerating and not state.dirty and self.committer.writing_base(state)]

    async def take_up(self, partitions: set[int] | list[int]) -> None:
        """Take these partitions up now (those not taken up yet), concurrently, once the
        service's topics exist."""
        self.phase = f"taking up {len(partitions)} partitions"
        started = time.perf_counter()
        if self.ensure_topics is not None:
            await self.ensure_topics()
        await asyncio.gather(*(self._take_up(partition) for partition in sorted(partitions)))
        self.take_up_seconds = time.perf_counter() - started
        self.phase = "waiting for a batch"

    async def _take_up(self, partition: int) -> PartitionTransaction:
        state = self.partitions.get(partition)
        if state is None:
            self.phase = f"taking up partition {partition}"
            state = await self.committer.take_up(partition)
            await self._check_input(state)
            if state.dirty:  # input started over: said in a checkpoint now, not at its next batch
                await self.committer.commit([state], [])
            self.partitions[partition] = state
            self.handler.take_up(state)
        return state

    async def _check_input(self, state: PartitionTransaction) -> None:
        """Each input topic of the partition must still hold the last record the
        checkpoint applied: a topic that ends before it, or holds another record
        there (its fingerprint differs), started over. Its input is then read again
        from its beginning; results already applied are dead-lettered as duplicates."""
        checkpoint = state.checkpoint
        wanted = {(topic, state.partition): offset for topic, offset in checkpoint.offsets.items()
                  if topic in self.settings.input_topics}
        if not wanted:
            return
        found = await self.committer.changelog.first_records(wanted)
        for (topic, partition), offset in sorted(wanted.items()):
            record = found[(topic, partition)]
            expected = checkpoint.fingerprints.get(topic)
            if record is not None and record.offset > offset + 1:  # retention removed records never applied
                log.warning("input %s[%d]: records %d to %d were removed (retention) before they were applied: "
                            "input resumes at %d", topic, partition, offset + 1, record.offset - 1, record.offset)
                self._note_started_over(topic, partition, offset, "records removed before they were applied")
                state.restart_input(topic, at=record.offset)
                continue
            if record is not None and (record.offset != offset or expected is None
                                       or input_fingerprint(record.timestamp, record.key, record.value) == expected):
                continue
            why = ("it ends before that offset" if record is None else "another record is at that offset")
            log.warning("input %s[%d] started over: the checkpoint applied up to offset %d, but %s; reading it "
                        "again from its beginning (results already applied become duplicate_match dead letters)",
                        topic, partition, offset, why)
            self._note_started_over(topic, partition, offset, why)
            state.restart_input(topic)

    def _note_started_over(self, topic: str, partition: int, offset: int, reason: str) -> None:
        observe.STARTED_OVER.labels("input", str(partition)).inc()
        self.started_over.append({"log": "input", "topic": topic, "partition": partition, "at": time.time(),
                                  "checkpoint_offset": offset, "reason": reason})
        del self.started_over[:-64]

    async def _with_skipped(self, state: PartitionTransaction, record: Any, expected: int) -> list[Any]:
        """The record, preceded by the records of its partition that input skipped: it
        arrived past `expected`, the next offset the partition's state expects.

        The intake starts each partition right after its checkpoint, so this is a
        safety net: the consumer jumped. The missing records are read directly from
        the broker, in order, and applied first."""
        log.warning("input %s[%d] arrived at offset %d, past the checkpoint (next %d): reading %d skipped records",
                    record.topic, record.partition, record.offset, expected, record.offset - expected)
        observe.INPUT_GAPS.inc()
        skipped = await input_.read_range(self.intake.options, record.topic, record.partition, expected, record.offset)
        return [*skipped, record]

    # -- ownership: called at rebalances (stream/app.py) ---------------------------------
    def checkpoint(self, partition: int) -> Checkpoint:
        """The partition's last checkpoint."""
        state = self.partitions.get(partition)
        if state is not None:
            return state.checkpoint
        return self.store.checkpoint(partition)

    def positions(self, owned: list[tuple[str, int]]) -> Positions:
        """Where input resumes: the record after each partition's checkpoint (None: its beginning)."""
        positions: Positions = {}
        for topic, partition in owned:
            done = self.checkpoint(partition).offsets.get(topic)
            positions[(topic, partition)] = None if done is None else done + 1
        return positions

    async def resume(self, owned: list[tuple[str, int]], generation: int | None = None) -> bool:
        """Take these partitions up, then input from them after their checkpoints
        (unless the assignment of `generation` is already over)."""
        self.pausing = False
        await self.take_up({partition for _, partition in owned})
        if not await self.intake.resume(self.positions(owned), generation):
            return False
        self.trouble = None
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name="ratings-batches")
        self.resumed = True
        return True

    async def pause(self) -> None:
        """Take no more input and wait for the batch in progress. One that does not
        finish in time (the broker is not answering) is cancelled: its writes stay
        uncommitted. The partitions are taken up anew before their next batch."""
        self.resumed = False
        self.pausing = True
        if not await self.intake.pause(self.settings.stop_timeout):
            log.warning("the batch in progress did not finish in %.0f s: cancelling it", self.settings.stop_timeout)
            await self._cancel()
        self.forget()

    def forget(self) -> None:
        """Forget the partitions' states: each is taken up anew (a new epoch) before
        its next batch, which leaves whatever a failed or cancelled batch wrote
        uncommitted (and ends the bases being written)."""
        self.partitions.clear()
        self.committer.end_bases()

    async def stop(self) -> None:
        await self.pause()
        await self._cancel()
        await self.intake.close()

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        await cancel(task)


# -- the re-rates in progress, as /health's `rerating` and the metrics show them ----------
class Paused(Exception):
    """Input was paused (a rebalance, a stop) between two parts of a re-rate: the
    batch ends there; the partition's next owner resumes the re-rate."""


class Rerates:
    def __init__(self, tally: observe.Tally):
        self.tally = tally
        self.running: dict[str, dict[str, Any]] = {}  # league -> its re-rate's progress

    def progress(self, state: PartitionTransaction, outcome: Outcome, started: float, continued: bool = False) -> None:
        """After a part begun at `started`: a later part (`continued`), or the record that began a re-rate."""
        if continued:
            self.tally.rerate_parts += 1
        league = outcome.pending or (outcome.rerated.league if outcome.rerated is not None else None)
        if league is None:
            return
        now = time.perf_counter()
        progress = self.running.setdefault(league, {"started": started, "seconds": 0.0})
        progress["seconds"] += now - started
        if outcome.pending is not None:
            job = state.get(JOBS, league.encode())
            progress.update(match_id=job["match_id"], matches_reapplied=job["reapplied"], matches=job["total"])
            observe.RERATE_REMAINING.labels(league).set(job["total"] - job["reapplied"])
            return
        del self.running[league]
        observe.RERATE_REMAINING.labels(league).set(0)
        self.tally.rerated(outcome.rerated, progress["seconds"], now - progress["started"], time.time())

    def describe(self, league: str) -> str:
        progress = self.running.get(league)
        if progress is None or "matches" not in progress:
            return "resuming"
        return f"{progress['matches_reapplied']:,} of {progress['matches']:,} matches applied again"

    def health(self) -> list[dict[str, Any]]:
        return [{"league": league, **{key: value for key, value in progress.items() if key != "started"}}
                for league, progress in sorted(self.running.items())]
