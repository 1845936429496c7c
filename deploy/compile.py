"""Compile the worker's per-match path with mypyc into a copy of the package.

    python deploy/compile.py [DIRECTORY]      (default: build/compiled)

DIRECTORY gets a copy of stream_app/ in which the modules below are C extensions
built by mypyc from the same typed source; the rest stay Python. Run anything
with PYTHONPATH=DIRECTORY to use it (`ratings worker`, the tests, the benchmarks);
without it the package runs as plain Python. The copy does not follow later edits:
build it again. Needs mypy (the dev extra) and a C compiler.

Only modules without async code, on the path of every match: parsing, applying,
the tables, the transaction, the changelog's records, the batch's metrics.
docs/performance.md has what compilation gains.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "stream_app/inputs.py",
    "stream_app/apply.py",
    "stream_app/rating/records.py",
    "stream_app/rating/applied.py",
    "stream_app/rating/errors.py",
    "stream_app/rating/ports.py",
    "stream_app/rating/history.py",
    "stream_app/rating/log_rows.py",
    "stream_app/rating/snapshots.py",
    "stream_app/rating/tiers.py",
    "stream_app/rating/season_step.py",
    "stream_app/rating/match_step.py",
    "stream_app/rerate.py",
    "stream_app/published.py",
    "stream_app/stream/records.py",
    "stream_app/state/league_tables.py",
    "stream_app/state/tables.py",
    "stream_app/stream/transaction.py",
    "stream_app/stream/changelog.py",
    "stream_app/stream/partitioner.py",
    "stream_app/stream/observe.py",
    "stream_app/stream/store.py",
)

# Run in the copy: mypyc type-checks the modules (following imports of the rest
# silently), writes C, and setuptools builds the extensions next to their sources.
_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
setup(name="stream-app-compiled", packages=[], py_modules=[], script_args=["build_ext", "--inplace"],
      ext_modules=mypycify(["--follow-imports=silent", "--ignore-missing-imports", *sys.argv[1:]],
                           group_name="stream_app_compiled"))
"""


def build(target: Path) -> list[Path]:
    """A copy of the package in `target`, with MODULES compiled; the extensions built."""
    target = target.resolve()
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(ROOT / "stream_app", target / "stream_app", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "schemas", target / "stream_app" / "schemas")  # where an installed package has them
    # As in a checkout: stream_app/kafka_broker.py finds Kafka's POM and broker settings there.
    shutil.copytree(ROOT / "deploy" / "kafka", target / "deploy" / "kafka")
    done = subprocess.run([sys.executable, "-c", _SETUP, *MODULES], cwd=target, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "error" in line]
        raise RuntimeError("mypyc failed:\n" + "\n".join(errors[-30:] or done.stderr.splitlines()[-30:]))
    shutil.rmtree(target / "build", ignore_errors=True)  # the C sources and objects
    return sorted(target.rglob("*.so"))


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else ROOT / "build" / "compiled")
    started = time.monotonic()
    print(f"compiling {len(MODULES)} modules with mypyc into {target} ...", flush=True)
    try:
        built = build(target)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"built {len(built)} extensions in {time.monotonic() - started:.0f} s; "
          f"use them with PYTHONPATH={target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
