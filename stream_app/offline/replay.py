"""Offline replay: the same engine over a file of match-result lines.

`Ledger` holds every league's player states in memory; matches are applied
through `rating.apply_match`, as in the stream worker, so a replay of a file
and the stream of the same file end in the same state, bit for bit.
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
from operator import attrgetter
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Sequence

from ..engine import Match, PlayerState, RatingChange, RatingSystem
from ..events import BadEvent, parse_match
from ..leagues import LeagueConfig
from ..rating import DuplicateMatch, apply_match


_PLAYER = attrgetter("player")
_AFTER = attrgetter("after")


class Ledger:
    """Every league's ratings, in memory (a `LeagueState` for `apply_match`)."""

    def __init__(self, config: LeagueConfig | None = None):
        self.config = config or LeagueConfig.defaults()
        self.leagues: dict[str, dict[str, PlayerState]] = {}
        self.records: dict[str, dict[str, Any]] = {}  # league -> its record (algorithm, matches, players)
        self.seen: dict[str, set[str]] = {}
        self.applied = 0
        self.duplicates = 0
        # Called with (match, prior states, None for newcomers) after each applied match.
        self.observer: Callable[[Match, list[PlayerState | None]], None] | None = None
        # Called with (league, player, entry) for each history entry (`ratings replay --history`).
        self.history: Callable[[str, str, dict[str, Any]], None] | None = None

    def apply(self, match: Match) -> list[RatingChange] | None:
        """Apply one match; None if its match_id was already applied in its league."""
        try:
            applied = apply_match(self.config, self, match)
        except DuplicateMatch:
            self.duplicates += 1
            return None
        self.applied += 1
        if self.observer is not None:
            self.observer(match, applied.prior)
        return applied.changes

    # -- LeagueState ---------------------------------------------------------------
    def league(self, league: str) -> dict[str, Any] | None:
        return self.records.get(league)

    def has_match(self, league: str, match_id: str) -> bool:
        seen = self.seen.get(league)
        return seen is not None and match_id in seen

    def players(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerState | None]:
        players = self.leagues.get(league)
        return [None] * len(names) if players is None else list(map(players.get, names))

    def save(self, match: Match, changes: list[RatingChange], record: dict[str, Any], history: list[dict[str, Any]]) -> None:
        league = match.league
        if self.history is not None:
            for change, entry in zip(changes, history):
                self.history(league, change.player, entry)
        players = self.leagues.get(league)
        if players is None:
            players = self.leagues[league] = {}
            self.seen[league] = set()
        players.update(zip(map(_PLAYER, changes), map(_AFTER, changes)))
        self.seen[league].add(match.match_id)
        self.records[league] = record

    # -- reading -------------------------------------------------------------------
    def state(self, league: str, player: str) -> PlayerState | None:
        return self.leagues.get(league, {}).get(player)

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{league: {player: {rating, matches, ...extras}}}: the replay output."""
        return {
            league: {player: state.public() for player, state in players.items()}
            for league, players in self.leagues.items()
        }

    @property
    def player_count(self) -> int:
        return sum(len(players) for players in self.leagues.values())


@dataclass
class ReplayReport:
    matches: int = 0
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
            match = parse_match(line.rstrip(b"\r\n"))
            changes = ledger.apply(match)
        except BadEvent as exc:
            if strict:
                raise ReplayError(number, exc) from None
            report.skipped += 1
            if len(report.problems) < 1000:
                report.problems.append((number, exc))
            if on_problem is not None:
                on_problem(number, exc)
            continue
        if changes is None:
            report.duplicates += 1
        else:
            report.matches += 1
            if unfreeze:
                gc.freeze()
        if number % 256 == 0:
            bar.update()


class ReplayError(RuntimeError):
    def __init__(self, line: int, error: BadEvent):
        super().__init__(f"line {line}: {error}")
        self.line = line
        self.error = error
