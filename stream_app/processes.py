"""Child processes of the service on this machine: free ports, processes that
die with their parent, and `WorkerProcess`, a `ratings worker` as a child
process (used by `ratings demo`, the tests and the benchmarks)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


def free_port(host: str = HOST) -> int:
    """A TCP port that was free a moment ago (bind to port 0, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_free(host: str, port: int | None) -> bool:
    """Nothing listens on host:port. With SO_REUSEADDR, as servers bind: the connections of
    a stopped server that wait in TIME_WAIT for about a minute do not count as a listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port or 0))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Meanwhile SIGTERM raises KeyboardInterrupt: `kill` stops a foreground command
    (`ratings broker`, `ratings kafka`) as cleanly as Ctrl-C."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(parent_pid: int) -> None:
    """preexec_fn: SIGKILL this child when its parent (the thread that forked it) dies.

    Runs between fork and exec: async-signal-safe calls only, no allocation-heavy work.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # not Linux: the process group and atexit still apply
        return
    # The parent may have died between fork and prctl: then nobody will signal us.
    if os.getppid() != parent_pid:
        os._exit(1)


def dies_with_this_process() -> Callable[[], None] | None:
    """A preexec_fn that ties a child's life to this process (None where Linux's prctl is missing)."""
    parent = os.getpid()
    return (lambda: die_with_parent(parent)) if sys.platform.startswith("linux") else None


def listener_owned_by(pid: int, host: str, port: int | None) -> bool | None:
    """Does process `pid` hold the socket listening on host:port? None when /proc cannot tell."""
    try:
        wanted = {f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}", f"00000000:{port:04X}"}
        inodes = set()
        with open("/proc/net/tcp") as table:
            next(table)
            for row in table:
                fields = row.split()
                if fields[1] in wanted and fields[3] == "0A":  # 0A: LISTEN
                    inodes.add(fields[9])
        if not inodes:
            return None
        fds = Path(f"/proc/{pid}/fd")
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
        return False
    except (OSError, ValueError, StopIteration):
        return None


def port_open(host: str, port: int | None) -> bool:
    if port is None:
        return False
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class WorkerProcess:
    """`ratings worker` as a child process in its own process group, with its own
    HTTP port and data directory; its output goes to `log_path`."""

    def __init__(self, broker_url: str, data_dir: Path, log_path: Path, *, args: list[str] = (),
                 port: int | None = None, env: dict[str, str] | None = None, cwd: Path | None = None):
        self.port = port or free_port()
        self.data_dir = data_dir
        self.log_path = log_path
        argv = [sys.executable, "-m", "stream_app.cli", "worker", "--broker", broker_url,
                "--data-dir", str(data_dir), "--web-port", str(self.port), *args]
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                     start_new_session=True, preexec_fn=dies_with_this_process())

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        """(HTTP status, JSON body or text); (0, None) when the worker does not answer."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as reply:
                body = reply.read()
                status = reply.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(), exc.code
        except (urllib.error.URLError, OSError):
            return 0, None
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode()

    def health(self) -> dict[str, Any] | None:
        status, body = self.get("/health", timeout=2)
        return body if status == 200 else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the process group; SIGKILL it after `timeout` seconds. Returns the exit status."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def exit_unless_done(seconds: float, message: str) -> None:
    """Exit this process (status 1, `message` logged with the seconds) in `seconds`,
    whatever it is doing: for a stop that can hang (a worker's, with the broker gone,
    waits for it without end)."""
    def exit_now() -> None:
        logging.getLogger(__name__).error(message, seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()
