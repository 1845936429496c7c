"""Accuracy of every system, as docs/accuracy.md reports it:

(a) the Elo-MMR paper's Table 2 on our Codeforces file
    (../shared/data/codeforces-1071.jsonl.gz): each system through the code
    path of `ratings replay --metrics-json`, with the configurations in
    deploy/accuracy/; `elo-pairwise` with its k chosen by `ratings tune`'s
    search on the earlier half of the file; the paper's figures beside ours;
(b) the synthetic data set in teams (`ratings synth --team-size`): the
    weng-lin models and team elo-mmx, scored between teams, next to the
    ratings a perfect observer would give (the true skills);
(c) the calibration of each system's win probabilities in the same replays
    (offline.accuracy.Calibration, the states before each round: up to 50
    pairs of players a contest on Codeforces, up to 500 pairs of teams a
    round on the 50 synthetic rounds): a table, and a reliability diagram in
    docs/calibration.png.

Not a speed benchmark: the times are printed for the record only.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from stream_app.engine import Match
from stream_app.inputs import BadEvent, parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.accuracy import CALIBRATION_PAIRS, Accuracy, Calibration
from stream_app.offline.ledger import Ledger
from stream_app.offline.replay import replay
from stream_app.offline.synth import PERFORMANCE_SD, SKILL_MEAN, SKILL_SD, STEP_SD, synthetic_rounds
from stream_app.offline.tune import Range, Tuner, candidates, load_league, search, with_params

ROOT = Path(__file__).resolve().parent.parent
CODEFORCES = ROOT.parent / "shared" / "data" / "codeforces-1071.jsonl.gz"
CONFIGS = ROOT / "deploy" / "accuracy"
# Table 2 of the paper, Codeforces row: pair inversion, rank deviation (players with >= 5 contests).
PAPER = {"codeforces": (78.3, 14.9), "elo-mmx": (78.5, 14.8), "elo-mmr": (78.6, 14.7), "glicko2": None,
         "weng-lin": None, "elo-pairwise": None}
SYSTEMS = ["codeforces", "glicko2", "weng-lin", "elo-mmx", "elo-mmr"]
PAIRWISE_K = "k=0.005,0.01,0.02,0.05,0.1,0.2"
CALIBRATION_PNG = ROOT / "docs" / "calibration.png"
SYNTHETIC_PAIRS = 500  # pairs of teams a round: the synthetic set has only 50 rounds
PLOT_MIN_PAIRS = 20  # bins with fewer pairs are left off the diagram (not the table): noise


def _observers(*observers: Callable) -> Callable:
    """One ledger observer calling each in turn (the replay runs one)."""
    def observe(match: Match, prior: list) -> None:
        for observer in observers:
            observer(match, prior)
    return observe


def _tallies(config: LeagueConfig, pairs: int = CALIBRATION_PAIRS) -> tuple[Accuracy, Calibration, Callable]:
    accuracy, calibration = Accuracy(), Calibration(config.system_for, pairs)
    return accuracy, calibration, _observers(accuracy.observe, calibration.observe)


def _scored(config: LeagueConfig, path: Path) -> tuple[dict, float]:
    """The accuracy report, with the calibration's under "calibration", and the seconds taken."""
    ledger = Ledger(config)
    accuracy, calibration, ledger.observer = _tallies(config)
    started = time.perf_counter()
    replay(path, ledger, progress=False)
    return {**accuracy.report(), "calibration": calibration.report()}, time.perf_counter() - started


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
    """elo-pairwise with k from a grid searched on the earlier half (as `ratings tune`),
    then replayed once more with that k for its calibration."""
    config = LeagueConfig.load(CONFIGS / "codeforces-elo-pairwise.toml")
    league, items, _ = load_league(path, None)
    started = time.perf_counter()
    rule = config.rule_for(league)
    _, best, trials = search(Tuner(rule, items, 0.5), candidates([Range.parse(PAIRWISE_K)], None, 1, 0))
    seconds = time.perf_counter() - started
    chosen = with_params(rule, best.params)
    ledger = Ledger(chosen)
    _, calibration, ledger.observer = _tallies(chosen)
    for item in items:
        try:
            ledger.apply(item)
        except BadEvent:
            pass  # a result the system cannot rate: the replay skips it too
    return {**best.whole, "k": best.params["k"], "test": best.test, "seconds": seconds,
            "trials": {str(t.params["k"]): t.train["pair_inversion"] for t in trials},
            "calibration": calibration.report()}


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
        config = LeagueConfig.from_toml(toml, name)
        ledger = Ledger(config)
        accuracy, calibration, ledger.observer = _tallies(config, SYNTHETIC_PAIRS)
        started = time.perf_counter()
        for item in items:
            ledger.apply(item)
        rows[name] = {**accuracy.report(), "calibration": calibration.report(),
                      "seconds": time.perf_counter() - started}
        print(f"  {name:<34} {rows[name]['pair_inversion']:6.2f}% / {rows[name]['rank_deviation']:5.2f}%"
              f"  ({rows[name]['seconds']:.1f} s)", flush=True)
    rows["true skills"] = _true_skills(items, players, rounds, seed)
    print(f"  {'true skills (the ceiling)':<34} {rows['true skills']['pair_inversion']:6.2f}% / "
          f"{rows['true skills']['rank_deviation']:5.2f}%", flush=True)
    return rows


def _true_skills(items: list, players: int, rounds: int, seed: int) -> dict:
    """Accuracy of the skills the data was drawn from, known before each round:
    what no rating system can beat on this data; and the calibration of the
    data's own model (_TrueModel) on them, perfect but for sampling."""
    from stream_app.engine.elo import EloState

    rng = np.random.default_rng(seed)  # the same draws as synthetic_rounds makes
    skill = rng.normal(SKILL_MEAN, SKILL_SD, players)
    accuracy, calibration = Accuracy(), Calibration(lambda league: _TrueModel(), SYNTHETIC_PAIRS)
    for t, match in enumerate(items):
        if t:
            skill = skill + rng.normal(0.0, STEP_SD, players)
        rng.normal(0.0, PERFORMANCE_SD, players)
        rng.permutation(players)
        if t:  # before the first round the ratings are as unknown as for the systems
            prior = [EloState(float(skill[int(x.player[1:])]), t) for x in match.participants]
        else:
            prior = [None] * len(match.participants)
        accuracy.observe(match, prior)
        calibration.observe(match, prior)
    return {**accuracy.report(), "calibration": calibration.report()}


class _TrueModel:
    """The synthetic data's model of a match: a side performs the sum of its
    members' skills plus Gaussian noise of PERFORMANCE_SD per member."""

    def win_probability(self, side: list, other: list) -> float:
        gap = sum(s.rating for s in side) - sum(s.rating for s in other)
        spread = PERFORMANCE_SD * math.sqrt(len(side) + len(other))
        return 0.5 * math.erfc(-gap / spread / math.sqrt(2.0))


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


def print_calibration(rows: dict) -> None:
    """System, pairs, Brier score, and each bin's observed frequency / mean predicted probability."""
    head = "".join(f"{f'{b / 10:.1f}-{(b + 1) / 10:.1f}':>12}" for b in range(10))
    print(f"  {'system':<34}{'pairs':>8}{'Brier':>8}{head}   (per bin: observed / predicted)", flush=True)
    for name, row in rows.items():
        report = row["calibration"]
        cells = "".join(f"{'-':>12}" if not b["count"] else f"{b['observed']:.3f}/{b['predicted']:.3f}".rjust(12)
                        for b in report["bins"])
        print(f"  {name:<34}{report['pairs']:>8,}{report['brier']:>8.4f}{cells}", flush=True)


def plot_calibration(panels: dict[str, dict], path: Path) -> None:
    """A reliability diagram per data set: each bin's mean predicted probability
    against its observed frequency, one line per system, marker area by count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 6.0), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels.items()):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect calibration")
        for name, row in rows.items():
            report = row["calibration"]
            used = [b for b in report["bins"] if b["count"] >= PLOT_MIN_PAIRS]
            share = np.array([b["count"] for b in used], float) / report["pairs"]
            style = {"color": "black", "linestyle": ":"} if name == "true skills" else {}
            line, = ax.plot([b["predicted"] for b in used], [b["observed"] for b in used], linewidth=1.2,
                            label=f"{name} (Brier {report['brier']:.3f})", **style)
            ax.scatter([b["predicted"] for b in used], [b["observed"] for b in used], s=8 + 400 * share,
                       color=line.get_color(), alpha=0.7, zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_xlabel("predicted P(first finishes ahead), mean of the bin")
        ax.set_ylabel("observed frequency (a tie counts half)")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle("Calibration of the win probabilities, ratings before each round\n"
                 f"(marker area: share of pairs; bins of fewer than {PLOT_MIN_PAIRS} pairs left out)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run() -> dict:
    out = {}
    panels = {}
    if CODEFORCES.exists():
        print("(a) Codeforces, players with >= 5 contests: pair inversion / rank deviation", flush=True)
        out["codeforces"] = codeforces_table()
        plot_table2(out["codeforces"], ROOT / "bench" / "accuracy-table2.png")
        print(f"(c) calibration on Codeforces, pairs of rated players (up to {CALIBRATION_PAIRS} a contest)",
              flush=True)
        print_calibration(out["codeforces"])
        panels["Codeforces (1,071 contests), pairs of rated players"] = out["codeforces"]
    else:
        print(f"(a) skipped: {CODEFORCES} is missing", file=sys.stderr)
    print("(b) synthetic teams of 4 (2,000 players, 50 rounds), scored between teams", flush=True)
    out["synthetic_teams"] = synthetic_teams()
    print(f"(c) calibration on the synthetic teams, pairs of teams (up to {SYNTHETIC_PAIRS} a round)", flush=True)
    print_calibration(out["synthetic_teams"])
    panels["synthetic teams of 4 (2,000 players, 50 rounds), pairs of teams"] = out["synthetic_teams"]
    plot_calibration(panels, CALIBRATION_PNG)
    print(f"reliability diagram written to {CALIBRATION_PNG}", flush=True)
    return out


if __name__ == "__main__":
    run()
