"""What one input record becomes: skipped (applied before: a redelivery),
forwarded (on the wrong partition for its league), applied (through
`rating.apply_match`, as in the replay) or dead-lettered, with the output
events to publish. No Kafka here: the batch loop (stream/worker.py) hands in
records and publishes what comes back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

import orjson
from aiokafka.partitioner import murmur2

from ..engine import Match, PlayerState, RatingChange, RatingSystem
from ..events import BadEvent, dead_letter, parse_match, rating_changed_events
from ..leagues import LeagueConfig
from ..rating import Applied, DuplicateMatch, apply_match
from .state import (HISTORY, LAST_TIME, LEAGUES, MATCHES, PLAYERS, PartitionState, history_key, match_key, player_key,
                    player_state, stored_history)

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
    dead_letter: BadEvent | None = None
    forwarded: bool = False
    redelivered: bool = False  # at or below the checkpoint: applied before


class PartitionLeagues:
    """The leagues of one partition, as `apply_match` reads and writes them: the
    tables' committed records plus the batch in progress (PartitionState)."""

    def __init__(self, state: PartitionState, config: LeagueConfig):
        self.state = state
        self.config = config
        self.last_time: dict[str, float] = {}  # players read: their last match's time (stream/state.py)

    def league(self, league: str) -> dict[str, Any] | None:
        return self.state.get(LEAGUES, league.encode())

    def has_match(self, league: str, match_id: str) -> bool:
        return self.state.get(MATCHES, match_key(league, match_id)) is not None

    def players(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerState | None]:
        get = self.state.get
        from_dict = system.state_from_dict
        found = []
        for name in names:
            raw = get(PLAYERS, player_key(league, name))
            if raw is None:
                found.append(None)
                continue
            data, last = player_state(raw)
            if last is not None:
                self.last_time[name] = last
            found.append(from_dict(data))
        return found

    def save(self, match: Match, changes: list[RatingChange], record: dict[str, Any], history: list[dict[str, Any]]) -> None:
        league = match.league
        put = self.state.put
        for change in changes:
            value = change.after.to_dict()
            last = match.time if match.time is not None else self.last_time.get(change.player)
            if last is not None:
                value[LAST_TIME] = last
            put(PLAYERS, player_key(league, change.player), value)
        put(MATCHES, match_key(league, match.match_id), {"seq": record["matches"]})
        put(LEAGUES, league.encode(), record)
        if history:
            kept = self.config.options_for(league).history_max
            for change, entry in zip(changes, history):
                seq = entry["seq"]
                put(HISTORY, history_key(league, change.player, seq), stored_history(entry, match.time))
                if kept is not None and seq > kept:  # bounded: the entry that falls out goes
                    put(HISTORY, history_key(league, change.player, seq - kept), None)


class RecordHandler:
    def __init__(self, config: LeagueConfig, partitions: int, forward_topic: str):
        self.config = config
        self.partitions = partitions
        self.forward_topic = forward_topic

    def handle(self, state: PartitionState, topic: str, partition: int, offset: int,
               key: bytes | None, value: bytes | None) -> Outcome:
        outcome = Outcome()
        if state.already_applied(topic, offset):
            outcome.redelivered = True
            return outcome
        state.note_offset(topic, offset)
        payload = value if value is not None else b""
        try:
            match = parse_match(payload)
            owner = league_partition(match.league, self.partitions)
            if partition != owner:
                if topic == self.forward_topic:
                    # Cannot happen with Kafka's default partitioner; refuse rather than loop.
                    raise BadEvent("schema_violation", f"league: {match.league!r} arrived on partition {partition}, not {owner}",
                                   "league", match.league, match.match_id)
                outcome.forwarded = True
                outcome.outputs.append(Output("forward", match.league.encode(), payload))
                return outcome
            applied = apply_match(self.config, PartitionLeagues(state, self.config), match)
            league_key = match.league.encode()
            outcome.outputs.extend(Output("change", league_key, _encode(event))
                                   for event in rating_changed_events(applied.algorithm, match, applied.changes))
        except BadEvent as exc:
            outcome.dead_letter = exc
            outcome.outputs.append(_dead_letter_output(exc, key, payload, topic, partition, offset))
            return outcome
        except Exception as exc:  # a bug or an input the engine cannot handle: never crash the worker
            log.exception("record %s:%s:%s could not be applied", topic, partition, offset)
            error = BadEvent("internal_error", f"event: could not be applied ({type(exc).__name__}: {exc})")
            outcome.dead_letter = error
            outcome.outputs = [_dead_letter_output(error, key, payload, topic, partition, offset)]
            return outcome
        outcome.applied = applied
        return outcome


def is_duplicate(error: BadEvent) -> bool:
    return isinstance(error, DuplicateMatch)


def _encode(event: dict) -> bytes:
    """orjson.dumps, copied out: orjson's result keeps the block it was written in
    (about 4 KiB), and the worker holds a batch's outputs until the broker has them;
    a copy of the exact size is cheaper than thousands of such blocks."""
    return bytes(memoryview(orjson.dumps(event)))


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
