"""Inputs that correct the record: results mixed with voids, corrections and
late results; and what they must come to, worked out without the service
(`cleaned`): the results that count, corrected, in the league's order."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from stream_app.inputs import BadEvent, parse_input, parse_time
from stream_app.published import events_of
from stream_app.leagues import IN_ORDER, LeagueConfig
from stream_app.offline.replay import Ledger
from stream_app.apply import apply
from stream_app.rerate import Rerated

CONFIG = """
[default]
algorithm = "elo"
snapshot_every = 7

[leagues."late-*"]
algorithm = "elo"
late_results = "in_order"
snapshot_every = 5

[leagues."kart*"]
algorithm = "elo-pairwise"
ties = "half"
snapshot_every = 4

[leagues."arena*"]
algorithm = "elo-mmr"
late_results = "in_order"
snapshot_every = 3

[leagues."mmx*"]
algorithm = "elo-mmx"
snapshot_every = 6

[leagues."go*"]
algorithm = "glicko2"
late_results = "in_order"
snapshot_every = 5

[leagues."team*"]
algorithm = "weng-lin"
snapshot_every = 4

[leagues."relay*"]
algorithm = "elo-mmx"
late_results = "in_order"
snapshot_every = 3

[leagues."month*"]
algorithm = "glicko2"
late_results = "in_order"
snapshot_every = 5
inactive_days = 20
season = "monthly"
season_reset = {shrink = 0.5, toward = "initial", min_uncertainty = 150}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1500}, {name = "Top 10%", top_percent = 10}]
floor = 1350

[leagues."split*"]
algorithm = "elo"
snapshot_every = 6
season = "manual"
season_reset = {shrink = 0.25, toward = "mean"}
floor = 960
"""


def _shift(text: str, minutes: int) -> str:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")) + timedelta(minutes=minutes)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reranked(participants: list[dict], rng: random.Random) -> list[dict]:
    """The same players in another order (ranks 1..n), sometimes one fewer; teams
    keep their members and get another order."""
    if "team" in participants[0]:
        teams = list(dict.fromkeys(p["team"] for p in participants))
        rng.shuffle(teams)
        return [{**p, "rank": teams.index(p["team"]) + 1} for p in participants]
    people = [{"player": p["player"]} for p in participants]
    rng.shuffle(people)
    if len(people) > 3 and rng.random() < 0.3:
        people.pop()
    return [{**p, "rank": i + 1} for i, p in enumerate(people)]


def with_corrections(results: list[dict], rng: random.Random, voids: float = 0.06, corrections: float = 0.06,
                     late: float = 0.08, untimed: float = 0.03) -> list[dict]:
    """The results (in order, each with occurred_at) with commands mixed in after the
    results they name, some results arriving late, some without occurred_at, and a
    few commands that must be refused (unknown match, voided twice, no change)."""
    docs = [dict(doc) for doc in results]
    for doc in docs:
        if rng.random() < untimed:
            doc.pop("occurred_at", None)
    # Late results: moved a few places later in arrival, keeping their time.
    for i in range(len(docs) - 1, -1, -1):
        if rng.random() < late:
            j = min(len(docs) - 1, i + rng.randint(1, 8))
            docs.insert(j, docs.pop(i))
    out: list[dict] = []
    live: list[dict] = []
    voided: list[dict] = []
    for doc in docs:
        out.append(doc)
        live.append(doc)
        roll = rng.random()
        if roll < voids and live:
            target = live.pop(rng.randrange(len(live)))
            out.append({"schema": "match-voided.v1", "league": target["league"], "match_id": target["match_id"],
                        "reason": "annulled"})
            voided.append(target)
        elif roll < voids + corrections and live:
            target = rng.choice(live)
            command = {"schema": "match-corrected.v1", "league": target["league"], "match_id": target["match_id"],
                       "participants": _reranked(target["participants"], rng), "reason": "wrong standings"}
            if "occurred_at" in target and rng.random() < 0.4:
                command["occurred_at"] = _shift(target["occurred_at"], rng.randint(-300, 300))
            out.append(command)
        elif roll < voids + corrections + 0.01:
            out.append({"schema": "match-voided.v1", "league": doc["league"], "match_id": "no-such-match",
                        "reason": "typo"})
        elif roll < voids + corrections + 0.02 and voided:
            target = rng.choice(voided)
            out.append({"schema": "match-voided.v1", "league": target["league"], "match_id": target["match_id"],
                        "reason": "voided twice"})
    return out


def cleaned(docs: list[dict], config: LeagueConfig) -> list[dict]:
    """The results that count after the commands, corrected, each league in its
    order: arrival order, or time order where the league has late_results =
    "in_order" (a result without occurred_at after every result received before
    it). Replaying these gives what the docs must give."""
    leagues: dict[str, dict[str, Any]] = {}
    for doc in docs:
        league = leagues.setdefault(doc["league"], {"entries": {}, "order_time": None, "arrivals": 0, "seasons": set()})
        entries = league["entries"]
        in_order = config.options_for(doc["league"]).late_results == IN_ORDER
        kind = doc.get("schema", "match-result.v1")
        if kind == "season-started.v1":  # in a known league with manual seasons, a name used once, not too early
            time = parse_time(doc["occurred_at"])
            if (entries and config.options_for(doc["league"]).season == "manual" and doc["season"] not in league["seasons"]
                    and (league["order_time"] is None or time >= league["order_time"])):
                league["seasons"].add(doc["season"])
                time = league["order_time"] = parse_time(doc["occurred_at"])
                entries[("season", doc["season"])] = {"doc": doc, "place": time, "arrival": league["arrivals"],
                                                      "voided": False}
                league["arrivals"] += 1
            continue
        match_id = doc["match_id"]
        if kind == "match-result.v1":
            if match_id in entries:
                continue
            time = parse_time(doc["occurred_at"]) if "occurred_at" in doc else None
            order_time = league["order_time"]
            if time is None:
                place = order_time
            elif order_time is None or time >= order_time:
                place = league["order_time"] = time
            else:
                place = time if in_order else order_time
            entries[match_id] = {"doc": doc, "place": place, "arrival": league["arrivals"], "voided": False}
            league["arrivals"] += 1
        elif kind == "match-voided.v1":
            if match_id in entries and not entries[match_id]["voided"]:
                entries[match_id]["voided"] = True
        else:
            entry = entries.get(match_id)
            if entry is None or entry["voided"]:
                continue
            corrected = {key: value for key, value in entry["doc"].items() if key != "participants"}
            corrected["participants"] = doc["participants"]
            if "occurred_at" in doc:
                corrected["occurred_at"] = doc["occurred_at"]
                if in_order:
                    entry["place"] = parse_time(doc["occurred_at"])
                    if league["order_time"] is None or entry["place"] > league["order_time"]:
                        league["order_time"] = entry["place"]
            entry["doc"] = corrected
    out = []
    for league in leagues.values():
        live = [e for e in league["entries"].values() if not e["voided"]]
        live.sort(key=lambda e: (float("-inf") if e["place"] is None else e["place"], e["arrival"]))
        out += [e["doc"] for e in live]
    return out


def corrected_leagues(seed: int, scale: int = 1) -> list[dict]:
    """Eight leagues, one per case of CONFIG (elo appending and in time order,
    elo-pairwise, elo-mmr in time order, elo-mmx, glicko2 in time order, weng-lin
    teams, elo-mmx teams in time order), with corrections mixed in, interleaved
    at random."""
    from stream_app.offline.sample import multi_player_league, two_player_league

    from .leagues import interleave
    from .sample_teams import team_league

    rng = random.Random(seed)
    leagues = [
        list(two_player_league("chess", 14, 90 * scale, rng)),
        list(two_player_league("late-chess", 14, 90 * scale, rng)),
        list(multi_player_league("kart", 12, 30 * scale, 5, rng)),
        list(multi_player_league("arena", 24, 20 * scale, 8, rng)),
        list(multi_player_league("mmx", 16, 20 * scale, 6, rng)),
        list(two_player_league("go", 10, 60 * scale, rng, spacing=4 * 3600)),
        list(team_league("team", 16, 24 * scale, 2, rng)),
        list(team_league("relay", 14, 20 * scale, 2, rng, teams=(2, 3))),
        list(two_player_league("month", 12, 60 * scale, rng, spacing=2 * 86400)),
    ]
    commands = [with_corrections(league, rng) for league in leagues]
    split = with_corrections(list(two_player_league("split", 10, 60 * scale, rng, spacing=3600)), rng)
    return interleave([*commands, with_seasons(split, every=15)], rng)


def with_seasons(docs: list[dict], every: int) -> list[dict]:
    """A league's docs with a season-started command after every `every` docs, a minute
    after the latest occurred_at so far, and one that reuses a name (refused)."""
    out: list[dict] = []
    latest = None
    seasons = 0
    for i, doc in enumerate(docs):
        out.append(doc)
        if "occurred_at" in doc:
            time = parse_time(doc["occurred_at"])
            latest = time if latest is None else max(latest, time)
        if (i + 1) % every == 0 and latest is not None:
            seasons += 1
            start = datetime.fromtimestamp(latest + 60, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append({"schema": "season-started.v1", "league": doc["league"], "season": f"S{seasons}",
                        "occurred_at": start, "reason": "next split"})
            if seasons == 2:
                out.append({**out[-1], "season": "S1"})  # the name is taken: a dead letter
    return out


def run(docs: list[dict], config: LeagueConfig) -> tuple[Ledger, list[dict], list[BadEvent]]:
    """Apply every doc through apply.apply on a Ledger that keeps history: the
    ledger (`rerates` counted), the rating-changed events published in order, and
    the refused docs' errors."""
    ledger = Ledger(config, keep_history=True)
    events, refused = [], []
    for doc in docs:
        try:
            item = parse_input(orjson.dumps(doc))
            done = apply(config, ledger.tables, item)
        except BadEvent as exc:
            refused.append(exc)
            continue
        if isinstance(done, Rerated):
            ledger.rerates += 1
        events += events_of(done, config)
    return ledger, events, refused
