"""Two-player Elo with points (the ELO-Rating library, checked against the Elo blog post's example).

Expected score  E_a = 1 / (1 + 10 ** ((R_b - R_a) / c))
Outcome         S_a = 1 win, 0.5 draw, 0 loss (from the ranks)
points_method 0 R'_a = R_a + K (S_a - E_a)
points_method 1 S_a is replaced by P_a / (P_a + P_b)
points_method 2 R'_a = R_a + K (S_a - E_a) + sign(S_a - E_a) * L * P_a / (P_a + P_b)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .base import InvalidMatch, Match, Params, PlayerState, RatingChange, RatingSystem, require


@dataclass(frozen=True)
class EloParams(Params):
    k: float = 32.0
    scale: float = 400.0  # the c of the ELO-Rating library
    initial: float = 1000.0
    points_method: int = 0
    l: float = 16.0  # noqa: E741 - the L factor of the ELO-Rating library

    def check(self) -> None:
        require(self.k > 0, "k", f"must be > 0 (got {self.k})")
        require(self.scale > 0, "scale", f"must be > 0 (got {self.scale})")
        require(self.points_method in (0, 1, 2), "points_method", f"must be 0, 1 or 2 (got {self.points_method})")
        require(self.l >= 0, "l", f"must be >= 0 (got {self.l})")


@dataclass(frozen=True, slots=True)
class EloState(PlayerState):
    rating: float
    matches: int = 0

    def to_dict(self) -> dict[str, Any]:
        # The base class's reads the fields by name; two-player leagues call this per participant.
        return {"rating": self.rating, "matches": self.matches}


def expected_score(rating: float, opponent: float, scale: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / scale))


def _sign(x: float) -> float:
    # S - E within float noise of zero (equal ratings, a draw) counts as zero, so
    # the L bonus does not flip on rounding errors of the ratings.
    return 1.0 if x > 1e-12 else -1.0 if x < -1e-12 else 0.0


class Elo(RatingSystem[EloState]):
    name = "elo"
    Params = EloParams
    State = EloState
    params: EloParams

    def check(self, match: Match) -> None:
        super().check(match)
        n = len(match.participants)
        if n != 2:
            raise InvalidMatch(
                "system_rule",
                f"participants: the 'elo' system rates exactly 2 participants (got {n})",
                "participants",
            )
        if self.params.points_method:
            for i, p in enumerate(match.participants):
                if p.score is None:
                    raise InvalidMatch(
                        "system_rule",
                        f"participants[{i}].score: required by points_method {self.params.points_method}",
                        f"participants[{i}].score",
                    )
                if p.score < 0:
                    raise InvalidMatch(
                        "system_rule",
                        f"participants[{i}].score: must be >= 0 for points_method {self.params.points_method}",
                        f"participants[{i}].score",
                    )

    def rate(self, match: Match, before: Sequence[EloState]) -> list[RatingChange[EloState]]:
        p = self.params
        a, b = match.participants
        ra, rb = before[0].rating, before[1].rating
        ea = expected_score(ra, rb, p.scale)
        eb = expected_score(rb, ra, p.scale)
        sa = 1.0 if a.rank < b.rank else 0.0 if a.rank > b.rank else 0.5
        sb = 1.0 - sa
        if p.points_method == 0:
            da = p.k * (sa - ea)
            db = p.k * (sb - eb)
        else:
            total = a.score + b.score  # type: ignore[operator]
            # A 0-0 result shares the points evenly rather than dividing by zero.
            fa = a.score / total if total > 0 else 0.5  # type: ignore[operator]
            fb = b.score / total if total > 0 else 0.5  # type: ignore[operator]
            if p.points_method == 1:
                da = p.k * (fa - ea)
                db = p.k * (fb - eb)
            else:
                da = p.k * (sa - ea) + _sign(sa - ea) * p.l * fa
                db = p.k * (sb - eb) + _sign(sb - eb) * p.l * fb
        after_a = EloState(ra + da, before[0].matches + 1)
        after_b = EloState(rb + db, before[1].matches + 1)
        return [
            RatingChange(a.player, before[0], after_a, {"expected_score": ea}),
            RatingChange(b.player, before[1], after_b, {"expected_score": eb}),
        ]

    def win_probability(self, side: Sequence[EloState], other: Sequence[EloState]) -> float:
        """The expected score the update uses, as a probability of winning (a draw
        counts half, as in the update)."""
        return expected_score(side[0].rating, other[0].rating, self.params.scale)
