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

ROOT = Path(__file__).resolve().parent.parent.parent
spec = importlib.util.spec_from_file_location("compile", ROOT / "deploy" / "compile.py")
compile_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compile_script)

# The tests of the compiled modules' behaviour: the engine's path through the stream
# layer, the replay's, and the stream against the replay with real workers.
SUITE = [
    "tests/stream/test_records.py", "tests/stream/test_transaction.py", "tests/stream/test_commit.py",
    "tests/stream/test_changelog.py", "tests/stream/test_store.py", "tests/stream/test_observe.py",
    "tests/test_inputs.py", "tests/test_inputs_fast.py", "tests/test_rating.py", "tests/test_rerate.py",
    "tests/test_seasons.py",
    "tests/stream/test_records_fuzz.py", "tests/offline",
    "tests/e2e/test_stream_e2e.py::test_stream_equals_replay_with_events_dead_letters_and_metrics",
    "tests/e2e/test_corrections.py",
]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler (.ci/run installs gcc)")


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("compiled")
    compile_script.build(target)
    return target


def test_every_listed_module_is_built_as_an_extension(compiled):
    built = {path.relative_to(compiled).as_posix().split(".")[0] for path in compiled.rglob("stream_app/**/*.so")}
    assert built == {path.removesuffix(".py") for path in compile_script.MODULES}
    assert (compiled / "stream_app" / "schemas" / "match-result.v1.json").exists()


def test_without_the_copy_on_the_path_the_package_is_plain_python():
    # (this suite's own process: what `make test` tests)
    from stream_app.stream.observe import compiled_modules

    assert compiled_modules() == []


def test_the_compiled_path_passes_its_tests_and_the_stream_equals_the_replay(compiled):
    names = ",".join(module_name(path) for path in compile_script.MODULES)
    # The tests run from the copy (through a link), so that the directory pytest puts
    # first on the path holds the compiled package, not the checkout's. PYTHONSAFEPATH:
    # the workers they start (in the checkout) do not put their directory first either.
    (compiled / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "PYTHONPATH": str(compiled), "PYTHONSAFEPATH": "1", "RATINGS_EXPECT_COMPILED": names}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(compiled),
                           "-c", str(ROOT / "pyproject.toml"), *SUITE], cwd=compiled, env=env, capture_output=True,
                          text=True, timeout=1800)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary, summary
