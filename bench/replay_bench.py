"""Replay throughput on two-player elo: ours (validation, config, ledger,
duplicate rule) against a bare loop (orjson + a dict + the Elo formula)."""

from __future__ import annotations

import random
import time

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.inputs import parse_match
from stream_app.offline.replay import Ledger
from stream_app.offline.sample import two_player_league


def _lines(n: int) -> list[bytes]:
    rng = random.Random(1)
    events = []
    for league in range(50):
        events.extend(two_player_league(f"league-{league}", 200, n // 50, rng))
    rng.shuffle(events)
    return [orjson.dumps(e) for e in events]


def _bare(lines: list[bytes]) -> dict:
    ratings: dict = {}
    for line in lines:
        doc = orjson.loads(line)
        table = ratings.setdefault(doc["league"], {})
        a, b = doc["participants"]
        ra, rb = table.get(a["player"], 1000.0), table.get(b["player"], 1000.0)
        ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))
        sa = 1.0 if a["rank"] < b["rank"] else 0.0 if a["rank"] > b["rank"] else 0.5
        table[a["player"]] = ra + 32.0 * (sa - ea)
        table[b["player"]] = rb + 32.0 * ((1.0 - sa) - (1.0 - ea))
    return ratings


def _ours(lines: list[bytes]) -> Ledger:
    ledger = Ledger(LeagueConfig.defaults())
    for line in lines:
        ledger.apply(parse_match(line))
    return ledger


def run(n: int = 200_000) -> dict:
    lines = _lines(n)
    best = {}
    for name, fn in (("bare_loop", _bare), ("replay", _ours)):
        times = []
        for _ in range(3):
            started = time.perf_counter()
            fn(lines)
            times.append(time.perf_counter() - started)
        best[name] = min(times)
    result = {
        "matches": len(lines),
        "bare_loop_matches_per_s": len(lines) / best["bare_loop"],
        "replay_matches_per_s": len(lines) / best["replay"],
        "ratio_replay_to_bare": best["bare_loop"] / best["replay"],
    }
    print(
        f"replay of {len(lines):,} two-player elo matches: {result['replay_matches_per_s']:,.0f} matches/s; "
        f"bare loop {result['bare_loop_matches_per_s']:,.0f}/s; ratio {result['ratio_replay_to_bare']:.2f}"
    )
    return result
