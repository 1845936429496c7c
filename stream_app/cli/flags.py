"""What the commands share: flags with their environment variables, value
checks, the league configuration and Kafka security from the environment,
and the listing of rejected lines.

Every flag defaults to the environment variable named after it (--broker:
RATINGS_BROKER, --match-topic: RATINGS_MATCH_TOPIC, ...) and then to
stream_app.settings; the flag wins. Kafka security (TLS, SASL) comes from
RATINGS_KAFKA_* variables only (stream_app/security.py), so passwords never
appear in a process listing.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from ..leagues import ConfigError, LeagueConfig
from ..settings import DEFAULTS, Settings

LIST_PROBLEMS = 20  # rejected lines listed one by one; the summary counts them all

# The exit statuses, one meaning each for every command (README, "Exit statuses").
DONE = 0
REFUSED = 1  # the input or the request was refused: rejected lines, an unknown league or match, a bad value
USAGE = 2  # argparse's own: a flag or argument missing, unknown or out of range, flags that do not go together
NOT_ALLOWED = 3  # the broker refused this client: TLS, SASL or its ACLs
UNREACHABLE = 4  # no broker, or no worker, answered (or a send failed on the way)
FILE_ERROR = 5  # a file could not be read or written
INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT

_STATUS_WORDS = {USAGE: "a usage error", NOT_ALLOWED: "the broker refused this client (TLS, SASL or its ACLs)",
                 UNREACHABLE: "no broker answered, or a send failed", FILE_ERROR: "a file could not be read or written"}


def exit_statuses(meanings: dict[int, str | None]) -> str:
    """The end of a command's description: its exit statuses in order, each with what it
    means for this command (None: the usual words)."""
    said = {DONE: "done", USAGE: _STATUS_WORDS[USAGE]} | {status: meaning or _STATUS_WORDS[status]
                                                          for status, meaning in meanings.items()}
    return "Exit status: " + "; ".join(f"{status} {said[status]}" for status in sorted(said)) + "."


def shown(value: float, spec: str) -> str:
    """format(value, spec) without a negative zero: a value that rounds to zero shows as
    0.0 (+0.0 when signed), never -0.0."""
    places = re.search(r"\.(\d+)([f%])", spec)
    if places is not None and round(value * (100 if places[2] == "%" else 1), int(places[1])) == 0:
        value = 0.0
    return format(value, spec)


def env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _integer_from(low: int, rule: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{rule} (got {value})")
        return value

    return parse


positive_int = _integer_from(1, "must be at least 1")
count = _integer_from(0, "must be 0 or more")  # an integer from 0


def _seconds_from(low: float, above: bool, rule: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not (value > low if above else value >= low):  # NaN too
            raise argparse.ArgumentTypeError(f"{rule} (got {text})")
        return value

    return parse


positive_seconds = _seconds_from(0, True, "must be above 0")
count_seconds = _seconds_from(0, False, "must be 0 or more")  # seconds, 0 allowed


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535 (got {value})")
    return value


def writable(*paths: str | None) -> None:
    """Raise what writing each of these files would raise (a missing directory, a
    directory in the way, no permission), before a long run writes them at its end.
    None and "-" (stdout) pass."""
    for path in paths:
        if path in (None, "-"):
            continue
        target = Path(path)  # type: ignore[arg-type]
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not target.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if not os.access(target if target.exists() else target.parent, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


def league_config(path: str | None) -> LeagueConfig:
    """The league configuration of --config. A file that cannot be read raises its OSError
    (main says which and why: FILE_ERROR); an invalid one stops the command (REFUSED)."""
    if path is None:
        return LeagueConfig.defaults()
    raw = Path(path).read_bytes()
    try:
        return LeagueConfig.from_toml(raw.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise SystemExit(f"ratings: {path}: not a league configuration: TOML is UTF-8 text") from None
    except ConfigError as exc:
        raise SystemExit(f"ratings: {exc}") from None


def kafka_security(command: str) -> Any:
    """KafkaSecurity from RATINGS_KAFKA_* (None for plaintext); a bad setting stops the command."""
    from ..security import KafkaSecurity, SecurityConfigError

    try:
        security = KafkaSecurity.from_env()
    except SecurityConfigError as exc:
        raise SystemExit(f"ratings {command}: {exc}") from None
    return security if security.protocol != "PLAINTEXT" else None


class Problems:
    """Lists the first LIST_PROBLEMS rejected lines on stderr and counts them all."""

    def __init__(self, quiet: bool, write: Callable[[str], None] | None = None):
        self.quiet = quiet
        self.write = write or (lambda text: print(text, file=sys.stderr))
        self.count = 0

    def add(self, line: int, error: Exception) -> None:
        self.count += 1
        if not self.quiet and self.count <= LIST_PROBLEMS:
            self.write(f"line {line}: {error}")

    def summary(self, what: str) -> None:
        if not self.quiet and self.count > LIST_PROBLEMS:
            print(f"... and {self.count - LIST_PROBLEMS:,} more {what}", file=sys.stderr)


def client_from(args: argparse.Namespace) -> Any:
    """A RatingsClient for the broker and topics of the flags; with --config, one that
    refuses before sending what a league's system cannot rate."""
    from ..client import RatingsClient

    config = league_config(args.config) if getattr(args, "config", None) is not None else None
    try:
        return RatingsClient.from_settings(settings_from(args), config=config)
    except ValueError as exc:  # a malformed --broker
        raise SystemExit(f"ratings {args.command}: {exc}") from None


def kafka_failed(args: argparse.Namespace, exc: BaseException) -> int:
    """Say, on stderr, why the broker could not be used and what to do; the exit status."""
    from ..client.kafka import KafkaSecurityError, NotAuthorized

    if isinstance(exc, (KafkaSecurityError, NotAuthorized)):  # their text says what to check, in one line
        print(f"ratings {args.command}: {args.broker}: {exc}", file=sys.stderr)
        return NOT_ALLOWED
    print(f"ratings {args.command}: cannot connect to {args.broker} ({_reason(exc)})\n"
          f"  Is a broker running there? Start one with `ratings broker`, or name yours with --broker or "
          f"RATINGS_BROKER.", file=sys.stderr)
    return UNREACHABLE


def _reason(exc: BaseException) -> str:
    """aiokafka's errors print as 'KafkaConnectionError: text': the text, or the name alone;
    an OSError's strerror ('Connection reset by peer')."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    text = str(exc.args[0]) if exc.args else ""
    return text or type(exc).__name__


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the parsed flags: every field that has a flag of its name, the
    league configuration, and Kafka security from the environment."""
    values = {f.name: getattr(args, f.name) for f in fields(Settings) if hasattr(args, f.name)}
    if "data_dir" in values:
        values["data_dir"] = Path(values["data_dir"])
    return Settings(**values, config_path=getattr(args, "config", None), security=kafka_security(args.command))


def command(sub: Any, name: str, func: Callable[[argparse.Namespace], int], help: str,
            description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose arguments run `func`."""
    parser = sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".")
    parser.set_defaults(func=func)
    return parser


def add_common_flags(parser: argparse.ArgumentParser, *, web: bool = False, data_dir: bool = False,
                     config: bool = False) -> None:
    """Broker, partitions and topic flags (plus, on request, web, data directory and league configuration).

    Defaults come from the environment variable named after each flag; argparse
    converts and checks them like command-line values.
    """
    group = parser.add_argument_group("Kafka (each flag defaults to the environment variable named in brackets)")
    group.add_argument("--broker", default=env("RATINGS_BROKER", DEFAULTS.broker), metavar="URL",
                       help="Kafka bootstrap URL, kafka://HOST:PORT[;HOST:PORT...] [RATINGS_BROKER] (default %(default)s)")
    group.add_argument("--partitions", type=positive_int, default=env("RATINGS_PARTITIONS", DEFAULTS.partitions),
                       metavar="N", help="partitions of topics created when missing [RATINGS_PARTITIONS] (default %(default)s)")
    group.add_argument("--match-topic", default=env("RATINGS_MATCH_TOPIC", DEFAULTS.match_topic), metavar="TOPIC",
                       help="match-result events [RATINGS_MATCH_TOPIC] (default %(default)s)")
    group.add_argument("--changes-topic", default=env("RATINGS_CHANGES_TOPIC", DEFAULTS.changes_topic), metavar="TOPIC",
                       help="rating-changed events [RATINGS_CHANGES_TOPIC] (default %(default)s)")
    group.add_argument("--dlq-topic", default=env("RATINGS_DLQ_TOPIC", DEFAULTS.dlq_topic), metavar="TOPIC",
                       help="dead letters: rejected match results [RATINGS_DLQ_TOPIC] (default %(default)s)")
    if web:
        group = parser.add_argument_group("HTTP")
        group.add_argument("--web-port", type=port, default=env("RATINGS_WEB_PORT", DEFAULTS.web_port), metavar="PORT",
                           help="HTTP API and metrics port [RATINGS_WEB_PORT] (default %(default)s)")
        group.add_argument("--web-host", default=env("RATINGS_WEB_HOST", DEFAULTS.web_host), metavar="HOST",
                           help="HTTP bind address [RATINGS_WEB_HOST] (default %(default)s)")
    if data_dir:
        parser.add_argument("--data-dir", default=env("RATINGS_DATA_DIR", f"./{DEFAULTS.data_dir}"), metavar="DIR",
                            help="local state (RocksDB tables) [RATINGS_DATA_DIR] (default %(default)s)")
    if config:
        parser.add_argument("--config", "-c", default=env("RATINGS_CONFIG", None), metavar="FILE",
                            help="league configuration (TOML) [RATINGS_CONFIG] (default: every league uses elo)")


def add_api_flags(parser: argparse.ArgumentParser) -> None:
    """Where the HTTP API is (any worker answers for any league; api_base() resolves it), and --json."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--web-port", type=port, metavar="PORT",
                       help=f"a worker's HTTP port on 127.0.0.1 [RATINGS_WEB_PORT] (default {DEFAULTS.web_port})")
    where.add_argument("--api", metavar="URL", help="the API base URL instead, e.g. http://worker-1:6066 [RATINGS_API]")
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def api_base(args: argparse.Namespace) -> str:
    """--api, else --web-port, else RATINGS_API, else RATINGS_WEB_PORT: a flag wins over both variables."""
    if args.api or (args.web_port is None and env("RATINGS_API", None)):
        return args.api or env("RATINGS_API", None)
    try:
        number = args.web_port or port(env("RATINGS_WEB_PORT", str(DEFAULTS.web_port)))
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"ratings {args.command}: RATINGS_WEB_PORT: {exc}") from None
    return f"http://127.0.0.1:{number}"
