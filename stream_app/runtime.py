"""What the rating engine leaves to its caller: threads and memory. The replay
and the worker both set their process up here; the engine itself starts no
thread and never touches the garbage collector or the C library.

- Threads: Elo-MMR solves a big round's rows independently; `split_rows` solves
  them in parts on the calling thread and one helper thread together (NumPy
  releases the GIL in its loops). Rows are independent: the parts give the same
  bits as one piece. `use_threads` gives it to a configuration's systems.
- The cyclic collector: a big round or a re-rate allocates millions of objects
  and frees them without cycles; with every player's state alive, the collector
  would rescan them all many times over. `no_cyclic_gc` holds it off meanwhile.
- glibc: `tune_malloc` keeps freed memory in the process (a round's NumPy
  temporaries of a few MB would otherwise be mapped and unmapped each time),
  `trim_malloc` gives the pages freed in the middle of the heaps back (a
  long-running worker's RSS otherwise creeps up).
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from .engine.mmr.system import EloMmrBase, nothing
from .leagues import LeagueConfig

# Rounds with at least this many window cells are solved in parts by this thread and
# the helper together: below it, handing the work over costs more than it gives.
SPLIT_CELLS = 1 << 16
# Cells of one part (there are at least two). Whichever thread is free takes the
# next part, so that neither waits long for the other when another program takes
# a core away for a while.
PART_CELLS = 1 << 18
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
# Rounds of at least this many participants run with the cyclic collector held off.
LARGE_ROUND = 500

_helper: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def helper() -> ThreadPoolExecutor:
    """The process's helper thread (started at its first use)."""
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(1, thread_name_prefix="elo-mmr")
    return _helper


def split_rows(solve: Callable[[slice], np.ndarray], n: int, cells: int,
               first: Callable[[], Any] = nothing) -> tuple[np.ndarray, Any]:
    """(solve(slice(0, n)), first()). For a big round the solve is computed by
    parts on this thread and the helper thread, and this thread runs `first`
    (other work of the round) while the helper starts on the parts."""
    if cells < SPLIT_CELLS or n < 2 or CORES < 2:
        done = first()
        return solve(slice(0, n)), done
    other_thread = helper()
    count = min(n, max(2, cells // PART_CELLS))
    bounds = [n * k // count for k in range(count + 1)]
    results: list[np.ndarray] = [np.empty(0)] * count
    parts = iter(range(count))  # shared: each next() hands a part to one thread

    def work(before: Callable[[], Any] = nothing) -> Any:
        try:
            done = before()
            for k in parts:
                results[k] = solve(slice(bounds[k], bounds[k + 1]))
        except BaseException:
            for _ in parts:  # leave the other thread nothing more to start
                pass
            raise
        return done

    other = other_thread.submit(work)
    try:
        done = work(first)
    finally:
        if not other.cancel():  # cancelled: it had not started, and has nothing left
            other.result()
    return np.concatenate(results), done


def use_threads(config: LeagueConfig) -> None:
    """The configuration's Elo-MMR systems solve big rounds with `split_rows`."""
    for rule in [config.default, *config.rules]:
        threaded(rule.system)


def threaded(system: Any) -> Any:
    """The system, solving big rounds with `split_rows` if it is an Elo-MMR one."""
    if isinstance(system, EloMmrBase):
        system.split_rows = split_rows
    return system


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector held off meanwhile (it runs afterwards, as usual)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# The worker's thresholds. A batch of two-player matches keeps tens of thousands of
# containers alive until it commits, then reference counting frees them: with the
# youngest generation collected at the default, nearly every batch paid a collection
# that scanned them all; at 200,000 one runs only when that many outlive their batches.
WORKER_GC_THRESHOLDS = (200_000, 50, 100)


def collect_for_batches() -> None:
    """The cyclic collector's thresholds of a worker's process."""
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


@contextmanager
def long_lived_states() -> Iterator[bool]:
    """A process that keeps every player's state alive (the replay): the youngest
    generation's threshold raised so that a collection only runs within a match that
    allocates a lot, and `keep_survivors` after each match moves what survived out of
    the collector's reach; all back at the end. Gives whether it applies (not when
    the collector is off or the caller froze objects already)."""
    applies = gc.isenabled() and gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    if applies:
        gc.set_threshold(max(thresholds[0], 100_000), *thresholds[1:])
    try:
        yield applies
    finally:
        if applies:
            gc.set_threshold(*thresholds)
            gc.unfreeze()


def keep_survivors() -> None:
    """Every object alive now is long-lived: out of the cyclic collector's reach
    (gc.freeze, O(1)); a full collection would otherwise scan them all."""
    gc.freeze()


def _libc() -> Any:
    """glibc, or None where the C library is another."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


_LIBC = _libc()
_malloc_tuned = False


def tune_malloc() -> None:
    """Keep freed memory in the process: as MALLOC_MMAP_THRESHOLD_=64 MiB,
    MALLOC_TRIM_THRESHOLD_=256 MiB and MALLOC_TOP_PAD_=64 MiB. Once per process; a
    no-op without glibc."""
    global _malloc_tuned
    if _malloc_tuned or _LIBC is None or not hasattr(_LIBC, "mallopt"):
        return
    _malloc_tuned = True
    _LIBC.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD
    _LIBC.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    _LIBC.mallopt(-2, 64 << 20)  # M_TOP_PAD


def _malloc_trim() -> Callable[[int], int] | None:
    if _LIBC is None or not hasattr(_LIBC, "malloc_trim"):
        return None
    trim = _LIBC.malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def can_trim_malloc() -> bool:
    return _TRIM is not None


def trim_malloc() -> None:
    """Give the heap's free pages back to the system (a no-op without glibc)."""
    if _TRIM is not None:
        _TRIM(0)
