"""`ratings`: the command line. Thin: parses flags and calls the library.
Offline commands are in offline.py, publishing ones in publish.py, the other
streaming ones in stream.py, shared flags in flags.py."""

from __future__ import annotations

import argparse
from typing import Sequence

from . import offline, publish, stream


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratings", description="Streaming per-league ratings (Elo, multi-player Elo, Codeforces, Elo-MMR, Elo-MMchi, "
                                     "Glicko, Glicko-2, Weng-Lin).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    offline.add_commands(sub)
    stream.add_commands(sub)
    publish.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
