"""Standby partitions: the changelogs of partitions another worker owns, followed
into the local store, so that taking one over reads only the last moments of
its changelog instead of all of it.

Faust's assignor places each input partition's standby on another worker
(`table_standby_replicas`) and, when an owner leaves, gives its partitions to
their standbys. The follower reads those changelog partitions as they grow,
through the same rule as a take-up (stream/changelog.py), and stores what it
commits with its checkpoint, so the local store of a standby partition is a
consistent cut at every moment, as an owned one is. A changelog that no longer
holds a standby partition's checkpoint started over: the partition is followed
from the beginning, its copy kept until the owner's write-back there completes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import aclosing
from typing import Any

from . import observe
from .changelog import ChangelogRule, StartedOver
from .commit import FLUSH_ROWS, Derive, holds, last_base, store_committed
from .intake import KafkaChangelog
from .store import LocalStore
from .tasks import cancel
from ..state.base import Tables

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0  # a followed partition's local checkpoint is at most about this far behind
RETRY_SECONDS = 5.0


class Standby:
    def __init__(self, store: LocalStore, options: dict[str, Any], changelog_topic: str, tables: Tables,
                 derive: Derive):
        self.store = store
        self.tables = tables  # the partitions' key space, and the domain's way to make an entry's writes again
        self.derive = derive
        self.options = options  # aiokafka connection options
        self.topic = changelog_topic
        self.partitions: list[int] = []
        self.records = 0  # changelog records followed
        # Changelog records of the followed partitions past their local checkpoints (what a
        # take-up would read now); None until each partition's end is known.
        self.behind: int | None = None
        self._task: asyncio.Task | None = None

    def follow(self, partitions: set[int] | list[int]) -> None:
        """Follow these partitions' changelogs from their local checkpoints (call `stop` first)."""
        self.partitions = sorted(partitions)
        observe.STANDBY_PARTITIONS.set(len(self.partitions))
        if self.partitions:
            self._task = asyncio.create_task(self._run(self.partitions), name="ratings-standby")

    async def stop(self) -> None:
        """Stop following; whatever was committed is stored first."""
        task, self._task = self._task, None
        self.partitions = []
        self.behind = None
        observe.STANDBY_PARTITIONS.set(0)
        await cancel(task)

    async def _run(self, partitions: list[int]) -> None:
        while True:
            try:
                await self._follow(partitions)
            except asyncio.CancelledError:
                raise
            except StartedOver as exc:
                log.warning("%s: following again in %.0f s", exc, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
            except Exception:  # the broker went away: try again from the local checkpoints
                log.exception("following standby partitions %s failed: again in %.0f s", partitions, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)

    async def _follow(self, partitions: list[int]) -> None:
        changelog = KafkaChangelog(self.options)
        rules = {}
        for p in partitions:
            checkpoint = self.store.checkpoint(p)
            start = None
            if checkpoint.changelog >= 0 and not await holds(changelog, self.topic, p, checkpoint):
                # Kept until the owner's write-back completes: the owner may be gone too.
                log.warning("standby partition %d: the changelog no longer holds offset %d: following it again "
                            "from its beginning", p, checkpoint.changelog)
                start = 0
            elif checkpoint.changelog < 0:  # nothing yet: from the last base on, as a take-up reads
                self.store.wipe(p)  # (rows stored before a stop, with no checkpoint: stream/commit.py)
                start = await last_base(changelog, self.topic, p, await changelog.end_offset(self.topic, p))
            rules[p] = ChangelogRule(checkpoint, start=start)
        stored = {p: rule.checkpoint.changelog for p, rule in rules.items()}
        flushed = {p: time.monotonic() for p in partitions}

        def flush(p: int) -> None:
            rule = rules[p]
            store_committed(self.store, p, rule, self.tables, self.derive)
            stored[p], flushed[p] = rule.checkpoint.changelog, time.monotonic()

        try:
            async with aclosing(changelog.follow(self.topic, {p: rules[p].position for p in partitions})) as rounds:
                async for fetched, ends in rounds:
                    for p, records in fetched.items():
                        rule = rules[p]
                        for r in records:
                            rule.feed(r.offset, r.key, r.value)
                            if rule.wipe:  # a base or a write-back completed: stored alone, as a take-up does
                                flush(p)
                        self.records += len(records)
                        observe.STANDBY_RECORDS.inc(len(records))
                    now = time.monotonic()
                    for p, rule in rules.items():  # (not inside a base: see `ChangelogRule.storable`)
                        if rule.storable and rule.checkpoint.changelog != stored[p] and (
                                rule.pending >= FLUSH_ROWS or now - flushed[p] >= FLUSH_SECONDS):
                            flush(p)
                    self.behind = _behind(ends, stored)
                    observe.STANDBY_BEHIND.set(-1 if self.behind is None else self.behind)
        finally:
            for p, rule in rules.items():  # keep what was read: a take-up starts from there
                if rule.storable and rule.checkpoint.changelog != stored[p]:
                    flush(p)


def _behind(ends: dict[int, int | None], stored: dict[int, int]) -> int | None:
    """Changelog records past the local checkpoints (None: an end not known yet)."""
    behind = 0
    for p, end in ends.items():
        if end is None:
            return None
        behind += max(0, end - stored[p] - 1)
    return behind
