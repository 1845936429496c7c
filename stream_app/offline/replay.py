"""Offline replay: the same engine over a file of match-result lines.

The `Ledger` (ledger.py) holds every league in memory; results and commands
are applied through `rating.apply`, as in the stream worker, so a replay of a
file and the stream of the same file end in the same state, bit for bit.
"""

from __future__ import annotations

import gc
import gzip
import io
import queue
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Iterator

from ..engine import Match, PlayerState
from ..events import BadEvent, parse_input
from ..rerate import Rerated
from .ledger import Ledger

__all__ = ["Ledger", "ReplayReport", "ReplayError", "replay", "open_lines"]


@dataclass
class ReplayReport:
    matches: int = 0  # results applied
    commands: int = 0  # voids and corrections applied
    rerates: int = 0  # leagues re-rated (by a command or a late result)
    duplicates: int = 0
    skipped: int = 0
    lines: int = 0
    seconds: float = 0.0
    problems: list[tuple[int, BadEvent]] = field(default_factory=list)


class _Progress:
    """A byte-based progress bar on a terminal; nothing otherwise."""

    def __init__(self, raw: IO[bytes] | None, total: int | None, enabled: bool):
        self.raw = raw
        self.bar = None
        if enabled and raw is not None and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc="replay", file=sys.stderr, leave=False)

    def update(self) -> None:
        if self.bar is not None and self.raw is not None:
            self.bar.update(self.raw.tell() - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def open_lines(path: str | Path) -> tuple[Iterator[bytes], IO[bytes] | None, int | None]:
    """Lines of a JSONL file (plain, .gz, or '-' for stdin), the raw file, its size."""
    if str(path) == "-":
        return iter(sys.stdin.buffer), None, None
    path = Path(path)
    raw = open(path, "rb")
    size = path.stat().st_size
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return iter(io.BufferedReader(gzip.GzipFile(fileobj=raw))), raw, size
    return iter(raw), raw, size


_MALLOC_TUNED = False


def _tune_malloc() -> None:
    """Keep freed memory in the process (glibc): a round allocates and frees
    many NumPy temporaries of a few MB each, which glibc would otherwise map
    and unmap every time (a page fault on every fresh page). Equivalent to MALLOC_MMAP_THRESHOLD_=64 MiB,
    MALLOC_TRIM_THRESHOLD_=256 MiB and MALLOC_TOP_PAD_=64 MiB. Once per
    process; a no-op where glibc's mallopt is not available."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    mallopt(-2, 64 << 20)  # M_TOP_PAD


@contextmanager
def _observe_behind(ledger: Ledger) -> Iterator[None]:
    """Run the ledger's observer on a helper thread, in match order: the
    observer (the accuracy metrics) is mostly NumPy, which releases the GIL,
    so it overlaps with the rating of the next matches. The prior states it
    is given are immutable. Its first exception is raised here, at the latest
    when the replay ends."""
    observer = ledger.observer
    if observer is None:
        yield
        return
    pending: queue.Queue = queue.Queue(maxsize=64)  # bounds the matches held for it
    errors: list[BaseException] = []

    def work() -> None:
        while (item := pending.get()) is not None:
            if not errors:
                try:
                    observer(*item)
                except BaseException as exc:  # re-raised on the replaying thread
                    errors.append(exc)

    def submit(match: Match, prior: list[PlayerState | None]) -> None:
        if errors:
            raise errors[0]
        pending.put((match, prior))

    thread = threading.Thread(target=work, name="replay-observer", daemon=True)
    thread.start()
    ledger.observer = submit
    try:
        yield
    finally:
        ledger.observer = observer
        pending.put(None)
        thread.join()
    if errors:
        raise errors[0]


def replay(
    path: str | Path,
    ledger: Ledger,
    *,
    strict: bool = False,
    progress: bool | None = None,
    on_problem: Callable[[int, BadEvent], None] | None = None,
) -> ReplayReport:
    """Apply every line of the file to the ledger, in file order."""
    report = ReplayReport()
    _tune_malloc()
    lines, raw, size = open_lines(path)
    bar = _Progress(raw, size, sys.stderr.isatty() if progress is None else progress)
    started = time.perf_counter()
    # The ledger keeps hundreds of thousands of states alive, none of them in
    # reference cycles; the cyclic collector would rescan them all at every
    # full collection. Each match's survivors are moved to the permanent
    # generation instead (gc.freeze is O(1)), and the youngest generation's
    # threshold is raised so that a collection only runs within a match that
    # allocates a lot; everything goes back at the end.
    unfreeze = gc.isenabled() and gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    if unfreeze:
        gc.set_threshold(max(thresholds[0], 100_000), *thresholds[1:])
    try:
        with _observe_behind(ledger):
            _replay_lines(lines, ledger, report, bar, strict, on_problem, unfreeze)
    finally:
        if unfreeze:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        bar.close()
        if raw is not None:
            raw.close()
    report.seconds = time.perf_counter() - started
    return report


def _replay_lines(
    lines: Iterator[bytes],
    ledger: Ledger,
    report: ReplayReport,
    bar: _Progress,
    strict: bool,
    on_problem: Callable[[int, BadEvent], None] | None,
    unfreeze: bool,
) -> None:
    for number, line in enumerate(lines, start=1):
        report.lines = number
        if not line.strip():
            continue
        try:
            item = parse_input(line.rstrip(b"\r\n"))
            done = ledger.apply(item)
        except BadEvent as exc:
            if strict:
                raise ReplayError(number, exc) from None
            report.skipped += 1
            if len(report.problems) < 1000:
                report.problems.append((number, exc))
            if on_problem is not None:
                on_problem(number, exc)
            continue
        if done is None:
            report.duplicates += 1
        else:
            if isinstance(item, Match):
                report.matches += 1
            else:
                report.commands += 1
            if isinstance(done, Rerated):
                report.rerates += 1
            if unfreeze:
                gc.freeze()
        if number % 256 == 0:
            bar.update()


class ReplayError(RuntimeError):
    def __init__(self, line: int, error: BadEvent):
        super().__init__(f"line {line}: {error}")
        self.line = line
        self.error = error
