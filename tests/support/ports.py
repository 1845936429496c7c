"""Ports for the servers a test starts (brokers, workers' HTTP APIs, Prometheus).

The suite runs in several pytest-xdist processes at once. A port from the kernel
(bind to 0) comes out of the ephemeral range, which every outgoing connection of
every process also draws from, and two processes asking at once can be handed the
same one. Each test process takes its ports from a block of its own below that
range instead, in turn, skipping any that something listens on.
"""

from __future__ import annotations

import itertools
import os

from stream_app.processes import HOST, port_free

FIRST = 20_000
BLOCK = 750  # ports per test process; 16 blocks end at 31,999, below Linux's ephemeral range (32,768 up)
BLOCKS = 16
# A pytest run started by a test (tests/deploy/test_compile.py) is given a block of its own.
BLOCK_VARIABLE = "RATINGS_TESTS_PORT_BLOCK"


def block_index() -> int:
    """This process's block: $RATINGS_TESTS_PORT_BLOCK, else the xdist worker's number
    (gw0: 0, gw1: 1, ...; 0 without xdist)."""
    chosen = os.environ.get(BLOCK_VARIABLE) or os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return int(chosen) % BLOCKS


_block_start = FIRST + BLOCK * block_index()
_turn = itertools.cycle(range(_block_start, _block_start + BLOCK))


def free_port(host: str = HOST) -> int:
    """The next port of this process's block that nothing listens on."""
    for _ in range(BLOCK):
        port = next(_turn)
        if port_free(host, port):
            return port
    raise RuntimeError(f"no free port in {_block_start}-{_block_start + BLOCK - 1}")
