"""What the engine leaves to its caller (stream_app/runtime.py): a big Elo-MMR
round solved by parts on two threads gives the same bits as the engine alone;
the parts are each solved once and joined in order; a failing part stops the
rest; a busy helper thread is not waited for; the collector is held off and
given back."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from stream_app import runtime
from stream_app.engine import make_system
from stream_app.leagues import LeagueConfig, LeagueRule
from tests.support.rounds import random_rounds, replay_rounds

FAST = {"subsample_size": 100, "subsample_bucket": 2.0}


@pytest.mark.parametrize("part_cells", [1 << 60, 4000])
@pytest.mark.parametrize("params", [FAST, dict(FAST, split_ties=True), {"subsample_size": 30}])
def test_rounds_split_over_two_threads_give_the_same_bits(monkeypatch, params, part_cells):
    # Big rounds are solved by parts on two threads at once (two parts, or
    # many); rows are independent, so the stream worker and a replay agree
    # exactly whatever the split.
    rounds = random_rounds(seed=11, count=4, pool=900, low=500, high=800)
    monkeypatch.setattr(runtime, "CORES", 2)
    monkeypatch.setattr(runtime, "SPLIT_CELLS", 1)
    monkeypatch.setattr(runtime, "PART_CELLS", part_cells)
    threaded = make_system("elo-mmr", params)
    runtime.use_threads(LeagueConfig([], LeagueRule("*", "elo-mmr", threaded)))
    assert threaded.split_rows is runtime.split_rows
    used = []
    monkeypatch.setattr(runtime, "helper", lambda real=runtime.helper: used.append(1) or real())
    split = replay_rounds(threaded, rounds)
    assert used  # the helper thread took part
    whole = replay_rounds(make_system("elo-mmr", params), rounds)  # the engine alone: one piece
    assert split == whole


def test_parts_are_each_solved_once_and_joined_in_order(monkeypatch):
    monkeypatch.setattr(runtime, "CORES", 2)
    monkeypatch.setattr(runtime, "PART_CELLS", 100)
    seen = []

    def solve(rows):
        seen.append((rows.start, rows.stop))
        time.sleep(0.0002)  # gives the helper thread a chance to take parts
        return np.arange(rows.start, rows.stop, dtype=float)

    out, done = runtime.split_rows(solve, 1000, 1 << 20, first=lambda: "other work")
    assert np.array_equal(out, np.arange(1000.0)) and done == "other work"
    assert sorted(seen) == [(k, k + 1) for k in range(1000)]


def test_an_error_in_a_part_is_raised_once_the_helper_has_stopped(monkeypatch):
    monkeypatch.setattr(runtime, "CORES", 2)
    monkeypatch.setattr(runtime, "PART_CELLS", 100)
    started = []

    def solve(rows):
        started.append(rows.start)
        time.sleep(0.001)
        if rows.start == 10:  # on whichever thread takes it
            raise ZeroDivisionError("part failed")
        return np.zeros(rows.stop - rows.start)

    with pytest.raises(ZeroDivisionError):
        runtime.split_rows(solve, 1000, 1 << 20)
    count = len(started)
    time.sleep(0.05)
    assert len(started) == count < 1000  # nothing runs on afterwards, and the rest was not started


def test_a_busy_helper_thread_is_not_waited_for(monkeypatch):
    # When the helper thread has not started (another program has the other
    # core, say), this thread solves every part and does not wait for it.
    monkeypatch.setattr(runtime, "CORES", 2)
    monkeypatch.setattr(runtime, "PART_CELLS", 100)
    rows = np.arange(1000.0)
    runtime.split_rows(lambda part: rows[part], 1000, 1 << 20)  # the helper exists
    release = threading.Event()
    blocked = runtime.helper().submit(release.wait, 10)
    try:
        started = time.perf_counter()
        out, _ = runtime.split_rows(lambda part: rows[part], 1000, 1 << 20)
        assert time.perf_counter() - started < 5
        assert np.array_equal(out, rows)
    finally:
        release.set()
        blocked.result()


def test_the_collector_is_held_off_and_given_back():
    assert gc.isenabled()
    with runtime.no_cyclic_gc():
        assert not gc.isenabled()
        with runtime.no_cyclic_gc():  # nested: the outer one gives it back
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), runtime.no_cyclic_gc():
        1 / 0
    assert gc.isenabled()
