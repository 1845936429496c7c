"""The worker's tables: one partition's key space, the domain's keys and the
codecs of what they hold. Every table's keys sit behind its own first byte; the
generic partition transaction (stream/transaction.py) knows the tables only as
these prefixes.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from ..engine import Match, RatingSystem
from ..inputs import SEP
from ..leagues import LeagueConfig
from ..rating.log_rows import entry_from_log, log_entry, match_from_log
from ..rating.records import ABSENT, VOIDED, Entry, PlayerRecord
from .base import Tables

# Tables: one key space per partition, each table's keys behind its own first byte.
PLAYERS = "players"
LEAGUES = "leagues"
MATCHES = "matches"  # each match's place in its league's log (rating/log_rows.py)
HISTORY = "history"
LOG = "log"  # each league's results in order (rating/log_rows.py)
SNAPSHOTS = "snapshots"  # players' states at the log's boundaries
BOUNDARIES = "boundaries"
WORKING = "working"  # the player records a re-rate rebuilds (rerate.py)
JOBS = "jobs"  # each league's re-rate in progress
SEASONS = "seasons"  # each league's seasons, by number (rating.season_row)
FINALS = "finals"  # each ended season's final standings, by season and player (seasons.archive_row)
TABLE_PREFIX = {PLAYERS: b"p", LEAGUES: b"l", MATCHES: b"m", HISTORY: b"h", LOG: b"a", SNAPSHOTS: b"s", BOUNDARIES: b"b",
                WORKING: b"w", JOBS: b"j", SEASONS: b"n", FINALS: b"f"}
# Committed values of these tables stay cached between batches (read again, batch
# after batch); other keys (match ids: read once, to find a duplicate) only within one.
CACHED = frozenset((PLAYERS, LEAGUES))


def tables_for(config: LeagueConfig) -> Tables:
    """The domain's tables: the players' values are PlayerRecords (PlayerCodec), the
    snapshot rows' and working records' a PlayerRecord or ABSENT (MarkedRecordCodec),
    the log's its entries (LogCodec), the matches' their order keys or VOIDED
    (PlaceCodec); the rest JSON values as they are."""
    marked = MarkedRecordCodec(config)
    return Tables(TABLE_PREFIX, CACHED, codecs={PLAYERS: PlayerCodec(config), SNAPSHOTS: marked, WORKING: marked,
                                                LOG: LogCodec(), MATCHES: PlaceCodec()})


def store_key(table: str, key: bytes) -> bytes:
    return TABLE_PREFIX[table] + key


KEY_SEP = SEP.encode()  # between a league and the rest of a key


def player_key(league: str, player: str) -> bytes:
    return f"{league}{SEP}{player}".encode()


def match_key(league: str, match_id: str) -> bytes:
    return f"{league}{SEP}{match_id}".encode()


def league_prefix(league: str) -> bytes:
    return f"{league}{SEP}".encode()


def prefix_end(prefix: bytes) -> bytes:
    """The first key above every key with this prefix (a scan's end)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def history_prefix(league: str, player: str) -> bytes:
    return f"{league}{SEP}{player}{SEP}".encode()


def history_key(league: str, player: str, seq: int) -> bytes:
    """Big-endian, so a player's entries sort by seq."""
    return history_prefix(league, player) + _SEQ.pack(seq)


def history_keys(players: list[bytes], seqs: list[int]) -> list[bytes]:
    """`history_key` of each player (their key in the players table, player_key) and seq:
    a player's key and the separator are their history's prefix."""
    return [player + KEY_SEP + _SEQ.pack(seq) for player, seq in zip(players, seqs)]


_SEQ = struct.Struct(">Q")


def seq_of(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


def log_key(league: str, order: bytes) -> bytes:
    return league_prefix(league) + order


def boundary_key(league: str, number: int) -> bytes:
    return league_prefix(league) + number.to_bytes(8, "big")


def season_key(league: str, number: int) -> bytes:
    return league_prefix(league) + number.to_bytes(8, "big")


def final_key(league: str, number: int, player: str) -> bytes:
    return season_key(league, number) + player.encode()


def snapshot_key(league: str, number: int, player: str) -> bytes:
    """By boundary, then player: a re-rate reads the rows from its boundary on in one scan."""
    return boundary_key(league, number) + player.encode()


# The stream's player record is the rating state plus the time of the player's
# last match with an occurred_at (inactivity is judged by it) and the boundary of
# the interval it was written in (rating.records.PlayerRecord; 0 when absent). Their names
# must not be fields of any rating state (elo-mmr's has its own `last_time`).
LAST_TIME = "last_occurred"
SNAP = "snap"
SINCE = "since"
BASE = "season_base"


def stored_record(record: PlayerRecord) -> dict[str, Any]:
    """A player record as stored: the rating state's dict (`to_dict`, taken over), with
    the last match's time, the record's boundaries and season base when they are not none."""
    stored = record.state.to_dict()
    if record.last_time is not None:
        stored[LAST_TIME] = record.last_time
    if record.snap:
        stored[SNAP] = record.snap
    if record.since:
        stored[SINCE] = record.since
    if record.base:
        stored[BASE] = record.base
    return stored


def record_of(value: dict[str, Any], system: RatingSystem) -> PlayerRecord:
    """A stored player record (stored_record) as a PlayerRecord of the league's system."""
    data, last = player_state(value)
    return PlayerRecord(system.state_from_dict(data), last, value.get(SNAP, 0), value.get(SINCE, 0), value.get(BASE, 0))


class PlayerCodec:
    """The players table's values: a PlayerRecord, stored as its league's system's
    state dict with the record's markers (stored_record). The transaction keeps the
    record, so a player read again is not decoded again."""

    def __init__(self, config: LeagueConfig):
        self.config = config

    def encode(self, record: PlayerRecord) -> bytes:
        return orjson.dumps(stored_record(record))

    def decode(self, key: bytes, raw: bytes) -> PlayerRecord:
        return record_of(orjson.loads(raw), self.config.system_for(league_of(key)))


def league_of(key: bytes) -> str:
    """The league of a table's key (every key starts with its league)."""
    return key[:key.index(KEY_SEP)].decode()


class MarkedRecordCodec:
    """A snapshot row's or a working record's value: a PlayerRecord, or ABSENT (the
    player had no record then), stored as stored_record or as ABSENT's JSON."""

    def __init__(self, config: LeagueConfig):
        self.config = config

    def encode(self, value: PlayerRecord | int) -> bytes:
        return orjson.dumps(stored_record(value) if type(value) is PlayerRecord else ABSENT)

    def decode(self, key: bytes, raw: bytes) -> PlayerRecord | int:
        value = orjson.loads(raw)
        return ABSENT if value == ABSENT else record_of(value, self.config.system_for(league_of(key)))


class PlaceCodec:
    """A match's place in its league's log: held as its order key (bytes), or VOIDED,
    stored as {"key": hex} or VOIDED's JSON. Bytes, not a dict a match: the replay
    holds one for every match it applied, and the cyclic collector goes through every
    dict it holds (bytes it skips)."""

    def encode(self, value: bytes | dict[str, Any]) -> bytes:
        return orjson.dumps({"key": value.hex()} if type(value) is bytes else value)

    def decode(self, key: bytes, raw: bytes) -> bytes | dict[str, Any]:
        value = orjson.loads(raw)
        return bytes.fromhex(value["key"]) if "key" in value else VOIDED


class LogCodec:
    """The log's values: an Entry (a result, or a season started by command), stored as
    its log row (rating/log_rows.py), which names no league: the key does."""

    def encode(self, entry: Entry) -> bytes:
        return orjson.dumps(log_entry(entry))

    def decode(self, key: bytes, raw: bytes) -> Entry:
        return entry_from_log(league_of(key), orjson.loads(raw))


def player_state(record: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """A stored player record: (the rating state's dict, the last match's time or None)."""
    if LAST_TIME not in record and SNAP not in record and BASE not in record:
        return record, None
    data = record.copy()
    last = data.pop(LAST_TIME, None)
    data.pop(SNAP, None)
    data.pop(SINCE, None)
    data.pop(BASE, None)
    return data, last


# -- the changelog's entries (earlier releases wrote one a result: a take-up derives its writes) --
def entry_of(payload: bytes | memoryview) -> tuple[Match, list[dict[str, Any]]]:
    """An entry's match and the participants' states after it (as dicts)."""
    league, logged, after = orjson.loads(payload)
    return match_from_log(league, logged), after
