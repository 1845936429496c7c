"""`ratings replay` and `ratings demo`, run through the command line."""

import gzip
import re
import subprocess
import sys

import orjson
import pytest

from stream_app.cli import main
from stream_app.leagues import LeagueConfig
from stream_app.offline.replay import Ledger, replay
from stream_app.offline.sample import DEMO_CONFIG, demo_matches

CONFIG = """
[leagues."race"]
algorithm = "elo-pairwise"
ties = "half"
"""


def m(league, match_id, *standings):
    return {"league": league, "match_id": match_id, "participants": [{"player": p, "rank": r} for p, r in standings]}


def write_lines(path, events, extra=()):
    with open(path, "wb") as f:
        for e in events:
            f.write(e if isinstance(e, bytes) else orjson.dumps(e))
            f.write(b"\n")
        for line in extra:
            f.write(line + b"\n")
    return path


def plain_elo(matches):
    """Independent two-player Elo with the defaults (K 32, c 400, start 1000)."""
    ratings, counts = {}, {}
    for a, b, outcome in matches:
        ra, rb = ratings.get(a, 1000.0), ratings.get(b, 1000.0)
        ea = 1 / (1 + 10 ** ((rb - ra) / 400))
        eb = 1 / (1 + 10 ** ((ra - rb) / 400))
        ratings[a], ratings[b] = ra + 32 * (outcome - ea), rb + 32 * ((1 - outcome) - eb)
        counts[a], counts[b] = counts.get(a, 0) + 1, counts.get(b, 0) + 1
    return ratings, counts


def test_replay_writes_final_state_per_league_equal_to_an_independent_elo(tmp_path, capsys):
    events = [
        m("chess", "1", ("ann", 1), ("ben", 2)),
        m("chess", "2", ("ann", 2), ("cat", 1)),
        m("go", "1", ("ann", 1), ("ben", 1)),  # same names, another league: separate ratings
        m("chess", "3", ("ben", 1), ("cat", 1)),
    ]
    path = write_lines(tmp_path / "in.jsonl", events)
    out = tmp_path / "out.json"
    assert main(["replay", "--input", str(path), "--output", str(out)]) == 0
    state = orjson.loads(out.read_bytes())
    chess, counts = plain_elo([("ann", "ben", 1.0), ("ann", "cat", 0.0), ("ben", "cat", 0.5)])
    assert set(state) == {"chess", "go"}
    for player, rating in chess.items():
        assert state["chess"][player] == {"rating": rating, "matches": counts[player]}
    assert state["go"]["ann"] == {"rating": 1000.0, "matches": 1}
    err = capsys.readouterr().err
    assert re.search(r"replay: 4 matches applied, 0 duplicates skipped, 0 invalid lines skipped; 2 leagues, 5 players; [\d.]+ s", err)


def test_invalid_lines_are_reported_with_line_number_and_reason_and_skipped(tmp_path, capsys):
    events = [
        m("chess", "1", ("ann", 1), ("ben", 2)),
        b"{broken",
        m("chess", "2", ("ann", 1), ("ben", 2), ("cat", 3)),  # three players in an elo league
        m("chess", "3", ("ann", 1), ("ann", 2)),
        m("chess", "4", ("ben", 1), ("ann", 2)),
    ]
    path = write_lines(tmp_path / "in.jsonl", events)
    out = tmp_path / "out.json"
    assert main(["replay", "-i", str(path), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "line 2: event: not valid JSON" in err and "[invalid_json]" in err
    assert "line 3: participants: the 'elo' system rates exactly 2 participants (got 3) [system_rule]" in err
    assert "line 4: participants[1].player: 'ann' already appears at participants[0] [duplicate_player]" in err
    assert "2 matches applied" in err and "3 invalid lines skipped" in err
    state = orjson.loads(out.read_bytes())
    assert state["chess"]["ann"]["matches"] == 2 and "cat" not in state["chess"]


def test_strict_stops_at_the_first_invalid_line(tmp_path, capsys):
    path = write_lines(tmp_path / "in.jsonl", [m("chess", "1", ("a", 1), ("b", 2))], [b"[]"])
    assert main(["replay", "-i", str(path), "--strict", "-o", str(tmp_path / "o.json")]) == 1
    err = capsys.readouterr().err
    assert "line 2: event: must be a JSON object (got list) [not_an_object]" in err and "--strict" in err
    assert not (tmp_path / "o.json").exists()


def test_a_match_id_seen_before_in_its_league_is_skipped(tmp_path):
    events = [
        m("chess", "1", ("a", 1), ("b", 2)),
        m("chess", "1", ("a", 1), ("b", 2)),  # a producer's retry
        m("go", "1", ("a", 1), ("b", 2)),  # same id, another league: a different match
    ]
    ledger = Ledger()
    report = replay(write_lines(tmp_path / "in.jsonl", events), ledger, progress=False)
    assert (report.matches, report.duplicates) == (2, 1)
    assert ledger.state("chess", "a").matches == 1 and ledger.state("go", "a").matches == 1


def test_gzip_and_plain_inputs_give_identical_results(tmp_path, capsys):
    events = demo_matches(seed=3, scale=0.2)
    plain = write_lines(tmp_path / "in.jsonl", events)
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    config = tmp_path / "leagues.toml"
    config.write_text(DEMO_CONFIG)
    for src, dst in ((plain, "a.json"), (packed, "b.json")):
        assert main(["replay", "-i", str(src), "-c", str(config), "-o", str(tmp_path / dst)]) == 0
    a, b = (tmp_path / "a.json").read_bytes(), (tmp_path / "b.json").read_bytes()
    assert a == b
    state = orjson.loads(a)
    assert set(state) == {event["league"] for event in events} and len(state) == 10  # the sample's leagues
    some = next(iter(state["karting"].values()))
    assert set(some) == {"rating", "matches", "soft_rating"}


def test_replay_of_pairwise_league_matches_the_ledger_and_reports_soft_rating(tmp_path):
    events = [m("race", str(i), ("a", 1 + i % 3), ("b", 1 + (i + 1) % 3), ("c", 1 + (i + 2) % 3)) for i in range(30)]
    path = write_lines(tmp_path / "in.jsonl", events)
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    assert main(["replay", "-i", str(path), "-c", str(config), "-o", str(tmp_path / "o.json")]) == 0
    state = orjson.loads((tmp_path / "o.json").read_bytes())["race"]
    assert {p: v["matches"] for p, v in state.items()} == {"a": 30, "b": 30, "c": 30}
    # Each player won, placed and lost 10 times in rotation: the sum stays zero.
    assert abs(sum(v["rating"] for v in state.values())) < 1e-9
    # Under 100 matches the soft rating is the mean of the ratings after each match.
    from stream_app.inputs import parse_match

    ledger, after_each = Ledger(LeagueConfig.from_toml(CONFIG)), []
    for event in events:
        ledger.apply(parse_match(event))
        after_each.append(ledger.state("race", "a").rating)
    assert state["a"]["soft_rating"] == pytest.approx(sum(after_each) / 30, abs=1e-9)
    assert state["a"]["soft_rating"] != state["a"]["rating"]


def test_bad_config_file_is_an_error_at_start_up(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[leagues."x"]\nalgorithm = "elo"\nk = 0\n')
    path = write_lines(tmp_path / "in.jsonl", [])
    with pytest.raises(SystemExit) as exit_:
        main(["replay", "-i", str(path), "-c", str(config)])
    assert str(config) in str(exit_.value) and "'k'" in str(exit_.value)


def test_stdin_input_via_the_console_script(tmp_path):
    data = b"".join(orjson.dumps(e) + b"\n" for e in [m("chess", "1", ("a", 1), ("b", 2))])
    done = subprocess.run(
        [sys.executable, "-m", "stream_app.cli", "replay", "--input", "-"], input=data, capture_output=True, check=True
    )
    state = orjson.loads(done.stdout)
    assert state["chess"]["a"]["rating"] == 1016.0
    assert b"1 matches applied" in done.stderr


def test_demo_prints_each_leagues_top_10(capsys):
    assert main(["demo", "--offline"]) == 0
    out = capsys.readouterr().out
    leagues = ("arena", "chess-blitz", "chess-rapid", "contests", "go", "karting", "relay", "squads", "squash", "tennis")
    for league in leagues:
        assert f"{league} (" in out
    rows = [line for line in out.splitlines() if re.match(r"\s+\d+\s+\S+\s+-?\d+\.\d", line)]
    assert len(rows) == 10 * len(leagues)
    # Ordered by rating within each league.
    blitz = [float(r.split()[2]) for r in rows[:10]]
    assert blitz == sorted(blitz, reverse=True)


def test_the_demo_sample_rates_stronger_players_higher():
    """End to end through the engine: hidden skill and final rating correlate."""
    import numpy as np

    from stream_app.inputs import parse_match

    skills = {}
    events = demo_matches(seed=11, skills=skills)
    ledger = Ledger(LeagueConfig.from_toml(DEMO_CONFIG))
    for event in events:
        ledger.apply(parse_match(event))
    assert ledger.applied == len(events)
    for league in ("chess-blitz", "karting"):
        players = ledger.leagues[league]
        names = sorted(players)
        corr = np.corrcoef([skills[n] for n in names], [players[n].rating for n in names])[0, 1]
        assert corr > 0.7, (league, corr)


def test_the_observer_sees_every_match_in_order_with_prior_states(tmp_path):
    # replay() runs the observer on a helper thread: same calls, same order.
    events = [m("x", f"m{k}", ("a", 1 + k % 2), ("b", 2 - k % 2)) for k in range(50)]
    path = write_lines(tmp_path / "in.jsonl", events)
    seen = []
    ledger = Ledger()
    ledger.observer = lambda match, prior: seen.append((match.match_id, [None if s is None else s.matches for s in prior]))
    replay(path, ledger, progress=False)
    assert [match_id for match_id, _ in seen] == [f"m{k}" for k in range(50)]
    assert seen[0][1] == [None, None]
    assert all(counts == [k, k] for k, (_, counts) in enumerate(seen) if k)


def test_an_observer_error_stops_the_replay(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [m("x", f"m{k}", ("a", 1), ("b", 2)) for k in range(20)])
    ledger = Ledger()

    def observer(match, prior):
        if match.match_id == "m3":
            raise ZeroDivisionError("observer failed")

    ledger.observer = observer
    with pytest.raises(ZeroDivisionError):
        replay(path, ledger, progress=False)
    assert ledger.observer is observer


def test_history_file_holds_each_players_history_oldest_first(tmp_path, capsys):
    events = [m("chess", "1", ("a", 1), ("b", 2)), m("chess", "2", ("b", 1), ("a", 2)),
              m("race", "1", ("a", 1), ("b", 2), ("c", 2)), m("chess", "1", ("a", 1), ("b", 2))]  # last: a duplicate
    source = write_lines(tmp_path / "in.jsonl", events)
    (tmp_path / "leagues.toml").write_text(CONFIG)
    assert main(["replay", "-i", str(source), "-c", str(tmp_path / "leagues.toml"), "-o", str(tmp_path / "out.json"),
                 "--history", str(tmp_path / "history.jsonl")]) == 0
    final = orjson.loads((tmp_path / "out.json").read_bytes())
    lines = [orjson.loads(line) for line in (tmp_path / "history.jsonl").read_bytes().splitlines()]
    assert [(e["league"], e["player"], e["seq"], e["match_id"], e["rank"]) for e in lines] == [
        ("chess", "a", 1, "1", 1), ("chess", "a", 2, "2", 2), ("chess", "b", 1, "1", 2), ("chess", "b", 2, "2", 1),
        ("race", "a", 1, "1", 1), ("race", "b", 1, "1", 2), ("race", "c", 1, "1", 2)]
    last = {(e["league"], e["player"]): e for e in lines}
    assert {key: e["rating_after"] for key, e in last.items()} == {
        (league, player): view["rating"] for league, players in final.items() for player, view in players.items()}
    assert lines[3]["rating_before"] == lines[2]["rating_after"] and {e["cause"] for e in lines} == {"match"}


def test_history_file_that_cannot_be_written_is_a_clear_error(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", [m("chess", "1", ("a", 1), ("b", 2))])
    assert main(["replay", "-i", str(source), "--history", str(tmp_path / "missing" / "h.jsonl")]) == 5
    assert "missing/h.jsonl" in capsys.readouterr().err


def test_replay_of_a_file_with_voids_corrections_and_late_results_is_the_replay_of_the_results_that_count(tmp_path, capsys):
    from tests.support.corrections import CONFIG as CORRECTIONS, cleaned, corrected_leagues

    docs = corrected_leagues(8)
    (tmp_path / "leagues.toml").write_text(CORRECTIONS)
    config = LeagueConfig.from_toml(CORRECTIONS)
    outputs = {}
    for name, lines in (("mixed", docs), ("counted", cleaned(docs, config))):
        source = write_lines(tmp_path / f"{name}.jsonl", lines)
        assert main(["replay", "-i", str(source), "-c", str(tmp_path / "leagues.toml"), "-o", str(tmp_path / f"{name}.json"),
                     "--history", str(tmp_path / f"{name}-history.jsonl"), "--quiet"]) == 0
        outputs[name] = (orjson.loads((tmp_path / f"{name}.json").read_bytes()),
                         sorted((tmp_path / f"{name}-history.jsonl").read_bytes().splitlines()))
    err = capsys.readouterr().err
    assert re.search(r"voids and corrections applied \(\d+ re-rates\)", err), err
    mixed, counted = outputs["mixed"], outputs["counted"]
    assert {league: players for league, players in mixed[0].items() if players} == counted[0]
    assert mixed[1] == counted[1] and len(mixed[1]) > 500
