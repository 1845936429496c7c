"""The rules of the state protocol (stream/state.py): versioned records,
checkpoints, burned batch numbers. The sequence that writes them is tested
in test_commit.py."""

from stream_app.stream.state import CHECKPOINT_KEY, CHECKPOINTS, PLAYERS, Checkpoint, PartitionState, resolve

TOPIC = "match-results"


def stored(store: dict, writes: list) -> None:
    for table, key, value in writes:
        store.setdefault(table, {})[key] = value


def test_a_record_of_a_batch_that_never_committed_reads_as_its_previous_value():
    store: dict = {}
    state, record = PartitionState.take_up(0, lambda t, k: store.get(t, {}).get(k))
    stored(store, [(CHECKPOINTS, CHECKPOINT_KEY, record)])
    state.put(PLAYERS, b"l\x1fa", {"rating": 1.0})
    writes, checkpoint = state.checkpoint_writes()
    stored(store, [*writes, (CHECKPOINTS, CHECKPOINT_KEY, checkpoint)])
    state.checkpointed(checkpoint)
    state.put(PLAYERS, b"l\x1fa", {"rating": 2.0})
    writes, _ = state.checkpoint_writes()
    stored(store, writes)  # the crash: no checkpoint after these
    reopened, _ = PartitionState.take_up(0, lambda t, k: store.get(t, {}).get(k))
    assert reopened.get(PLAYERS, b"l\x1fa") == {"rating": 1.0}
    # And the burned batch number keeps it uncommitted even after later checkpoints.
    assert reopened.checkpoint.batch in reopened.checkpoint.aborted
    later = Checkpoint(batch=reopened.checkpoint.batch + 5, aborted=reopened.checkpoint.aborted)
    assert resolve(store[PLAYERS][b"l\x1fa"], later) == {"rating": 1.0}


def test_a_versioned_record_holds_the_new_and_the_committed_value():
    state = PartitionState(0, Checkpoint(batch=4), lambda t, k: None)
    state.put(PLAYERS, b"k", {"rating": 3.0})
    writes, checkpoint = state.checkpoint_writes()
    [(table, key, value)] = writes
    assert (table, key) == (PLAYERS, b"k")
    assert resolve(value, Checkpoint(batch=5)) == {"rating": 3.0}
    assert resolve(value, Checkpoint(batch=4)) is None  # before the batch: no committed value
    assert resolve(value, Checkpoint(batch=6, aborted=[5])) is None
    assert Checkpoint.decode(checkpoint).batch == 5


def test_offsets_at_or_below_the_checkpoint_are_applied_and_the_next_one_is_expected():
    state = PartitionState(0, Checkpoint(batch=3, offsets={TOPIC: 41}), lambda t, k: None)
    assert state.already_applied(TOPIC, 41) and not state.already_applied(TOPIC, 42)
    assert state.next_offset(TOPIC) == 42 and state.next_offset("other") is None
    state.note_offset(TOPIC, 42)
    assert state.already_applied(TOPIC, 42) and state.next_offset(TOPIC) == 43
    _, checkpoint = state.checkpoint_writes()
    assert Checkpoint.decode(checkpoint).offsets == {TOPIC: 42}
