"""Team matches for the tests (stream_app.offline.sample has the two-player and
multi-player leagues the demo uses too)."""

from __future__ import annotations

import random
from typing import Any, Iterator

from stream_app.offline.sample import START, _hidden_skills, _iso


def team_league(
    league: str,
    players: int,
    matches: int,
    team_size: int,
    rng: random.Random,
    teams: tuple[int, int] = (2, 4),
    part_time: float = 0.1,
) -> Iterator[dict[str, Any]]:
    """Team matches: between teams[0] and teams[1] teams of `team_size`, drawn
    from the players at random; a member plays half the match with probability
    `part_time`. A team performs the weighted sum of its members' skills plus
    noise, and teams are ranked by it (rounded, so some tie)."""
    skill = _hidden_skills(league, players, 4, rng, None)
    names = list(skill)
    for m in range(matches):
        count = rng.randint(*teams)
        field = rng.sample(names, min(count * team_size, len(names)))
        lineups = [field[k:k + team_size] for k in range(0, len(field) - team_size + 1, team_size)]
        weights = {p: 0.5 if rng.random() < part_time else 1.0 for p in field}
        perf = [round(sum(weights[p] * skill[p] for p in team) + rng.gauss(0.0, 1.0), 1) for team in lineups]
        parts = []
        for t, team in enumerate(lineups):
            rank = 1 + sum(1 for other in perf if other > perf[t])
            for p in team:
                person = {"player": p, "team": f"t{t + 1}", "rank": rank}
                if weights[p] != 1.0:
                    person["weight"] = weights[p]
                parts.append(person)
        yield {"match_id": f"{league}-{m:06d}", "league": league, "occurred_at": _iso(START + 1800 * m),
               "participants": parts}
