"""Commands that publish to the match topic: `ratings produce` (a file of
results, voids and corrections) and `ratings void`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from .flags import LIST_PROBLEMS, Problems, add_common_flags, client_from, command


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

    client = client_from(args)
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


# -- ratings void ------------------------------------------------------------------
def cmd_void(args: argparse.Namespace) -> int:
    return asyncio.run(_void(args))


async def _void(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    from ..events import BadEvent

    client = client_from(args)
    try:
        await client.start()
        sent = await client.void(args.league, args.match_id, args.reason)
    except BadEvent as exc:
        print(f"ratings void: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, OSError) as exc:
        print(f"ratings void: cannot publish to {args.broker}: {exc}", file=sys.stderr)
        return 2
    finally:
        await client.stop()
    print(f"void of {args.league}/{args.match_id} published ({sent.topic}[{sent.partition}] offset {sent.offset}): "
          "the league is re-rated without it, `ratings subscribe` shows the corrections")
    return 0


def add_commands(sub: Any) -> None:
    p = command(sub, "produce", cmd_produce, "validate match-result lines and publish them to Kafka, keyed by league",
                "Validate each line of a JSONL file of match results, voids and corrections (plain or .gz; '-' reads "
                "stdin) and publish the "
                "valid ones, unchanged, to the match topic with the league as key. Rejected lines are listed (the "
                f"first {LIST_PROBLEMS}) with their line number and reason; a summary line is always printed on stderr. "
                "Exit status: 0 every line was sent; 1 some lines were rejected (the valid ones were sent); 2 the file "
                "could not be read, the broker could not be reached or a send failed.")
    p.add_argument("file", metavar="FILE", help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, do not list rejected lines")
    add_common_flags(p)

    p = command(sub, "void", cmd_void, "publish a match-voided.v1 command: a result the league applied never counted",
                "Publish a match-voided.v1 command for a result the league has applied: the worker re-rates the league "
                "without it and publishes one correction per player whose rating changed. A match the league never "
                "applied, or already voided, comes back as a dead letter (unknown_match). Corrections are published "
                "the same way as results (JSON lines through `ratings produce`, schemas/match-corrected.v1.json). "
                "Exit status: 0 published; 1 the command is invalid; 2 the broker could not be reached.")
    p.add_argument("league", metavar="LEAGUE")
    p.add_argument("match_id", metavar="MATCH_ID")
    p.add_argument("--reason", required=True, help="why (kept with the command; 1 to 500 characters)")
    add_common_flags(p)
