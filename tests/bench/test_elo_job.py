"""The benchmarks' plain Elo job (bench/elo_job.py) does the worker's output work:
byte for byte the rating-changed events a worker publishes for the same matches."""

import random

import orjson

from bench import elo_job
from stream_app.leagues import LeagueConfig
from stream_app.offline.sample import two_player_league
from stream_app.stream.changelog import Checkpoint
from stream_app.stream.records import RecordHandler
from stream_app.state.tables import tables_for
from stream_app.stream.transaction import PartitionTransaction

CONFIG = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
TOPIC = "match-results"


def test_the_plain_job_publishes_the_workers_bytes_for_every_participant():
    rng = random.Random(5)
    matches = [e for league in ("elo-a", "elo-b") for e in two_player_league(league, 20, 300, rng)]
    handler = RecordHandler(CONFIG, 1, TOPIC + "-by-league")
    state = PartitionTransaction(0, Checkpoint(), lambda key: None, tables_for(CONFIG))
    leagues: dict[str, dict] = {}
    draws = 0
    for offset, doc in enumerate(matches):
        outcome = handler.handle(state, TOPIC, 0, offset, doc["league"].encode(), orjson.dumps(doc))
        worker = [(o.kind, o.key, o.value) for o in outcome.outputs]
        plain = elo_job.rate(leagues.setdefault(doc["league"], {}), doc)
        assert worker == [("change", doc["league"].encode(), value) for value in plain]
        draws += doc["participants"][0]["rank"] == doc["participants"][1]["rank"]
    assert draws > 0  # ties were among them
    assert leagues["elo-a"][matches[0]["participants"][0]["player"]][1] > 1  # players met again
