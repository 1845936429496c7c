"""The suite's own rules (tests/conftest.py), run on a test file of their own in a pytest
of its own: under RATINGS_TESTS_FAIL_ON_SKIP (.ci/run) a skipped test fails and says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each starts a pytest that imports the suite's fixtures (5 s): make test runs them, make check does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

SKIPPING = """
import pytest

def test_skips():
    pytest.skip("no frobnicator: apt-get install frobnicator")

def test_passes():
    pass
"""


def run_pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--rootdir", str(tmp_path), str(tmp_path / "test_skipping.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("RATINGS_TESTS_")} | env)


def test_a_skip_fails_under_fail_on_skip_and_names_its_reason(tmp_path):
    done = run_pytest(tmp_path, RATINGS_TESTS_FAIL_ON_SKIP="1")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout
    assert "skipped under RATINGS_TESTS_FAIL_ON_SKIP" in done.stdout and "apt-get install frobnicator" in done.stdout


def test_a_skip_is_a_skip_elsewhere(tmp_path):
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 skipped" in done.stdout
