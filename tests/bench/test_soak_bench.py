"""The soak benchmark's figure and input (bench/soak_bench.py); the whole run
takes an hour and is `python -m bench --only soak`'s."""

from itertools import islice

import orjson
import pytest

from bench import soak_bench
from stream_app.inputs import parse_input


def samples(rss):
    return [{"t_s": 60.0 * k, "worker_rss_mib": value} for k, value in enumerate(rss)]


def test_growth_is_the_slope_of_the_second_half_in_mib_per_hour():
    # A first half that climbs (warming up) does not count; the second climbs 1 MiB a minute.
    rss = [100, 200, 300, 400, 500, 500, 501, 502, 503, 504]
    assert soak_bench.growth_per_hour(samples(rss)) == pytest.approx(60.0)
    assert soak_bench.growth_per_hour(samples([300] * 10)) == pytest.approx(0.0, abs=1e-9)
    assert soak_bench.growth_per_hour(samples([300, 301, 302, 303])) is None  # too few samples to fit


def test_the_input_is_valid_keyed_two_player_results_round_robin_over_the_leagues():
    records = list(islice(soak_bench.matches(), 2 * soak_bench.LEAGUES))
    leagues = [key.decode() for key, _ in records]
    assert leagues[: soak_bench.LEAGUES] == [f"soak-{k:02d}" for k in range(soak_bench.LEAGUES)]
    assert leagues[soak_bench.LEAGUES:] == leagues[: soak_bench.LEAGUES]
    for key, value in records:
        match = parse_input(value)
        assert match.league == key.decode() and len(match.participants) == 2
    assert len({orjson.loads(value)["match_id"] for _, value in records}) == len(records)


def test_rocksdbs_memory_is_read_from_the_workers_metrics_by_kind():
    class StubWorker:
        def __init__(self, status, text):
            self.reply = status, text

        def get(self, path, timeout):
            assert path == "/metrics"
            return self.reply

    text = ("# HELP ratings_local_store_memory_bytes ...\n"
            'ratings_local_store_memory_bytes{kind="memtables"} 2.097152e+06\n'
            'ratings_local_store_memory_bytes{kind="block_cache"} 1048576.0\n'
            'ratings_checkpoints_total 3.0\n')
    assert soak_bench.store_memory(StubWorker(200, text)) == {"store_memtables_mib": 2.0, "store_block_cache_mib": 1.0}
    assert soak_bench.store_memory(StubWorker(0, None)) == {}
