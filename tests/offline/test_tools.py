"""`ratings synth`, `ratings plot` and `replay --metrics-json` through the CLI."""

import gzip

import numpy as np
import orjson
import pytest

from stream_app.cli import main
from stream_app.inputs import parse_match
from stream_app.offline.synth import synthetic_rounds

PAIRWISE = '[default]\nalgorithm = "elo-pairwise"\nk = 1\nties = "half"\n'


def test_synth_follows_the_papers_generative_model(tmp_path, capsys):
    out = tmp_path / "syn.jsonl.gz"
    assert main(["synth", "--players", "300", "--rounds", "4", "--seed", "5", "-o", str(out)]) == 0
    lines = gzip.decompress(out.read_bytes()).splitlines()
    assert len(lines) == 4
    matches = [parse_match(line) for line in lines]
    for m in matches:
        assert len(m.participants) == 300  # every player in every round
        assert sorted(p.rank for p in m.participants) == list(range(1, 301))
    assert matches[1].time - matches[0].time == 86_400
    # Same seed, same data; another seed, other data.
    again = [orjson.dumps(e) for e in synthetic_rounds(300, 4, seed=5)]
    assert again == lines
    assert [orjson.dumps(e) for e in synthetic_rounds(300, 4, seed=6)] != lines


def test_synth_skills_spread_like_the_paper_says():
    # Over many players, standings correlate with each other across rounds about as the
    # model implies: skill sd 300, performance noise sd 200 -> corr(perf_t, perf_t+1) ~ 0.69.
    rounds = list(synthetic_rounds(4000, 2, seed=1))
    rank = [{p["player"]: p["rank"] for p in r["participants"]} for r in rounds]
    names = sorted(rank[0])
    corr = np.corrcoef([rank[0][n] for n in names], [rank[1][n] for n in names])[0, 1]
    assert 0.6 < corr < 0.75


def synthetic_files(tmp_path, players: int, rounds: int, seed: int):
    """A JSON-lines file of synthetic rounds and a league config rating them with elo-pairwise."""
    data = tmp_path / "syn.jsonl"
    data.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in synthetic_rounds(players, rounds, seed=seed)))
    config = tmp_path / "c.toml"
    config.write_text(PAIRWISE)
    return data, config


def test_metrics_json_writes_the_figures_and_prints_a_table(tmp_path, capsys):
    data, config = synthetic_files(tmp_path, 400, 20, seed=2)
    metrics = tmp_path / "m.json"
    state = tmp_path / "s.json"
    assert main(["replay", "-i", str(data), "-c", str(config), "--metrics-json", str(metrics), "-o", str(state)]) == 0
    figures = orjson.loads(metrics.read_bytes())
    assert set(figures) >= {"pair_inversion", "rank_deviation", "pair_inversion_all", "rank_deviation_all", "mse", "rounds_scored"}
    assert figures["rounds_scored"] == 18  # 20 rounds, the first 2 (10%) skipped
    # Ratings learned from the data predict far better than chance (50% / 33%).
    assert 70 < figures["pair_inversion"] < 90 and figures["rank_deviation"] < 25
    out = capsys.readouterr().out
    assert "pair inversion" in out and "experienced (>= 5 rounds)" in out
    assert f"{figures['pair_inversion']:.2f}%" in out
    assert "synthetic" in orjson.loads(state.read_bytes())


def test_plot_draws_a_png_of_the_top_players(tmp_path, capsys):
    data, config = synthetic_files(tmp_path, 50, 6, seed=3)
    chart = tmp_path / "chart.png"
    assert main(["plot", "-i", str(data), "-c", str(config), "--league", "synthetic", "--top", "3", "-o", str(chart)]) == 0
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    assert "3 players of synthetic" in capsys.readouterr().err
    named = tmp_path / "named.png"
    assert main(["plot", "-i", str(data), "-c", str(config), "-l", "synthetic", "-p", "s000001", "-o", str(named)]) == 0
    with pytest.raises(SystemExit, match="not in league"):
        main(["plot", "-i", str(data), "-c", str(config), "-l", "synthetic", "-p", "nobody", "-o", str(named)])
    with pytest.raises(SystemExit, match="no applied match"):
        main(["plot", "-i", str(data), "-c", str(config), "-l", "chess", "-o", str(named)])


def test_synth_with_teams_deals_every_player_into_a_team_ranked_by_the_sum_of_performances(tmp_path):
    out = tmp_path / "teams.jsonl"
    assert main(["synth", "--players", "301", "--rounds", "3", "--team-size", "4", "-o", str(out)]) == 0
    matches = [parse_match(line) for line in out.read_bytes().splitlines()]
    assert len(matches) == 3
    for m in matches:
        assert len(m.participants) == 301
        teams: dict[str, list] = {}
        for p in m.participants:
            teams.setdefault(p.team, []).append(p)
        assert sorted(len(v) for v in teams.values()) == [4] * 74 + [5]  # the last team takes the remainder
        assert sorted({v[0].rank for v in teams.values()}) == list(range(1, 76))
    assert {p.team: p.player for p in matches[0].participants} != {p.team: p.player for p in matches[1].participants}
    # Stronger players (the same skills as without teams) end on better teams more often.
    alone = {p["player"]: p["rank"] for p in next(synthetic_rounds(301, 1, seed=0))["participants"]}
    best = sorted(alone, key=alone.get)[:60]
    worst = sorted(alone, key=alone.get)[-60:]
    ranks = {p.player: p.rank for p in matches[0].participants}
    assert np.mean([ranks[n] for n in best]) < np.mean([ranks[n] for n in worst])
    assert main(["synth", "--players", "7", "--team-size", "4", "-o", str(out)]) == 2
