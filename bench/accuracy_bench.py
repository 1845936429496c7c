"""Accuracy of every system, as docs/accuracy.md reports it:

(a) the Elo-MMR paper's Table 2 on our Codeforces file
    (../shared/data/codeforces-1071.jsonl.gz): each system through the code
    path of `ratings replay --metrics-json`, with the configurations in
    deploy/accuracy/; `elo-pairwise` with its k chosen by `ratings tune`'s
    search on the earlier half of the file; the paper's figures beside ours;
(b) the synthetic data set in teams (`ratings synth --team-size`): the
    weng-lin models and team elo-mmx, scored between teams, next to the
    ratings a perfect observer would give (the true skills).

Not a speed benchmark: the times are printed for the record only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from stream_app.events import parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.accuracy import Accuracy
from stream_app.offline.ledger import Ledger
from stream_app.offline.replay import replay
from stream_app.offline.synth import PERFORMANCE_SD, SKILL_MEAN, SKILL_SD, STEP_SD, synthetic_rounds
from stream_app.offline.tune import Range, Tuner, candidates, load_league, search

ROOT = Path(__file__).resolve().parent.parent
CODEFORCES = ROOT.parent / "shared" / "data" / "codeforces-1071.jsonl.gz"
CONFIGS = ROOT / "deploy" / "accuracy"
# Table 2 of the paper, Codeforces row: pair inversion, rank deviation (players with >= 5 contests).
PAPER = {"codeforces": (78.3, 14.9), "elo-mmx": (78.5, 14.8), "elo-mmr": (78.6, 14.7), "glicko2": None,
         "weng-lin": None, "elo-pairwise": None}
SYSTEMS = ["codeforces", "glicko2", "weng-lin", "elo-mmx", "elo-mmr"]
PAIRWISE_K = "k=0.005,0.01,0.02,0.05,0.1,0.2"


def _scored(config: LeagueConfig, path: Path) -> tuple[dict, float]:
    ledger = Ledger(config)
    accuracy = Accuracy()
    ledger.observer = accuracy.observe
    started = time.perf_counter()
    replay(path, ledger, progress=False)
    return accuracy.report(), time.perf_counter() - started


def codeforces_table(path: Path = CODEFORCES, systems: list[str] = SYSTEMS) -> dict:
    rows = {}
    for name in systems:
        config = LeagueConfig.load(CONFIGS / f"codeforces-{name}.toml")
        report, seconds = _scored(config, path)
        rows[name] = {**report, "seconds": seconds}
        _print_row(name, rows[name])
    rows["elo-pairwise"] = pairwise_tuned(path)
    _print_row("elo-pairwise", rows["elo-pairwise"])
    return rows


def pairwise_tuned(path: Path) -> dict:
    """elo-pairwise with k from a grid searched on the earlier half (as `ratings tune`)."""
    config = LeagueConfig.load(CONFIGS / "codeforces-elo-pairwise.toml")
    league, items, _ = load_league(path, None)
    started = time.perf_counter()
    tuner = Tuner(config.rule_for(league), items, 0.5)
    _, best, trials = search(tuner, candidates([Range.parse(PAIRWISE_K)], None, 1, 0))
    return {**best.whole, "k": best.params["k"], "test": best.test, "seconds": time.perf_counter() - started,
            "trials": {str(t.params["k"]): t.train["pair_inversion"] for t in trials}}


def _print_row(name: str, row: dict) -> None:
    paper = PAPER.get(name)
    theirs = f"{paper[0]:.1f}% / {paper[1]:.1f}%" if paper else "-"
    print(f"  {name:<14} {row['pair_inversion']:6.2f}% / {row['rank_deviation']:5.2f}%   paper {theirs:<16}"
          f" all rated {row['pair_inversion_all']:6.2f}% / {row['rank_deviation_all']:5.2f}%  ({row['seconds']:.0f} s)",
          flush=True)


TEAM_SYSTEMS = {
    "weng-lin plackett-luce": '[default]\nalgorithm = "weng-lin"\n',
    "weng-lin bradley-terry-full": '[default]\nalgorithm = "weng-lin"\nmodel = "bradley-terry-full"\n',
    "weng-lin bradley-terry-part": '[default]\nalgorithm = "weng-lin"\nmodel = "bradley-terry-part"\n',
    "weng-lin thurstone-mosteller-full": '[default]\nalgorithm = "weng-lin"\nmodel = "thurstone-mosteller-full"\n',
    "weng-lin thurstone-mosteller-part": '[default]\nalgorithm = "weng-lin"\nmodel = "thurstone-mosteller-part"\n',
    "elo-mmx (teams)": '[default]\nalgorithm = "elo-mmx"\n',
}


def synthetic_teams(players: int = 2000, rounds: int = 50, team_size: int = 4, seed: int = 0) -> dict:
    """Every team system on the same synthetic team rounds, scored between teams."""
    events = list(synthetic_rounds(players, rounds, seed, "synthetic", team_size))
    items = [parse_input(e) for e in events]
    rows = {}
    for name, toml in TEAM_SYSTEMS.items():
        ledger = Ledger(LeagueConfig.from_toml(toml, name))
        accuracy = Accuracy()
        ledger.observer = accuracy.observe
        started = time.perf_counter()
        for item in items:
            ledger.apply(item)
        rows[name] = {**accuracy.report(), "seconds": time.perf_counter() - started}
        print(f"  {name:<34} {rows[name]['pair_inversion']:6.2f}% / {rows[name]['rank_deviation']:5.2f}%"
              f"  ({rows[name]['seconds']:.1f} s)", flush=True)
    rows["true skills"] = _true_skills(items, players, rounds, seed)
    print(f"  {'true skills (the ceiling)':<34} {rows['true skills']['pair_inversion']:6.2f}% / "
          f"{rows['true skills']['rank_deviation']:5.2f}%", flush=True)
    return rows


def _true_skills(items: list, players: int, rounds: int, seed: int) -> dict:
    """Accuracy of the skills the data was drawn from, known before each round:
    what no rating system can beat on this data."""
    from stream_app.engine.elo import EloState

    rng = np.random.default_rng(seed)  # the same draws as synthetic_rounds makes
    skill = rng.normal(SKILL_MEAN, SKILL_SD, players)
    accuracy = Accuracy()
    for t, match in enumerate(items):
        if t:
            skill = skill + rng.normal(0.0, STEP_SD, players)
        rng.normal(0.0, PERFORMANCE_SD, players)
        rng.permutation(players)
        if t:  # before the first round the ratings are as unknown as for the systems
            accuracy.observe(match, [EloState(float(skill[int(x.player[1:])]), t) for x in match.participants])
        else:
            accuracy.observe(match, [None] * len(match.participants))
    return accuracy.report()


def plot_table2(rows: dict, path: Path) -> None:
    """Pair inversion and rank deviation per system, ours beside the paper's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(rows, key=lambda name: rows[name]["pair_inversion"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, key, index, label in ((axes[0], "pair_inversion", 0, "pair inversion (%), higher is better"),
                                  (axes[1], "rank_deviation", 1, "rank deviation (%), lower is better")):
        y = np.arange(len(names))
        ax.barh(y - 0.2, [rows[n][key] for n in names], 0.4, label="ours (1,071 contests)")
        paper = [PAPER[n][index] if PAPER.get(n) else np.nan for n in names]
        ax.barh(y + 0.2, paper, 0.4, label="the paper's Table 2")
        ax.set_yticks(y, names)
        ax.set_xlabel(label)
        values = [rows[n][key] for n in names]
        ax.set_xlim(min(values) - 3, max(values) + 3)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Codeforces: ratings before each contest predicting it (players with 5+ contests)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run() -> dict:
    out = {}
    if CODEFORCES.exists():
        print("(a) Codeforces, players with >= 5 contests: pair inversion / rank deviation", flush=True)
        out["codeforces"] = codeforces_table()
        plot_table2(out["codeforces"], ROOT / "bench" / "accuracy-table2.png")
    else:
        print(f"(a) skipped: {CODEFORCES} is missing", file=sys.stderr)
    print("(b) synthetic teams of 4 (2,000 players, 50 rounds), scored between teams", flush=True)
    out["synthetic_teams"] = synthetic_teams()
    return out


if __name__ == "__main__":
    run()
