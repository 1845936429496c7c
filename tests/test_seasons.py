"""Seasons (stream_app/seasons.py, rating.start_season_at): periods, tiers, the soft
reset checked on every player, the floor, the refused commands, and a void that
takes a season away."""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import pytest

from stream_app.inputs import BadEvent, format_time, parse_input, parse_time
from stream_app.leagues import ConfigError, LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.seasons import Tier, period, tier_of
from tests.support.corrections import run


def at(text: str) -> float:
    return parse_time(text)


@pytest.mark.parametrize("schedule, moment, name, start", [
    ("monthly", "2026-01-01T00:00:00Z", "2026-01", "2026-01-01T00:00:00Z"),
    ("monthly", "2026-02-28T23:59:59Z", "2026-02", "2026-02-01T00:00:00Z"),
    ("quarterly", "2026-05-15T12:00:00Z", "2026-Q2", "2026-04-01T00:00:00Z"),
    ("quarterly", "2026-12-31T23:00:00Z", "2026-Q4", "2026-10-01T00:00:00Z"),
    ("yearly", "2027-07-04T00:00:00Z", "2027", "2027-01-01T00:00:00Z"),
    ("weekly", "2026-01-01T10:00:00Z", "2026-W01", "2025-12-29T00:00:00Z"),  # a Thursday: ISO week 1 of 2026
    ("weekly", "2027-01-01T10:00:00Z", "2026-W53", "2026-12-28T00:00:00Z"),  # a Friday: still 2026's last ISO week
    ("weekly", "2026-03-08T23:59:59Z", "2026-W10", "2026-03-02T00:00:00Z"),  # a Sunday ends its week
    ("monthly", "2026-03-01T00:30:00+01:00", "2026-02", "2026-02-01T00:00:00Z"),  # UTC periods
])
def test_a_period_is_named_and_starts_in_utc(schedule, moment, name, start):
    assert period(schedule, at(moment)) == (name, at(start))


def test_a_player_is_in_the_last_tier_whose_conditions_hold():
    tiers = (Tier("Bronze"), Tier("Silver", min_rating=1200), Tier("Top 1%", top_percent=1))
    assert tier_of(tiers, 1100, 50, 1000) == "Bronze"
    assert tier_of(tiers, 1100, 5, 1000) == "Top 1%"  # a top share needs no rating
    assert tier_of(tiers, 1300, 50, 1000) == "Silver"
    assert tier_of(tiers, 1300, 10, 1000) == "Top 1%"  # 9 ahead: under 1% of 1000
    assert tier_of(tiers, 1300, 11, 1000) == "Silver"  # 10 ahead: not under 1%
    assert tier_of(tiers, 900, 1, 5) == "Top 1%"  # rank 1 always is in a top share
    assert tier_of(tiers, 1300, None, 1000) == "Silver"  # not ranked: no top share
    assert tier_of((Tier("Silver", min_rating=1200),), 1000, 1, 10) is None


MONTHLY = """
[leagues."m-*"]
algorithm = "{algorithm}"
season = "monthly"
season_reset = {{shrink = {shrink}, toward = "{toward}"{least}}}
"""


def monthly_league(league: str, months: int, seed: int, players: int = 12, per_month: int = 30) -> list[dict]:
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(players)]
    docs = []
    for month in range(1, months + 1):
        for day in range(per_month):
            a, b = rng.sample(names[: players - 2] if month == 1 else names, 2)  # two players join later
            stamp = datetime(2026, month, 1 + day % 28, 1 + day // 28, tzinfo=timezone.utc).timestamp()
            docs.append({"league": league, "match_id": f"{month}-{day}", "occurred_at": format_time(stamp),
                         "participants": [{"player": a, "rank": 1}, {"player": b, "rank": 2}]})
    return docs


@pytest.mark.parametrize("algorithm, toward, least", [
    ("elo", "initial", None), ("elo", "mean", None), ("glicko2", "initial", 120.0), ("weng-lin", "mean", 5.0),
    ("elo-mmr", "initial", 200.0),
])
def test_the_reset_moves_every_player_by_its_formula_and_their_next_match_starts_there(algorithm, toward, least):
    shrink = 0.4
    config = LeagueConfig.from_toml(MONTHLY.format(algorithm=algorithm, shrink=shrink, toward=toward,
                                                   least="" if least is None else f", min_uncertainty = {least}"))
    ledger, events, refused = run(monthly_league("m-1", 4, seed=len(algorithm)), config)
    assert refused == []
    resets: dict[str, list[dict]] = {}
    ratings: dict[str, float] = {}  # every player's rating, as the events say
    for event in events:
        if event.get("cause") == "season_reset":
            resets.setdefault(event["season"], []).append(event)
            assert event["rating_before"] == ratings[event["player"]]
        ratings[event["player"]] = event["rating_after"]
    assert list(resets) == ["2026-02", "2026-03", "2026-04"]
    initial = config.system_for("m-1").initial_state().rating
    for season, events in resets.items():
        before = {e["player"]: e["rating_before"] for e in events}
        assert len(before) == (10 if season == "2026-02" else 12)  # every player of the league, none twice
        centre = initial if toward == "initial" else math.fsum(before.values()) / len(before)
        for event in events:
            assert event["rating_after"] == pytest.approx(centre + shrink * (event["rating_before"] - centre), abs=1e-9)
            if least is not None:
                assert event["uncertainty"] >= least
    # Each player's first match of a season starts from their reset rating.
    checked = 0
    for player in ratings:
        history = ledger.history("m-1", player)
        for season, events in resets.items():
            start = period("monthly", at(f"{season}-01T00:00:00Z"))[1]
            first = next((h for h in history if h["occurred_at"] is not None and at(h["occurred_at"]) >= start), None)
            reset = next((e for e in events if e["player"] == player), None)
            if first is None or reset is None or at(first["occurred_at"]) >= start + 31 * 86400:
                continue
            assert first["rating_before"] == reset["rating_after"], (player, season)
            checked += 1
    assert checked >= 25


def test_a_floor_holds_after_every_match_and_every_reset():
    config = LeagueConfig.from_toml("""
[leagues."f"]
algorithm = "elo"
k = 64
season = "monthly"
season_reset = {shrink = 1.5e-1, toward = "mean"}
floor = 980
""")
    ledger, events, _ = run(monthly_league("f", 3, seed=5), config)
    assert min(e["rating_after"] for e in events) == 980.0
    assert sum(e["rating_after"] == 980.0 for e in events) > 5
    assert any(e.get("cause") == "season_reset" for e in events)
    assert min(state.rating for state in ledger.leagues["f"].values()) >= 980.0


@pytest.mark.parametrize("algorithm", ["elo-mmr", "elo-mmx"])
def test_a_floored_change_publishes_the_display_rating_of_its_floored_rating(algorithm):
    config = LeagueConfig.from_toml(f"""
[leagues."f"]
algorithm = "{algorithm}"
floor = 1490
""")
    _, events, _ = run(monthly_league("f", 1, seed=3), config)
    floored = [e for e in events if e["rating_after"] == 1490.0]
    assert len(floored) > 3
    for event in events:
        assert event["display_rating"] == event["rating_after"] - 3.0 * (event["uncertainty"] - 80.0), event


SEASONED = """
[default]
algorithm = "elo"

[leagues."hand"]
algorithm = "elo"
season = "manual"

[leagues."cal"]
algorithm = "elo"
season = "monthly"
"""


def result(league: str, match_id: str, when: str) -> dict:
    return {"league": league, "match_id": match_id, "occurred_at": when,
            "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}


def start(league: str, season: str, when: str) -> dict:
    return {"schema": "season-started.v1", "league": league, "season": season, "occurred_at": when}


@pytest.mark.parametrize("command, code, field", [
    (start("nowhere", "S1", "2026-02-01T00:00:00Z"), "unknown_league", "league"),
    (start("plain", "S1", "2026-02-01T00:00:00Z"), "season_rule", "league"),
    (start("cal", "S1", "2026-02-01T00:00:00Z"), "season_rule", "league"),
    (start("hand", "S1", "2026-02-01T00:00:00Z"), "season_exists", "season"),
    (start("hand", "S9", "2026-01-10T00:00:00Z"), "season_too_early", "occurred_at"),
    ({"schema": "season-started.v1", "league": "hand", "season": "S9"}, "schema_violation", "occurred_at"),
    ({**start("hand", "S 9", "2026-02-01T00:00:00Z")}, "schema_violation", "season"),
])
def test_a_season_command_that_cannot_apply_is_refused_with_its_reason(command, code, field):
    ledger = Ledger(LeagueConfig.from_toml(SEASONED))
    for doc in (result("plain", "1", "2026-01-20T00:00:00Z"), result("cal", "1", "2026-01-20T00:00:00Z"),
                result("hand", "1", "2026-01-05T00:00:00Z"), start("hand", "S1", "2026-01-10T00:00:00Z"),
                result("hand", "2", "2026-01-20T00:00:00Z")):
        ledger.apply(parse_input(doc))
    before = (dict(ledger.records), {k: list(v) for k, v in ledger.season_rows.items()})
    with pytest.raises(BadEvent) as refused:
        ledger.apply(parse_input(command))
    assert (refused.value.code, refused.value.field) == (code, field)
    assert field in refused.value.message
    assert (dict(ledger.records), {k: list(v) for k, v in ledger.season_rows.items()}) == before  # nothing applied


def test_a_manual_season_ends_with_the_standings_of_those_who_played_in_it():
    ledger = Ledger(LeagueConfig.from_toml(SEASONED))
    ledger.apply(parse_input(result("hand", "0", "2026-01-01T00:00:00Z")))
    ledger.apply(parse_input(start("hand", "S1", "2026-01-02T00:00:00Z")))
    ledger.apply(parse_input(result("hand", "1", "2026-01-03T00:00:00Z")))
    ledger.apply(parse_input({**result("hand", "2", "2026-01-04T00:00:00Z"),
                              "participants": [{"player": "c", "rank": 1}, {"player": "a", "rank": 2}]}))
    ledger.apply(parse_input(start("hand", "S2", "2026-01-05T00:00:00Z")))
    assert [row["name"] for row in ledger.season_rows["hand"]] == ["S1", "S2"]
    assert "end" not in ledger.season_rows["hand"][1]
    final = ledger.final_standings()
    assert [(row["season"], row["player"], row["rank"], row["matches"]) for row in final] == [
        ("S1", "c", 1, 1), ("S1", "a", 2, 2), ("S1", "b", 3, 1)]  # the results before S1 form no season
    assert final[0]["percentile"] == pytest.approx(200 / 3)


def test_voiding_the_only_result_of_a_month_takes_its_season_away_as_if_it_never_came():
    config = LeagueConfig.from_toml(SEASONED)
    docs = [result("cal", "jan", "2026-01-10T00:00:00Z"), result("cal", "feb", "2026-02-10T00:00:00Z"),
            result("cal", "mar", "2026-03-10T00:00:00Z"), result("cal", "apr", "2026-04-10T00:00:00Z")]
    ledger = Ledger(config)
    for doc in docs:
        ledger.apply(parse_input(doc))
    assert [row["name"] for row in ledger.season_rows["cal"]] == ["2026-01", "2026-02", "2026-03", "2026-04"]
    ledger.apply(parse_input({"schema": "match-voided.v1", "league": "cal", "match_id": "feb", "reason": "annulled"}))
    fresh = Ledger(config)
    for doc in docs:
        if doc["match_id"] != "feb":
            fresh.apply(parse_input(doc))
    assert [row["name"] for row in ledger.season_rows["cal"]] == ["2026-01", "2026-03", "2026-04"]
    assert ledger.final_standings() == fresh.final_standings()
    assert [{k: v for k, v in row.items() if k != "key"} for row in ledger.season_rows["cal"]] == \
           [{k: v for k, v in row.items() if k != "key"} for row in fresh.season_rows["cal"]]
    assert ledger.season_rows["cal"][0]["end"] == at("2026-03-01T00:00:00Z")


@pytest.mark.parametrize("table, message", [
    ('season = "daily"', "key 'season': must be one of"),
    ("season_reset = {shrink = 0.5}", "key 'season_reset': needs `season`"),
    ('season = "monthly"\nseason_reset = {shrink = 1.5}', "key 'season_reset.shrink': must be between 0 and 1"),
    ('season = "monthly"\nseason_reset = {toward = "median"}', "key 'season_reset.toward'"),
    ('season = "monthly"\nseason_reset = {min_uncertainty = 100}', "key 'season_reset.min_uncertainty': 'elo' ratings"),
    ('season = "monthly"\nseason_reset = {spread = 1}', "key 'season_reset.spread': unknown key"),
    ('tiers = [{name = "A"}, {name = "A"}]', "key 'tiers[1].name': 'A' names two tiers"),
    ('tiers = [{min_rating = 3}]', "key 'tiers[0].name': required"),
    ('tiers = [{name = "A", top_percent = 0}]', "key 'tiers[0].top_percent': must be in (0, 100]"),
    ('tiers = []', "key 'tiers': must be a non-empty array"),
    ('floor = "low"', "key 'floor': must be a number"),
])
def test_a_season_key_with_a_mistake_stops_start_up_naming_the_table_and_the_key(table, message):
    with pytest.raises(ConfigError) as error:
        LeagueConfig.from_toml(f'[leagues."x"]\nalgorithm = "elo"\n{table}\n', "leagues.toml")
    assert str(error.value).startswith('leagues.toml: [leagues."x"] key ') and message in str(error.value)


TIERED = """
[leagues."t"]
algorithm = "elo"
k = 40
season = "monthly"
season_reset = {shrink = 0.5}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1010}, {name = "Top 10%", top_percent = 10}]
"""


def test_each_event_carries_the_tiers_a_brute_force_count_of_the_standings_gives():
    config = LeagueConfig.from_toml(TIERED)
    tiers = config.options_for("t").tiers
    docs = monthly_league("t", 3, seed=11, players=30, per_month=60)
    docs.insert(70, {"schema": "match-voided.v1", "league": "t", "match_id": "1-5", "reason": "annulled"})
    _, events, refused = run(docs, config)
    assert refused == []
    ratings: dict[str, float] = {}

    def tier(player: str) -> str | None:
        if player not in ratings:
            return None
        ahead = sum(1 for other, rating in ratings.items()
                    if rating > ratings[player] or (rating == ratings[player] and other < player))
        return tier_of(tiers, ratings[player], ahead + 1, len(ratings))

    groups: list[list[dict]] = []
    for event in events:  # a match's, a reset's or a re-rate's events come together
        if groups and (groups[-1][0]["match_id"], groups[-1][0].get("cause")) == (event["match_id"], event.get("cause")):
            groups[-1].append(event)
        else:
            groups.append([event])
    seen = set()
    for group in groups:
        assert [event["tier_before"] for event in group] == [tier(event["player"]) for event in group]
        for event in group:
            if event["matches"] == 0:
                ratings.pop(event["player"], None)
            else:
                ratings[event["player"]] = event["rating_after"]
        assert [event["tier_after"] for event in group] == [tier(event["player"]) for event in group]
        seen |= {(event.get("cause"), event["tier_after"]) for event in group}
    assert {(None, "Top 10%"), (None, "Silver"), (None, "Bronze"), ("season_reset", "Bronze")} <= seen
    assert any(event.get("cause") == "correction" for event in events)
