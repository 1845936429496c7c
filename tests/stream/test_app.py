"""The worker's Faust app (stream/app.py), built for real but not started."""

import asyncio
import os

import pytest

from stream_app import runtime
from stream_app.settings import Settings
from stream_app.stream import app as app_module
from stream_app.stream.app import WorkerApp


def test_the_app_keeps_no_faust_table_and_its_state_under_the_data_directory(tmp_path):
    worker = WorkerApp(Settings(data_dir=tmp_path / "data", partitions=2, app_id="unit"))
    try:
        assert not worker.app.tables  # the worker's own store holds the state, not Faust's tables
        assert worker.store.directory == tmp_path / "data" / "state"
        assert worker.settings.changelog_topic == "unit-state-changelog"
        assert worker.app.conf.web_tables_enabled is False
        assert worker.health()["assigned_partitions"] == [] and worker.ready() is False
    finally:
        worker.store.close()


def test_the_fetch_wait_reaches_the_input_consumer(tmp_path):
    # The embedded broker answers an empty fetch only when its wait is over (aiokafka's
    # default is 0.5 s): the worker's input consumer must ask for the configured wait.
    worker = WorkerApp(Settings(data_dir=tmp_path / "data", partitions=2, app_id="unit", fetch_wait=0.02))
    try:
        assert worker.batches.intake.fetch_wait_ms == 20
    finally:
        worker.store.close()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not runtime.can_trim_malloc(), reason="the C library is not glibc")
def test_memory_freed_between_kept_blocks_goes_back_to_the_system(tmp_path):
    # What the worker frees between long-lived allocations stays in glibc's heap until
    # trimmed: the worker trims it on a timer.
    worker = WorkerApp(Settings(data_dir=tmp_path / "data", partitions=2, app_id="unit"))
    try:
        blocks = [bytes([i % 251]) * 4000 for i in range(25_000)]  # 100 MB, every page touched
        kept = blocks[::50]
        del blocks
        before = _rss_bytes()
        asyncio.run(worker._release_memory())
        assert before - _rss_bytes() > 50 * 1024 * 1024 and len(kept) == 500
        assert (app_module.TRIM_SECONDS, worker._release_memory) in worker.timers()  # and the app runs it
    finally:
        worker.store.close()
