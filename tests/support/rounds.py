"""Rounds of many players for the Elo-MMR tests: random standings with plenty
of ties, and a system applied to them round after round."""

from __future__ import annotations

from typing import Any

import numpy as np

from stream_app.engine import Match, Participant


def round_match(rows: list[tuple[str, int]], match_id: str = "m", time: float | None = None) -> Match:
    return Match("league", match_id, tuple(Participant(p, r) for p, r in rows), time)


def replay_rounds(system: Any, rounds: list[list[tuple[str, int]]]) -> dict[str, Any]:
    """Each player's state after the rounds, rated one after the other by `system`."""
    states: dict[str, Any] = {}
    for k, rows in enumerate(rounds):
        before = [states.get(p) or system.initial_state() for p, _ in rows]
        for change in system.rate(round_match(rows, str(k), 1000.0 * (k + 1)), before):
            states[change.player] = change.after
    return states


def random_rounds(seed: int, count: int, pool: int, low: int, high: int) -> list[list[tuple[str, int]]]:
    rng = np.random.default_rng(seed)
    rounds = []
    for _ in range(count):
        size = int(rng.integers(low, high + 1))
        players = rng.choice(pool, size=size, replace=False)
        ranks = np.sort(rng.integers(1, size // 2 + 2, size=size))  # plenty of ties
        rounds.append([(f"p{p}", int(r)) for p, r in zip(players, ranks)])
    return rounds
