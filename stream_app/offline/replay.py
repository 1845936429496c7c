"""Offline replay: the same engine over a file of match-result lines.

The `Ledger` (ledger.py) holds every league in memory; results and commands
are applied through `apply.apply`, as in the stream worker, so a replay of a
file and the stream of the same file end in the same state, bit for bit.
"""

from __future__ import annotations

import copyreg
import gzip
import io
import multiprocessing
import pickle
import queue
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from ..engine import Match, Participant, PlayerState
from ..inputs import BadEvent, Correction, Void, parse_input
from ..rerate import Rerated
from ..runtime import keep_survivors, long_lived_states, tune_malloc, use_threads
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

    def __init__(self, total: int | None, enabled: bool):
        self.bar = None
        if enabled and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc="replay", file=sys.stderr, leave=False)

    def update(self, position: int) -> None:
        """`position`: bytes of the input file read so far."""
        if self.bar is not None:
            self.bar.update(position - self.bar.n)

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


# A line as parsed: its item, the BadEvent it raised, or None when blank.
Parsed = Match | Void | Correction | BadEvent | None
# Files at least this big are read and parsed by a forked child process (on
# Linux), while this one rates: parsing is Python work, which a thread could
# only do while the rating thread waits.
READER_MIN_BYTES = 1 << 20
# Input bytes per message from the reader: enough to make each message cheap,
# few enough that it stays just ahead.
_MESSAGE_BYTES = 1 << 18


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
    tune_malloc()
    use_threads(ledger.config)
    lines, raw, size = open_lines(path)
    bar = _Progress(size, sys.stderr.isatty() if progress is None else progress)
    started = time.perf_counter()
    try:
        in_child = (raw is not None and size >= READER_MIN_BYTES and sys.platform.startswith("linux")
                    and not multiprocessing.current_process().daemon)  # a daemonic process may not start one
        # The ledger keeps hundreds of thousands of states alive, none of them in reference cycles.
        with long_lived_states() as settle, _parsed_lines(path, lines, raw, bar, in_child) as parsed, \
                _observe_behind(ledger):
            _replay_lines(parsed, ledger, report, strict, on_problem, settle)
    finally:
        bar.close()
        if raw is not None:
            raw.close()
    report.seconds = time.perf_counter() - started
    return report


def _parse(line: bytes) -> Parsed:
    if not line.strip():
        return None
    try:
        return parse_input(line.rstrip(b"\r\n"))
    except BadEvent as exc:
        return exc


@contextmanager
def _parsed_lines(path: str | Path, lines: Iterator[bytes], raw: IO[bytes] | None, bar: _Progress,
                  in_child: bool) -> Iterator[Iterator[tuple[int, Parsed]]]:
    """(line number, the line parsed) for every line of the file, in order:
    parsed here, or by a child process a few messages ahead."""
    if not in_child:
        yield _parse_here(lines, raw, bar)
        return
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_read_child, args=(str(path), send), name="replay-reader", daemon=True
    )
    child.start()
    send.close()
    try:
        yield _parsed_from(receive, bar, child)
    finally:
        receive.close()
        if child.is_alive():
            child.terminate()
        child.join()


def _parse_here(lines: Iterator[bytes], raw: IO[bytes] | None, bar: _Progress) -> Iterator[tuple[int, Parsed]]:
    for number, line in enumerate(lines, start=1):
        yield number, _parse(line)
        if raw is not None and number % 256 == 0:
            bar.update(raw.tell())


def _parsed_from(receive: Connection, bar: _Progress, child: BaseProcess) -> Iterator[tuple[int, Parsed]]:
    while True:
        try:
            message = receive.recv_bytes()
        except EOFError:
            child.join()
            raise RuntimeError(f"the replay's reader process ended early (exit code {child.exitcode})") from None
        batch, position, error, last = pickle.loads(message)
        yield from batch
        bar.update(position)
        if error is not None:
            raise error
        if last:
            return


def _read_child(path: str, send: Connection) -> None:
    """The reader process: every line parsed, sent in messages of
    (lines, position, error, last). Its first error ends the file there."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the replaying process handles it
    # The objects inherited from the replaying process are never freed here:
    # a collection scanning them would copy their pages.
    keep_survivors()
    batch: list[tuple[int, Parsed]] = []
    position = 0
    try:
        lines, raw, _ = open_lines(path)
        assert raw is not None  # a file: the reader is not used for stdin
        taken = 0
        for number, line in enumerate(lines, start=1):
            batch.append((number, _parse(line)))
            taken += len(line)
            if taken >= _MESSAGE_BYTES:
                position = raw.tell()
                send.send_bytes(_dumps((batch, position, None, False)))
                batch, taken = [], 0
        send.send_bytes(_dumps((batch, raw.tell(), None, True)))
    except BrokenPipeError:  # the replay stopped early
        pass
    except Exception as exc:  # raised by the replay, after the lines read before it
        try:
            message = _dumps((batch, position, exc, True))
        except (pickle.PicklingError, TypeError, AttributeError):  # its text is enough
            message = _dumps((batch, position, RuntimeError(f"replay reader: {exc!r}"), True))
        send.send_bytes(message)


def _dumps(message: Any) -> bytes:
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _READER_TABLE
    pickler.dump(message)
    return out.getvalue()


# A Match goes as columns, one list per field of Participant: rebuilding it
# costs the replaying process less than parsing did, and less than unpickling
# one object per participant would. Trailing fields left at their default in every
# participant are not sent (the constructor gives them the same default).
_PARTICIPANT_FIELDS = [(f.name, f.default) for f in fields(Participant)]


def _match_columns(match: Match) -> tuple[Callable[..., Match], tuple]:
    people = match.participants
    columns = [[getattr(p, name) for p in people] for name, _ in _PARTICIPANT_FIELDS]
    while len(columns) > 1 and all(v is _PARTICIPANT_FIELDS[len(columns) - 1][1] for v in columns[-1]):
        columns.pop()
    return _match_from_columns, (match.league, match.match_id, match.time, columns)


def _match_from_columns(league: str, match_id: str, time: float | None, columns: list[list[Any]]) -> Match:
    return Match(league, match_id, tuple(map(Participant, *columns)), time)


def _bad_event_fields(exc: BadEvent) -> tuple[type[BadEvent], tuple]:
    # Its constructor takes more than the message the default pickling keeps.
    return type(exc), (exc.code, exc.message, exc.field, exc.league, exc.match_id)


_READER_TABLE = copyreg.dispatch_table.copy()
_READER_TABLE[Match] = _match_columns
_READER_TABLE[BadEvent] = _bad_event_fields


def _replay_lines(
    parsed: Iterator[tuple[int, Parsed]],
    ledger: Ledger,
    report: ReplayReport,
    strict: bool,
    on_problem: Callable[[int, BadEvent], None] | None,
    settle: bool,
) -> None:
    for number, item in parsed:
        report.lines = number
        if item is None:
            continue
        try:
            if isinstance(item, BadEvent):
                raise item
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
            if settle:
                keep_survivors()


class ReplayError(RuntimeError):
    def __init__(self, line: int, error: BadEvent):
        super().__init__(f"line {line}: {error}")
        self.line = line
        self.error = error
