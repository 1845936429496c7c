"""What the worker does with one input record, without Kafka.

The Faust agent (stream_app/worker.py) feeds records here and sends what
comes back; the rules are the same as `Ledger.apply` of the offline replay
(validation, the league's system, a match_id seen before in its league is
not applied again), which is why stream and replay agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import logging

import orjson
from aiokafka.partitioner import murmur2

from .config import LeagueConfig
from .engine import Match, PlayerState, RatingChange
from .events import BadEvent, dead_letter, parse_match, rating_changed_events
from .replay import rate_match
from .state import LEAGUES, MATCHES, PLAYERS, PartitionLedger, match_key, player_key


log = logging.getLogger(__name__)


@lru_cache(maxsize=65536)
def league_partition(league: str, partitions: int) -> int:
    """Kafka's default partitioner (murmur2) on the league: where a league lives."""
    return (murmur2(league.encode()) & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class Output:
    kind: str  # "change", "dead_letter" or "forward"
    key: bytes
    value: bytes


@dataclass(slots=True)
class Applied:
    league: str
    algorithm: str
    match: Match
    changes: list[RatingChange]
    new_players: int
    league_players: int


@dataclass
class Result:
    outputs: list[Output] = field(default_factory=list)
    applied: Applied | None = None
    dead_letter: BadEvent | None = None
    duplicate: tuple[str, str] | None = None  # (league, algorithm) of a match_id seen before
    forwarded: bool = False
    redelivered: bool = False  # at or below the checkpoint: already applied


class Processor:
    def __init__(self, config: LeagueConfig, partitions: int, source_topic: str, forward_topic: str):
        self.config = config
        self.partitions = partitions
        self.source_topic = source_topic
        self.forward_topic = forward_topic

    def process(
        self,
        ledger: PartitionLedger,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
    ) -> Result:
        result = Result()
        if ledger.already_applied(topic, offset):
            result.redelivered = True
            return result
        ledger.note_offset(topic, offset)
        payload = value if value is not None else b""
        try:
            match = parse_match(payload)
            owner = league_partition(match.league, self.partitions)
            if partition != owner:
                if topic == self.forward_topic:
                    # Cannot happen with Kafka's default partitioner; refuse rather than loop.
                    raise BadEvent("schema_violation", f"league: {match.league!r} arrived on partition {partition}, not {owner}", "league", match.league, match.match_id)
                result.forwarded = True
                result.outputs.append(Output("forward", match.league.encode(), payload))
                return result
            self._apply(ledger, match, result)
        except BadEvent as exc:
            result.dead_letter = exc
            result.outputs.append(_dead_letter_output(exc, key, payload, topic, partition, offset))
        except Exception as exc:  # a bug or an input the engine cannot handle: never crash the worker
            log.exception("record %s:%s:%s could not be applied", topic, partition, offset)
            error = BadEvent("internal_error", f"event: could not be applied ({type(exc).__name__}: {exc})")
            result.applied = None
            result.dead_letter = error
            result.outputs = [_dead_letter_output(error, key, payload, topic, partition, offset)]
        return result

    def _apply(self, ledger: PartitionLedger, match: Match, result: Result) -> None:
        league = match.league
        rule = self.config.rule_for(league)
        record = ledger.get(LEAGUES, league.encode()) or {"algorithm": rule.algorithm, "matches": 0, "players": 0}
        if record["algorithm"] != rule.algorithm:
            raise BadEvent(
                "system_rule",
                f"league: {league!r} is rated with {record['algorithm']!r} but the configuration now says {rule.algorithm!r}",
                "league",
                league,
                match.match_id,
            )
        mkey = match_key(league, match.match_id)
        if ledger.get(MATCHES, mkey) is not None:
            result.duplicate = (league, rule.algorithm)
            raise BadEvent(
                "duplicate_match",
                f"match_id: {match.match_id!r} was already applied in league {league!r}",
                "match_id",
                league,
                match.match_id,
            )
        system = rule.system
        state_from_dict = system.state_from_dict
        # Each player's key, encoded once: read now, written below.
        keys: dict[str, bytes] = {}
        new_players = 0

        def lookup(player: str) -> PlayerState | None:
            nonlocal new_players
            key = keys[player] = player_key(league, player)
            raw = ledger.get(PLAYERS, key)
            if raw is None:  # a newcomer (validation lets no player appear twice)
                new_players += 1
                return None
            return state_from_dict(raw)

        _, changes = rate_match(system, match, lookup)
        # Everything is computed before anything is written, so a failure
        # (reported as a dead letter) leaves no partial match in the state.
        league_key = league.encode()
        outputs = [
            Output("change", league_key, _encode(event))
            for event in rating_changed_events(rule.algorithm, match, changes)
        ]
        seq = record["matches"] + 1
        players = record["players"] + new_players
        put = ledger.put
        for change in changes:
            put(PLAYERS, keys[change.player], change.after.to_dict())
        put(MATCHES, mkey, {"seq": seq})
        put(LEAGUES, league_key, {"algorithm": rule.algorithm, "matches": seq, "players": players})
        result.outputs.extend(outputs)
        result.applied = Applied(league, rule.algorithm, match, changes, new_players, players)


def _encode(event: dict) -> bytes:
    """orjson.dumps, copied out: orjson's result keeps the block it was written in
    (about 4 KiB, measured), and the worker holds a batch's outputs until the broker
    has them; a copy of the exact size is cheaper than thousands of such blocks."""
    return bytes(memoryview(orjson.dumps(event)))


def _dead_letter_output(
    error: BadEvent, key: bytes | None, payload: bytes, topic: str, partition: int, offset: int
) -> Output:
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

