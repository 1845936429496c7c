"""The rating systems added for teams and for what users ask, one match at a time,
against the reference implementations measured in the same run:

- weng-lin (each model) against openskill 6.2 (compiled): a 2-player match,
  a match of 4 teams of 5, and one round of 5,000 single-player teams with
  distinct ratings (the goal: well under a second);
- glicko2 against the glicko2 package: a 2-player match (one period of one game);
- codeforces against elo-pairwise (both O(n^2) per round): a round of 5,000.
"""

from __future__ import annotations

import random
import time
from typing import Callable

from stream_app.engine import Match, Participant, make_system

ROUND = 5_000


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _per_call(fn: Callable[[], object], calls: int, repeat: int = 5) -> float:
    return _best(lambda: [fn() for _ in range(calls)], repeat) / calls


def _teams(rng: random.Random, teams: int, size: int) -> tuple[list[list[tuple[float, float]]], list[int]]:
    return ([[(rng.uniform(10, 40), rng.uniform(1, 8)) for _ in range(size)] for _ in range(teams)],
            list(range(1, teams + 1)))


def weng_lin() -> dict:
    from openskill.models import (BradleyTerryFull, BradleyTerryPart, PlackettLuce, ThurstoneMostellerFull,
                                  ThurstoneMostellerPart)

    oracles = {"plackett-luce": PlackettLuce, "bradley-terry-full": BradleyTerryFull,
               "bradley-terry-part": BradleyTerryPart, "thurstone-mosteller-full": ThurstoneMostellerFull,
               "thurstone-mosteller-part": ThurstoneMostellerPart}
    rng = random.Random(5)
    shapes = {"2 players": (_teams(rng, 2, 1), 2000, 5), "4 teams of 5": (_teams(rng, 4, 5), 500, 5),
              f"{ROUND:,} players": (_teams(rng, ROUND, 1), 1, 3)}
    out = {}
    for model, oracle_cls in oracles.items():
        system = make_system("weng-lin", {"model": model})
        oracle = oracle_cls()
        for shape, ((teams, ranks), calls, repeat) in shapes.items():
            people = tuple(Participant(f"p{t}.{m}", ranks[t], None, f"t{t}" if len(team) > 1 else None)
                           for t, team in enumerate(teams) for m in range(len(team)))
            match = Match("l", "m", people)
            states = [system.State(mu, sigma, 3) for team in teams for mu, sigma in team]
            ratings = [[oracle.rating(mu=mu, sigma=sigma) for mu, sigma in team] for team in teams]
            ours = _per_call(lambda: system.rate(match, states), calls, repeat)
            theirs = _per_call(lambda: oracle.rate(ratings, ranks=ranks), calls, repeat) if calls > 1 or \
                model not in ("bradley-terry-full", "thurstone-mosteller-full") else None
            out[f"{model}, {shape}"] = {"seconds": ours, "openskill_seconds": theirs,
                                        "ratio": None if theirs is None else ours / theirs}
            ratio = "" if theirs is None else f"  openskill {theirs * 1e6:10.1f} µs  ratio {ours / theirs:5.2f}"
            print(f"  weng-lin {model:<26} {shape:<14} {ours * 1e6:10.1f} µs{ratio}", flush=True)
    return out


def glicko2_two_players() -> dict:
    import glicko2 as reference

    system = make_system("glicko2")
    match = Match("l", "m", (Participant("a", 1), Participant("b", 2)))
    states = [system.State(1600.0, 120.0, 0.06, 5), system.State(1500.0, 80.0, 0.06, 5)]

    def theirs() -> None:
        a, b = reference.Player(1600, 120, 0.06), reference.Player(1500, 80, 0.06)
        a.update_player([1500], [80], [1])
        b.update_player([1600], [120], [0])

    ours = _per_call(lambda: system.rate(match, states), 5000)
    base = _per_call(theirs, 5000)
    print(f"  glicko2 2 players  {ours * 1e6:8.1f} µs  glicko2 package {base * 1e6:8.1f} µs  ratio {ours / base:5.2f}",
          flush=True)
    return {"seconds": ours, "package_seconds": base, "ratio": ours / base}


def codeforces_round() -> dict:
    rng = random.Random(9)
    match = Match("l", "m", tuple(Participant(f"p{i}", i + 1) for i in range(ROUND)))
    ratings = [rng.uniform(800, 2800) for _ in range(ROUND)]
    result = {}
    for name in ("codeforces", "elo-pairwise"):
        system = make_system(name)
        states = [system.State(rating=r) for r in ratings]
        result[name] = _best(lambda: system.rate(match, states), 3)
    ratio = result["codeforces"] / result["elo-pairwise"]
    print(f"  codeforces {ROUND:,} players {result['codeforces']:.3f} s  elo-pairwise {result['elo-pairwise']:.3f} s"
          f"  ratio {ratio:5.2f}", flush=True)
    return {**result, "ratio": ratio}


def run() -> dict:
    return {"weng_lin": weng_lin(), "glicko2": glicko2_two_players(), "codeforces": codeforces_round()}


if __name__ == "__main__":
    run()
