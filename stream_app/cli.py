"""`ratings`: the command line. Thin: parses flags and calls the library."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import orjson

from .config import ConfigError, LeagueConfig
from .replay import Ledger, ReplayError, replay


LIST_PROBLEMS = 20  # invalid lines listed one by one; the summary counts them all


def _config(path: str | None) -> LeagueConfig:
    try:
        return LeagueConfig.load(path)
    except ConfigError as exc:
        raise SystemExit(f"ratings: {exc}") from None


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
        line = f"{rank:>3}  {name:<24} {view['rating']:>10.1f} {view['matches']:>8}"
        if extra:
            line += f" {view[extra]:>12.1f}"
        lines.append(line)
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    ledger = Ledger(_config(args.config))

    listed = 0

    def problem(line: int, exc: Exception) -> None:
        nonlocal listed
        listed += 1
        if not args.quiet and listed <= LIST_PROBLEMS:
            print(f"line {line}: {exc}", file=sys.stderr)

    accuracy = None
    if args.metrics_json:
        from .accuracy import Accuracy

        accuracy = Accuracy()
        ledger.observer = accuracy.observe
    try:
        report = replay(args.input, ledger, strict=args.strict, on_problem=problem)
    except ReplayError as exc:
        print(f"ratings replay: {args.input}: {exc} (stopped: --strict)", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"ratings replay: {args.input}: {exc.strerror}", file=sys.stderr)
        return 1
    if not args.quiet and listed > LIST_PROBLEMS:
        print(f"... and {listed - LIST_PROBLEMS:,} more invalid lines", file=sys.stderr)
    if accuracy is not None:
        from .accuracy import format_report

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
        f"replay: {report.matches:,} matches applied, {report.duplicates:,} duplicates skipped, "
        f"{report.skipped:,} invalid lines skipped; {len(ledger.leagues):,} leagues, "
        f"{ledger.player_count:,} players; {report.seconds:.2f} s ({rate:,.0f} matches/s)",
        file=sys.stderr,
    )
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    import gzip

    from .synth import synthetic_rounds

    path = args.output
    out = sys.stdout.buffer if path in (None, "-") else (gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb"))
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=args.rounds, unit="round", desc="synth", file=sys.stderr, leave=False)
    try:
        for event in synthetic_rounds(args.players, args.rounds, args.seed, args.league):
            out.write(orjson.dumps(event) + b"\n")
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
        if out is not sys.stdout.buffer:
            out.close()
    print(f"synth: {args.rounds:,} rounds of {args.players:,} players written to {path or 'stdout'}", file=sys.stderr)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plot import draw

    draw(args.input, _config(args.config), args.league, args.output, top=args.top, players=args.player)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from pathlib import Path as _Path

    from .worker import Settings, run_worker

    _config(args.config)  # fail fast, before Faust starts, on a bad configuration
    from .security import KafkaSecurity, SecurityConfigError

    try:
        security = KafkaSecurity.from_env()
    except SecurityConfigError as exc:
        raise SystemExit(f"ratings worker: {exc}") from None
    settings = Settings(
        broker=args.broker,
        partitions=args.partitions,
        match_topic=args.match_topic,
        changes_topic=args.changes_topic,
        dlq_topic=args.dlq_topic,
        data_dir=_Path(args.data_dir),
        web_port=args.web_port,
        web_host=args.web_host,
        config_path=args.config,
        app_id=args.app_id,
        advertised_url=args.advertised_url,
        batch_max=args.batch_max,
        security=security if security.protocol != "PLAINTEXT" else None,
    )
    return run_worker(settings, loglevel=args.loglevel)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    api = (args.api or f"http://127.0.0.1:{args.web_port}").rstrip("/")
    url = f"{api}/leagues/{urllib.parse.quote(args.league, safe='')}/leaderboard?limit={args.limit}&offset={args.offset}"
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            board = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        print(f"ratings leaderboard: {message} (HTTP {exc.code})", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"ratings leaderboard: cannot reach the API at {api}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(board))
        return 0
    print(f"{board['league']} ({board.get('players_total', len(board['players'])):,} players)")
    print(f"{'#':>5}  {'player':<28} {'rating':>10} {'matches':>8}")
    for row in board["players"]:
        print(f"{row['rank']:>5}  {row['player']:<28} {row['rating']:>10.1f} {row['matches']:>8}")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from .sample import demo_matches

    out = sys.stdout.buffer if args.output in (None, "-") else open(args.output, "wb")
    try:
        for event in demo_matches(seed=args.seed, scale=args.scale):
            out.write(orjson.dumps(event) + b"\n")
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if not args.offline:
        from .demo import run_demo

        return run_demo(seed=args.seed, web_port=args.web_port, serve=False if args.no_serve else None)
    from .sample import DEMO_CONFIG, demo_matches

    config = LeagueConfig.from_toml(DEMO_CONFIG, "<demo config>")
    with tempfile.TemporaryDirectory(prefix="ratings-demo-") as tmp:
        path = Path(tmp) / "matches.jsonl"
        events = demo_matches(seed=args.seed)
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        print(f"demo: generated {len(events):,} matches in 3 leagues ({path.name}); replaying them", file=sys.stderr)
        ledger = Ledger(config)
        report = replay(path, ledger)
    for league, players in sorted(ledger.snapshot().items()):
        print(format_leaderboard(league, players, 10))
        print()
    print(
        f"demo: {report.matches:,} matches applied in {report.seconds:.2f} s; "
        f"{ledger.player_count:,} players in {len(ledger.leagues)} leagues",
        file=sys.stderr,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratings", description="Streaming per-league ratings (Elo, multi-player Elo).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("replay", help="apply a file of match-result lines offline and print the final ratings")
    p.add_argument("--input", "-i", required=True, help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--config", "-c", help="league configuration (TOML); default: every league uses elo")
    p.add_argument("--output", "-o", help="write the final state here (JSON) instead of stdout")
    p.add_argument("--strict", action="store_true", help="stop at the first invalid line (exit status 1)")
    p.add_argument("--indent", action="store_true", help="indent the JSON output")
    p.add_argument("--quiet", "-q", action="store_true", help="do not list invalid lines (the summary still counts them)")
    p.add_argument(
        "--metrics-json",
        metavar="FILE",
        help="score how well ratings before each round predict it (pair inversion, rank deviation, MSE); "
        "write the figures here and a table to stdout (the state then goes only to --output)",
    )
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("plot", help="replay one league and chart players' ratings over time (PNG)")
    p.add_argument("--input", "-i", required=True, help="JSONL file of match-result events (plain or .gz)")
    p.add_argument("--config", "-c", help="league configuration (TOML)")
    p.add_argument("--league", "-l", required=True)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--top", type=int, default=10, help="the N highest-rated players at the end (default 10)")
    who.add_argument("--player", "-p", action="append", help="a player to draw (repeatable)")
    p.add_argument("--output", "-o", required=True, help="the chart (PNG)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("synth", help="write the Elo-MMR paper's synthetic data set (section 6.1) as match-result lines")
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--league", default="synthetic")
    p.add_argument("--output", "-o", help="file to write (.gz compresses); default stdout")
    p.set_defaults(func=cmd_synth)

    from .cli_stream import _positive_int, add_common_flags

    p = sub.add_parser("worker", help="run a stream worker (Faust) that applies match results and serves the HTTP API")
    add_common_flags(p, web=True, data_dir=True, config=True)
    p.add_argument(
        "--app-id",
        default=os.environ.get("RATINGS_APP_ID", "ratings"),
        help="consumer group and prefix of the tables' changelog topics [RATINGS_APP_ID] (default ratings)",
    )
    p.add_argument(
        "--advertised-url",
        default=os.environ.get("RATINGS_ADVERTISED_URL") or None,
        help="URL other workers use to reach this one's API, e.g. http://worker-1:6066 "
        "[RATINGS_ADVERTISED_URL] (default http://WEB_HOST:WEB_PORT; set it when --web-host is 0.0.0.0)",
    )
    p.add_argument(
        "--batch-max",
        type=_positive_int,
        default=os.environ.get("RATINGS_BATCH_MAX", "2000"),
        help="input records applied between two checkpoints, at most [RATINGS_BATCH_MAX] (default 2000); "
        "larger batches cost fewer checkpoints per match, smaller ones less latency under load",
    )
    p.add_argument("--loglevel", default="info", help="log level (default info)")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("leaderboard", help="print a league's leaderboard from a worker's HTTP API")
    p.add_argument("league")
    p.add_argument("--limit", type=int, default=20, help="rows (default 20, at most 100000)")
    p.add_argument("--offset", type=int, default=0, help="skip this many rows first")
    p.add_argument("--web-port", type=int, default=int(os.environ.get("RATINGS_WEB_PORT", "6066")),
                   help="a worker's HTTP port on 127.0.0.1 [RATINGS_WEB_PORT] (default 6066); any worker answers for any league")
    p.add_argument("--api", default=os.environ.get("RATINGS_API"), help="the API base URL instead [RATINGS_API]")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(func=cmd_leaderboard)

    p = sub.add_parser("sample", help="write the demo's sample match results as JSONL")
    p.add_argument("--output", "-o", help="file to write (default stdout)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--scale", type=float, default=1.0, help="multiply the number of matches")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser(
        "demo",
        help="run the service end to end: embedded broker, a worker, sample leagues published, leaderboards printed",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--web-port", type=int, default=None, help="the worker's HTTP port (default 6066, or a free one)")
    p.add_argument("--no-serve", action="store_true", help="stop at the end even on a terminal (default: serve until Ctrl-C)")
    p.add_argument("--offline", action="store_true", help="no broker: replay the small sample offline and print top 10s")
    p.set_defaults(func=cmd_demo)
    from .cli_stream import add_stream_commands; add_stream_commands(sub)  # noqa: E702 (broker, produce, subscribe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
