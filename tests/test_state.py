"""The exactly-once state protocol (stream_app/state.py + processor.py) under
simulated crashes, without Kafka: a model of the changelogs and of input
redelivery. Whatever the crash points, the committed state equals the replay."""

import random
from collections import defaultdict

import orjson
import pytest

from stream_app.config import LeagueConfig
from stream_app.events import parse_match
from stream_app.processor import Processor
from stream_app.replay import Ledger
from stream_app.sample import multi_player_league, two_player_league
from stream_app.state import (
    CHECKPOINT_KEY,
    CHECKPOINTS,
    LEAGUES,
    PLAYERS,
    Checkpoint,
    PartitionLedger,
    resolve,
)

CONFIG = LeagueConfig.from_toml('[leagues."kart*"]\nalgorithm = "elo-pairwise"\n[default]\nalgorithm = "elo"\n')
TOPIC = "match-results"


def inputs(seed=0):
    rng = random.Random(seed)
    events = list(two_player_league("chess", 12, 150, rng)) + list(multi_player_league("karting", 10, 40, 4, rng))
    rng.shuffle(events)
    events.sort(key=lambda e: (e["league"] != "chess", 0))  # stable: keeps each league's order
    rng.shuffle(events)
    lines = [orjson.dumps(e) for e in events]
    lines.insert(30, b"{bad")
    lines.insert(60, lines[10])  # a duplicate match_id
    return lines


class Cluster:
    """The changelogs: what the broker acknowledged, in order, per table."""

    def __init__(self):
        self.log = defaultdict(list)

    def restore(self):
        store = defaultdict(dict)
        for table, records in self.log.items():
            for key, value in records:
                store[table][key] = value
        return store


class SimWorker:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.store = cluster.restore()  # an empty data directory, restored from the changelogs
        self.ledger, record = PartitionLedger.take_up(0, lambda t, k: self.store[t].get(k))
        self._ack([(CHECKPOINTS, CHECKPOINT_KEY, record)])
        self.processor = Processor(CONFIG, 1, TOPIC, TOPIC + "-by-league")
        self.emitted = []

    def _ack(self, writes):
        for table, key, value in writes:
            self.store[table][key] = value
            self.cluster.log[table].append((key, value))

    def run_batch(self, lines, start, size, rng, crash):
        """Process lines[start:start+size]; maybe crash part-way through the checkpoint."""
        outputs = []
        for offset in range(start, min(len(lines), start + size)):
            result = self.processor.process(self.ledger, TOPIC, 0, offset, b"k", lines[offset])
            outputs += [o for o in result.outputs if o.kind == "change"]
        if crash == "before_outputs":
            return False
        self.emitted += [orjson.loads(o.value)["event_id"] for o in outputs]
        writes, checkpoint = self.ledger.checkpoint_writes()
        if crash == "during_writes":
            # The broker acknowledged some of the records (any subset: several topics).
            self._ack([w for w in writes if rng.random() < 0.5])
            return False
        self._ack(writes)
        if crash == "before_checkpoint":
            return False
        self._ack([(CHECKPOINTS, CHECKPOINT_KEY, checkpoint)])
        self.ledger.committed(checkpoint)
        return True


def committed_players(store):
    checkpoint = Checkpoint.decode(store[CHECKPOINTS].get(CHECKPOINT_KEY))
    out = {}
    for key, record in store[PLAYERS].items():
        value = resolve(record, checkpoint)
        if value is not None:
            league, player = key.decode().split("\x1f")
            out[(league, player)] = value
    return out


def expected_players(lines):
    ledger = Ledger(CONFIG)
    for line in lines:
        try:
            ledger.apply(parse_match(line))
        except Exception:
            pass
    return {(league, player): state.to_dict() for league, players in ledger.leagues.items() for player, state in players.items()}, ledger


@pytest.mark.parametrize("seed", range(12))
def test_crashes_at_any_point_neither_lose_nor_double_apply(seed):
    rng = random.Random(seed)
    lines = inputs(seed % 3)
    expected, ledger = expected_players(lines)
    cluster = Cluster()
    worker = SimWorker(cluster)
    committed_offset = 0  # what Faust committed: never past a checkpoint
    position = 0
    crashes = 0
    all_emitted = set()
    while position < len(lines):
        size = rng.randint(1, 40)
        crash = rng.choice([None, None, None, "before_outputs", "during_writes", "before_checkpoint"])
        ok = worker.run_batch(lines, position, size, rng, crash)
        all_emitted.update(worker.emitted)
        if ok:
            position = min(len(lines), position + size)
            # Faust may commit any offset up to the checkpoint (often less).
            committed_offset = rng.randint(committed_offset, position)
        else:
            crashes += 1
            worker = SimWorker(cluster)  # restart with an empty data directory
            position = committed_offset  # redelivery from the committed offset
    state = committed_players(worker.store)
    assert state == expected
    # League records count every applied match once.
    checkpoint = Checkpoint.decode(worker.store[CHECKPOINTS][CHECKPOINT_KEY])
    for league, seen in ledger.seen.items():
        assert resolve(worker.store[LEAGUES][league.encode()], checkpoint)["matches"] == len(seen)
    # Every rating change was published at least once (duplicates carry the same id).
    expected_ids = set()
    replay = Ledger(CONFIG)
    from stream_app.events import event_id

    for line in lines:
        try:
            match = parse_match(line)
            if replay.apply(match) is not None:
                expected_ids.update(event_id(match.league, match.match_id, p.player) for p in match.participants)
        except Exception:
            pass
    assert expected_ids <= all_emitted
    assert crashes >= 0


def test_a_record_of_a_batch_that_never_committed_reads_as_its_previous_value():
    store = {PLAYERS: {}, CHECKPOINTS: {}}
    ledger, record = PartitionLedger.take_up(0, lambda t, k: store[t].get(k))
    store[CHECKPOINTS][CHECKPOINT_KEY] = record
    ledger.put(PLAYERS, b"l\x1fa", {"rating": 1.0})
    writes, checkpoint = ledger.checkpoint_writes()
    for table, key, value in writes:
        store[table][key] = value
    store[CHECKPOINTS][CHECKPOINT_KEY] = checkpoint
    ledger.committed(checkpoint)
    ledger.put(PLAYERS, b"l\x1fa", {"rating": 2.0})
    writes, _ = ledger.checkpoint_writes()
    for table, key, value in writes:
        store[table][key] = value  # the crash: no checkpoint after these
    reopened, _ = PartitionLedger.take_up(0, lambda t, k: store[t].get(k))
    assert reopened.get(PLAYERS, b"l\x1fa") == {"rating": 1.0}
    # And the burned batch number keeps it uncommitted even after later checkpoints.
    assert reopened.checkpoint.batch in reopened.checkpoint.aborted


def test_events_at_or_below_the_checkpoint_are_skipped_as_redelivered():
    ledger = PartitionLedger(0, Checkpoint(batch=3, offsets={TOPIC: 41}), lambda t, k: None)
    processor = Processor(CONFIG, 1, TOPIC, TOPIC + "-by-league")
    assert processor.process(ledger, TOPIC, 0, 41, b"k", b"{}").redelivered
    assert not processor.process(ledger, TOPIC, 0, 42, b"k", b"{}").redelivered


def test_an_engine_failure_becomes_a_dead_letter_and_leaves_no_partial_state(monkeypatch):
    from stream_app.engine.elo import Elo

    def broken(self, match, before):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(Elo, "rate", broken)
    ledger = PartitionLedger(0, Checkpoint(), lambda t, k: None)
    processor = Processor(CONFIG, 1, TOPIC, TOPIC + "-by-league")
    line = orjson.dumps({"league": "chess", "match_id": "1", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]})
    result = processor.process(ledger, TOPIC, 0, 0, b"chess", line)
    assert result.dead_letter.code == "internal_error" and "ZeroDivisionError" in result.dead_letter.message
    assert [o.kind for o in result.outputs] == ["dead_letter"]
    assert ledger.overlay == {}  # nothing of the match was written
    assert orjson.loads(result.outputs[0].value)["payload"] == line.decode()
