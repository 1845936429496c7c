"""`make bench`: every benchmark prints its figure next to a baseline measured
in the same run, because these machines are noisy; results go to JSON."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from . import (accuracy_bench, changelog_bench, corrections_bench, mmr_bench, profile_bench, reads_bench, recovery_bench,
               replay_bench, soak_bench, stream_bench, systems_bench)

BENCHES = {"replay": replay_bench.run, "mmr": mmr_bench.run, "stream": stream_bench.run,
           "corrections": corrections_bench.run, "changelog": changelog_bench.run,
           "recovery": recovery_bench.run,
           "reads": reads_bench.run, "accuracy": accuracy_bench.run,
           "systems": systems_bench.run,
           "profile": lambda: profile_bench.run(plot_to=profile_bench.PROFILE_PNG),  # (docs/profile.png drawn again)
           "soak": soak_bench.run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)")
    parser.add_argument("--output", default="bench/results.json")
    args = parser.parse_args(argv)
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    for name in args.only or list(BENCHES):
        print(f"== {name}", flush=True)
        results[name] = BENCHES[name]()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
