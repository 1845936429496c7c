"""A worker that cannot start says why in one line and exits with status 1, no
traceback: its web port taken, or a web host it cannot listen on. (No broker is
needed: the port is tried before the broker. A broker that cannot be reached:
tests/cli/test_cli.py.)"""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.support.ports import free_port
from tests.support.workers import ROOT


def start_worker(tmp_path, *args: str) -> subprocess.CompletedProcess:
    nothing_there = free_port()
    return subprocess.run([sys.executable, "-m", "stream_app.cli", "worker", "--broker", f"kafka://127.0.0.1:{nothing_there}",
                           "--data-dir", str(tmp_path / "d"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_taken_web_port_is_one_line_and_exit_status_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = start_worker(tmp_path, "--web-port", str(port))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (f"ratings worker: web port {port} on 127.0.0.1 is already in use (another worker?): "
                           "choose another with --web-port (RATINGS_WEB_PORT)\n")


def test_a_web_host_not_of_this_machine_is_one_line_and_exit_status_1(tmp_path):
    port = free_port()
    done = start_worker(tmp_path, "--web-host", "192.0.2.1", "--web-port", str(port))  # TEST-NET-1: nobody's
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ratings worker: cannot serve the API on 192.0.2.1:{port}: ")
