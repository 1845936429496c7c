"""The events out: rating-changed events (of a match applied, a season's reset,
or a re-rate's corrections) and dead letters, as schemas/rating-changed.v1.json and
schemas/dead-letter.v1.json say."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from typing import Any, Iterable

import orjson

from .engine import Match, Participant, PlayerState, RatingChange
from .inputs import SEP, BadEvent, format_time
from .leagues import LeagueConfig
from .rating.applied import Applied, SeasonStarted
from .rating.records import Tiers
from .rerate import Rerated

MAX_DEAD_LETTER_BYTES = 1_000_000  # a dead letter's payload is cut to fit (payload_truncated)


def event_id(league: str, match_id: str, player: str, revision: int | None = None) -> str:
    """Deterministic: a redelivered rating change has the same id. A correction's
    also names the league's re-rate count (a match can be corrected twice)."""
    # SEP cannot occur in ids, so distinct tuples never collide by concatenation.
    text = f"{league}{SEP}{match_id}{SEP}{player}" + ("" if revision is None else f"{SEP}{revision}")
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def events_of(done: Applied | SeasonStarted | Rerated, config: LeagueConfig) -> list[dict[str, Any]]:
    """The rating-changed events of what `apply.apply` did (rating.Applied,
    rating.SeasonStarted or rerate.Rerated) in its league, in the order they are
    published: a season a result starts comes before the result's own."""
    if type(done) is Applied:  # (the common case first, once per match: no rule looked up)
        events = rating_changed_events(done.algorithm, done.match, done.changes, done.tiers)
        return events if done.season is None else events_of(done.season, config) + events
    if type(done) is SeasonStarted:
        return season_reset_events(done.algorithm, done.league, done.season["name"], done.season["start"], done.reset())
    # A player left without a counted match goes back to the initial state.
    assert isinstance(done, Rerated)
    return correction_events(done.algorithm, done.league, done.match_id, done.revision, done.corrections,
                             config.system_for(done.league).initial_state())


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
    (with each one's tiers before and after, in a league with tiers)."""
    occurred_at = format_time(match.time) if match.time is not None else None
    events = [
        _rating_changed(algorithm, match, participant, change, occurred_at)
        for participant, change in zip(match.participants, changes)
    ]
    if tiers is not None:
        for event, (before, after) in zip(events, tiers):
            event["tier_before"], event["tier_after"] = before, after
    return events


def _rating_changed(
    algorithm: str, match: Match, participant: Participant, change: RatingChange, occurred_at: str | None
) -> dict[str, Any]:
    before = change.before
    after = change.after
    event: dict[str, Any] = {
        "schema": "rating-changed.v1",
        "event_id": event_id(match.league, match.match_id, change.player),
        "league": match.league,
        "match_id": match.match_id,
        "player": change.player,
        "algorithm": algorithm,
        "rank": participant.rank,
        "rating_before": before.rating,
        "rating_after": after.rating,
        "delta": after.rating - before.rating,
        "matches": after.matches,
    }
    if occurred_at is not None:
        event["occurred_at"] = occurred_at
    if participant.team is not None:
        event["team"] = participant.team
    if participant.weight != 1.0:
        event["weight"] = participant.weight
    # The base class's public() is just rating and matches, already above: skip the call.
    if type(after).public is not PlayerState.public:
        for key, value in after.public().items():
            if key not in ("rating", "matches"):
                event[key] = value
    event |= change.extras  # (an operator, not a call: once a participant)
    return event


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
