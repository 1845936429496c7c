"""What one input record becomes: skipped (applied before: a redelivery),
forwarded (on the wrong partition for its league), applied (through
`apply.apply_match`, as in the replay) or dead-lettered, with the output
events to publish. No Kafka here: the batch loop (stream/worker.py) hands in
records and publishes what comes back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import AbstractSet, Any, Sequence

import orjson
from aiokafka.partitioner import murmur2

from ..engine import Match, PlayerState, RatingSystem
from ..events import BadEvent, parse_input
from ..published import correction_events, dead_letter, rating_changed_events
from ..leagues import IN_ORDER, LeagueConfig
from ..apply import apply
from ..rating import ABSENT, Applied, DuplicateMatch, PlayerRecord, log_entry, match_from_log
from ..rerate import Rerated, proceed
from .state import (BOUNDARIES, HISTORY, JOBS, LAST_TIME, LEAGUES, LOG, MATCHES, PLAYERS, SNAP, SNAPSHOTS, WORKING,
                    PartitionState,
                    boundary_key, history_key, league_prefix, log_key, match_key, player_key, player_state,
                    snapshot_key, stored_history)

log = logging.getLogger(__name__)


def key_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: murmur2 of the key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@lru_cache(maxsize=65536)
def league_partition(league: str, partitions: int) -> int:
    """Where a league lives: its matches are keyed by league."""
    return key_partition(league.encode(), partitions)


@dataclass(slots=True)
class Output:
    kind: str  # "change", "dead_letter" or "forward"
    key: bytes
    value: bytes


@dataclass
class Outcome:
    outputs: list[Output] = field(default_factory=list)
    applied: Applied | None = None
    rerated: Rerated | None = None
    pending: str | None = None  # a league whose re-rate goes on in the next part
    dead_letter: BadEvent | None = None
    forwarded: bool = False
    redelivered: bool = False  # at or below the checkpoint: applied before


class PartitionLeagues:
    """The leagues of one partition, as apply.apply reads and writes them: the
    tables' committed records plus the batch in progress (PartitionState)."""

    keeps_history = True  # the API serves it

    def __init__(self, state: PartitionState, config: LeagueConfig):
        self.state = state
        self.config = config
        self.stored: dict[str, dict[str, Any]] = {}  # the records of the players read (last_time, snap)
        self.keys: dict[str, bytes] = {}  # the players' keys, built once per match

    # -- applying at the end of the log ----------------------------------------------------
    def league(self, league: str) -> dict[str, Any] | None:
        return self.state.get(LEAGUES, league.encode())

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        return self.state.get(MATCHES, match_key(league, match_id))

    def players(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerState | None]:
        get = self.state.get
        from_dict = system.state_from_dict
        stored = self.stored
        keys = self.keys
        found = []
        for name in names:
            key = keys[name] = player_key(league, name)
            raw = get(PLAYERS, key)
            if raw is None:
                found.append(None)
                continue
            stored[name] = raw
            found.append(from_dict(player_state(raw)[0]))
        return found

    def save(self, applied: Applied) -> None:
        match, place = applied.match, applied.place
        league = match.league
        put = self.state.put
        boundary = place.boundary
        stored = self.stored
        for change, prior in zip(applied.changes, applied.prior):
            name = change.player
            raw = None if prior is None else stored[name]
            if boundary and (raw is None or raw.get(SNAP, 0) < boundary):  # rating.needs_snapshot
                put(SNAPSHOTS, snapshot_key(league, boundary, name), ABSENT if raw is None else raw)
            value = change.after.to_dict()
            last = match.time if match.time is not None or raw is None else raw.get(LAST_TIME)
            if last is not None:
                value[LAST_TIME] = last
            if boundary:
                value[SNAP] = boundary
            key = self.keys.get(name)
            put(PLAYERS, player_key(league, name) if key is None else key, value)
        if place.new:
            put(MATCHES, match_key(league, match.match_id), {"key": place.key.hex()})
            self.state.put_new(LOG, log_key(league, place.key), log_entry(match))
        if place.opened is not None:
            self.put_boundary(league, boundary, place.key, place.opened)
        put(LEAGUES, league.encode(), applied.record)
        if applied.history:
            # A new entry's history keys are new too: the player's count only grew since the checkpoint.
            put_entry = self.state.put_new if place.new else put
            kept = self.config.rule_for(league).options.history_max
            time = match.time
            for change, entry in zip(applied.changes, applied.history):
                seq = entry["seq"]
                put_entry(HISTORY, history_key(league, change.player, seq), stored_history(entry, time))
                if kept is not None and seq > kept:  # bounded: the entry that falls out goes
                    put(HISTORY, history_key(league, change.player, seq - kept), None)

    def put_history(self, league: str, player: str, entry: dict[str, Any], time: float | None) -> None:
        seq = entry["seq"]
        self.state.put(HISTORY, history_key(league, player, seq), stored_history(entry, time))
        kept = self.config.rule_for(league).options.history_max
        if kept is not None and seq > kept:
            self.state.put(HISTORY, history_key(league, player, seq - kept), None)

    # -- re-rates (rerate.py) -----------------------------------------------------------------
    def put_league(self, league: str, record: dict[str, Any]) -> None:
        self.state.put(LEAGUES, league.encode(), record)

    def put_placed(self, league: str, match_id: str, place: dict[str, Any]) -> None:
        self.state.put(MATCHES, match_key(league, match_id), place)

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Match]]:
        prefix = league_prefix(league)
        return [(key[len(prefix):], match_from_log(league, entry))
                for key, entry in self.state.scan(LOG, prefix + start, _after(prefix), limit)]

    def put_log(self, league: str, key: bytes, match: Match | None) -> None:
        self.state.put(LOG, log_key(league, key), None if match is None else log_entry(match))

    def boundary(self, league: str, number: int) -> tuple[bytes, dict[str, Any]] | None:
        value = self.state.get(BOUNDARIES, boundary_key(league, number))
        return None if value is None else (bytes.fromhex(value["key"]), value["record"])

    def put_boundary(self, league: str, number: int, key: bytes | None, record: dict[str, Any] | None) -> None:
        value = None if key is None else {"key": key.hex(), "record": record}
        self.state.put(BOUNDARIES, boundary_key(league, number), value)

    def snapshot_records(self, league: str, first: int, names: AbstractSet[str],
                         system: RatingSystem) -> dict[str, PlayerRecord | None]:
        at = len(league_prefix(league)) + 8
        found: dict[str, PlayerRecord | None] = {}
        for key, raw in self.state.scan(SNAPSHOTS, boundary_key(league, first), _after(league_prefix(league)), raw=True):
            name = key[at:].decode()
            if name in names and name not in found:
                value = orjson.loads(raw) if type(raw) is bytes else raw
                found[name] = None if value == ABSENT else _player_record(value, system)
        return found

    def put_snapshot(self, league: str, number: int, player: str, record: PlayerRecord | None) -> None:
        self.state.put(SNAPSHOTS, snapshot_key(league, number, player), ABSENT if record is None else _stored(record))

    def forget_snapshots(self, league: str, after: int) -> None:
        end = _after(league_prefix(league))
        for table in (SNAPSHOTS, BOUNDARIES):
            for key, _ in self.state.scan(table, boundary_key(league, after + 1), end, raw=True):
                self.state.put(table, key, None)

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        get = self.state.get
        return [None if (raw := get(PLAYERS, player_key(league, name))) is None else _player_record(raw, system)
                for name in names]

    def put_player(self, league: str, name: str, record: PlayerRecord | None) -> None:
        self.state.put(PLAYERS, player_key(league, name), None if record is None else _stored(record))

    def forget_history(self, league: str, player: str, first: int, last: int) -> None:
        for seq in range(first, last + 1):
            self.state.put(HISTORY, history_key(league, player, seq), None)

    def working(self, league: str, system: RatingSystem) -> "TableRecords":
        return TableRecords(self.state, league, system)

    def job(self, league: str) -> dict[str, Any]:
        return self.state.get(JOBS, league.encode())

    def put_job(self, league: str, job: dict[str, Any] | None) -> None:
        self.state.put(JOBS, league.encode(), job)
        if job is None:
            self.state.jobs.discard(league)
        else:
            self.state.jobs.add(league)

    def jobs(self) -> list[str]:
        """The leagues with a re-rate in progress."""
        return [key.decode() for key, _ in self.state.scan(JOBS, b"", b"\xff")]


class TableRecords:
    """A re-rate's working records in the WORKING table, read once and kept in memory
    for the part in progress; `flush` writes the ones set."""

    def __init__(self, state: PartitionState, league: str, system: RatingSystem):
        self.state = state
        self.league = league
        self.system = system
        self.records: dict[str, PlayerRecord | None] = {}
        self.changed: set[str] = set()

    def get(self, name: str) -> PlayerRecord | None:
        if name in self.records:
            return self.records[name]
        raw = self.state.get(WORKING, player_key(self.league, name))
        record = self.records[name] = None if raw is None or raw == ABSENT else _player_record(raw, self.system)
        return record

    def set(self, name: str, record: PlayerRecord | None) -> None:
        self.records[name] = record
        self.changed.add(name)

    def flush(self) -> None:
        for name in self.changed:
            record = self.records[name]
            self.state.put(WORKING, player_key(self.league, name), ABSENT if record is None else _stored(record))
        self.changed.clear()

    def names(self) -> list[str]:
        prefix = league_prefix(self.league)
        return [key[len(prefix):].decode() for key, _ in self.state.scan(WORKING, prefix, _after(prefix))]

    def forget(self, names: list[str]) -> None:
        for name in names:
            self.state.put(WORKING, player_key(self.league, name), None)
        self.records.clear()


def _after(prefix: bytes) -> bytes:
    """The first key above every key with this prefix."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _player_record(raw: dict[str, Any], system: RatingSystem) -> PlayerRecord:
    data, last = player_state(raw)
    return PlayerRecord(system.state_from_dict(data), last, raw.get(SNAP, 0))


def _stored(record: PlayerRecord) -> dict[str, Any]:
    value = record.state.to_dict()
    if record.last_time is not None:
        value[LAST_TIME] = record.last_time
    if record.snap:
        value[SNAP] = record.snap
    return value


class RecordHandler:
    def __init__(self, config: LeagueConfig, partitions: int, forward_topic: str, rerate_part: int | None = None):
        self.config = config
        self.partitions = partitions
        self.forward_topic = forward_topic
        self.rerate_part = rerate_part  # participant results per part of a re-rate (None: all in one)
        self.in_order: dict[str, bool] = {}

    def handle(self, state: PartitionState, topic: str, partition: int, offset: int,
               key: bytes | None, value: bytes | None) -> Outcome:
        outcome = Outcome()
        if state.already_applied(topic, offset):
            outcome.redelivered = True
            return outcome
        state.note_offset(topic, offset)
        payload = value if value is not None else b""
        state.savepoint(journal=True)
        try:
            item = parse_input(payload)
            league = item.league
            owner = league_partition(league, self.partitions)
            if partition != owner:
                if topic == self.forward_topic:
                    # Cannot happen with Kafka's default partitioner; refuse rather than loop.
                    raise BadEvent("schema_violation", f"league: {league!r} arrived on partition {partition}, not {owner}",
                                   "league", league, item.match_id)
                outcome.forwarded = True
                outcome.outputs.append(Output("forward", league.encode(), payload))
                return outcome
            if isinstance(item, Match) and not self._in_order(league):
                state.savepoint(journal=False)  # appended, never re-rated: its writes come after every check
            done = apply(self.config, PartitionLeagues(state, self.config), item, self.rerate_part)
            if isinstance(done, Applied):
                outcome.applied = done
                outcome.outputs.extend(Output("change", league.encode(), _encode(event))
                                       for event in rating_changed_events(done.algorithm, done.match, done.changes))
            else:
                self._rerated(league, done, outcome)
        except BadEvent as exc:
            state.rollback()
            outcome.dead_letter = _detached(exc)
            outcome.outputs.append(_dead_letter_output(exc, key, payload, topic, partition, offset))
        except Exception as exc:  # a bug or an input the engine cannot handle: never crash the worker
            state.rollback()  # nothing of a record half applied stays
            log.exception("record %s:%s:%s could not be applied", topic, partition, offset)
            error = BadEvent("internal_error", f"event: could not be applied ({type(exc).__name__}: {exc})")
            outcome.dead_letter = error
            outcome.outputs = [_dead_letter_output(error, key, payload, topic, partition, offset)]
        return outcome


    def _in_order(self, league: str) -> bool:
        """Whether the league places late results in time order (they can re-rate it)."""
        found = self.in_order.get(league)
        if found is None:
            found = self.in_order[league] = self.config.options_for(league).late_results == IN_ORDER
        return found

    def proceed(self, state: PartitionState, league: str) -> Outcome:
        """The next part of a league's re-rate (one started by `handle` with a budget
        left over, or found at a take-up)."""
        outcome = Outcome()
        state.savepoint(journal=True)
        try:
            self._rerated(league, proceed(self.config, PartitionLeagues(state, self.config), league, self.rerate_part),
                          outcome)
        except BaseException:
            state.rollback()
            raise
        return outcome

    def _rerated(self, league: str, done: Rerated | None, outcome: Outcome) -> None:
        if done is None:
            outcome.pending = league
            return
        outcome.rerated = done
        events = correction_events(done.algorithm, league, done.match_id, done.revision, done.corrections,
                                   self.config.system_for(league).initial_state())
        outcome.outputs.extend(Output("change", league.encode(), _encode(event)) for event in events)

    def take_up(self, state: PartitionState) -> None:
        """A partition taken up: the re-rates it has in progress."""
        state.jobs = set(PartitionLeagues(state, self.config).jobs())


def is_duplicate(error: BadEvent) -> bool:
    return isinstance(error, DuplicateMatch)


def _encode(event: dict) -> bytes:
    """orjson.dumps, copied out: orjson's result keeps the block it was written in
    (about 4 KiB), and the worker holds a batch's outputs until the broker has them;
    a copy of the exact size is cheaper than thousands of such blocks."""
    return bytes(memoryview(orjson.dumps(event)))


def _detached(error: BadEvent) -> BadEvent:
    """The error without its traceback and the exceptions it arose from: their frames
    lead back to this one, which holds the outcome that keeps the error, a cycle only
    the cyclic collector frees (the worker's runs rarely: stream/app.py)."""
    error.__traceback__ = error.__context__ = error.__cause__ = None
    return error


def _dead_letter_output(error: BadEvent, key: bytes | None, payload: bytes, topic: str, partition: int,
                        offset: int) -> Output:
    # The source is only built for a dead letter: most records never need it.
    source = {"topic": topic, "partition": partition, "offset": offset, "key": _text(key)}
    return Output("dead_letter", key or b"", orjson.dumps(dead_letter(error, payload, source)))


def _text(key: bytes | None) -> str | None:
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.hex()
