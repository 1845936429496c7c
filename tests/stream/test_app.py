"""The worker's Faust app (stream/app.py), built for real but not started."""

from stream_app.settings import Settings
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
        assert worker.worker.intake.fetch_wait_ms == 20
    finally:
        worker.store.close()
