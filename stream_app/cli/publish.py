"""Commands that publish to the match topic: `ratings produce` (a file of
results, voids and corrections), `ratings void`, `ratings correct` and
`ratings season-start`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import sys
import time
from typing import Any, Callable

from .flags import (DONE, FILE_ERROR, LIST_PROBLEMS, NOT_ALLOWED, REFUSED, UNREACHABLE, Problems, add_common_flags,
                    client_from, command, env, exit_statuses, kafka_failed)


# -- ratings produce -------------------------------------------------------------
def cmd_produce(args: argparse.Namespace) -> int:
    from ..offline.replay import open_lines

    try:
        lines, raw, size = open_lines(args.file)
    except OSError as exc:
        print(f"ratings produce: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return FILE_ERROR
    try:
        return asyncio.run(_produce(args, lines, raw, size))
    finally:
        if raw is not None:
            raw.close()


async def _produce(args: argparse.Namespace, lines, raw, size) -> int:
    from aiokafka.errors import KafkaError

    from ..client.kafka import NotAuthorized

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
            return kafka_failed(args, exc)
        numbered = events()
        try:
            sent, rejected = await client.publish_many((line for _, line in numbered), on_progress=progress,
                                                       on_reject=lambda _, exc: problems.add(counts["lines"], exc))
        except NotAuthorized as exc:
            return kafka_failed(args, exc)
        except (KafkaError, OSError, EOFError) as exc:
            if isinstance(exc, KafkaError):
                what, status = f"delivery failed: {exc!r}", UNREACHABLE
            else:  # the file broke off (a truncated .gz, a read error)
                what, status = f"{args.file}: line {counts['lines']}: {exc}", FILE_ERROR
            print(f"ratings produce: {what}; {counts['acknowledged']:,} events acknowledged before that", file=sys.stderr)
            return status
    finally:
        if bar is not None:
            bar.close()
        await client.stop()
    problems.summary("rejected lines")
    seconds = time.perf_counter() - started
    rate = sent / seconds if seconds else 0.0
    # "Sent" is not "applied": say what was checked, and where a worker's refusals go.
    checked = "each checked against its league's system" if args.config else \
        "not checked against the leagues' systems (--config FILE does)"
    print(
        f"produce: {sent:,} events sent, {len(rejected):,} lines rejected ({counts['lines']:,} lines, {counts['blank']:,} blank) "
        f"to {args.match_topic} at {args.broker}; {seconds:.2f} s ({rate:,.0f} events/s); {checked}; a worker's "
        f"refusals: `ratings subscribe --dead-letters`",
        file=sys.stderr,
    )
    return REFUSED if rejected else DONE


def _above_bar(bar: Any, text: str) -> None:
    if bar is not None:
        bar.write(text, file=sys.stderr)
    else:
        print(text, file=sys.stderr)


# -- ratings void and ratings correct: published, then followed to what the worker did ----
def cmd_void(args: argparse.Namespace) -> int:
    from ..client import void_command

    return _publish_and_follow(args, void_command(args.league, args.match_id, args.reason),
                               f"void of {args.league}/{args.match_id}", "re-rated without it")


def cmd_correct(args: argparse.Namespace) -> int:
    from ..client import correction_command

    return _publish_and_follow(args, correction_command(args.league, args.match_id, args.participants, args.reason,
                                                        args.at),
                               f"correction of {args.league}/{args.match_id}", "re-rated with these standings")


def _publish_and_follow(args: argparse.Namespace, command: dict[str, Any], what: str, done: str) -> int:
    """Publish a void or correction and, unless --wait 0, wait that long for the league's
    worker to apply it (its corrections) or refuse it (a dead letter): 'published' is not
    'applied'. An invalid command is refused before anything connects."""
    from ..inputs import BadEvent

    client = client_from(args)
    try:
        client.check(command)
    except BadEvent as exc:
        return _refused(args, _in_argument_words(exc, _COMMAND_ARGUMENTS))
    return asyncio.run(_followed(args, client, command, what, done))


async def _followed(args: argparse.Namespace, client: Any, command: dict[str, Any], what: str, done: str) -> int:
    # The followers start before the command is published, so neither answer is missed.
    from aiokafka.errors import KafkaError

    from ..client.kafka import NotAuthorized

    outcome = _Outcome(client, args.league, args.match_id)
    unfollowed = "--wait 0" if not args.wait else None
    try:
        await client.start()
        if args.wait:
            try:
                await outcome.follow()
            except NotAuthorized as exc:  # a producer's principal need not read the topics out: publish all the same
                await outcome.stop()
                unfollowed = str(exc)
        sent = await client.publish(command)
        print(f"{what} published ({sent.topic}[{sent.partition}] offset {sent.offset})")
        if unfollowed is not None:
            print(f"not followed ({unfollowed}): a worker refuses a match its league never applied as a dead letter "
                  f"(unknown_match); `ratings subscribe --dead-letters --league {args.league}` shows it")
            return DONE
        return await outcome.said(args, done)
    except (KafkaError, OSError) as exc:
        return kafka_failed(args, exc)
    finally:
        await outcome.stop()
        await client.stop()


class _Outcome:
    """What the worker of a league did with a void or correction of one of its matches:
    the first correction (a rating-changed event of cause "correction") or dead letter
    naming the match, followed from now on."""

    def __init__(self, client: Any, league: str, match_id: str):
        self.client, self.league, self.match_id = client, league, match_id
        self.found: asyncio.Queue[tuple[bool, dict[str, Any]]] = asyncio.Queue()
        self.readers: list[asyncio.Task[None]] = []

    async def follow(self) -> None:
        """Start following both topics; returns once both are read from their end."""
        ready = []
        for applied, events in ((True, self.client.changes), (False, self.client.dead_letters)):
            positioned = asyncio.Event()
            ready.append(positioned)
            self.readers.append(asyncio.create_task(self._read(applied, events(league=self.league,
                                                                                 on_ready=positioned.set))))
        while not all(event.is_set() for event in ready):
            self._raise_failed()
            await asyncio.sleep(0.05)

    def _raise_failed(self) -> None:
        """A reader's error (the broker went away, the ACLs refused), the caller's to say."""
        for reader in self.readers:
            if reader.done():
                reader.result()

    async def _read(self, applied: bool, stream: Any) -> None:
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                if event.get("match_id") == self.match_id and (not applied or event.get("cause") == "correction"):
                    await self.found.put((applied, event))

    async def said(self, args: argparse.Namespace, done: str) -> int:
        """Wait --wait seconds for the outcome, say it, and return the exit status."""
        found = asyncio.ensure_future(self.found.get())
        try:
            # Whichever first: the outcome, a reader failing, or the end of the wait.
            await asyncio.wait([found, *self.readers], timeout=args.wait, return_when=asyncio.FIRST_COMPLETED)
            if not found.done():
                self._raise_failed()
                print(f"ratings {args.command}: no worker applied or refused it within {args.wait:g} s. Is a worker "
                      f"running on this broker? Once one is, `ratings subscribe --dead-letters --league "
                      f"{args.league} --from-beginning` shows a refusal", file=sys.stderr)
                return UNREACHABLE
        finally:
            if not found.done():
                found.cancel()
        applied, event = found.result()
        if not applied:
            print(f"ratings {args.command}: not applied: {event.get('message')} [{event.get('reason')}]",
                  file=sys.stderr)
            return REFUSED
        print(f"applied: {args.league} {done}; `ratings subscribe --league {args.league} --from-beginning` shows "
              f"each player's correction")
        return DONE

    async def stop(self) -> None:
        for reader in self.readers:
            reader.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)  # each closes its consumer
        self.readers = []


# The fields of a command and the arguments that give them, for the error messages.
_COMMAND_ARGUMENTS = {"league": "LEAGUE", "match_id": "MATCH_ID", "season": "NAME", "occurred_at": "--at",
                      "reason": "--reason", "participants": "PARTICIPANT"}


def _in_argument_words(exc: Any, arguments: dict[str, str]) -> str:
    """A BadEvent's text with its field named as the command line's argument
    ('participants[1].rank: ...' -> 'PARTICIPANT 2 rank: ...')."""
    message = re.sub(r"participants\[(\d+)\](?:\.(\w+))?",
                     lambda place: f"PARTICIPANT {int(place[1]) + 1}" + (f" {place[2]}" if place[2] else ""),
                     exc.message)
    field, sep, rest = message.partition(": ")
    return f"{arguments.get(field, field)}{sep}{rest} [{exc.code}]"


_PARTICIPANT_FIELDS = {"rank": int, "score": float, "team": str, "weight": float}


def participant(text: str) -> dict[str, Any]:
    """One participant of `ratings correct`: PLAYER=RANK, or PLAYER, then ,FIELD=VALUE
    pairs (rank, score, team, weight), e.g. erin=1, carol,score=4, ann=1,team=red."""
    head, *pairs = text.split(",")
    player, sep, rank = head.partition("=")
    fields = [("rank", rank)] if sep else []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if name not in _PARTICIPANT_FIELDS or not sep:
            raise argparse.ArgumentTypeError(f"{text!r}: {pair!r} is not FIELD=VALUE of rank, score, team or weight")
        fields.append((name, value))
    doc: dict[str, Any] = {"player": player}
    for name, value in fields:
        kind = _PARTICIPANT_FIELDS[name]
        try:
            doc[name] = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {name}: not {'an integer' if kind is int else 'a number'}: "
                                             f"{value!r}") from None
        if kind is float and not math.isfinite(doc[name]):
            raise argparse.ArgumentTypeError(f"{text!r}: {name}: must be a finite number (got {value!r})")
    return doc


def _refused(args: argparse.Namespace, message: str) -> int:
    print(f"ratings {args.command}: {message}", file=sys.stderr)
    return REFUSED


# -- ratings season-start ------------------------------------------------------------
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
        if exc.field == "occurred_at":
            return _refused(args, f"--at: must be an RFC 3339 date-time with a time zone offset, e.g. "
                                  f"2026-03-20T00:00:00Z (got {args.at!r})")
        return _refused(args, _in_argument_words(exc, _COMMAND_ARGUMENTS))
    return asyncio.run(_season_start(args, at))


async def _season_start(args: argparse.Namespace, at: str) -> int:
    """Publish the season start (no outcome to follow: a season without a reset publishes nothing)."""
    from aiokafka.errors import KafkaError

    client = client_from(args)
    try:
        await client.start()
        sent = await client.start_season(args.league, args.season, at, args.reason)
    except (KafkaError, OSError) as exc:
        return kafka_failed(args, exc)
    finally:
        await client.stop()
    print(f"season {args.season} of {args.league} at {at} published ({sent.topic}[{sent.partition}] offset "
          f"{sent.offset}): the season in progress ends with its final standings kept; `ratings seasons "
          f"{args.league}` lists it once applied, `ratings subscribe --dead-letters` shows a refusal")
    return DONE


def _add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", type=_wait_seconds, default=30.0, metavar="S",
                        help="seconds to wait for the league's worker to apply or refuse it (default %(default)g; "
                             "0: publish only)")


def _wait_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (got {text})")
    return value


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", default=env("RATINGS_CONFIG", None), metavar="FILE",
                        help="the workers' league configuration (TOML) [RATINGS_CONFIG]: standings a league's system "
                             "cannot rate are refused before they are sent (default: not checked)")


_FOLLOWED = exit_statuses({REFUSED: "the command is invalid, or the worker refused it (a match its league never "
                                    "applied, or a correction that changes nothing)",
                           NOT_ALLOWED: None,
                           UNREACHABLE: "no broker answered, or no worker applied or refused it within --wait"})
_PUBLISHED = exit_statuses({REFUSED: "the command is invalid", NOT_ALLOWED: None, UNREACHABLE: None})


def _match_command(sub: Any, name: str, func: Callable[[argparse.Namespace], int], help: str,
                   description: str) -> argparse.ArgumentParser:
    """A command on one result of a league (void, correct): LEAGUE MATCH_ID, --reason, --wait
    and the Kafka flags; its own arguments are the caller's to add."""
    p = command(sub, name, func, help, f"{description} {_FOLLOWED}")
    p.add_argument("league", metavar="LEAGUE")
    p.add_argument("match_id", metavar="MATCH_ID")
    p.add_argument("--reason", required=True, help="why (kept with the command; 1 to 500 characters)")
    _add_wait(p)
    add_common_flags(p)
    return p


def add_commands(sub: Any) -> None:
    p = command(sub, "produce", cmd_produce, "validate match-result lines and publish them to Kafka, keyed by league",
                "Validate each line of a JSONL file of match results, voids and corrections (plain or .gz; '-' reads "
                "stdin) and publish the "
                "valid ones, unchanged, to the match topic with the league as key. With --config (the workers' "
                "league configuration), a result or correction its league's system cannot rate (three players in "
                "an elo league, teams in a league without them) is rejected too, with the reason the worker would "
                f"give. Rejected lines are listed (the first {LIST_PROBLEMS}) with their line number and reason; a "
                "summary line is always printed on stderr. A sent line can still be refused by a worker (a "
                "duplicate, a void of a match never applied): `ratings subscribe --dead-letters` shows those. "
                + exit_statuses({REFUSED: "some lines were rejected (the valid ones were sent)", NOT_ALLOWED: None,
                                 UNREACHABLE: "no broker answered, or a send failed",
                                 FILE_ERROR: "FILE or --config could not be read"}))
    p.add_argument("file", metavar="FILE", help="JSONL file of match-result events (plain or .gz; '-' for stdin)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, do not list rejected lines")
    _add_config(p)
    add_common_flags(p)

    _match_command(sub, "void", cmd_void, "publish a match-voided.v1 command: a result the league applied never counted",
                   "Publish a match-voided.v1 command for a result the league has applied, then wait (--wait) for "
                   "the league's worker: it re-rates the league without it and publishes one correction per player "
                   "whose rating changed, or refuses a match the league never applied, or voided already, as a dead "
                   "letter (unknown_match). `ratings correct` replaces a result's standings instead.")

    p = _match_command(sub, "correct", cmd_correct,
                       "publish a match-corrected.v1 command: a result the league applied, with other standings",
                       "Publish a match-corrected.v1 command: the result MATCH_ID of the league with these standings "
                       "(and, with --at, this time) instead, as if it had been so from the start; then wait (--wait) "
                       "for the league's worker to re-rate the league, or to refuse it as a dead letter: a match the "
                       "league never applied or voided (unknown_match), standings its system cannot rate "
                       "(system_rule), standings it has already (duplicate_match). With --config (the workers' league "
                       "configuration) standings the system cannot rate are refused before anything is published.")
    p.add_argument("participants", metavar="PARTICIPANT", nargs="+", type=participant,
                   help="a participant: PLAYER=RANK (1 is best, equal ranks tie), or PLAYER,score=X (higher is "
                        "better); then ,team=T and ,weight=W where the system has teams or partial play, e.g. "
                        "erin=1 frank=2, carol,score=4 dave,score=6, ann=1,team=red")
    p.add_argument("--at", metavar="RFC3339",
                   help="the match's corrected time, with a time zone offset (default: it keeps its time)")
    _add_config(p)

    p = command(sub, "season-start", cmd_season_start,
                "publish a season-started.v1 command: a league with manual seasons starts its next one",
                "Publish a season-started.v1 command, keyed by the league like its results: a league configured "
                "with season = \"manual\" ends the season in progress (its final standings are kept, `ratings "
                "leaderboard LEAGUE --season S` prints them) and starts NAME; the league's season_reset, if any, "
                "applies to every player. The worker refuses, as a dead letter, a league without results yet "
                "(unknown_league) or without manual seasons (season_rule), a NAME used before in the league "
                "(season_exists) and a time before the league's latest result (season_too_early). Leagues with "
                "scheduled seasons (weekly, monthly, ...) start them by themselves. " + _PUBLISHED)
    p.add_argument("league", metavar="LEAGUE")
    p.add_argument("season", metavar="NAME", help="the new season's name, unique in the league (an id: "
                   "A-Z a-z 0-9 _ . : @ + -, 1 to 128 characters), e.g. spring-2026")
    p.add_argument("--at", metavar="RFC3339",
                   help="when the season starts, with a time zone offset, e.g. 2026-03-20T00:00:00Z; not before the "
                   "league's latest result (default: now, UTC, to the second)")
    p.add_argument("--reason", metavar="TEXT",
                   help="why (kept with the season and shown to people; 1 to 500 characters)")
    add_common_flags(p)
