"""What one input record becomes (stream/records.py)."""

import gc

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.stream.partitioner import league_partition
from stream_app.stream.records import RecordHandler
from stream_app.stream.changelog import Checkpoint
from stream_app.state.tables import tables_for
from stream_app.stream.transaction import PartitionTransaction

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
TOPIC = "match-results"
FORWARD = TOPIC + "-by-league"
LINE = orjson.dumps({"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]})


def fresh() -> PartitionTransaction:
    return PartitionTransaction(0, Checkpoint(), lambda key: None, tables_for(CONFIG))


def test_records_at_or_below_the_checkpoint_are_skipped_as_redelivered():
    state = PartitionTransaction(0, Checkpoint(batch=3, offsets={TOPIC: 41}), lambda key: None, tables_for(CONFIG))
    handler = RecordHandler(CONFIG, 1, FORWARD)
    assert handler.handle(state, TOPIC, 0, 41, b"k", LINE).redelivered
    outcome = handler.handle(state, TOPIC, 0, 42, b"k", LINE)
    assert not outcome.redelivered and outcome.applied is not None and len(outcome.outputs) == 2


def test_an_engine_failure_becomes_a_dead_letter_and_leaves_no_partial_state(monkeypatch):
    from stream_app.engine.elo import Elo

    def broken(self, match, before):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(Elo, "rate", broken)
    state = fresh()
    outcome = RecordHandler(CONFIG, 1, FORWARD).handle(state, TOPIC, 0, 0, b"chess", LINE)
    assert outcome.dead_letter.code == "internal_error" and "ZeroDivisionError" in outcome.dead_letter.message
    assert [o.kind for o in outcome.outputs] == ["dead_letter"]
    assert state.overlay == {}  # nothing of the match was written
    assert orjson.loads(outcome.outputs[0].value)["payload"] == LINE.decode()


def test_a_record_on_the_wrong_partition_is_forwarded_keyed_by_league_and_refused_if_it_comes_back():
    partitions = 8
    wrong = (league_partition("chess", partitions) + 1) % partitions
    handler = RecordHandler(CONFIG, partitions, FORWARD)
    outcome = handler.handle(fresh(), TOPIC, wrong, 0, b"not-the-league", LINE)
    assert outcome.forwarded and [(o.kind, o.key, o.value) for o in outcome.outputs] == [("forward", b"chess", LINE)]
    again = handler.handle(fresh(), FORWARD, wrong, 0, b"chess", LINE)
    assert again.dead_letter.code == "schema_violation" and not again.forwarded


def test_dead_letters_leave_no_garbage_for_the_cyclic_collector():
    # The worker's collector runs rarely (stream/app.py): a flood of rejected records
    # must be freed by reference counting alone.
    handler = RecordHandler(CONFIG, 1, FORWARD)
    bad = [b"not json", orjson.dumps({"league": "chess"}), LINE, LINE]  # the last: a duplicate
    for offset, value in enumerate(bad):  # the schema's validator is built at its first use, once
        handler.handle(fresh(), TOPIC, 0, offset, b"chess", value)
    state = fresh()
    gc.collect()
    gc.disable()
    try:
        outcomes = [handler.handle(state, TOPIC, 0, offset, b"chess", value) for offset, value in enumerate(bad)]
        assert [o.dead_letter.code for o in outcomes if o.dead_letter] == ["invalid_json", "schema_violation",
                                                                           "duplicate_match"]
        del outcomes
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_player_record_is_stored_as_its_systems_state_dict_with_its_markers_and_read_back_equal():
    from stream_app.rating.records import PlayerRecord
    from stream_app.state.tables import PLAYERS, player_key

    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n[leagues."go"]\nalgorithm = "glicko2"\n')
    codec = tables_for(config).codecs[PLAYERS]
    for league in ("chess", "go"):
        record = PlayerRecord(config.system_for(league).initial_state(), last_time=1.5, snap=3, since=2, base=4)
        raw = codec.encode(record)
        stored = orjson.loads(raw)
        assert stored["last_occurred"] == 1.5 and stored["snap"] == 3 and stored["season_base"] == 4
        assert codec.decode(player_key(league, "p1"), raw) == record


def test_a_record_refused_before_it_writes_leaves_the_records_before_it_in_the_batch():
    """One savepoint per record, set once the record is parsed: a refusal before it
    (an unparsable line) undoes nothing of the batch, not even a void's re-rate just
    before it, whose savepoint kept a journal."""
    handler = RecordHandler(CONFIG, 1, FORWARD)
    state = fresh()
    second = LINE.replace(b'"match_id":"1"', b'"match_id":"2"')
    for offset, line in enumerate((LINE, second)):
        handler.handle(state, TOPIC, 0, offset, b"chess", line)
    void = orjson.dumps({"schema": "match-voided.v1", "league": "chess", "match_id": "1", "reason": "annulled"})
    rerated = handler.handle(state, TOPIC, 0, 2, b"chess", void)
    assert rerated.rerated is not None and state.journal  # the void's writes, undoable until the next savepoint
    before = dict(state.overlay)
    refused = handler.handle(state, TOPIC, 0, 3, b"chess", b"{not json")
    assert refused.dead_letter is not None and state.overlay == before
