"""`ratings`: the command line. Thin: parses flags and calls the library.
Offline commands are in offline.py, publishing ones in publish.py, the other
streaming ones in stream.py, shared flags in flags.py."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import offline, publish, stream
from .flags import DONE, FILE_ERROR, INTERRUPTED, NOT_ALLOWED, REFUSED, UNREACHABLE, exit_statuses


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratings", description="Streaming per-league ratings (Elo, multi-player Elo, Codeforces, Elo-MMR, Elo-MMchi, "
                                     "Glicko, Glicko-2, Weng-Lin).",
                                     epilog="The exit status of every command but worker, broker, kafka and demo: "
                                     + exit_statuses({REFUSED: "refused: the input or the request", NOT_ALLOWED: None,
                                                      UNREACHABLE: "no broker or no worker answered", FILE_ERROR: None}
                                                     ).removeprefix("Exit status: ")
                                     + " `ratings COMMAND --help` says what each means for it.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    offline.add_commands(sub)
    stream.add_commands(sub)
    publish.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or DONE
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        return DONE
    except OSError as exc:
        if exc.filename is None:  # not a file's: a bug to see whole
            raise
        # Any command's file (an input, an output, --config): which one and why, no traceback.
        print(f"ratings {args.command}: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return FILE_ERROR
