"""The events out: rating-changed events (of a match applied, a season's reset,
or a re-rate's corrections) and dead letters, as schemas/rating-changed.v1.json and
schemas/dead-letter.v1.json say."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from functools import partial
from operator import methodcaller
from typing import Any, Iterable

import orjson

from .engine import Match, PlayerState, RatingChange, RatingSystem
from .inputs import SEP, BadEvent, format_time
from .rating.applied import Applied, SeasonStarted
from .rating.records import Tiers
from .rerate import Rerated

MAX_DEAD_LETTER_BYTES = 1_000_000  # a dead letter's payload is cut to fit (payload_truncated)


def event_id(league: str, match_id: str, player: str, revision: int | None = None) -> str:
    """Deterministic: a redelivered rating change has the same id. A correction's
    also names the league's re-rate count (a match can be corrected twice)."""
    return event_ids(league, match_id, [player], revision)[0]


def event_ids(league: str, match_id: str, players: list[str], revision: int | None = None) -> list[str]:
    """`event_id` of each player: the hash of the league, the match, the player (and
    the revision), by map over the players (a match's events take no call a player)."""
    # SEP cannot occur in ids, so distinct tuples never collide by concatenation.
    head = f"{league}{SEP}{match_id}{SEP}"
    tail = "" if revision is None else f"{SEP}{revision}"
    texts = [f"{head}{player}{tail}" for player in players]
    return list(map(_HEX, map(_ID_HASH, map(str.encode, texts))))


_ID_HASH = partial(hashlib.blake2b, digest_size=16)
_HEX = methodcaller("hexdigest")


def events_of(done: Applied | SeasonStarted | Rerated, system: RatingSystem) -> list[dict[str, Any]]:
    """The rating-changed events of what `apply.apply` did (rating.Applied,
    rating.SeasonStarted or rerate.Rerated) in its league rated by `system`, in the
    order they are published: a season a result starts comes before the result's own."""
    if isinstance(done, Applied):  # (the common case first: once per match)
        events = rating_changed_events(done.algorithm, done.match, done.changes, done.tiers)
        return events if done.season is None else events_of(done.season, system) + events
    if isinstance(done, SeasonStarted):
        return season_reset_events(done.algorithm, done.league, done.season["name"], done.season["start"], done.reset())
    # A player left without a counted match goes back to the initial state.
    return correction_events(done.algorithm, done.league, done.match_id, done.revision, done.corrections,
                             system.initial_state())


def correction_events(algorithm: str, league: str, match_id: str, revision: int,
                      corrections: Iterable[Any], initial: PlayerState) -> list[dict[str, Any]]:
    """One rating-changed event (cause "correction") per player whose state a re-rate
    changed (rerate.RatingCorrection): from the state last published to the state now.
    A player left without a counted match goes back to `initial` with 0 matches."""
    events = []
    for correction in corrections:
        before = correction.published or initial
        after = correction.now
        public = initial.public() if after is None else after.public()
        if after is None:
            public["matches"] = 0
        event: dict[str, Any] = {
            "schema": "rating-changed.v1",
            "event_id": event_id(league, match_id, correction.player, revision),
            "league": league,
            "match_id": match_id,
            "player": correction.player,
            "algorithm": algorithm,
            "cause": "correction",
            "rating_before": before.rating,
            "rating_after": public["rating"],
            "delta": public["rating"] - before.rating,
        }
        event.update(public)
        del event["rating"]
        if correction.tiers is not None:
            event["tier_before"], event["tier_after"] = correction.tiers
        events.append(event)
    return events


def season_reset_events(algorithm: str, league: str, season: str, start: float,
                        changes: Iterable[tuple[RatingChange, Tiers | None]]) -> list[dict[str, Any]]:
    """One rating-changed event (cause "season_reset") per player whose state a season's
    start changed. Its match_id is "season:" and the season's name."""
    match_id = f"season:{season}"
    occurred_at = format_time(start)
    events = []
    for change, tiers in changes:
        event: dict[str, Any] = {
            "schema": "rating-changed.v1",
            "event_id": event_id(league, match_id, change.player),
            "league": league,
            "match_id": match_id,
            "player": change.player,
            "algorithm": algorithm,
            "cause": "season_reset",
            "season": season,
            "occurred_at": occurred_at,
            "rating_before": change.before.rating,
            "rating_after": change.after.rating,
            "delta": change.after.rating - change.before.rating,
        }
        public = change.after.public()
        del public["rating"]
        event.update(public)
        if tiers is not None:
            event["tier_before"], event["tier_after"] = tiers
        events.append(event)
    return events


def rating_changed_events(algorithm: str, match: Match, changes: list[RatingChange],
                          tiers: list[Tiers] | None = None) -> list[dict[str, Any]]:
    """The rating-changed event of each participant's change, in participant order
    (with each one's tiers before and after, in a league with tiers). Built column by
    column: the fields every event has in one comprehension, then the rest."""
    league, match_id = match.league, match.match_id
    people = match.participants
    ids = event_ids(league, match_id, [change.player for change in changes])
    events = [{"schema": "rating-changed.v1", "event_id": id_, "league": league, "match_id": match_id,
               "player": change.player, "algorithm": algorithm, "rank": participant.rank,
               "rating_before": change.before.rating, "rating_after": change.after.rating,
               "delta": change.after.rating - change.before.rating, "matches": change.after.matches}
              for participant, change, id_ in zip(people, changes, ids)]
    if match.time is not None:
        occurred_at = format_time(match.time)
        for event in events:
            event["occurred_at"] = occurred_at
    for event, participant, change in zip(events, people, changes):
        if participant.team is not None:
            event["team"] = participant.team
        if participant.weight != 1.0:
            event["weight"] = participant.weight
        # The base class's public() is just rating and matches, already above: skip the call.
        after = change.after
        if type(after).public is not PlayerState.public:
            for key, value in after.public().items():
                if key not in ("rating", "matches"):
                    event[key] = value
        extras = change.extras
        if extras:
            event.update(extras)
    if tiers is not None:
        for event, (before, after_tier) in zip(events, tiers):
            event["tier_before"], event["tier_after"] = before, after_tier
    return events


def dead_letter(error: BadEvent, payload: bytes | str | dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    if isinstance(payload, dict):
        payload = orjson.dumps(payload)
    if isinstance(payload, str):
        payload = payload.encode("utf-8", "surrogatepass")
    try:
        text, encoding = payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(payload).decode("ascii"), "base64"
    letter: dict[str, Any] = {
        "schema": "dead-letter.v1",
        "reason": error.code,
        "message": error.message,
        "field": error.field,
        "league": error.league,
        "match_id": error.match_id,
        "payload": text,
        "payload_encoding": encoding,
        "source": source,
        "failed_at": format_time(datetime.now(timezone.utc).timestamp()),
    }
    size = len(orjson.dumps(letter))
    if size > MAX_DEAD_LETTER_BYTES:
        # An oversized event (or one whose text grows when escaped as a JSON
        # string) cannot travel whole: keep the longest prefix that fits and say so.
        letter["payload_truncated"] = True
        letter["payload_bytes"] = len(payload)
        letter["message"] = error.message[:4096]
        keep = len(payload)
        while size > MAX_DEAD_LETTER_BYTES and keep > 0:
            keep = max(0, min(keep - 1, int(keep * (MAX_DEAD_LETTER_BYTES - 1024) / size)))
            part = payload[:keep]
            letter["payload"] = part.decode("utf-8", "ignore") if encoding == "utf-8" else base64.b64encode(part).decode("ascii")
            size = len(orjson.dumps(letter))
    return letter
