"""A worker's log at a rebalance: aiokafka's lines that Faust's formatter draws as
tables (the partitions assigned and revoked, the topics subscribed) become one
line, the new assignment, its partitions compact (stream/app.py RebalanceLines).
A real rebalance of two workers: tests/e2e/test_reads.py."""

from __future__ import annotations

import io
import logging

import faust.worker  # noqa: F401  (registers Faust's table formatting of log arguments)
import pytest
from aiokafka.structs import TopicPartition
from mode.utils.logging import ExtensionFormatter

from stream_app.stream.app import RebalanceLines, compact_partitions

ASSIGNED = {TopicPartition("match-results", p) for p in (4, 5, 6, 7, 1)} | {TopicPartition("by-league", 0)}


@pytest.fixture
def logged():
    """What the aiokafka consumer's loggers write through Faust's formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ExtensionFormatter(stream=stream, fmt="%(message)s"))
    loggers = [logging.getLogger(name) for name in RebalanceLines.LOGGERS]
    saved = [(logger.level, logger.propagate, list(logger.filters)) for logger in loggers]
    for logger in loggers:
        logger.filters[:] = []  # none another test installed (the broker watch's drops repeated warnings)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    yield stream
    for logger, (level, propagate, filters) in zip(loggers, saved):
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.filters[:] = filters


def rebalance() -> None:
    """aiokafka's own INFO lines of a rebalance, as it logs them (its format strings)."""
    coordinator, subscription, consumer = (logging.getLogger(name) for name in RebalanceLines.LOGGERS)
    subscription.info("Updating subscribed topics to: %s", frozenset({"match-results", "by-league"}))
    consumer.info("Subscribed to topic(s): %s", {"match-results", "by-league"})
    coordinator.info("Revoking previously assigned partitions %s for group %s", set(ASSIGNED), "ratings")
    coordinator.info("Setting newly assigned partitions %s for group %s", set(ASSIGNED), "ratings")
    coordinator.warning("Heartbeat failed for group %s because it is rebalancing", "ratings")


def test_without_the_filter_faust_draws_tables(logged):
    rebalance()
    assert logged.getvalue().count("+----") >= 8  # what the worker's log was full of


def test_a_rebalance_logs_one_line_of_what_was_assigned(logged):
    RebalanceLines.install()
    RebalanceLines.install()  # once per logger, however often
    assert all(sum(isinstance(f, RebalanceLines) for f in logging.getLogger(name).filters) == 1
               for name in RebalanceLines.LOGGERS)
    rebalance()
    assert logged.getvalue().splitlines() == [
        "Setting newly assigned partitions by-league 0, match-results 1,4-7 for group ratings",
        "Heartbeat failed for group ratings because it is rebalancing"]


def test_partitions_are_said_as_runs():
    assert compact_partitions([]) == "none"
    assert compact_partitions({TopicPartition("t", p) for p in (0, 1, 2, 4, 6, 7)}) == "t 0-2,4,6-7"
