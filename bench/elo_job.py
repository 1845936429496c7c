"""The service's output work for a two-player `elo` match, without the service:
what the plain aiokafka loop (bench/stream_bench.py, the ceiling) and the Quix
Streams application (bench/quix_app.py) do for each match.

Per league, each player's rating and match count; per participant, the
rating-changed event the worker publishes for the same match under the
default `elo` settings: the same fields in the same order, the same id, the
same orjson bytes (tests/bench/test_elo_job.py compares them with the
worker's). Nothing else: no validation, no duplicate check, no history.
"""

from __future__ import annotations

from typing import Any

import orjson

from stream_app.published import event_id

K = 32.0
SCALE = 400.0
INITIAL = 1000.0


def rate(players: Any, doc: dict[str, Any]) -> list[bytes]:
    """Rate one match of a league whose players are `players` (a mapping of
    player -> [rating, matches]: a dict, or anything with get and __setitem__),
    and return its two rating-changed events."""
    league, match_id = doc["league"], doc["match_id"]
    a, b = doc["participants"]
    ra, ma = players.get(a["player"]) or (INITIAL, 0)
    rb, mb = players.get(b["player"]) or (INITIAL, 0)
    ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / SCALE))
    eb = 1.0 / (1.0 + 10.0 ** ((ra - rb) / SCALE))
    sa = 1.0 if a["rank"] < b["rank"] else 0.0 if a["rank"] > b["rank"] else 0.5
    after_a = ra + K * (sa - ea)
    after_b = rb + K * ((1.0 - sa) - eb)
    players[a["player"]] = [after_a, ma + 1]
    players[b["player"]] = [after_b, mb + 1]
    occurred_at = doc.get("occurred_at")
    return [_event(league, match_id, part, before, after, matches, expected, occurred_at)
            for part, before, after, matches, expected in ((a, ra, after_a, ma + 1, ea), (b, rb, after_b, mb + 1, eb))]


def _event(league: str, match_id: str, participant: dict[str, Any], before: float, after: float, matches: int,
           expected: float, occurred_at: str | None) -> bytes:
    event: dict[str, Any] = {
        "schema": "rating-changed.v1",
        "event_id": event_id(league, match_id, participant["player"]),
        "league": league,
        "match_id": match_id,
        "player": participant["player"],
        "algorithm": "elo",
        "rank": participant["rank"],
        "rating_before": before,
        "rating_after": after,
        "delta": after - before,
        "matches": matches,
    }
    if occurred_at is not None:
        event["occurred_at"] = occurred_at
    event["expected_score"] = expected
    return orjson.dumps(event)
