"""The synthetic data set of the Elo-MMR paper, section 6.1.

Players' initial skills are drawn with mean 1500 and spread 300; every player
competes in every round and is ranked by an independent performance (skill
plus noise of spread 200); between rounds each skill takes a Gaussian step of
spread 35. The paper says "variance" for these three numbers; its reported
accuracy (81.7% pair inversion) only fits them as standard deviations (with
skills known exactly, the best possible is about 81%), so they are used as
standard deviations here.

With `team_size` K > 1 the players are dealt into random teams of K each
round (the last team takes the remainder); a team's performance is the sum of
its members' performances, and teams are ranked by it.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

SKILL_MEAN = 1500.0
SKILL_SD = 300.0
PERFORMANCE_SD = 200.0
STEP_SD = 35.0
DAY = 86_400
START = 1_577_836_800  # 2020-01-01T00:00:00Z


def synthetic_rounds(
    players: int = 10_000, rounds: int = 50, seed: int = 0, league: str = "synthetic", team_size: int = 1
) -> Iterator[dict[str, Any]]:
    if team_size < 1 or (team_size > 1 and players < 2 * team_size):
        raise ValueError(f"team_size: must be 1, or at most half the players (got {team_size} for {players} players)")
    rng = np.random.default_rng(seed)
    names = np.array([f"s{i:06d}" for i in range(players)])
    skill = rng.normal(SKILL_MEAN, SKILL_SD, players)
    for t in range(rounds):
        if t:
            skill = skill + rng.normal(0.0, STEP_SD, players)
        performance = skill + rng.normal(0.0, PERFORMANCE_SD, players)
        event = {"match_id": f"synth-{t + 1}", "league": league, "occurred_at": _iso(START + t * DAY)}
        if team_size == 1:
            order = np.argsort(-performance, kind="stable")
            event["participants"] = [{"player": str(names[i]), "rank": place + 1} for place, i in enumerate(order)]
        else:
            event["participants"] = _team_round(rng.permutation(players), performance, names, team_size)
        yield event


def _team_round(dealt: np.ndarray, performance: np.ndarray, names: np.ndarray, size: int) -> list[dict[str, Any]]:
    teams = [dealt[k:k + size] for k in range(0, len(dealt) - len(dealt) % size, size)]
    teams[-1] = np.concatenate((teams[-1], dealt[len(teams) * size:]))
    totals = np.array([performance[members].sum() for members in teams])
    rows = []
    for place, team in enumerate(np.argsort(-totals, kind="stable")):
        rows.extend({"player": str(names[i]), "team": f"t{team + 1}", "rank": place + 1} for i in teams[team])
    return rows


def _iso(seconds: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
