"""The rule that reads a partition's changelog back (stream/changelog.py):
data records count with their checkpoint, in order, a crashed batch's are
dropped, a take-up fences the writers before it, and a rival take-up that comes
second is not accepted."""

import zlib
from itertools import count

import orjson
import zstandard

from stream_app.stream.changelog import (BASE_ROWS_FIRST, DATA_START, ENTRY, PACK_BYTES, ROW, ROWS, ZROWS, ZSTD_ROWS,
                                         Checkpoint, ChangelogRule, RecordWriter, base_end_record, base_record,
                                         checkpoint_record, fence_record, input_fingerprint, mark_of, packed_count,
                                         packed_rows, row_of, start_record)
from tests.support.changelog import old_row

TOPIC = "match-results"
_PLACES = count()


def j(value) -> bytes:
    return orjson.dumps(value)


def row_record(epoch: int, batch: int, key: bytes, value: bytes | None) -> tuple[bytes, bytes]:
    return RecordWriter(epoch, batch, first=next(_PLACES)).row(key, value)


def entry_record(epoch: int, batch: int, payload: bytes) -> tuple[bytes, bytes]:
    return RecordWriter(epoch, batch, first=next(_PLACES)).entry(payload)


def rows_of(records: list) -> dict:
    """Committed row records folded into the values they leave (None: deleted)."""
    rows = {}
    for kind, payload in records:
        assert kind in (ROW, ROWS, ZSTD_ROWS)
        for key, value in packed_rows(kind, payload) if kind != ROW else [row_of(payload)]:
            rows[key] = None if value is None else orjson.loads(value)
    return rows


def read(records: list[tuple[bytes, bytes]], start: Checkpoint | None = None) -> tuple[dict, Checkpoint, int]:
    rule = ChangelogRule(start)
    for offset, (key, value) in enumerate(records, start=rule.position):
        rule.feed(offset, key, value)
    committed, checkpoint, _ = rule.take()
    return rows_of(committed), checkpoint, rule.fenced


def test_rows_count_with_their_checkpoint_and_a_crashed_batch_is_dropped():
    log = [
        fence_record(1),
        row_record(1, 1, b"pa", j(1)),
        row_record(1, 1, b"pb", j(10)),
        checkpoint_record(1, 1, {TOPIC: 4}),
        row_record(1, 2, b"pa", j(2)),  # a batch that never completed
        row_record(1, 2, b"pc", j(7)),
    ]
    rows, checkpoint, _ = read(log)
    assert rows == {b"pa": 1, b"pb": 10}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets, checkpoint.changelog) == (1, 1, {TOPIC: 4}, 3)
    # The next owner's fence settles the crashed batch: its records never count.
    rule = ChangelogRule()
    for offset, record in enumerate([*log, fence_record(2)]):
        rule.feed(offset, *record)
    committed, checkpoint, _ = rule.take()
    assert rows_of(committed) == {b"pa": 1, b"pb": 10} and not rule.waiting
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets) == (2, 1, {TOPIC: 4})


def test_a_replaced_writers_late_records_are_ignored():
    log = [
        fence_record(1),
        row_record(1, 1, b"pa", j(1)),
        checkpoint_record(1, 1, {TOPIC: 0}),
        fence_record(2),  # another worker took over
        row_record(2, 2, b"pa", j(3)),
        row_record(1, 2, b"pa", j(2)),  # the replaced worker's late batch...
        checkpoint_record(1, 2, {TOPIC: 1}),  # ...and its checkpoint
        checkpoint_record(2, 2, {TOPIC: 1}),
        row_record(1, 3, b"pb", j(9)),
    ]
    rows, checkpoint, fenced = read(log)
    assert rows == {b"pa": 3}
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.changelog) == (2, 2, 7)
    assert fenced == 3


def test_of_two_take_ups_with_one_epoch_the_first_in_the_log_wins():
    log = [fence_record(4), fence_record(4), row_record(4, 1, b"pa", j(1)), checkpoint_record(4, 1, {})]
    _, checkpoint, fenced = read(log)
    assert checkpoint.changelog == 3 and fenced == 1
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(log[:2]):
        rule.feed(offset, key, value)
    assert rule.checkpoint.changelog == 0  # the second fence (offset 1) was not accepted


def test_reading_on_from_a_stored_checkpoint_equals_reading_from_the_start():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1)), checkpoint_record(1, 1, {TOPIC: 0}),
           row_record(1, 2, b"pa", j(2)), row_record(1, 2, b"pb", j(5)), checkpoint_record(1, 2, {TOPIC: 1}),
           fence_record(2), row_record(2, 3, b"pb", j(6)), checkpoint_record(2, 3, {TOPIC: 2})]
    whole, end, _ = read(log)
    first, middle, _ = read(log[:3])
    rest, end_again, _ = read(log[middle.changelog + 1:], middle)
    assert {**first, **rest} == whole == {b"pa": 2, b"pb": 6}
    assert end_again == end


def test_a_compacted_changelog_commits_what_the_whole_one_does():
    """The log cleaner keeps the last record of each key. Every mark has a key of its
    own, so no mark the rule drops can take the place of one it accepts: here a take-up's
    fence of a stale epoch (a worker on an empty directory fences with epoch 1, then tries
    again above the epoch it read) and a replaced worker's late batch, after the fence of
    its successor. With one key for an epoch's marks (releases before this one), the
    cleaner kept the late checkpoint in place of epoch 1's last one, and the late batch
    counted."""
    log = [
        fence_record(1), row_record(1, 1, b"pa", j(1)), checkpoint_record(1, 1, {TOPIC: 0}),
        row_record(1, 2, b"pb", j(2)), checkpoint_record(1, 2, {TOPIC: 1}),
        fence_record(1),  # a stale take-up's fence...
        fence_record(2),  # ...which tried again above: the new owner
        row_record(1, 3, b"pa", j(9)), checkpoint_record(1, 3, {TOPIC: 2}),  # the replaced worker's late batch
        row_record(2, 3, b"pc", j(3)), checkpoint_record(2, 3, {TOPIC: 2}),
    ]
    assert len({key for key, _ in log}) == len(log)
    assert fence_record(2)[0] != fence_record(2)[0] != checkpoint_record(2, 0, {})[0]
    whole, checkpoint, _ = read(log)
    assert whole == {b"pa": 1, b"pb": 2, b"pc": 3}
    shared = [(b"\x00epoch" + value[1:9] if key[0] == 0 else key, value) for key, value in log]  # the old keys
    for records in (log, shared):
        rule = ChangelogRule()
        for offset, key, value in compacted(records):
            rule.feed(offset, key, value)
        committed, end, _ = rule.take()
        assert (rows_of(committed) == whole) == (records is log)
        assert (end.epoch, end.batch, end.offsets) == (checkpoint.epoch, checkpoint.batch, checkpoint.offsets)
    assert rows_of(committed)[b"pa"] == 9


def test_data_records_keep_their_byte_layout_and_each_has_a_key_of_its_own():
    # Changelogs outlive releases: a worker reads records an older one wrote.
    writer = RecordWriter(3, 258)
    key, record = writer.row(b"pa", b"[1]")
    head = bytes(7) + b"\x03" + bytes(6) + b"\x01\x02"
    assert key == b"\x01" + head + bytes(4) and record == b"R" + head + b"\x00\x02pa[1]"
    assert row_of(memoryview(record)[17:]) == (b"pa", b"[1]")
    key, record = writer.entry(b'["l"]')
    assert key == b"\x01" + head + b"\x00\x00\x00\x01" and record == b"E" + head + b'["l"]'
    assert row_of(writer.row(b"pa", None)[1][17:]) == (b"pa", None)
    assert RecordWriter(3, 259).row(b"pa", b"[1]")[0] != RecordWriter(4, 258).row(b"pa", b"[1]")[0]


def test_entries_and_rows_come_out_in_the_order_they_were_written():
    log = [fence_record(1), entry_record(1, 1, b"e1"), row_record(1, 1, b"pa", j(1)), entry_record(1, 1, b"e2"),
           checkpoint_record(1, 1, {}), entry_record(1, 2, b"e3"), fence_record(2)]
    rule = ChangelogRule()
    for offset, record in enumerate(log):
        rule.feed(offset, *record)
    committed, _, _ = rule.take()
    assert [(kind, bytes(payload)) for kind, payload in committed] == [
        (ENTRY, b"e1"), (ROW, b"\x00\x02pa1"), (ENTRY, b"e2")]  # e3's batch never completed


def test_a_changelog_written_before_entries_reads_by_its_old_rule_and_entries_follow_it():
    log = [
        fence_record(1),
        old_row(1, 1, b"pa", j(1), None),
        old_row(1, 1, b"pb", j(10), None),
        checkpoint_record(1, 1, {TOPIC: 4}),
        old_row(1, 2, b"pa", j(2), j(1)),  # a batch that never completed: its values before stand
        old_row(1, 2, b"pc", j(7), None),
        fence_record(2),  # the new release takes the partition up
        row_record(2, 2, b"pd", j(4)),  # its first batch follows the fence's (which keeps batch 1)
        entry_record(2, 2, b"e1"),
        checkpoint_record(2, 2, {TOPIC: 6}),
    ]
    rule = ChangelogRule()
    for offset, record in enumerate(log):
        rule.feed(offset, *record)
    committed, checkpoint, _ = rule.take()
    assert rows_of(committed[:-1]) == {b"pa": 1, b"pb": 10, b"pc": None, b"pd": 4}
    assert rows_of(committed[:4]) == {b"pa": 1, b"pb": 10, b"pc": None}  # pa's value before, pc deleted
    assert (committed[-1][0], bytes(committed[-1][1])) == (ENTRY, b"e1")
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets) == (2, 2, {TOPIC: 6})


def test_a_start_voids_everything_before_it_and_its_rows_count_with_its_checkpoint():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1)), row_record(1, 1, b"pb", j(2)),
           checkpoint_record(1, 1, {TOPIC: 4}), row_record(1, 2, b"pa", j(3)),  # a batch cut short
           start_record(2), row_record(2, 1, b"pb", j(7)), row_record(2, 1, b"pc", j(8)),
           checkpoint_record(2, 1, {TOPIC: 9}, {TOPIC: 77})]
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(log):
        rule.feed(offset, key, value)
        if offset == 4:
            assert rule.take()[2] is False  # nothing to wipe before the start
    committed, checkpoint, wipe = rule.take()
    assert wipe  # a store that held the state before the start must drop it
    assert rows_of(committed) == {b"pb": 7, b"pc": 8}  # pa: gone with the start
    assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets, checkpoint.fingerprints) == (2, 1, {TOPIC: 9}, {TOPIC: 77})
    assert checkpoint.changelog == 8


def test_a_start_of_an_epoch_already_accepted_is_dropped_like_a_rival_fence():
    log = [fence_record(3), row_record(3, 1, b"pa", j(1)), checkpoint_record(3, 1, {TOPIC: 0}),
           start_record(3), row_record(3, 1, b"pb", j(2)), checkpoint_record(3, 1, {TOPIC: 1})]
    rows, checkpoint, fenced = read(log)
    assert rows == {b"pa": 1} and checkpoint.changelog == 2 and fenced == 2


def test_reading_from_a_start_offset_wipes_what_the_store_held():
    log = [fence_record(1), row_record(1, 1, b"pa", j(1)), checkpoint_record(1, 1, {TOPIC: 0}),
           start_record(5), row_record(5, 1, b"pb", j(2)), checkpoint_record(5, 1, {TOPIC: 3})]
    rule = ChangelogRule(start=3)
    assert rule.position == 3
    for offset in range(3, len(log)):
        rule.feed(offset, *log[offset])
    committed, checkpoint, wipe = rule.take()
    assert wipe and set(rows_of(committed)) == {b"pb"} and (checkpoint.epoch, checkpoint.offsets) == (5, {TOPIC: 3})


def test_checkpoints_keep_fingerprints_and_records_written_before_them_still_read():
    old = (b"\x00epoch" + (1).to_bytes(8, "big"), b"C" + (1).to_bytes(8, "big") + (1).to_bytes(8, "big") + orjson.dumps({TOPIC: 6}))
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
    when a later mark abandons it, its rows are dropped."""
    before = [fence_record(1), row_record(1, 1, b"pa", j(1)), checkpoint_record(1, 1, {TOPIC: 0})]
    cut = [start_record(4), row_record(4, 1, b"pa", j(9)), row_record(4, 1, b"pz", j(9))]
    rows, checkpoint, _ = read(before + cut)
    assert rows == {b"pa": 1} and checkpoint.epoch == 1
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(before + cut + [fence_record(5)]):
        rule.feed(offset, key, value)
    committed, checkpoint, wipe = rule.take()
    assert not wipe and rows_of(committed) == {b"pa": 1} and checkpoint.epoch == 5
    # Written back again under a higher epoch, complete this time.
    again = [start_record(6), row_record(6, 1, b"pb", j(2)), checkpoint_record(6, 1, {TOPIC: 3})]
    rows, checkpoint, _ = read(before + cut + again)
    assert rows == {b"pb": 2} and (checkpoint.epoch, checkpoint.batch) == (6, 1)


def test_compaction_keeps_every_start():
    assert start_record(3)[0] not in (checkpoint_record(3, 1, {})[0], start_record(4)[0], start_record(3, 2)[0],
                                      fence_record(3)[0])
    compacted = [row_record(1, 1, b"pa", j(1)), checkpoint_record(1, 1, {TOPIC: 5}),
                 start_record(2), row_record(2, 1, b"pb", j(2)), checkpoint_record(2, 1, {TOPIC: 0})]
    rows, checkpoint, _ = read(compacted)
    assert rows == {b"pb": 2} and checkpoint.epoch == 2


def compacted(records: list[tuple[bytes, bytes | None]]) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of what a log cleaner keeps: each key's last record, no tombstone."""
    last = {key: offset for offset, (key, _) in enumerate(records)}
    return [(offset, key, value) for offset, (key, value) in enumerate(records)
            if last[key] == offset and value is not None]


# Epoch 1 writes pa, pb, pc over two batches and deletes pc; its base (batch 3) holds pa and pb;
# then batch 4 follows it, and tombstones for everything before the base.
BEFORE_BASE = [
    fence_record(1),
    row_record(1, 1, b"pa", j(1)), row_record(1, 1, b"pc", j(3)), checkpoint_record(1, 1, {TOPIC: 0}),
    row_record(1, 2, b"pb", j(2)), row_record(1, 2, b"pc", None), checkpoint_record(1, 2, {TOPIC: 1}),
]
BASE = [start_record(1, 3), row_record(1, 3, b"pa", j(1)), row_record(1, 3, b"pb", j(2)),
        checkpoint_record(1, 3, {TOPIC: 1})]
AFTER_BASE = [row_record(1, 4, b"pb", j(4)), checkpoint_record(1, 4, {TOPIC: 2})]
TOMBSTONES = [(key, None) for key, _ in BEFORE_BASE]


def test_a_base_replaces_the_state_before_it_for_a_reader_from_any_point_of_a_compacted_log():
    log = BEFORE_BASE + BASE + AFTER_BASE + TOMBSTONES
    whole, checkpoint, _ = read(log)
    assert whole == {b"pa": 1, b"pb": 4} and (checkpoint.epoch, checkpoint.batch) == (1, 4)
    kept = compacted(log)
    assert [key for _, key, _ in kept if key[:1] == b"\x01"] == [key for key, _ in BASE[1:3] + AFTER_BASE[:1]]
    # From the start, or from a checkpoint whose records the cleaner removed (a standby's,
    # a worker's that stopped long ago, here one that still holds the deleted pc):
    for start in (Checkpoint(), Checkpoint(1, 1, {TOPIC: 0}, changelog=3)):
        rule = ChangelogRule(start)
        for offset, key, value in kept:
            if offset >= rule.position:
                rule.feed(offset, key, value)
        records, checkpoint, wipe = rule.take()
        assert wipe and rows_of(records) == {b"pa": 1, b"pb": 4}  # pc is gone with the wiped state
        assert (checkpoint.epoch, checkpoint.batch, checkpoint.offsets) == (1, 4, {TOPIC: 2})
        assert checkpoint.base == len(BEFORE_BASE)  # where the base starts


def test_a_packed_base_replaces_the_state_before_it_as_a_base_of_rows_does():
    packed = list(RecordWriter(1, 3, first=1_000_000).packed(iter([(b"pa", j(1)), (b"pb", j(2))])))
    assert len(packed) == 1
    log = BEFORE_BASE + BASE[:1] + packed + BASE[-1:] + AFTER_BASE + TOMBSTONES
    for start in (Checkpoint(), Checkpoint(1, 1, {TOPIC: 0}, changelog=3)):
        rule = ChangelogRule(start)
        for offset, key, value in compacted(log):
            if offset >= rule.position:
                rule.feed(offset, key, value)
        records, checkpoint, wipe = rule.take()
        assert wipe and [kind for kind, _ in records] == [ZSTD_ROWS, ROW] and rows_of(records) == {b"pa": 1, b"pb": 4}
        assert (checkpoint.epoch, checkpoint.batch, checkpoint.base) == (1, 4, len(BEFORE_BASE))


def test_packed_rows_come_back_in_order_from_compressed_records_of_about_pack_bytes_each():
    rows = [(b"p%06d" % i, bytes([i % 251]) * (i % 700)) for i in range(3000)]  # empty values too
    rows[7] = (rows[7][0], None)  # a deletion
    writer = RecordWriter(3, 258)
    records = list(writer.packed(iter(rows)))
    assert writer.rows_packed == 3000 and len(records) == writer.count > 2
    assert len({key for key, _ in records}) == len(records)  # a key of its own each: the cleaner keeps every one
    assert all(value[:1] == b"X" and mark_of(value)[1:] == (3, 258) for _, value in records)
    assert all(len(value) < PACK_BYTES / 4 for _, value in records)  # about PACK_BYTES each before compression
    unpacked = [row for _, value in records for row in packed_rows(ZSTD_ROWS, memoryview(value)[DATA_START:])]
    assert unpacked == rows
    assert sum(packed_count(memoryview(value)[DATA_START:]) for _, value in records) == 3000
    assert list(RecordWriter(1, 1).packed(iter([]))) == []
    # Changelogs outlive releases: the count, then compressed (one Zstandard frame) each row's
    # two lengths (a deletion's value length all ones), then keys and values in turn.
    [(_, record)] = RecordWriter(3, 258).packed(iter([(b"pa", b"[1]"), (b"pb", b""), (b"pc", None)]))
    head = bytes(7) + b"\x03" + bytes(6) + b"\x01\x02"
    body = b"\x00\x02\x00\x00\x00\x03" + b"\x00\x02\x00\x00\x00\x00" + b"\x00\x02\xff\xff\xff\xff" + b"pa[1]pbpc"
    assert record[:DATA_START + 4] == b"X" + head + b"\x00\x00\x00\x03"
    assert zstandard.ZstdDecompressor().decompress(record[DATA_START + 4:]) == body
    # Earlier releases compressed the same with zlib (kind Q): read as they were written.
    earlier = b"Q" + head + b"\x00\x00\x00\x03" + zlib.compress(body, 1)
    assert list(packed_rows(ZROWS, memoryview(earlier)[DATA_START:])) == [(b"pa", b"[1]"), (b"pb", b""), (b"pc", None)]
    rule = ChangelogRule(Checkpoint())
    for offset, value in enumerate([earlier, checkpoint_record(3, 258, {TOPIC: 0})[1]]):
        rule.feed(offset, (b"\x01" + bytes(20)) if offset == 0 else b"c", value)
    records, _, _ = rule.take()
    assert [(kind, list(packed_rows(kind, payload))) for kind, payload in records] == [
        (ZROWS, [(b"pa", b"[1]"), (b"pb", b""), (b"pc", None)])]


def test_a_packed_record_ends_with_the_row_that_brings_it_to_pack_bytes_however_the_rows_are_taken(monkeypatch):
    import stream_app.stream.changelog as changelog_module
    monkeypatch.setattr(changelog_module, "PACK_BYTES", 5000)
    rows = [(b"p%05d" % i, None if i % 11 == 0 else b"v" * (i * 37 % 900)) for i in range(400)]
    found = []
    for chunk in (1, 7, 64, 8192):  # the rows a scan gives at a time: never where a record ends
        monkeypatch.setattr(changelog_module, "_PACK_CHUNK", chunk)
        found.append([packed_count(memoryview(value)[DATA_START:]) for _, value in RecordWriter(1, 1).packed(rows)])
    assert found[1:] == found[:-1] and sum(found[0]) == 400 and len(found[0]) > 5
    # A batch's writes come as a dict: the same records.
    assert list(RecordWriter(1, 1).packed(dict(rows))) == list(RecordWriter(1, 1).packed(rows))
    sizes = [6 + len(key) + len(value or b"") for key, value in rows]  # two lengths, a key, a value (None: none)
    start = 0
    for count_ in found[0][:-1]:
        bytes_ = sizes[start:start + count_]
        assert sum(bytes_) >= 5000 > sum(bytes_[:-1])
        start += count_
    assert sum(sizes[start:]) < 5000 + sizes[-1]


def test_packed_records_of_earlier_releases_are_read_as_they_were_written():
    """Kind P: uncompressed, the count, each row's two lengths, then keys and values in turn."""
    head = bytes(7) + b"\x03" + bytes(6) + b"\x01\x02"
    record = b"P" + head + b"\x00\x00\x00\x02" + b"\x00\x02\x00\x00\x00\x03\x00\x02\x00\x00\x00\x00" + b"pa[1]pb"
    assert list(packed_rows(ROWS, memoryview(record)[DATA_START:])) == [(b"pa", b"[1]"), (b"pb", b"")]
    # In a base of an earlier release (a start and its packed rows), they replace the state.
    payload = b"\x00\x00\x00\x02" + b"\x00\x02\x00\x00\x00\x01\x00\x02\x00\x00\x00\x01" + b"pa1pb2"
    packed = (RecordWriter(1, 3, first=1_000_000).row(b"", None)[0], b"P" + mark_of_head(1, 3) + payload)
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(BEFORE_BASE + BASE[:1] + [packed] + BASE[-1:] + AFTER_BASE):
        rule.feed(offset, key, value)
    records, _, wipe = rule.take()
    assert wipe and [kind for kind, _ in records] == [ROWS, ROW] and rows_of(records) == {b"pa": 1, b"pb": 4}


def mark_of_head(epoch: int, batch: int) -> bytes:
    return epoch.to_bytes(8, "big") + batch.to_bytes(8, "big")


def test_a_base_its_owner_did_not_finish_changes_nothing():
    # A crash before the base's checkpoint: the next take-up's fence leaves the state before it.
    log = BEFORE_BASE + BASE[:-1] + [fence_record(2), row_record(2, 3, b"pa", j(9)), checkpoint_record(2, 3, {})]
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(log):
        rule.feed(offset, key, value)
    records, checkpoint, wipe = rule.take()
    assert not wipe and rows_of(records) == {b"pa": 9, b"pb": 2, b"pc": None}
    assert (checkpoint.epoch, checkpoint.batch) == (2, 3)


def test_a_replaced_owners_late_base_is_dropped():
    # The new owner's fence came first: the old owner's base (epoch 1, after it) never counts.
    log = BEFORE_BASE + [fence_record(2)] + BASE + [row_record(2, 3, b"pb", j(5)), checkpoint_record(2, 3, {})]
    rows, checkpoint, fenced = read(log)
    assert rows == {b"pa": 1, b"pb": 5, b"pc": None} and fenced == 4 and (checkpoint.epoch, checkpoint.batch) == (2, 3)


def test_a_reader_counts_the_entries_past_the_last_start_and_knows_where_it_is():
    log = [fence_record(1), entry_record(1, 1, b"e1"), entry_record(1, 1, b"e2"), checkpoint_record(1, 1, {TOPIC: 1}),
           entry_record(1, 2, b"e3")]  # batch 2 never completed
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(log):
        rule.feed(offset, key, value)
    assert (rule.checkpoint.entries, rule.checkpoint.base) == (2, -1)
    base_at = len(log)
    log += [start_record(1, 3), *RecordWriter(1, 3, first=100).packed(iter([(b"pa", j(1))])),
            checkpoint_record(1, 3, {TOPIC: 1}),  # a start's own checkpoint does not name it
            entry_record(1, 4, b"e4"), checkpoint_record(1, 4, {TOPIC: 2}, base=base_at)]
    for offset, (key, value) in enumerate(log[5:], start=5):
        rule.feed(offset, key, value)
        if offset == base_at + 2:  # the start completed: the entries before it are void
            assert (rule.checkpoint.entries, rule.checkpoint.base) == (0, base_at)
    assert (rule.checkpoint.entries, rule.checkpoint.base) == (1, base_at)
    # Kept with the local checkpoint: a rule that goes on from it counts on.
    again = ChangelogRule(Checkpoint.decode(rule.checkpoint.encode()))
    again.feed(len(log), *entry_record(1, 5, b"e5"))
    again.feed(len(log) + 1, *checkpoint_record(1, 5, {}, base=base_at))
    assert (again.checkpoint.entries, again.checkpoint.base) == (2, base_at)
    # One that comes in after the start learns where it is from a checkpoint that names it.
    late = ChangelogRule(Checkpoint(1, 3, {TOPIC: 1}, changelog=base_at + 2))
    for offset, (key, value) in enumerate(log[base_at + 3:], start=base_at + 3):
        late.feed(offset, key, value)
    assert (late.checkpoint.entries, late.checkpoint.base) == (1, base_at)


def test_records_before_a_base_that_the_cleaner_left_do_not_count():
    """The cleaner removes what a base made void in passes, a part of the tombstones' keys
    at a time: it can leave a record of a batch whose checkpoint it removed. That record
    came before the base, which holds the state after it (here pc was deleted since)."""
    log = BEFORE_BASE + BASE + AFTER_BASE
    left = {1: BEFORE_BASE[1], 2: BEFORE_BASE[2]}  # pa and pc of batch 1; its checkpoint, the rest, removed
    partial = [(offset, *record) for offset, record in enumerate(log)
               if offset >= len(BEFORE_BASE) or offset in left]
    rule = ChangelogRule()
    for offset, key, value in partial:
        rule.feed(offset, key, value)
    records, checkpoint, wipe = rule.take()
    assert wipe and rows_of(records) == {b"pa": 1, b"pb": 4}
    assert (checkpoint.epoch, checkpoint.batch) == (1, 4)


def _committed_from(log: list[tuple[int, tuple[bytes, bytes]]], start: int) -> list[tuple[int, bytes]]:
    """What a reader that starts at `start` with nothing stored ends with (its records,
    after the last wipe)."""
    rule = ChangelogRule(Checkpoint(), start=start)
    out: list[tuple[int, bytes]] = []
    for offset, (key, value) in log[start:]:
        rule.feed(offset, key, value)
        records, _, wipe = rule.take()
        out = ([] if wipe else out) + [(kind, bytes(payload)) for kind, payload in records]
    return out


def test_a_rival_fence_of_the_base_writers_epoch_drops_no_batch_for_a_reader_from_the_base():
    """A take-up from a stale directory fences with the owner's own epoch, between a batch's
    records and its checkpoint, right after a base: a reader of the whole log drops that
    fence (it accepted the owner's); one that starts at the base (an empty directory, or the
    records before it deleted) takes the base's epoch as accepted, drops it too, and keeps
    the batch."""
    epoch = 3
    log = [fence_record(epoch)]
    log.append(RecordWriter(epoch, 1).entry(b"one"))
    log.append(checkpoint_record(epoch, 1, {TOPIC: 0}))
    log.append(base_record(epoch, 1))
    log += list(RecordWriter(epoch, 1, first=BASE_ROWS_FIRST).packed([(b"\x01a", b"1")]))
    log.append(base_end_record(epoch, 1))
    log.append(RecordWriter(epoch, 2).entry(b"two"))
    log.append(fence_record(epoch))  # the rival's
    log.append(checkpoint_record(epoch, 2, {TOPIC: 1}, base=3))
    log = list(enumerate(log))
    whole, from_base = _committed_from(log, 0), _committed_from(log, 3)
    assert [payload for kind, payload in whole if kind == ENTRY][-1:] == [b"two"]
    assert [payload for kind, payload in from_base if kind == ENTRY] == [b"two"]


def test_a_record_batch_the_producer_sent_twice_is_committed_once():
    """A produce request whose answer was lost (a broker timing out) is sent again by the
    producer, which is not idempotent: the batch's records land twice, before its
    checkpoint. The rule commits each entry once (it counted the match twice)."""
    epoch = 2
    writer = RecordWriter(epoch, 1)
    sent = [writer.entry(b"one"), writer.entry(b"two")]
    log = [fence_record(epoch), *sent, *sent, checkpoint_record(epoch, 1, {TOPIC: 1})]
    rule = ChangelogRule()
    for offset, (key, value) in enumerate(log):
        rule.feed(offset, key, value)
    records, checkpoint, _ = rule.take()
    assert [bytes(payload) for kind, payload in records if kind == ENTRY] == [b"one", b"two"]
    assert rule.copies == 2 and checkpoint.batch == 1


def test_a_base_record_the_producer_sent_twice_is_taken_once():
    """The producer is not idempotent: a base's packed record whose answer was lost is sent
    again. A reader that opened the base takes it once (twice, its keys would go out of
    order into the table file it stores the base as, and the store would refuse it)."""
    state = [(b"pk%02d" % i, j(i)) for i in range(12)]
    base = list(RecordWriter(1, 1, first=BASE_ROWS_FIRST).packed(iter(state)))
    assert len(base) == 1
    log = [fence_record(1), row_record(1, 1, b"pk00", j(0)), checkpoint_record(1, 1, {TOPIC: 0}),
           base_record(1, 1), base[0], base[0], base_end_record(1, 1),
           row_record(1, 2, b"pk00", j(100)), checkpoint_record(1, 2, {TOPIC: 1}, base=3)]
    for start in (Checkpoint(), None):  # a reader of the whole log, and one that starts at the base
        rule = ChangelogRule(start, start=None if start is not None else 3)
        for offset in range(rule.position, len(log)):
            rule.feed(offset, *log[offset])
        records, checkpoint, wipe = rule.take()
        keys = [key for kind, payload in records if kind == ZSTD_ROWS for key, _ in packed_rows(kind, payload)]
        assert wipe and keys == [key for key, _ in state] and rule.copies == 1
        assert rows_of(records)[b"pk00"] == 100 and checkpoint.base == 3


def test_a_reader_from_inside_a_base_counts_from_its_opening_when_it_ends():
    """The owner's local checkpoint is past a base's opening (the base still open) and it
    dies after sending the batch that ended the base but before storing its checkpoint: a
    take-up from that checkpoint reads the end, whose opening is behind it. What the
    changelog holds past the last start is then what was committed since the opening (the
    checkpoint keeps the counts at the opening), not since the start before it."""
    def rows(epoch: int, batch: int, *keys: bytes) -> tuple[bytes, bytes]:
        return next(RecordWriter(epoch, batch, first=next(_PLACES)).packed(iter([(k, j(1)) for k in keys])))

    log = [fence_record(1), rows(1, 1, b"pa", b"pb"), checkpoint_record(1, 1, {TOPIC: 0}),
           rows(1, 2, b"pc"), checkpoint_record(1, 2, {TOPIC: 1})]
    base_at = len(log)
    base_rows = list(RecordWriter(1, 2, first=BASE_ROWS_FIRST).packed(iter([(b"pa", j(1)), (b"pb", j(1))])))
    log += [base_record(1, 2), rows(1, 3, b"pd"), checkpoint_record(1, 3, {TOPIC: 2})]  # a commit with no part
    inside = Checkpoint(1, 3, {TOPIC: 2}, changelog=len(log) - 1, rows=4, opened=(base_at, 0, 3))
    log += [*base_rows, base_end_record(1, 2), rows(1, 4, b"pe", b"pf"),
            checkpoint_record(1, 4, {TOPIC: 3}, base=base_at)]
    # The whole log, read by the rule: rows since the base's opening (pd, pe, pf).
    _, whole, _ = read(log)
    assert (whole.base, whole.rows, whole.opened) == (base_at, 3, None)
    # From the owner's checkpoint inside the base (kept in its store, as stored).
    stored = Checkpoint.decode(inside.encode())
    assert stored.opened == (base_at, 0, 3)
    _, after, fenced = read(log[inside.changelog + 1:], stored)
    assert (after.base, after.rows, after.opened) == (base_at, 3, None)
    assert fenced == len(base_rows) + 1  # the base's rows and end: its opening is behind this reader
    # A fence of a newer epoch ends the base's writer: a checkpoint naming the base later
    # cannot come, and what is kept of the opening goes.
    _, fenced_first, _ = read([fence_record(2)], stored)
    assert fenced_first.opened is None and fenced_first.rows == 4
