"""What the worker knows of the re-rates in progress (rerate.py does them; the
batch loop, stream/batch_loop.py, commits their parts): /health's `rerating`, the
remaining-matches gauge, and the re-rate's figures once done."""

from __future__ import annotations

import time
from typing import Any

from . import observe
from .records import Outcome
from .tables import JOBS
from .transaction import PartitionTransaction


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
