"""The inputs: parse and validate match results and the commands that void or
correct them or start a season (published.py builds the events that go out).
The JSON Schemas in schemas/ are the contract; this module compiles them
(fastjsonschema) and adds the rules a schema cannot say (a player twice in a
match, ranks for some participants but not others).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from itertools import repeat
from pathlib import Path
from typing import Any, Callable, Iterable

import fastjsonschema
from fastjsonschema.draft04 import CodeGeneratorDraft04
import orjson

from .engine import Match, Participant

MAX_EVENT_BYTES = 1 << 20  # 1 MiB: Kafka's default max message size; the largest Codeforces round is 0.6 MB
MAX_PARTICIPANTS = 20_000  # the largest Codeforces round has 16,783
MAX_ID_LENGTH = 128
# Ids (league, match_id, player): the match-result schema's pattern, and its rule in words.
ID_RULE = f"must be 1 to {MAX_ID_LENGTH} characters from A-Z a-z 0-9 _ . : @ + - (not '.' or '..')"
SEP = "\x1f"  # joins ids into keys; cannot occur in an id

RESULT = "match-result.v1"
VOIDED = "match-voided.v1"
CORRECTED = "match-corrected.v1"
SEASON_STARTED = "season-started.v1"
SCHEMA_NAMES = (RESULT, VOIDED, CORRECTED, SEASON_STARTED, "rating-changed.v1", "dead-letter.v1")


def schema_dir() -> Path:
    """schemas/ ships inside the wheel as stream_app/schemas; in a checkout it is ../schemas."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "schemas", here.parent / "schemas"):
        if (candidate / "match-result.v1.json").is_file():
            return candidate
    raise FileNotFoundError("the JSON Schemas (schemas/*.v1.json) are missing from the installation")


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    return json.loads((schema_dir() / f"{name}.json").read_text())


@lru_cache(maxsize=None)
def _compiled(name: str):
    # The schemas use only keywords that mean the same in draft 7 (fastjsonschema's) and 2020-12.
    schema = dict(load_schema(name))
    schema.pop("examples", None)
    return fastjsonschema.compile(schema)


class BadEvent(ValueError):
    """An input event that cannot be applied. `code` is the dead-letter reason."""

    def __init__(
        self,
        code: str,
        message: str,
        field: str | None = None,
        league: str | None = None,
        match_id: str | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.league = league
        self.match_id = match_id

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]"


def _path(parts: list[str]) -> str:
    """['data', 'participants', '0', 'rank'] -> 'participants[0].rank'"""
    out = ""
    for part in parts[1:]:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def _schema_error(exc: fastjsonschema.JsonSchemaValueException, doc: dict[str, Any]) -> BadEvent:
    field = _path(list(exc.path or ["data"]))
    rule = exc.rule or "schema"
    league = doc.get("league") if isinstance(doc.get("league"), str) else None
    match_id = doc.get("match_id") if isinstance(doc.get("match_id"), str) else None
    if rule == "required" and isinstance(exc.value, dict):
        missing = [k for k in (exc.rule_definition or []) if k not in exc.value]
        name = f"{field}.{missing[0]}" if field and missing else (missing[0] if missing else field)
        return BadEvent("schema_violation", f"{name}: required field is missing (required)", name, league, match_id)
    if field == "participants" and rule == "maxItems":
        return BadEvent(
            "too_many_participants",
            f"participants: at most {MAX_PARTICIPANTS} participants (got {len(doc['participants'])}) (maxItems)",
            field,
            league,
            match_id,
        )
    if rule == "anyOf":
        text = "needs a rank or a score"
    elif rule == "pattern":
        text = ID_RULE
    else:
        # fastjsonschema says "data.x must be ..."; keep the rule, drop the prefix.
        text = exc.message.split(" ", 1)[1] if " " in exc.message else exc.message
    return BadEvent("schema_violation", f"{field or 'event'}: {text} ({rule})", field or None, league, match_id)


def parse_time(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("no time zone offset")
    return moment.timestamp()


def format_time(seconds: float) -> str:
    if type(seconds) is float and seconds.is_integer() and 0 <= seconds < _YEAR_10000:
        # Whole seconds (the common case), spelled out from a per-day cache and a
        # table: the same text as below, more cheaply (it runs once per match).
        whole = int(seconds)
        rest = whole % 86400  # (operators, not divmod: a call each)
        return (f"{_day_text(whole // 86400)}T{_TWO_DIGITS[rest // 3600]}:{_TWO_DIGITS[rest % 3600 // 60]}:"
                f"{_TWO_DIGITS[rest % 60]}Z")
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


_YEAR_10000 = 253_402_300_800  # 10000-01-01T00:00:00Z in seconds since the epoch
_TWO_DIGITS = [f"{i:02d}" for i in range(60)]


@lru_cache(maxsize=1024)
def _day_text(days: int) -> str:
    """Days since the epoch -> YYYY-MM-DD."""
    return (date(1970, 1, 1) + timedelta(days=days)).isoformat()


def decode_payload(raw: bytes | str) -> dict[str, Any]:
    """Bytes -> JSON object, with the size, encoding and syntax checks."""
    if type(raw) is not bytes and isinstance(raw, str):  # (bytes, the common case, with no call)
        raw = raw.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_EVENT_BYTES:
        raise BadEvent("too_large", f"event: {len(raw)} bytes, over the limit of {MAX_EVENT_BYTES} bytes")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # Bytes that are not UTF-8 are never JSON to orjson: that reason is the clearer one.
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise BadEvent("invalid_encoding", f"event: not UTF-8 ({bad.reason} at byte {bad.start})") from None
        raise BadEvent("invalid_json", f"event: not valid JSON ({exc})") from None
    if type(doc) is not dict:  # (orjson makes exact dicts)
        raise BadEvent("not_an_object", f"event: must be a JSON object (got {type(doc).__name__})")
    return doc


# The fast path's checks. Each accepts a subset of what the schema accepts;
# anything else goes through the compiled schema, so errors stay the same.
_ID_CHARS = "A-Za-z0-9_.:@+-"
_ID = re.compile(rf"(?!\.{{1,2}}\Z)[{_ID_CHARS}]{{1,{MAX_ID_LENGTH}}}\Z")
# Ids joined by newlines (a newline cannot occur in an id): one regex for all.
_IDS = re.compile(rf"(?:(?!\.{{1,2}}\n)[{_ID_CHARS}]{{1,{MAX_ID_LENGTH}}}\n)+\Z")


def is_id(text: str) -> bool:
    return _ID.match(text) is not None


_DATE_TIME = re.compile(CodeGeneratorDraft04.FORMAT_REGEXS["date-time"])
_MAX_RANK = 1_000_000_000
_MISSING = object()


def _fast_match(doc: Any) -> Match | None:
    """The common case of a valid event, checked directly; None when unsure.

    Returns a Match only for events the schema and the extra rules accept,
    built exactly as the general path builds it.
    """
    if type(doc) is not dict:
        return None
    # (`in`, not get: once a match)
    league = doc["league"] if "league" in doc else None
    match_id = doc["match_id"] if "match_id" in doc else None
    people = doc["participants"] if "participants" in doc else None
    if type(league) is not str or type(match_id) is not str or type(people) is not list:
        return None
    n = len(people)
    if n < 2 or n > MAX_PARTICIPANTS or not _ID.match(league) or not _ID.match(match_id):
        return None
    for person in people:
        # Teams and partial play take the general path (its rules are longer).
        if type(person) is not dict or "team" in person or "weight" in person:
            return None
    players = [person.get("player") for person in people]
    try:
        joined = "\n".join(players)
    except TypeError:  # a player that is not a string
        return None
    # A newline inside an id would split it in two: count them first.
    if joined.count("\n") != n - 1 or not _IDS.match(joined + "\n") or len(set(players)) != n:
        return None
    ranks: Any = [person.get("rank", _MISSING) for person in people]
    scores = [person.get("score", _MISSING) for person in people]
    rank_types = set(map(type, ranks))
    score_types = set(map(type, scores))
    if not score_types <= _SCORE_TYPES:
        return None
    if rank_types == _INT_ONLY:
        if min(ranks) < 1 or max(ranks) > _MAX_RANK:
            return None
    elif rank_types == _MISSING_ONLY and _MISSING_TYPE not in score_types:
        ranks = None
    else:  # mixed, or not integers: the general path decides (and explains)
        return None
    if float in score_types:
        for score in scores:
            if type(score) is float and not math.isfinite(score):
                return None
    time = None
    if "occurred_at" in doc:
        text = doc["occurred_at"]
        if type(text) is not str or len(text) > 64 or not _DATE_TIME.match(text):
            return None
        try:
            time = parse_time(text)
        except ValueError:
            return None
    if score_types == _MISSING_ONLY:
        values: Iterable[float | None] = repeat(None, n)
    elif _MISSING_TYPE in score_types:
        values = [None if score is _MISSING else float(score) for score in scores]
    else:
        floats = [float(score) for score in scores]
        values = floats
        if ranks is None:
            ranks = _ranks_from_scores(floats)
    return Match(league, match_id, tuple(map(Participant, players, ranks, values)), time)



_MISSING_TYPE = type(_MISSING)
_INT_ONLY = {int}
_MISSING_ONLY = {_MISSING_TYPE}
_SCORE_TYPES = {int, float, _MISSING_TYPE}


def validate_match(doc: dict[str, Any]) -> Match:
    """A decoded JSON object -> a Match, or BadEvent naming the field and rule."""
    fast = _fast_match(doc)
    if fast is not None:
        return fast
    try:
        _compiled("match-result.v1")(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise _schema_error(exc, doc) from None
    league = doc["league"]
    match_id = doc["match_id"]
    people = doc["participants"]

    def bad(code: str, field: str, text: str) -> BadEvent:
        return BadEvent(code, f"{field}: {text}", field, league, match_id)

    seen: dict[str, int] = {}
    ranked = 0
    for i, person in enumerate(people):
        player = person["player"]
        if player in seen:
            raise bad("duplicate_player", f"participants[{i}].player", f"{player!r} already appears at participants[{seen[player]}]")
        seen[player] = i
        if "rank" in person:
            ranked += 1
        score = person.get("score")
        if score is not None and not math.isfinite(score):
            raise bad("schema_violation", f"participants[{i}].score", "must be a finite number")
    if 0 < ranked < len(people):
        i = next(i for i, person in enumerate(people) if "rank" not in person)
        raise bad(
            "inconsistent_standings",
            f"participants[{i}].rank",
            "missing while other participants have a rank (give every participant a rank, or none and every one a score)",
        )
    if ranked:
        ranks = [int(person["rank"]) for person in people]
    else:
        ranks = _ranks_from_scores([float(person["score"]) for person in people])
    teams = [person.get("team") for person in people]
    if any(team is not None for team in teams):
        _check_teams(people, teams, ranks, "rank" if ranked else "score", bad)
    time = None
    if "occurred_at" in doc:
        try:
            time = parse_time(doc["occurred_at"])
        except ValueError:
            raise bad("invalid_time", "occurred_at", "must be an RFC 3339 date-time with a time zone offset") from None
    participants = tuple(
        Participant(person["player"], rank, float(person["score"]) if "score" in person else None,
                    person.get("team"), float(person.get("weight", 1.0)))
        for person, rank in zip(people, ranks)
    )
    return Match(league=league, match_id=match_id, participants=participants, time=time)


def _check_teams(people: list[dict[str, Any]], teams: list[str | None], ranks: list[int], standing: str,
                 bad: Callable[[str, str, str], BadEvent]) -> None:
    """A team match: every participant has a team, there are two teams or more,
    and the members of a team give their team's standing (one rank, or one score)."""
    first: dict[str, int] = {}
    for i, team in enumerate(teams):
        if team is None:
            raise bad("invalid_teams", f"participants[{i}].team",
                      "missing while other participants have a team (give every participant a team, or none)")
        j = first.setdefault(team, i)
        if ranks[i] != ranks[j] or people[i].get(standing) != people[j].get(standing):
            raise bad("inconsistent_standings", f"participants[{i}].{standing}",
                      f"{people[i].get(standing)!r} differs from {people[j].get(standing)!r} at participants[{j}],"
                      f" of the same team {team!r} (the members of a team share its {standing})")
    if len(first) < 2:
        raise bad("invalid_teams", "participants", f"a team match needs at least 2 teams (got 1: {teams[0]!r})")


def _ranks_from_scores(scores: list[float]) -> list[int]:
    """Competition ranking: 1 + the number of strictly higher scores."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0] * len(scores)
    for position, i in enumerate(order):
        if position and scores[i] == scores[order[position - 1]]:
            ranks[i] = ranks[order[position - 1]]
        else:
            ranks[i] = position + 1
    return ranks


def parse_match(raw: bytes | str | dict[str, Any]) -> Match:
    doc = raw if isinstance(raw, dict) else decode_payload(raw)
    return validate_match(doc)


# Commands on the match-results topic, next to the results (stream_app/rating/ applies them).
@dataclass(slots=True)
class Void:
    """match-voided.v1: the result never counted."""

    league: str
    match_id: str
    reason: str


@dataclass(slots=True)
class Correction:
    """match-corrected.v1: the result with these standings instead. `match.time` is
    None when the command gives no occurred_at (the result keeps its time)."""

    match: Match
    reason: str

    @property
    def league(self) -> str:
        return self.match.league

    @property
    def match_id(self) -> str:
        return self.match.match_id


@dataclass(slots=True)
class SeasonStart:
    """season-started.v1: the league's next season, by hand (seasons.py)."""

    league: str
    season: str
    time: float
    reason: str | None = None

    @property
    def match_id(self) -> None:  # (a dead letter names the match of an input; a season start has none)
        return None


def parse_input(raw: bytes | str | dict[str, Any]) -> Match | Void | Correction | SeasonStart:
    """An input record: a match result, or a command, told apart by `schema`."""
    doc = raw if isinstance(raw, dict) else decode_payload(raw)
    kind = doc["schema"] if "schema" in doc else None  # (`in`, not get: once a match)
    if kind is None or kind == RESULT:
        return validate_match(doc)
    if kind == VOIDED:
        _check(VOIDED, doc)
        return Void(doc["league"], doc["match_id"], doc["reason"])
    if kind == CORRECTED:
        _check(CORRECTED, doc)
        standings = {key: value for key, value in doc.items() if key not in ("schema", "reason")}
        return Correction(validate_match(standings), doc["reason"])
    if kind == SEASON_STARTED:
        _check(SEASON_STARTED, doc)
        try:
            time = parse_time(doc["occurred_at"])
        except ValueError:
            raise BadEvent("invalid_time", "occurred_at: must be an RFC 3339 date-time with a time zone offset",
                           "occurred_at", doc["league"]) from None
        return SeasonStart(doc["league"], doc["season"], time, doc.get("reason"))
    league = doc.get("league") if isinstance(doc.get("league"), str) else None
    match_id = doc.get("match_id") if isinstance(doc.get("match_id"), str) else None
    raise BadEvent("schema_violation", f"schema: must be one of {RESULT!r}, {VOIDED!r}, {CORRECTED!r}, "
                   f"{SEASON_STARTED!r} (got {kind!r}) (enum)",
                   "schema", league, match_id)


def _check(name: str, doc: dict[str, Any]) -> None:
    try:
        _compiled(name)(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise _schema_error(exc, doc) from None
