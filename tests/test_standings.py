"""Standings (stream_app/standings.py): rank, percentile, pages and around-me
against a brute-force sort of the same players, after every change; and each
eligibility rule at its boundary."""

from __future__ import annotations

import random

import pytest

from stream_app.leagues import LeagueOptions
from stream_app.standings import Standing, Standings

DAY = 86400.0


def brute(players: dict[str, Standing], options: LeagueOptions, latest: float | None) -> list[tuple[str, Standing]]:
    """The eligible players by rating, then name, decided from the rules' words."""
    def eligible(s: Standing) -> bool:
        if s.matches < options.min_matches:
            return False
        if options.max_uncertainty is not None and s.uncertainty is not None and s.uncertainty > options.max_uncertainty:
            return False
        if options.inactive_days is not None and latest is not None and s.last_time is not None:
            return latest - s.last_time <= options.inactive_days * DAY
        return True

    return sorted(((name, s) for name, s in players.items() if eligible(s)), key=lambda kv: (-kv[1].rating, kv[0]))


def assert_same(standings: Standings, players: dict[str, Standing], latest: float | None) -> None:
    ranked = brute(players, standings.options, latest)
    assert [(name, s) for _, name, s in standings.page(0, len(players) + 1)] == ranked
    assert standings.eligible_total == len(ranked) and standings.players_total == len(players)
    position = {name: i + 1 for i, (name, _) in enumerate(ranked)}
    for name, s in players.items():
        assert standings.rank(name) == position.get(name)
        if name in position:
            lower = sum(1 for _, other in ranked if other.rating < s.rating)
            assert standings.percentile(name) == pytest.approx(100.0 * lower / len(ranked))
        else:
            assert standings.percentile(name) is None and standings.around(name, 3) is None


@pytest.mark.parametrize("options", [
    LeagueOptions(),
    LeagueOptions(min_matches=3),
    LeagueOptions(max_uncertainty=100.0, inactive_days=2.0),
    LeagueOptions(min_matches=2, max_uncertainty=150.0, inactive_days=0.5),
])
def test_every_change_keeps_ranks_percentiles_and_pages_equal_to_a_sort(options):
    rng = random.Random(7)
    names = [f"p{i:03d}" for i in range(120)]
    players: dict[str, Standing] = {}
    latest = 0.0
    standings = Standings(options, latest)
    for step in range(1500):
        name = rng.choice(names)
        old = players.get(name)
        # Coarse ratings make ties, which the name must break.
        rating = float(rng.randrange(1400, 1600, 5))
        time = latest + rng.choice([0.0, 0.0, 3600.0, DAY / 2])
        players[name] = Standing(rating, (old.matches if old else 0) + 1, rng.uniform(50, 200), time)
        standings.set(name, players[name])
        latest = max(latest, time)
        standings.advance(latest)
        if step % 100 == 99:
            assert_same(standings, players, latest)
    assert_same(standings, players, latest)
    ranked = brute(players, options, latest)
    if ranked:
        name = ranked[len(ranked) // 2][0]
        rows = standings.around(name, 4)
        i = len(ranked) // 2
        assert [(rank, n) for rank, n, _ in rows] == [(j + 1, ranked[j][0]) for j in range(max(i - 4, 0), min(i + 5, len(ranked)))]
        assert [n for _, n, _ in standings.around(ranked[0][0], 2)] == [n for n, _ in ranked[:3]]


def test_percentile_counts_only_players_rated_strictly_lower():
    standings = Standings(LeagueOptions())
    for name, rating in [("a", 1500.0), ("b", 1500.0), ("c", 1400.0), ("d", 1600.0)]:
        standings.set(name, Standing(rating, 1, None, None))
    assert [standings.rank(n) for n in "dabc"] == [1, 2, 3, 4]  # ties: by name
    assert standings.percentile("a") == standings.percentile("b") == 25.0
    assert standings.percentile("d") == 75.0 and standings.percentile("c") == 0.0


def test_min_matches_boundary():
    standings = Standings(LeagueOptions(min_matches=3))
    standings.set("two", Standing(1500.0, 2, None, None))
    standings.set("three", Standing(1400.0, 3, None, None))
    assert standings.provisional(standings.players["two"]) and standings.rank("two") is None
    assert not standings.provisional(standings.players["three"]) and standings.rank("three") == 1
    standings.set("two", Standing(1510.0, 3, None, None))  # its third match: ranked now
    assert standings.rank("two") == 1 and standings.eligible_total == 2


def test_max_uncertainty_boundary():
    standings = Standings(LeagueOptions(max_uncertainty=100.0))
    standings.set("at", Standing(1500.0, 5, 100.0, None))
    standings.set("above", Standing(1600.0, 5, 100.0001, None))
    assert standings.rank("at") == 1 and standings.rank("above") is None
    assert standings.provisional(standings.players["above"])


def test_inactive_days_boundary_counted_from_the_league_latest_time():
    start = 1_700_000_000.0
    standings = Standings(LeagueOptions(inactive_days=30), latest=start)
    standings.set("old", Standing(1600.0, 5, None, start))
    standings.set("new", Standing(1500.0, 5, None, start + DAY))
    standings.set("untimed", Standing(1400.0, 5, None, None))  # never judged inactive
    standings.advance(start + 30 * DAY)  # exactly 30 days after old's last match: still active
    assert standings.rank("old") == 1 and standings.eligible_total == 3
    standings.advance(start + 30 * DAY + 1)  # one second more: inactive
    assert standings.rank("old") is None and standings.rank("new") == 1 and standings.eligible_total == 2
    assert not standings.provisional(standings.players["old"])  # inactive is not provisional
    standings.advance(start)  # the latest time never goes back
    assert standings.rank("old") is None
    standings.set("old", Standing(1590.0, 6, None, start + 31 * DAY))  # plays again: listed again
    assert standings.rank("old") == 1 and standings.eligible_total == 3
