"""A match to come: what the league's rating system expects of it, and what each
player has at stake. Pure: the caller reads the players' states (the API from
its tables, a test from a replay) and turns PredictionError into a 400.

The sides' win probabilities, the draw probability and the match quality are
each system's own model (engine: `predict_win`, `predict_draw`,
`match_quality`; docs/algorithms.md). The predicted order ranks the sides by
win probability, equal ones sharing a rank (as openskill's `predict_rank`);
its probability is that of the whole order with each place taken in turn
among the sides left (Plackett-Luce over the win probabilities), so for two
sides it is the favourite's win probability. The rating at stake is the
system's own update applied to the match with each outcome, nothing stored.
"""

from __future__ import annotations

from typing import Any, Sequence

from .engine import InvalidMatch, Match, Participant, PlayerState, RatingSystem
from .inputs import ID_RULE, is_id

MAX_PLAYERS = 1_000  # players in one prediction, over every side
OUTCOMES = ("win", "draw", "loss")


class PredictionError(ValueError):
    """A request that cannot be predicted: the parameter and the rule it breaks."""

    def __init__(self, parameter: str, rule: str):
        super().__init__(f"{parameter}: {rule}")
        self.parameter = parameter
        self.rule = rule


def parse_sides(values: Sequence[str], parameter: str = "team") -> list[list[str]]:
    """The sides of `?team=a,b&team=c`: each value a side, its players comma separated."""
    if len(values) < 2:
        raise PredictionError(parameter, f"at least two sides, one {parameter!r} each (got {len(values)})")
    sides = [value.split(",") for value in values]
    total = sum(map(len, sides))
    if total > MAX_PLAYERS:
        raise PredictionError(parameter, f"at most {MAX_PLAYERS:,} players over all sides (got {total:,})")
    seen: dict[str, int] = {}
    for number, side in enumerate(sides, 1):
        for player in side:
            if not is_id(player):
                shown = repr(player[:40]) if player else "an empty id"
                raise PredictionError(parameter, f"side {number}: {shown}: a player id {ID_RULE}")
            if player in seen:
                where = "twice on the same side" if seen[player] == number else f"on sides {seen[player]} and {number}"
                raise PredictionError(parameter, f"player {player!r} is {where}")
            seen[player] = number
    return sides


def predict(system: RatingSystem, league: str, sides: list[list[str]],
            states: dict[str, PlayerState | None]) -> dict[str, Any]:
    """The prediction of a match between `sides` (player ids) in `league`, whose
    players have `states` (None, or absent: not rated yet, taken as newcomers)."""
    if not system.teams:
        for number, side in enumerate(sides, 1):
            if len(side) > 1:
                raise PredictionError("team", f"side {number}: the {system.name!r} system rates individuals, "
                                              f"not teams (one player per side)")
    initial = system.initial_state()
    newcomers = [player for side in sides for player in side if states.get(player) is None]
    rated = [[states.get(player) or initial for player in side] for side in sides]
    win = system.predict_win(rated)
    ranks = _ranks(win)
    doc: dict[str, Any] = {
        "league": league, "algorithm": system.name,
        "sides": [{"players": side, "ratings": {player: state.rating for player, state in zip(side, members)},
                   "win": p, "rank": rank}
                  for side, members, p, rank in zip(sides, rated, win, ranks)],
        "rank_probability": _order_probability(win),
        "draw": system.predict_draw(rated),
        "quality": system.match_quality(rated),
        "newcomers": newcomers,
    }
    if len(sides) == 2:
        _at_stake(system, league, sides, rated, doc)
    return doc


def _ranks(win: list[float]) -> list[int]:
    """Rank 1 for the likeliest winner; equal probabilities share a rank (1, 1, 3)."""
    order = sorted(range(len(win)), key=lambda i: -win[i])
    ranks = [0] * len(win)
    for place, i in enumerate(order):
        ranks[i] = ranks[order[place - 1]] if place and win[i] == win[order[place - 1]] else place + 1
    return ranks


def _order_probability(win: list[float]) -> float:
    """The predicted order's probability: each place taken by the side predicted
    there, among the sides not yet placed, in proportion to the win probabilities."""
    left = sum(win)
    probability = 1.0
    for p in sorted(win, reverse=True)[:-1]:
        probability *= p / left if left > 0 else 0.0
        left -= p
    return probability


def _at_stake(system: RatingSystem, league: str, sides: list[list[str]], rated: list[list[PlayerState]],
              doc: dict[str, Any]) -> None:
    """Each player's rating change for each outcome of a match between two sides,
    by the system's own update (a side without a change: the system cannot rate
    such a match as it stands, e.g. it needs scores; `change_unavailable` says why)."""
    teams = system.teams and any(len(side) > 1 for side in sides)
    for doc_side in doc["sides"]:
        doc_side["change"] = {outcome: {} for outcome in OUTCOMES}
    for outcome, ranks in zip(OUTCOMES, ((1, 2), (1, 1), (2, 1))):
        participants = tuple(Participant(player, rank, team=str(number) if teams else None)
                             for number, (side, rank) in enumerate(zip(sides, ranks)) for player in side)
        match = Match(league, "prediction", participants)
        try:
            system.check(match)
        except InvalidMatch as exc:
            doc["change_unavailable"] = exc.message
            for doc_side in doc["sides"]:
                doc_side["change"] = {}
            return
        changes = system.rate(match, [state for members in rated for state in members])
        at = 0
        for number, side in enumerate(sides):
            # Side 1's loss is this match's outcome seen from side 2.
            seen_as = outcome if number == 0 else OUTCOMES[2 - OUTCOMES.index(outcome)]
            for player in side:
                change = changes[at]
                doc["sides"][number]["change"][seen_as][player] = change.after.rating - change.before.rating
                at += 1
