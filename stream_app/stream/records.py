"""What one input record becomes: skipped (applied before: a redelivery),
forwarded (on the wrong partition for its league), applied (through
`apply.apply_match`, as in the replay) or dead-lettered, with the output
events to publish. No Kafka here: the batch loop (stream/batch_loop.py) hands in
records and publishes what comes back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, cast

import orjson

from ..apply import apply, apply_match
from ..engine import Match
from ..inputs import BadEvent, parse_input
from ..leagues import IN_ORDER, LeagueConfig
from ..published import dead_letter, events_of
from ..rating.applied import Applied, SeasonStarted
from ..rating.errors import DuplicateMatch
from ..rerate import Rerated, proceed
from .commit import Output
from ..state.league_tables import PartitionLeagues
from .partitioner import league_partition
from ..state.tables import entry_of
from .transaction import PartitionTransaction

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    outputs: list[Output] = field(default_factory=list)
    applied: Applied | None = None
    rerated: Rerated | None = None
    season: SeasonStarted | None = None  # a season started (by its command, or by a result)
    pending: str | None = None  # a league whose re-rate goes on in the next part
    dead_letter: BadEvent | None = None
    forwarded: bool = False
    redelivered: bool = False  # at or below the checkpoint: applied before


class RecordHandler:
    def __init__(self, config: LeagueConfig, partitions: int, forward_topic: str, rerate_part: int | None = None):
        self.config = config
        self.partitions = partitions
        self.forward_topic = forward_topic
        self.rerate_part = rerate_part  # participant results per part of a re-rate (None: all in one)
        self.in_order: dict[str, bool] = {}
        # By partition: its leagues over its transaction, with what the domain keeps between
        # batches (the standings of leagues with tiers, the re-rates in progress); made
        # again at each take-up.
        self.leagues: dict[int, PartitionLeagues] = {}

    def handle(self, state: PartitionTransaction, topic: str, partition: int, offset: int,
               key: bytes | None, value: bytes | None) -> Outcome:
        outcome = Outcome()
        if not state.take_offset(topic, offset):
            outcome.redelivered = True
            return outcome
        payload = value if value is not None else b""
        saved = False  # whether this record's savepoint is set: a refusal before it has nothing to undo
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
            # A result appended at the end of its league writes only once every check has
            # passed and it is rated: nothing to undo. Anything else may fail half way.
            state.savepoint(journal=type(item) is not Match or self._in_order(league))
            saved = True
            done = apply(self.config, self._leagues(state), item, self.rerate_part)
            if type(done) is SeasonStarted:  # (type, not isinstance: exact classes, once a match)
                outcome.season = done
                self._publish(league, done, outcome)
            elif type(done) is Applied:
                outcome.season = done.season  # (a season its time started, before the result)
                outcome.applied = done
                self._publish(league, done, outcome)
            else:
                self._rerated(league, cast("Rerated | None", done), outcome)
        except BadEvent as exc:
            if saved:
                state.rollback()
            outcome.dead_letter = _detached(exc)
            outcome.outputs.append(_dead_letter_output(exc, key, payload, topic, partition, offset))
        except Exception as failure:  # a bug or an input the engine cannot handle: never crash the worker
            if saved:
                state.rollback()  # nothing of a record half applied stays
            self._leagues(state).forget_all_standings()  # (a refusal comes before any change: a failure may not)
            log.exception("record %s:%s:%s could not be applied", topic, partition, offset)
            error = BadEvent("internal_error", f"event: could not be applied ({type(failure).__name__}: {failure})")
            outcome.dead_letter = error
            outcome.outputs = [_dead_letter_output(error, key, payload, topic, partition, offset)]
        return outcome


    def _in_order(self, league: str) -> bool:
        """Whether the league places late results in time order (they can re-rate it)."""
        in_order = self.in_order
        if league in in_order:  # (`in`, not get: once a match)
            return in_order[league]
        found = in_order[league] = self.config.options_for(league).late_results == IN_ORDER
        return found

    def proceed(self, state: PartitionTransaction, league: str) -> Outcome:
        """The next part of a league's re-rate (one started by `handle` with a budget
        left over, or found at a take-up)."""
        outcome = Outcome()
        state.savepoint(journal=True)
        try:
            done = proceed(self.config, self._leagues(state), league, self.rerate_part)
            self._rerated(league, done, outcome)
        except BaseException:
            state.rollback()
            self._leagues(state).forget_all_standings()
            raise
        return outcome

    def _publish(self, league: str, done: Applied | SeasonStarted | Rerated, outcome: Outcome) -> None:
        events = events_of(done, self.config)
        # Each event's JSON is copied out: orjson's result keeps the whole block it was
        # written in, and the worker holds a batch's outputs until the broker has them; a
        # copy of the exact size is cheaper than thousands of such blocks.
        key = league.encode()
        outcome.outputs += [Output("change", key, bytes(memoryview(orjson.dumps(event)))) for event in events]

    def _rerated(self, league: str, done: Rerated | None, outcome: Outcome) -> None:
        if done is None:
            outcome.pending = league
            return
        outcome.rerated = done
        self._publish(league, done, outcome)

    def deriver(self, state: PartitionTransaction) -> Callable[[bytes | memoryview], None]:
        """How a changelog entry's local writes are made again into this transaction (a
        take-up, a standby): the match saved with the states recorded after it, through
        the path that applied it. One per transaction: its leagues' keys are built once."""
        config = self.config
        leagues = PartitionLeagues(state, config)  # (no standings: nothing is published from here)

        def derive(payload: bytes | memoryview) -> None:
            match, after = entry_of(payload)
            system = config.system_for(match.league)
            done = apply_match(config, leagues, match, outcome=[system.state_from_dict(data) for data in after])
            if not isinstance(done, Applied):  # the league's late_results changed since: it would re-rate
                raise RuntimeError(f"changelog entry of match {match.match_id!r} in league {match.league!r} no "
                                   "longer goes at the end of its league (has the league's configuration changed?)")

        return derive

    def take_up(self, state: PartitionTransaction) -> None:
        """A partition taken up: the re-rates it has in progress; its standings are built again when needed."""
        leagues = self.leagues[state.partition] = PartitionLeagues(state, self.config, {})
        leagues.rerating.update(leagues.jobs())

    def rerating(self, state: PartitionTransaction) -> set[str]:
        """The partition's leagues with a re-rate in progress (its input waits)."""
        return self._leagues(state).rerating

    def _leagues(self, state: PartitionTransaction) -> PartitionLeagues:
        by_partition = self.leagues
        leagues = by_partition[state.partition] if state.partition in by_partition else None  # (once a match)
        if leagues is None or leagues.state is not state:  # (not taken up: a bench, a test)
            leagues = self.leagues[state.partition] = PartitionLeagues(state, self.config, {})
        return leagues


def is_duplicate(error: BadEvent) -> bool:
    return isinstance(error, DuplicateMatch)


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
