"""The worker's metrics (stream/observe.py)."""

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from stream_app.stream.observe import BatchHistogram

BUCKETS = (0.5, 1, 2, 4, 8, 16, float("inf"))


def _samples(registry: CollectorRegistry) -> list[str]:
    # The exposition's sample lines, minus prometheus_client's _created timestamps.
    return [line for line in generate_latest(registry).decode().splitlines()
            if line and not line.startswith("#") and "_created" not in line]


def test_a_batch_histogram_exposes_what_prometheus_clients_histogram_would_for_the_same_values():
    rng = random.Random(4)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("x_size", "sizes", ["algorithm"], BUCKETS, registry=ours)
    single = Histogram("x_size", "sizes", ["algorithm"], buckets=BUCKETS, registry=theirs)
    for algorithm in ("elo", "glicko2", "elo"):
        # Values on the bounds themselves, beyond the last, zero, and ordinary ones.
        values = [float(b) for b in BUCKETS[:-1]] + [0.0, 100.0] + [rng.uniform(0, 20) for _ in range(50)]
        batch.observe_many((algorithm,), values)
        for value in values:
            single.labels(algorithm).observe(value)
    lines = _samples(ours)
    assert lines == _samples(theirs)
    assert 'x_size_bucket{algorithm="elo",le="0.5"} 4.0' in lines  # 0.5 itself counts in le="0.5", twice over
    assert any(line.startswith('x_size_count{algorithm="glicko2"} 58.0') for line in lines)
