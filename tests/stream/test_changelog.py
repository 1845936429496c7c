"""The rule that reads a partition's changelog back (stream/changelog.py):
rows count with their checkpoint, a crashed batch leaves the values before it,
a take-up fences the writers before it, and a rival take-up that comes second
is not accepted."""

import orjson

from stream_app.stream.changelog import (Checkpoint, ChangelogReader, checkpoint_record, epoch_key, fence_record,
                                         input_fingerprint, new_value, old_value, row_record, start_record)

TOPIC = "match-results"


def j(value) -> bytes:
    return orjson.dumps(value)


def read(records: list[tuple[bytes, bytes]], start: Checkpoint | None = None) -> tuple[dict, Checkpoint, int]:
    reader = ChangelogReader(start)
    for offset, (key, value) in enumerate(records, start=reader.position):
        reader.feed(offset, key, value)
    rows, checkpoint, _ = reader.take()
    return {key: None if value is None else orjson.loads(value) for key, value in rows.items()}, checkpoint, reader.fenced


def test_rows_count_with_their_checkpoint_and_a_crashed_batch_leaves_the_values_before_it():
    log = [
        fence_record(1),
        row_record(1, 1, b"pa", j(1), None),
        row_record(1, 1, b"pb", j(10), None),
        checkpoint_record(1, 1, {TOPIC: 4}),
        row_record(1, 2, b"pa", j(2), j(1)),  # a batch that never completed
        row_record(1, 2, b"pc", j(7), None),
    ]
    rows, checkpoint, _ = read(log)
    assert rows == {b"pa": 1, b"pb": 10}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets, checkpoint.changelog) == (1, 1, {TOPIC: 4}, 3)
    # The next owner's fence settles the crashed batch: its keys keep their values before it.
    rows, checkpoint, _ = read([*log, fence_record(2)])
    assert rows == {b"pa": 1, b"pb": 10, b"pc": None}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets) == (2, 1, {TOPIC: 4})


def test_a_replaced_writers_late_records_are_ignored():
    log = [
        fence_record(1),
        row_record(1, 1, b"pa", j(1), None),
        checkpoint_record(1, 1, {TOPIC: 0}),
        fence_record(2),  # another worker took over
        row_record(2, 2, b"pa", j(3), j(1)),
        row_record(1, 2, b"pa", j(2), j(1)),  # the replaced worker's late batch...
        checkpoint_record(1, 2, {TOPIC: 1}),  # ...and its checkpoint
        checkpoint_record(2, 2, {TOPIC: 1}),
        row_record(1, 3, b"pb", j(9), None),
    ]
    rows, checkpoint, fenced = read(log)
    assert rows == {b"pa": 3}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.changelog) == (2, 2, 7)
    assert fenced == 3


def test_of_two_take_ups_with_one_epoch_the_first_in_the_log_wins():
    log = [fence_record(4), fence_record(4), row_record(4, 1, b"pa", j(1), None), checkpoint_record(4, 1, {})]
    _, checkpoint, fenced = read(log)
    assert checkpoint.changelog == 3 and fenced == 1
    reader = ChangelogReader()
    for offset, (key, value) in enumerate(log[:2]):
        reader.feed(offset, key, value)
    assert reader.checkpoint.changelog == 0  # the second fence (offset 1) was not accepted


def test_reading_on_from_a_stored_checkpoint_equals_reading_from_the_start():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1), None), checkpoint_record(1, 1, {TOPIC: 0}),
           row_record(1, 2, b"pa", j(2), j(1)), row_record(1, 2, b"pb", j(5), None), checkpoint_record(1, 2, {TOPIC: 1}),
           fence_record(2), row_record(2, 3, b"pb", j(6), j(5)), checkpoint_record(2, 3, {TOPIC: 2})]
    whole, end, _ = read(log)
    first, middle, _ = read(log[:3])
    rest, end_again, _ = read(log[middle.changelog + 1:], middle)
    assert {**first, **rest} == whole == {b"pa": 2, b"pb": 6}
    assert end_again == end


def test_a_compacted_changelog_keeps_each_epochs_last_checkpoint():
    """Compaction keeps the last record of each key: each epoch's fence and
    checkpoints share a key, so its last checkpoint stays and commits its rows."""
    assert fence_record(3)[0] == checkpoint_record(3, 9, {})[0] == epoch_key(3) != epoch_key(4)
    compacted = [row_record(1, 1, b"pa", j(1), None), checkpoint_record(1, 2, {TOPIC: 5}),
                 row_record(2, 3, b"pb", j(2), None), row_record(2, 4, b"pc", j(3), None),
                 checkpoint_record(2, 3, {TOPIC: 7})]
    rows, checkpoint, _ = read(compacted)
    assert rows == {b"pa": 1, b"pb": 2}  # batch 4 of epoch 2 has no checkpoint: pc waits
    assert (checkpoint.epoch, checkpoint.batch) == (2, 3)


def test_a_row_record_keeps_its_byte_layout():
    # Changelogs outlive releases: a worker reads rows an older one wrote.
    key, record = row_record(3, 258, b"pa", b"[1]", b"[0]")
    assert key == b"pa"
    assert record == (b"D" + bytes(7) + b"\x03" + bytes(6) + b"\x01\x02" + bytes(3) + b"\x03" + b"[1]" + b"[0]")
    assert new_value(record) == b"[1]" and old_value(record) == b"[0]"
    assert row_record(1, 1, b"pa", None, None)[1] == b"D" + bytes(7) + b"\x01" + bytes(7) + b"\x01" + bytes(4)
    assert new_value(row_record(1, 1, b"pa", None, b"x")[1]) is None


def test_a_start_voids_everything_before_it_and_its_rows_count_with_its_checkpoint():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1), None), row_record(1, 1, b"pb", j(2), None),
           checkpoint_record(1, 1, {TOPIC: 4}), row_record(1, 2, b"pa", j(3), j(1)),  # a batch cut short
           start_record(2), row_record(2, 1, b"pb", j(7), None), row_record(2, 1, b"pc", j(8), None),
           checkpoint_record(2, 1, {TOPIC: 9}, {TOPIC: 77})]
    reader = ChangelogReader()
    for offset, (key, value) in enumerate(log):
        reader.feed(offset, key, value)
        if offset == 4:
            assert reader.take()[2] is False  # nothing to wipe before the start
    rows, checkpoint, wipe = reader.take()
    assert wipe  # a store that held the state before the start must drop it
    assert {key: orjson.loads(value) for key, value in rows.items()} == {b"pb": 7, b"pc": 8}  # pa: gone with the start
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets, checkpoint.fingerprints) == (2, 1, {TOPIC: 9}, {TOPIC: 77})
    assert checkpoint.changelog == 8


def test_a_start_of_an_epoch_already_accepted_is_dropped_like_a_rival_fence():
    log = [fence_record(3), row_record(3, 1, b"pa", j(1), None), checkpoint_record(3, 1, {TOPIC: 0}),
           start_record(3), row_record(3, 1, b"pb", j(2), None), checkpoint_record(3, 1, {TOPIC: 1})]
    rows, checkpoint, fenced = read(log)
    assert rows == {b"pa": 1} and checkpoint.changelog == 2 and fenced == 2


def test_reading_from_a_start_offset_wipes_what_the_store_held():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1), None), checkpoint_record(1, 1, {TOPIC: 0}),
           start_record(5), row_record(5, 1, b"pb", j(2), None), checkpoint_record(5, 1, {TOPIC: 3})]
    reader = ChangelogReader(start=3)
    assert reader.position == 3
    for offset in range(3, len(log)):
        reader.feed(offset, *log[offset])
    rows, checkpoint, wipe = reader.take()
    assert wipe and set(rows) == {b"pb"} and (checkpoint.epoch, checkpoint.offsets) == (5, {TOPIC: 3})


def test_checkpoints_keep_fingerprints_and_records_written_before_them_still_read():
    old = (epoch_key(1), b"C" + (1).to_bytes(8, "big") + (1).to_bytes(8, "big") + orjson.dumps({TOPIC: 6}))
    _, checkpoint, _ = read([fence_record(1), old])
    assert (checkpoint.offsets, checkpoint.fingerprints) == ({TOPIC: 6}, {})
    _, checkpoint, _ = read([fence_record(1), checkpoint_record(1, 1, {TOPIC: 6}, {TOPIC: 12345}), fence_record(2)])
    assert (checkpoint.epoch, checkpoint.offsets, checkpoint.fingerprints) == (2, {TOPIC: 6}, {TOPIC: 12345})
    assert Checkpoint.decode(checkpoint.encode()) == checkpoint
    assert Checkpoint.decode(orjson.dumps({"epoch": 1, "batch": 2, "offsets": {}, "changelog": 3})).fingerprints == {}


def test_an_input_fingerprint_tells_a_record_sent_again_or_another_from_the_one_applied():
    applied = input_fingerprint(1_700_000_000_000, b"chess", b'{"match_id": "m1"}')
    assert applied == input_fingerprint(1_700_000_000_000, b"chess", b'{"match_id": "m1"}')
    assert applied != input_fingerprint(1_700_000_000_001, b"chess", b'{"match_id": "m1"}')  # the same, sent again
    assert applied != input_fingerprint(1_700_000_000_000, b"chess", b'{"match_id": "m2"}')
    assert input_fingerprint(1, b"ab", b"c") != input_fingerprint(1, b"a", b"bc")  # the key's end is marked
    assert input_fingerprint(None, None, None) == input_fingerprint(0, b"", b"")


def test_a_start_that_never_completes_leaves_the_state_before_it():
    """A write-back cut short (its worker died before the checkpoint) wipes nothing;
    when a later mark abandons it, its rows are dropped rather than reverted (their
    value before is none: reverting would delete the keys)."""
    before = [fence_record(1), row_record(1, 1, b"pa", j(1), None), checkpoint_record(1, 1, {TOPIC: 0})]
    cut = [start_record(4), row_record(4, 1, b"pa", j(9), None), row_record(4, 1, b"pz", j(9), None)]
    rows, checkpoint, _ = read(before + cut)
    assert rows == {b"pa": 1} and checkpoint.epoch == 1
    reader = ChangelogReader()
    for offset, (key, value) in enumerate(before + cut + [fence_record(5)]):
        reader.feed(offset, key, value)
    rows, checkpoint, wipe = reader.take()
    assert not wipe and {k: orjson.loads(v) for k, v in rows.items()} == {b"pa": 1} and checkpoint.epoch == 5
    # Written back again under a higher epoch, complete this time.
    again = [start_record(6), row_record(6, 1, b"pb", j(2), None), checkpoint_record(6, 1, {TOPIC: 3})]
    rows, checkpoint, _ = read(before + cut + again)
    assert rows == {b"pb": 2} and (checkpoint.epoch, checkpoint.batch) == (6, 1)


def test_compaction_keeps_every_start():
    assert start_record(3)[0] not in (epoch_key(3), start_record(4)[0], fence_record(3)[0])
    compacted = [row_record(1, 1, b"pa", j(1), None), checkpoint_record(1, 1, {TOPIC: 5}),
                 start_record(2), row_record(2, 1, b"pb", j(2), None), checkpoint_record(2, 1, {TOPIC: 0})]
    rows, checkpoint, _ = read(compacted)
    assert rows == {b"pb": 2} and checkpoint.epoch == 2
