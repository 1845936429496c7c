"""Elo-MMR against the authors' reference (elo-mmr-py, Rust), measured in the
same run:

(a) one round of 5,000 players with distinct prior ratings: both systems first
    rate the same three rounds of those players (so every player arrives with
    the same history), then the fourth round is timed (best of 3), with the
    exact settings ("mmr") and the fast ones ("mmr-fast");
(b) the whole Codeforces file (../shared/data/codeforces-1071.jsonl.gz):
    ours through the code path of `ratings replay --metrics-json` (parse,
    validate, Ledger.apply, the accuracy observer), the reference from the
    same lines (orjson, Contest objects, rate_latest); each run in a process
    of its own, ours without the metrics and the reference twice, interleaved
    (the least of each counts). Our accuracy figures
    are printed next to the reference's; computing the reference's needs a
    rating snapshot before every contest (about 4 minutes), so by default its
    figures are the ones measured that way (REFERENCE_ACCURACY below); set
    MMR_BENCH_REFERENCE_ACCURACY=1 to measure them again.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

from stream_app.offline.accuracy import Accuracy
from stream_app.leagues import LeagueConfig
from stream_app.engine import Match, Participant, make_system
from stream_app.offline.replay import Ledger, replay
from stream_app.runtime import threaded

ROOT = Path(__file__).resolve().parent.parent
CODEFORCES = ROOT.parent / "shared" / "data" / "codeforces-1071.jsonl.gz"
FAST = {"subsample_size": 100, "subsample_bucket": 2.0, "max_history": 100}
FAST_TOML = """[default]
algorithm = "elo-mmr"
subsample_size = 100
subsample_bucket = 2.0
max_history = 100
"""
# elo-mmr-py "mmr-fast" ratings before each contest, scored by stream_app.offline.accuracy
# (the metrics of EbTech's metrics.rs; first 10% of contests skipped), 2026-11-22.
REFERENCE_ACCURACY = {
    "pair_inversion": 78.35002993936618,
    "rank_deviation": 14.932886303001629,
    "pair_inversion_all": 77.359994305145,
    "rank_deviation_all": 15.550873182755577,
}


def _places(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(ranks)
    return np.searchsorted(ordered, ranks, side="left"), np.searchsorted(ordered, ranks, side="right") - 1


def _contest(em, players: list[str], ranks: np.ndarray, index: int):
    los, his = _places(ranks)
    return em.Contest(
        standings=[(p, int(a), int(b)) for p, a, b in zip(players, los, his)], name=str(index), time_seconds=index
    )


def _rounds(n: int, count: int, seed: int = 7) -> list[tuple[list[str], np.ndarray]]:
    """`count` rounds of the same n players in random orders (some ties)."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(0.0, 1.0, n)
    rounds = []
    for _ in range(count):
        perf = skill + rng.normal(0.0, 1.0, n)
        order = np.argsort(-perf, kind="stable")
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = np.arange(1, n + 1)
        ranks = (ranks + 1) // 2 * 2 - 1  # pairs tie: ranks 1,1,3,3,...
        rows = sorted(zip(ranks.tolist(), [f"p{i}" for i in range(n)]))
        rounds.append(([p for _, p in rows], np.array([r for r, _ in rows])))
    return rounds


def one_round(n: int = 5000, warmup: int = 3, repeat: int = 3) -> dict:
    import elo_mmr_py as em

    rounds = _rounds(n, warmup + 1)
    out = {}
    for label, ours_params, ref_name in (("exact", {}, "mmr"), ("fast", FAST, "mmr-fast")):
        system = threaded(make_system("elo-mmr", ours_params))  # the threads a replay or a worker gives it
        states: dict = {}
        for k, (players, ranks) in enumerate(rounds[:warmup]):
            match = Match("bench", str(k), tuple(map(Participant, players, ranks.tolist())), float(k))
            before = [states.get(p) or system.initial_state() for p in players]
            for change in system.rate(match, before):
                states[change.player] = change.after
        players, ranks = rounds[warmup]
        match = Match("bench", str(warmup), tuple(map(Participant, players, ranks.tolist())), float(warmup))
        before = [states[p] for p in players]
        ours = []
        for _ in range(repeat):
            started = time.perf_counter()
            changes = system.rate(match, before)
            ours.append(time.perf_counter() - started)

        rater = em.Rater(ref_name)
        rater.extend([_contest(em, p, r, k) for k, (p, r) in enumerate(rounds[:warmup])])
        checkpoint = Path(os.environ.get("TMPDIR", "/tmp")) / f"mmr-bench-{os.getpid()}.json"
        rater.save(checkpoint)
        contest = _contest(em, players, ranks, warmup)
        theirs = []
        for _ in range(repeat):
            fresh = em.Rater.load(checkpoint)
            started = time.perf_counter()
            fresh.add(contest)
            theirs.append(time.perf_counter() - started)
        checkpoint.unlink(missing_ok=True)
        ref = fresh.ratings
        gap = max(abs(c.after.rating - ref[c.player].mu) for c in changes)
        out[label] = {
            "players": n,
            "ours_s": min(ours),
            "reference_s": min(theirs),
            "ratio": min(ours) / min(theirs),
            "max_rating_difference": gap,
        }
        print(
            f"one round of {n:,} players ({label}, after {warmup} rounds): ours {min(ours):.3f} s, "
            f"elo-mmr-py {ref_name} {min(theirs):.3f} s, ratio {min(ours) / min(theirs):.2f}; "
            f"largest rating difference {gap:.2e}"
        )
    return out


def _reference_file(em, path: Path, with_accuracy: bool) -> tuple[float, dict | None]:
    """elo-mmr-py mmr-fast over the file: read, build contests, rate."""
    started = time.perf_counter()
    contests = []
    with gzip.open(path, "rb") as f:
        for k, line in enumerate(f):
            doc = orjson.loads(line)
            people = doc["participants"]
            contests.append(_contest(em, [p["player"] for p in people], np.array([p["rank"] for p in people]), k))
    em.rate_latest(contests, system="mmr-fast")
    seconds = time.perf_counter() - started
    if not with_accuracy:
        return seconds, None
    rater = em.Rater("mmr-fast")
    accuracy = Accuracy()

    class Seen:
        __slots__ = ("rating", "matches")

        def __init__(self, rating: float, matches: int):
            self.rating, self.matches = rating, matches

    for contest in contests:
        snapshot = rater.ratings
        prior = [snapshot.get(name) for name, _, _ in contest.standings]
        match = Match("cf", "x", tuple(Participant(name, lo + 1) for name, lo, _ in contest.standings))
        accuracy.observe(match, [None if r is None else Seen(r.mu, r.contests_played) for r in prior])
        rater.add(contest)
    return seconds, accuracy.report()


def _ours(path: str, with_metrics: bool) -> dict:
    """One replay of the file, as `ratings replay` runs it (with --metrics-json or not)."""
    ledger = Ledger(LeagueConfig.from_toml(FAST_TOML, "mmr_bench"))
    accuracy = Accuracy()
    if with_metrics:
        ledger.observer = accuracy.observe
    report = replay(path, ledger, progress=False)
    return {"seconds": report.seconds, "matches": report.matches, "players": ledger.player_count,
            "accuracy": accuracy.report() if with_metrics else None}


def _theirs(path: str) -> dict:
    import elo_mmr_py as em

    return {"seconds": _reference_file(em, Path(path), False)[0]}


PARTS = {"ours": lambda path: _ours(path, True), "ours-bare": lambda path: _ours(path, False), "reference": _theirs}


def _fresh(part: str, path: Path) -> dict:
    """A part run in a process of its own, as a user runs it: no heap left by the
    parts before, both cores free for its threads."""
    done = subprocess.run([sys.executable, "-m", "bench.mmr_bench", part, str(path)], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"mmr bench part {part!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def whole_file(path: Path = CODEFORCES) -> dict:
    import elo_mmr_py as em

    first = _fresh("ours", path)
    ours, figures, players, contests = first["seconds"], first["accuracy"], first["players"], first["matches"]
    # Like for like with the reference's figure (read + rate, no metrics): the least
    # of two runs each, interleaved, so that a slow minute of the machine does not
    # fall on one side only.
    bare_runs, their_runs = [], []
    for _ in range(2):
        bare_runs.append(_fresh("ours-bare", path)["seconds"])
        their_runs.append(_fresh("reference", path)["seconds"])
    bare, theirs = min(bare_runs), min(their_runs)
    measure = os.environ.get("MMR_BENCH_REFERENCE_ACCURACY") == "1"
    ref_figures = _reference_file(em, path, True)[1] if measure else dict(REFERENCE_ACCURACY)
    result = {
        "contests": contests,
        "players": players,
        "ours_s": ours,
        "ours_without_metrics_s": bare,
        "reference_s": theirs,
        "ours_without_metrics_runs_s": bare_runs,
        "reference_runs_s": their_runs,
        "ratio": ours / theirs,
        "ratio_without_metrics": bare / theirs,
        "ours_accuracy": figures,
        "reference_accuracy": ref_figures,
        "reference_accuracy_measured_now": measure,
    }
    print(
        f"Codeforces, {contests:,} contests, fast settings: ours {ours:.1f} s (replay with metrics), "
        f"elo-mmr-py mmr-fast {theirs:.1f} s (read + rate); ratio {ours / theirs:.2f}; "
        f"ours without the metrics (read + rate) {bare:.1f} s, ratio {bare / theirs:.2f}"
    )
    print(f"{'':<28}{'ours':>18}{'elo-mmr-py':>18}")
    for key, label in (
        ("pair_inversion", "pair inversion (>= 5)"),
        ("rank_deviation", "rank deviation (>= 5)"),
        ("pair_inversion_all", "pair inversion (all)"),
        ("rank_deviation_all", "rank deviation (all)"),
    ):
        print(f"{label:<28}{figures[key]:>17.2f}%{ref_figures[key]:>17.2f}%")
    return result


def run() -> dict:
    result = {"one_round": one_round()}
    if CODEFORCES.is_file():
        result["codeforces"] = whole_file()
    else:
        print(f"Codeforces file not found at {CODEFORCES}: skipping the whole-file comparison")
        result["codeforces"] = None
    return result


if __name__ == "__main__":  # one part of whole_file, in a fresh process: python -m bench.mmr_bench PART PATH
    print(json.dumps(PARTS[sys.argv[1]](sys.argv[2])))
