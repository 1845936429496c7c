"""Commands that publish to the match topic: `ratings produce` (a file of
results, voids and corrections), `ratings void` and `ratings season-start`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, Awaitable, Callable

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
    return await _send_command(
        args, lambda client: client.void(args.league, args.match_id, args.reason),
        lambda sent: f"void of {args.league}/{args.match_id} published ({sent.topic}[{sent.partition}] offset "
                     f"{sent.offset}): the league is re-rated without it, `ratings subscribe` shows the corrections")


async def _send_command(args: argparse.Namespace, send: Callable[[Any], Awaitable[Any]],
                        said: Callable[[Any], str]) -> int:
    """Publish one command with the client: 0 sent (`said` tells where), 1 refused, 2 no broker."""
    from aiokafka.errors import KafkaError

    from ..inputs import BadEvent

    client = client_from(args)
    try:
        await client.start()
        sent = await send(client)
    except BadEvent as exc:
        return _refused(args, str(exc))
    except (KafkaError, OSError) as exc:
        print(f"ratings {args.command}: cannot publish to {args.broker}: {exc}", file=sys.stderr)
        return 2
    finally:
        await client.stop()
    print(said(sent))
    return 0


# -- ratings season-start ------------------------------------------------------------
# The command's fields and the arguments that give them, for the error messages.
_SEASON_ARGUMENTS = {"league": "LEAGUE", "season": "NAME", "occurred_at": "--at", "reason": "--reason"}


def cmd_season_start(args: argparse.Namespace) -> int:
    from ..client import season_time
    from ..inputs import ID_RULE, SEASON_STARTED, BadEvent, is_id, parse_input

    # Checked here, before connecting, so that a mistake names the argument, not the field.
    if not is_id(args.season):
        return _refused(args, f"NAME: {ID_RULE} (got {args.season!r})")
    at = season_time(args.at)
    event = {"schema": SEASON_STARTED, "league": args.league, "season": args.season, "occurred_at": at}
    if args.reason is not None:
        event["reason"] = args.reason
    try:
        parse_input(event)
    except BadEvent as exc:
        argument = _SEASON_ARGUMENTS.get(exc.field or "")
        if argument == "--at":
            return _refused(args, f"--at: must be an RFC 3339 date-time with a time zone offset, e.g. "
                                  f"2026-03-20T00:00:00Z (got {args.at!r})")
        if argument is not None:
            return _refused(args, f"{argument}: {exc.message.removeprefix(f'{exc.field}: ')}")
        return _refused(args, str(exc))
    return asyncio.run(_season_start(args, at))


async def _season_start(args: argparse.Namespace, at: str) -> int:
    return await _send_command(
        args, lambda client: client.start_season(args.league, args.season, at, args.reason),
        lambda sent: f"season {args.season} of {args.league} at {at} published ({sent.topic}[{sent.partition}] offset "
                     f"{sent.offset}): the season in progress ends with its final standings kept; `ratings seasons "
                     f"{args.league}` lists it once applied, `ratings subscribe --dead-letters` shows a refusal")


def _refused(args: argparse.Namespace, message: str) -> int:
    print(f"ratings {args.command}: {message}", file=sys.stderr)
    return 1


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

    p = command(sub, "season-start", cmd_season_start,
                "publish a season-started.v1 command: a league with manual seasons starts its next one",
                "Publish a season-started.v1 command, keyed by the league like its results: a league configured "
                "with season = \"manual\" ends the season in progress (its final standings are kept, `ratings "
                "leaderboard LEAGUE --season S` prints them) and starts NAME; the league's season_reset, if any, "
                "applies to every player. The worker refuses, as a dead letter, a league without results yet "
                "(unknown_league) or without manual seasons (season_rule), a NAME used before in the league "
                "(season_exists) and a time before the league's latest result (season_too_early). Leagues with "
                "scheduled seasons (weekly, monthly, ...) start them by themselves. "
                "Exit status: 0 published; 1 the command is invalid; 2 the broker could not be reached.")
    p.add_argument("league", metavar="LEAGUE")
    p.add_argument("season", metavar="NAME", help="the new season's name, unique in the league (an id: "
                   "A-Z a-z 0-9 _ . : @ + -, 1 to 128 characters), e.g. spring-2026")
    p.add_argument("--at", metavar="RFC3339",
                   help="when the season starts, with a time zone offset, e.g. 2026-03-20T00:00:00Z; not before the "
                   "league's latest result (default: now, UTC, to the second)")
    p.add_argument("--reason", metavar="TEXT",
                   help="why (kept with the season and shown to people; 1 to 500 characters)")
    add_common_flags(p)
