"""The domain's rows as the tables store them (stream/tables.py)."""

import orjson

from stream_app.events import format_time
from stream_app.stream.tables import history_from_store, stored_history


def test_a_history_entry_is_stored_compactly_and_read_back_equal():
    timed = {"seq": 3, "match_id": "m-9", "occurred_at": format_time(1767225660.0), "rank": 2, "rating_before": 1500.5,
             "rating_after": 1490.25, "uncertainty": 81.5, "cause": "match"}
    untimed = {"seq": 1, "match_id": "m", "occurred_at": None, "rank": 1, "rating_before": 1000.0, "rating_after": 1016.0,
               "cause": "match"}
    for entry, time in ((timed, 1767225660.0), (untimed, None)):
        value = stored_history(entry, time)
        assert history_from_store(orjson.loads(orjson.dumps(value))) == entry
        assert len(orjson.dumps(value)) < 0.7 * len(orjson.dumps(entry))
