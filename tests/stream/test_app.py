"""The worker's Faust app (stream/app.py), built for real but not started."""

from pathlib import Path

from stream_app.settings import Settings
from stream_app.stream.app import CLEAN_MARKER, WorkerApp


def test_local_tables_are_kept_after_a_clean_stop_and_wiped_after_a_crash(tmp_path):
    """Faust keeps its RocksDB tables under the data directory's v1/tables; they
    are trusted only when the previous run left the clean-stop marker."""
    settings = Settings(data_dir=tmp_path / "data", partitions=1)
    tables = Path(WorkerApp(settings).app.conf.tabledir)
    assert tables.is_relative_to(tmp_path / "data")
    (tables / "players-0.db").mkdir(parents=True)
    (tmp_path / "data" / CLEAN_MARKER).write_text("1\n")
    kept = WorkerApp(settings)
    assert kept.wiped is False and tables.exists()
    assert not (tmp_path / "data" / CLEAN_MARKER).exists()  # consumed: the next stop must earn it again
    crashed = WorkerApp(settings)  # no marker: the run before did not stop cleanly
    assert crashed.wiped is True and not tables.exists()
    crashed.mark_clean()
    assert (tmp_path / "data" / CLEAN_MARKER).exists()


def test_the_app_has_a_table_per_state_table_and_serves_no_raw_tables(tmp_path):
    worker = WorkerApp(Settings(data_dir=tmp_path / "data", partitions=2, app_id="unit"))
    assert sorted(worker.tables) == ["checkpoints", "leagues", "matches", "players"]
    assert worker.store.changelog_topic("players") == "unit-players-changelog"
    assert worker.app.conf.web_tables_enabled is False
    assert worker.health()["assigned_partitions"] == [] and worker.ready() is False
