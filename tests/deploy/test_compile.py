"""deploy/compile.py: the per-match path compiled by mypyc behaves as the plain
Python it is built from. The rest of the suite tests the plain Python; this
builds the compiled copy once and runs the tests of that path on it, with the
end-to-end test in which real worker processes (compiled too) end equal to the
replay."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ports

ROOT = Path(__file__).resolve().parent.parent.parent
spec = importlib.util.spec_from_file_location("compile", ROOT / "deploy" / "compile.py")
compile_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compile_script)

# The tests of what compiling can change: the compiled modules' own tests, the fuzz of
# the record handling, the replay (which applies matches through them) and the stream
# against the replay with real workers, compiled too. In parts, so that pytest-xdist
# runs them side by side.
SUITE = {
    "units": ["tests/stream/test_records.py", "tests/stream/test_transaction.py", "tests/stream/test_commit.py",
              "tests/stream/test_changelog.py", "tests/stream/test_store.py", "tests/stream/test_observe.py",
              "tests/test_inputs.py", "tests/test_inputs_fast.py", "tests/test_rating.py", "tests/test_rerate.py",
              "tests/test_seasons.py"],
    "fuzz": ["tests/stream/test_records_fuzz.py"],
    "replay": ["tests/offline"],
    "workers": ["tests/e2e/test_stream_e2e.py::test_stream_equals_replay_with_events_dead_letters_and_metrics",
                "tests/e2e/test_corrections.py"],
}

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler (.ci/run installs gcc)")


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> Path:
    """Built once per run: the first test process to get here builds it, under a lock
    the others wait on (the parent of each process's temporary directory is the run's)."""
    import fcntl

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    target, done = shared / "compiled", shared / "compiled.done"
    with open(shared / "compiled.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            compile_script.build(target)
            (target / "tests").symlink_to(ROOT / "tests")  # see test_the_compiled_path_passes_its_tests
            done.touch()
    return target


def test_every_listed_module_is_built_as_an_extension(compiled):
    built = {path.relative_to(compiled).as_posix().split(".")[0] for path in compiled.rglob("stream_app/**/*.so")}
    assert built == {path.removesuffix(".py") for path in compile_script.MODULES}
    assert (compiled / "stream_app" / "schemas" / "match-result.v1.json").exists()


def test_without_the_copy_on_the_path_the_package_is_plain_python():
    # (this suite's own process: what `make test` tests)
    from stream_app.stream.observe import compiled_modules

    assert compiled_modules() == []


@pytest.mark.parametrize("part", list(SUITE))
def test_the_compiled_path_passes_its_tests_and_the_stream_equals_the_replay(compiled, part, tmp_path):
    names = ",".join(module_name(path) for path in compile_script.MODULES)
    # The tests run from the copy (through a link to tests/), so that the directory pytest
    # puts first on the path holds the compiled package, not the checkout's. PYTHONSAFEPATH:
    # the workers they start (in the checkout) do not put their directory first either.
    env = {**os.environ, "PYTHONPATH": str(compiled), "PYTHONSAFEPATH": "1", "RATINGS_EXPECT_COMPILED": names}
    # A plain pytest run, its ports a block no test process of this run uses.
    env.pop("PYTEST_XDIST_WORKER", None)
    env[ports.BLOCK_VARIABLE] = str(ports.block_index() + ports.BLOCKS // 2)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(compiled),
                           "--basetemp", str(tmp_path / "run"),
                           "-c", str(ROOT / "pyproject.toml"), *SUITE[part]], cwd=compiled, env=env,
                          capture_output=True, text=True, timeout=1800)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary, summary
