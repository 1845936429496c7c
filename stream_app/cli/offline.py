"""The offline commands: `ratings replay`, `plot`, `synth`, `tune` and `sample`, and
`ratings demo --offline`. No broker: files in, files or tables out."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from ..offline.replay import Ledger, ReplayError, replay
from .flags import FILE_ERROR, REFUSED, USAGE, Problems, command, exit_statuses, league_config, shown, writable


def leaderboard_rows(players: dict[str, dict[str, Any]], limit: int) -> list[tuple[int, str, dict[str, Any]]]:
    """Highest rating first; ties broken by name so the order is stable."""
    ordered = sorted(players.items(), key=lambda kv: (-kv[1]["rating"], kv[0]))
    return [(i + 1, name, view) for i, (name, view) in enumerate(ordered[:limit])]


def format_leaderboard(league: str, players: dict[str, dict[str, Any]], limit: int = 10) -> str:
    rows = leaderboard_rows(players, limit)
    extra = next((k for k in ("soft_rating", "uncertainty") if rows and k in rows[0][2]), None)
    head = f"{'#':>3}  {'player':<24} {'rating':>10} {'matches':>8}" + (f" {extra:>12}" if extra else "")
    lines = [f"{league} ({len(players)} players)", head]
    for rank, name, view in rows:
        line = f"{rank:>3}  {name:<24} {shown(view['rating'], '>10.1f')} {view['matches']:>8}"
        if extra:
            line += f" {shown(view[extra], '>12.1f')}"
        lines.append(line)
    return "\n".join(lines)


def write_history(ledger: Ledger, out: Any) -> None:
    """Every kept history entry as a JSON line {"league", "player", ...the entry}: by
    league and player in the order first rated, each player's oldest first."""
    write, dumps = out.write, orjson.dumps
    for league, players in ledger.records_by_league().items():
        for player in players:
            for entry in ledger.history(league, player):
                write(dumps({"league": league, "player": player, **entry}) + b"\n")


def write_seasons(ledger: Ledger, out: Any) -> tuple[int, int]:
    """Every ended season's final standings as JSON lines (Ledger.final_standings: by
    league, season and rank); returns (seasons ended, rows written). A season that
    ended without a player counts, with no row."""
    write, dumps = out.write, orjson.dumps
    rows = ledger.final_standings()
    for row in rows:
        write(dumps(row) + b"\n")
    ended = sum(1 for league in ledger.league_names() for season in ledger.seasons(league) if "end" in season)
    return ended, len(rows)


def cmd_replay(args: argparse.Namespace) -> int:
    writable(args.output, args.history, args.seasons, args.metrics_json)  # before the replay, not after it
    ledger = Ledger(league_config(args.config), keep_history=bool(args.history))
    problems = Problems(args.quiet)
    accuracy = None
    if args.metrics_json:
        from ..offline.accuracy import Accuracy

        accuracy = Accuracy()
        ledger.observer = accuracy.observe
    try:
        report = replay(args.input, ledger, strict=args.strict, on_problem=problems.add)
        if args.history:
            with open(args.history, "wb") as history:
                write_history(ledger, history)
        if args.seasons:
            with open(args.seasons, "wb") as seasons:
                ended, rows = write_seasons(ledger, seasons)
    except ReplayError as exc:
        print(f"ratings replay: {args.input}: {exc} (stopped: --strict)", file=sys.stderr)
        return REFUSED
    except OSError as exc:
        print(f"ratings replay: {exc.filename or args.input}: {exc.strerror or exc}", file=sys.stderr)
        return FILE_ERROR
    problems.summary("invalid lines")
    if accuracy is not None:
        from ..offline.accuracy import format_report

        figures = accuracy.report()
        Path(args.metrics_json).write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2) + b"\n")
        print(format_report(figures))
    # With --metrics-json stdout carries the table; the state then goes only to --output.
    if args.output not in (None, "-") or accuracy is None:
        data = orjson.dumps(ledger.snapshot(), option=orjson.OPT_INDENT_2 if args.indent else 0)
        if args.output in (None, "-"):
            sys.stdout.buffer.write(data + b"\n")
        else:
            Path(args.output).write_bytes(data + b"\n")
    rate = report.matches / report.seconds if report.seconds else 0.0
    print(
        f"replay: {report.matches:,} matches applied, "
        + (f"{report.commands:,} voids and corrections applied ({report.rerates:,} re-rates), " if report.rerates else "")
        + f"{report.duplicates:,} duplicates skipped, "
        f"{report.skipped:,} invalid lines skipped; {len(ledger.league_names()):,} leagues, "
        f"{ledger.player_count:,} players; "
        + (f"{ended:,} ended seasons' final standings ({rows:,} rows) written to {args.seasons}; "
           if args.seasons else "")
        + f"{report.seconds:.2f} s ({rate:,.0f} matches/s)",
        file=sys.stderr,
    )
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    import gzip

    from ..offline.synth import synthetic_rounds

    if args.team_size < 1 or (args.team_size > 1 and args.players < 2 * args.team_size):
        print(f"ratings synth: --team-size: must be 1, or at most half of --players (got {args.team_size})",
              file=sys.stderr)
        return USAGE
    path = args.output
    out = sys.stdout.buffer if path in (None, "-") else (gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb"))
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=args.rounds, unit="round", desc="synth", file=sys.stderr, leave=False)
    try:
        for event in synthetic_rounds(args.players, args.rounds, args.seed, args.league, args.team_size):
            out.write(orjson.dumps(event) + b"\n")
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
        if out is not sys.stdout.buffer:
            out.close()
    teams = f" in teams of {args.team_size}" if args.team_size > 1 else ""
    print(f"synth: {args.rounds:,} rounds of {args.players:,} players{teams} written to {path or 'stdout'}",
          file=sys.stderr)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from ..offline.plot import draw

    writable(args.output)
    draw(args.input, league_config(args.config), args.league, args.output, top=args.top, players=args.player)
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from ..offline.sample import demo_matches

    out = sys.stdout.buffer if args.output in (None, "-") else open(args.output, "wb")
    try:
        for event in demo_matches(seed=args.seed, scale=args.scale):
            out.write(orjson.dumps(event) + b"\n")
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ..offline.tune import Range, Tuner, candidates, load_league, search

    try:
        writable(args.output)  # before the trials, not after them
        ranges = [Range.parse(text) for text in args.param]
        config = league_config(args.config)
        league, items, invalid = load_league(args.input, args.league)
        rule = config.rule_for(league)
        tuner = Tuner(rule, items, args.train_share)
        options = candidates(ranges, args.trials, args.grid, args.seed)
        for values in options[:1]:
            from ..offline.tune import with_params

            with_params(rule, values)  # a bad name or value fails now, not after the first trial
    except OSError as exc:
        print(f"ratings tune: {exc.filename or args.input}: {exc.strerror or exc}", file=sys.stderr)
        return FILE_ERROR
    except ValueError as exc:  # a --param or --league this file or system does not have
        print(f"ratings tune: {exc}", file=sys.stderr)
        return USAGE
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(options), unit="trial", desc="tune", file=sys.stderr, leave=False)
    try:
        configured, best, trials = search(tuner, options, (lambda _: bar.update()) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    print(format_tuning(league, rule.algorithm, tuner, configured, best, trials, args.show))
    if args.output:
        doc = {"league": league, "algorithm": rule.algorithm, "train_share": args.train_share,
               "configured": vars(configured), "best": vars(best), "trials": [vars(t) for t in trials]}
        Path(args.output).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"tune: {len(trials)} trials of {rule.algorithm!r} on league {league!r} ({len(items):,} results and commands, "
          f"{invalid:,} invalid lines skipped); best {best.params} on the later part: "
          f"{best.test['pair_inversion']:.2f}% against {configured.test['pair_inversion']:.2f}% configured",
          file=sys.stderr)
    return 0


def format_tuning(league, algorithm, tuner, configured, best, trials, show: int) -> str:
    def pct(report, key):
        return "-" if report is None or report.get(key) is None else f"{report[key]:.2f}%"

    lines = [f"{algorithm} on {league}: trained on rounds 1-{tuner.train_rounds} (the first tenth of the file skipped), "
             f"tested on rounds {tuner.train_rounds + 1}-{tuner.rounds}; pair inversion / rank deviation, "
             "players with 5 rounds or more",
             f"{'':<34}{'earlier (train)':>20}{'later (test)':>20}{'whole file':>20}"]
    for name, trial in (("configured", configured), ("best", best)):
        cells = [f"{pct(r, 'pair_inversion')} / {pct(r, 'rank_deviation')}" for r in (trial.train, trial.test, trial.whole)]
        lines.append(f"{name:<34}" + "".join(f"{c:>20}" for c in cells))
    lines.append(f"best parameters: {best.params}")
    ranked = sorted(trials, key=lambda t: -(t.train["pair_inversion"] or 0.0))[:show]
    lines.append(f"top {len(ranked)} of {len(trials)} trials by the earlier part:")
    for trial in ranked:
        lines.append(f"  {pct(trial.train, 'pair_inversion')} / {pct(trial.train, 'rank_deviation')}  {trial.params}")
    return "\n".join(lines)


def demo_offline(seed: int) -> int:
    """`ratings demo --offline`: the small sample replayed, each league's top 10 printed."""
    from ..leagues import LeagueConfig
    from ..offline.sample import DEMO_CONFIG, demo_matches

    config = LeagueConfig.from_toml(DEMO_CONFIG, "<demo config>")
    with tempfile.TemporaryDirectory(prefix="ratings-demo-") as tmp:
        path = Path(tmp) / "matches.jsonl"
        events = demo_matches(seed=seed)
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        leagues = len({event["league"] for event in events})
        print(f"demo: generated {len(events):,} matches in {leagues} leagues ({path.name}); replaying them",
              file=sys.stderr)
        ledger = Ledger(config)
        report = replay(path, ledger)
    for league, players in sorted(ledger.snapshot().items()):
        print(format_leaderboard(league, players, 10))
        print()
    print(
        f"demo: {report.matches:,} matches applied in {report.seconds:.2f} s; "
        f"{ledger.player_count:,} players in {len(ledger.league_names())} leagues",
        file=sys.stderr,
    )
    return 0


def add_commands(sub: Any) -> None:
    p = command(sub, "replay", cmd_replay, "apply a file of match-result lines offline and print the final ratings",
                "Apply a file of match-result lines offline and print the final ratings. " + exit_statuses(
                    {REFUSED: "an invalid line with --strict, or an invalid --config", FILE_ERROR: None}))
    p.add_argument("--input", "-i", required=True, help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--config", "-c", help="league configuration (TOML); default: every league uses elo")
    p.add_argument("--output", "-o", help="write the final state here (JSON) instead of stdout")
    p.add_argument("--strict", action="store_true", help="stop at the first invalid line (exit status 1)")
    p.add_argument("--indent", action="store_true", help="indent the JSON output")
    p.add_argument("--quiet", "-q", action="store_true", help="do not list invalid lines (the summary still counts them)")
    p.add_argument("--history", metavar="FILE",
                   help="write every rating change as a JSON line (league, player, seq, match_id, occurred_at, rank, "
                        "rating_before, rating_after, uncertainty, cause): the history the stream keeps")
    p.add_argument("--seasons", metavar="FILE",
                   help="write every ended season's final standings as JSON lines (league, season, player, rating, "
                        "uncertainty, rank, percentile, tier, matches; by league, season and rank): what "
                        "`ratings leaderboard --season` reads from the stream")
    p.add_argument(
        "--metrics-json",
        metavar="FILE",
        help="score how well ratings before each round predict it (pair inversion, rank deviation, MSE); "
        "write the figures here and a table to stdout (the state then goes only to --output)",
    )

    p = command(sub, "plot", cmd_plot, "replay one league and chart players' ratings over time (PNG)",
                "Replay one league and chart players' ratings over time (PNG). " + exit_statuses(
                    {REFUSED: "the league has no match in the file, or a --player is not in it", FILE_ERROR: None}))
    p.add_argument("--input", "-i", required=True, help="JSONL file of match-result events (plain or .gz)")
    p.add_argument("--config", "-c", help="league configuration (TOML)")
    p.add_argument("--league", "-l", required=True)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--top", type=int, default=10, help="the N highest-rated players at the end (default 10)")
    who.add_argument("--player", "-p", action="append", help="a player to draw (repeatable)")
    p.add_argument("--output", "-o", required=True, help="the chart (PNG)")

    p = command(sub, "synth", cmd_synth, "write the Elo-MMR paper's synthetic data set (section 6.1) as match-result lines",
                "Write the Elo-MMR paper's synthetic data set (section 6.1) as match-result lines. "
                + exit_statuses({FILE_ERROR: None}))
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--league", default="synthetic")
    p.add_argument("--team-size", type=int, default=1, metavar="K",
                   help="deal the players into random teams of K each round, ranked by the sum of their members' "
                        "performances (default 1: everyone alone)")
    p.add_argument("--output", "-o", help="file to write (.gz compresses); default stdout")

    p = command(sub, "tune", cmd_tune, "search a league's parameters on the earlier part of a file, "
                "report the best and the configured ones on the later part",
                "Search a league's parameters on the earlier part of a file, report the best and the configured ones "
                "on the later part. " + exit_statuses({USAGE: "a usage error, or a --param or --league the file or "
                                                              "the system does not have", FILE_ERROR: None}))
    p.add_argument("--input", "-i", required=True, help="JSONL file of match-result events (plain or .gz)")
    p.add_argument("--config", "-c", help="league configuration (TOML): the system and the parameters to start from")
    p.add_argument("--league", "-l", help="the league to tune (default: the file's only league)")
    p.add_argument("--param", "-p", action="append", required=True, metavar="NAME=LO:HI",
                   help="a parameter to search: a number between LO and HI, or NAME=A,B,C for choices (repeatable)")
    p.add_argument("--train-share", type=float, default=0.5,
                   help="the earlier share of the league's results the search scores on (default 0.5)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--trials", type=int, help="random search: this many candidates (default 20)")
    how.add_argument("--grid", type=int, metavar="K", help="grid search: K values per LO:HI range")
    p.add_argument("--seed", type=int, default=0, help="the random search's seed (default 0)")
    p.add_argument("--show", type=int, default=10, help="list this many of the best trials (default 10)")
    p.add_argument("--output", "-o", help="write every trial's figures here (JSON)")

    p = command(sub, "sample", cmd_sample, "write the demo's sample match results as JSONL",
                "Write the demo's sample match results as JSONL. " + exit_statuses({FILE_ERROR: None}))
    p.add_argument("--output", "-o", help="file to write (default stdout)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--scale", type=float, default=1.0, help="multiply the number of matches")
