"""The suite's time per directory of tests, from a pytest run's `--durations=0` report:
`python -m tests.support.timings LOG` prints the table docs/development.md keeps
(tests, and the seconds their setup, call and teardown took, summed: under
pytest-xdist the directories overlap, so the sums add up to more than the run)."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(tests/\S+?)::(.+?)\s*$")


def directory(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) + "/" if len(parts) > 2 else "tests/test_*.py"


def table(text: str) -> str:
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, set[str]] = defaultdict(set)
    for line in text.splitlines():
        found = LINE.match(line)
        if found:
            took, _, path, name = found.groups()
            seconds[directory(path)] += float(took)
            tests[directory(path)].add(f"{path}::{name}")
    rows = ["| tests | count | seconds (summed) |", "|---|---|---|"]
    for name in sorted(seconds, key=seconds.get, reverse=True):
        rows.append(f"| `{name}` | {len(tests[name])} | {seconds[name]:,.0f} |")
    rows.append(f"| all | {sum(map(len, tests.values()))} | {sum(seconds.values()):,.0f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]).read_text(errors="replace")))
