"""A league's standings: its players in leaderboard order (rating, highest
first, then name), kept in an order-statistic structure so that a rank, a page
or the players around one are found in O(log n), and a changed player moves in
O(log n): nothing is ever re-sorted.

Only eligible players are ranked: a provisional player (fewer matches than
`min_matches`, or an uncertainty above `max_uncertainty`) or an inactive one
(last match before the league's latest by more than `inactive_days`) is not.
The league's latest time only grows, so inactivity is found by walking the
ranked players in order of their last match from the oldest.

Pure: no I/O. The worker feeds it from its store and commits (stream/reads.py).
"""

from __future__ import annotations

from typing import NamedTuple

from sortedcontainers import SortedList

from .leagues import LeagueOptions

_LAST_NAME = "\U0010ffff"  # sorts after every id


class Standing(NamedTuple):
    """What the standings keep of a player. A tuple of plain values: the garbage
    collector stops tracking it, which matters with hundreds of thousands."""

    rating: float
    matches: int
    uncertainty: float | None
    last_time: float | None  # seconds since the epoch of the last match with an occurred_at


class Standings:
    def __init__(self, options: LeagueOptions, latest: float | None = None):
        self.options = options
        self.latest = latest  # the league's latest occurred_at (seconds)
        self.players: dict[str, Standing] = {}
        self._ranked = SortedList()  # (-rating, name) of eligible players
        # (last_time, name) of ranked players, when inactivity applies
        self._by_time: SortedList | None = None if options.inactive_days is None else SortedList()

    # -- the rules ---------------------------------------------------------------------
    def provisional(self, standing: Standing) -> bool:
        options = self.options
        return standing.matches < options.min_matches or (
            options.max_uncertainty is not None and standing.uncertainty is not None
            and standing.uncertainty > options.max_uncertainty)

    def inactive(self, standing: Standing) -> bool:
        cutoff = self._cutoff()
        return cutoff is not None and standing.last_time is not None and standing.last_time < cutoff

    def eligible(self, standing: Standing) -> bool:
        return not self.provisional(standing) and not self.inactive(standing)

    def _cutoff(self) -> float | None:
        """Players whose last match is before this are inactive."""
        limit = self.options.inactive_seconds
        return None if limit is None or self.latest is None else self.latest - limit

    # -- changes -----------------------------------------------------------------------
    def set(self, player: str, standing: Standing) -> None:
        """A player's new figures (a newcomer's first)."""
        old = self.players.get(player)
        if old is not None and self.eligible(old):
            self._unrank(player, old)
        self.players[player] = standing
        if self.eligible(standing):
            self._ranked.add((-standing.rating, player))
            if self._by_time is not None and standing.last_time is not None:
                self._by_time.add((standing.last_time, player))

    def advance(self, latest: float | None) -> None:
        """The league's latest time, after a match: players it leaves inactive are unranked."""
        if latest is None or (self.latest is not None and latest <= self.latest):
            return
        self.latest = latest
        cutoff = self._cutoff()
        by_time = self._by_time
        if cutoff is None or by_time is None:
            return
        while by_time and by_time[0][0] < cutoff:
            _, player = by_time.pop(0)
            self._ranked.remove((-self.players[player].rating, player))

    def _unrank(self, player: str, standing: Standing) -> None:
        self._ranked.remove((-standing.rating, player))
        if self._by_time is not None and standing.last_time is not None:
            self._by_time.remove((standing.last_time, player))

    # -- reads -------------------------------------------------------------------------
    @property
    def players_total(self) -> int:
        return len(self.players)

    @property
    def eligible_total(self) -> int:
        return len(self._ranked)

    def rank(self, player: str) -> int | None:
        """1-based among eligible players (None: not ranked)."""
        standing = self.players.get(player)
        if standing is None or not self.eligible(standing):
            return None
        return self._ranked.index((-standing.rating, player)) + 1

    def percentile(self, player: str) -> float | None:
        """The share of eligible players rated strictly lower, in percent (None: not ranked)."""
        standing = self.players.get(player)
        if standing is None or not self.eligible(standing):
            return None
        lower = len(self._ranked) - self._ranked.bisect_right((-standing.rating, _LAST_NAME))
        return 100.0 * lower / len(self._ranked)

    def page(self, offset: int, limit: int) -> list[tuple[int, str, Standing]]:
        """(rank, player, standing) of the ranked players offset+1 .. offset+limit."""
        players = self.players
        return [(offset + i + 1, name, players[name])
                for i, (_, name) in enumerate(self._ranked.islice(offset, offset + limit))]

    def around(self, player: str, radius: int) -> list[tuple[int, str, Standing]] | None:
        """Up to `radius` ranked players above the player, the player, and up to
        `radius` below (None: the player is not ranked)."""
        rank = self.rank(player)
        if rank is None:
            return None
        first = max(rank - 1 - radius, 0)
        return self.page(first, rank + radius - first)
