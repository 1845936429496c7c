"""What the changelog costs per match: records and bytes a two-player `elo`
match writes to the changelog topic, with history on (the default), against
the input itself measured in the same run (the bytes of the results read).

30,000 two-player matches over 10 leagues of 1,000 players, applied by the
batch loop (stream/batch_loop.py) in batches of 2,000 on a real local store, the
broker in memory (streamtools.RecordingBroker): the figures are the worker's own
records, keys and values (Kafka's per-record overhead and compression not
counted), before any compaction.

The second stage, `corrections`, is the issue #45 scenario: 12,800 two-player
`elo` results in five leagues of 60 to 150 players, with a void or a correction
of one of the league's last 1,000 matches after about every 50th result. It is
applied twice, without bases (`--base-after 0`) and with the default, each time
counting the changelog records written and those it holds (the records each base
deleted before it gone), against the local store's keys; and what it holds is
taken up into an empty store, timed, and compared with the worker's store, key by key.

    python -m bench.changelog_bench [--matches N] [--leagues N] [--players N] [--only entries|corrections]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from stream_app.leagues import LeagueConfig
from stream_app.settings import Settings
from stream_app.offline.sample import two_player_league
from stream_app.stream.intake import InputRecord

from stream_app.stream.store import CHECKPOINT_KEY

from .streamtools import BATCH, batch_loop

KINDS = {b"X": "packed rows", b"Q": "packed rows (zlib, earlier releases)",
         b"P": "packed rows (uncompressed, earlier releases)", b"E": "entries (earlier releases)",
         b"R": "rows (earlier releases)", b"D": "rows (format before entries)", b"C": "checkpoints", b"F": "fences",
         b"S": "starts", b"B": "base openings", b"Z": "base ends"}


def _records(matches: int, leagues: int, players: int) -> list[InputRecord]:
    rng = random.Random(5)
    streams = [iter(two_player_league(f"league-{n}", players, matches // leagues, rng)) for n in range(leagues)]
    events = [event for group in zip(*streams) for event in group]  # the leagues interleaved, as they arrive
    return [InputRecord("matches", 0, i, e["league"].encode(), orjson.dumps(e), 0) for i, e in enumerate(events)]


def run(matches: int = 30_000, leagues: int = 10, players: int = 1_000, only: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if only in (None, "entries"):
        out.update(entries(matches, leagues, players))
    if only in (None, "corrections"):
        out["corrections"] = corrections()
    return out


def entries(matches: int, leagues: int, players: int) -> dict[str, Any]:
    records = _records(matches, leagues, players)
    matches = len(records)
    directory = Path(tempfile.mkdtemp(prefix="changelog-bench-"))
    try:
        config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
        _, store, broker, topic = asyncio.run(batch_loop(directory, config, records))
        # The state itself: what a changelog keyed by state key would hold once cleaned.
        live = [(key, value) for key, value in store.scan(0, b"") if key != CHECKPOINT_KEY]
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    changelog = broker.logs[(topic, 0)]
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for key, value in changelog:
        kind = KINDS.get(value[:1], value[:1].decode())
        count[kind] += 1
        size[kind] += len(key) + len(value)
    input_bytes = sum(len(r.key) + len(r.value) for r in records)
    out = {"matches": matches, "leagues": leagues, "players": players, "records_by_kind": dict(count),
           "bytes_by_kind": dict(size), "records_per_match": sum(count.values()) / matches,
           "bytes_per_match": sum(size.values()) / matches, "input_bytes_per_match": input_bytes / matches}
    out["ratio_to_input"] = out["bytes_per_match"] / out["input_bytes_per_match"]
    cleaned = _cleaned(changelog, broker.firsts.get((topic, 0), 0))
    out["bytes_per_match_cleaned"] = sum(len(key) + len(value) for _, key, value in cleaned) / matches
    out["records_per_match_cleaned"] = len(cleaned) / matches
    out["state_keys"] = len(live)
    out["state_bytes_per_match"] = sum(len(key) + len(value) for key, value in live) / matches
    print(f"changelog: {matches:,} two-player elo matches, {leagues} leagues of {players:,} players, history on, "
          f"batches of {BATCH:,}", flush=True)
    for kind in sorted(count, key=lambda k: -size[k]):
        print(f"  {kind:<12} {count[kind] / matches:6.3f} records, {size[kind] / matches:6.1f} bytes per match")
    print(f"  per match: {out['records_per_match']:.3f} records, {out['bytes_per_match']:.1f} bytes; the input "
          f"{out['input_bytes_per_match']:.1f} bytes (ratio {out['ratio_to_input']:.2f})", flush=True)
    print(f"  per million matches: {out['bytes_per_match']:.0f} MB before a log cleaner's pass, "
          f"{out['bytes_per_match_cleaned']:.0f} MB after it ({out['records_per_match_cleaned']:.3f} records a match: "
          "every record has a key of its own, and no base was due)", flush=True)
    print(f"  the local store at the end: {len(live):,} keys, {out['state_bytes_per_match']:.1f} bytes per match "
          "(what a changelog keyed by state key would hold once cleaned)", flush=True)
    return out


def _corrections_records() -> list[InputRecord]:
    rng = random.Random(45)
    sizes = (60, 80, 100, 125, 150)
    streams = [iter(two_player_league(f"league-{n}", players, 12_800 // len(sizes), rng)) for n, players in enumerate(sizes)]
    events = [event for group in zip(*streams) for event in group]
    docs: list[dict[str, Any]] = []
    applied: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        docs.append(event)
        applied.setdefault(event["league"], []).append(event)
        if rng.random() < 1 / 50:
            target = rng.choice(applied[event["league"]][-1_000:])
            if rng.random() < 0.5:
                docs.append({"schema": "match-voided.v1", "league": target["league"], "match_id": target["match_id"],
                             "reason": "bench"})
                applied[event["league"]].remove(target)
            else:
                swapped = [{"player": p["player"], "rank": 3 - p["rank"]} for p in target["participants"]]
                docs.append({"schema": "match-corrected.v1", "league": target["league"], "match_id": target["match_id"],
                             "reason": "bench", "participants": swapped})
                target["participants"] = swapped
    return [InputRecord("matches", 0, i, d["league"].encode(), orjson.dumps(d), 0) for i, d in enumerate(docs)]


def _rows(records: list[tuple[int, bytes, bytes]]) -> int:
    """The data the records hold: a packed record counted as its rows, any other record as one."""
    from stream_app.stream.changelog import DATA_START, PACKED, packed_count

    return sum(packed_count(value[DATA_START:]) if value[0] in PACKED else 1 for _, _, value in records)


def _cleaned(log: list[tuple[bytes, bytes | None]], first: int) -> list[tuple[int, bytes, bytes]]:
    """What the changelog holds: the records from its first offset on (a base deletes those before it)."""
    return [(offset, key, value) for offset, (key, value) in enumerate(log) if offset >= first]


class _Records:
    """A changelog partition's records as a take-up reads them (stream/commit.py's ChangelogTopic)."""

    def __init__(self, records: list[tuple[int, bytes, bytes]]):
        self.records = records

    async def read(self, topic: str, partition: int, start: int, end: int) -> Any:
        yield [record for record in self.records if start <= record[0] < end]


def corrections() -> dict[str, Any]:
    from stream_app.stream.changelog import ChangelogRule
    from stream_app.stream.commit import Committer
    from stream_app.stream.records import RecordHandler
    from stream_app.stream.store import LocalStore
    from stream_app.state.tables import tables_for

    records = _corrections_records()
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\n')
    print(f"changelog, corrections: {len(records):,} inputs (12,800 results in five leagues, voids and corrections), "
          "batches of 2,000", flush=True)
    out: dict[str, Any] = {"inputs": len(records)}
    for case, base_after in (("without bases", 0), ("with bases", Settings().base_after)):
        directory = Path(tempfile.mkdtemp(prefix="changelog-bench-"))
        try:
            seconds, store, broker, topic = asyncio.run(batch_loop(directory / "worker", config, records,
                                                                  base_after=base_after))
            live = dict(store.scan(0, b""))
            keys = len(live) - 1  # the checkpoint aside
            log = broker.logs[(topic, 0)]
            cleaned = _cleaned(log, broker.firsts.get((topic, 0), 0))
            # An empty directory takes what the changelog holds up: a take-up's reading and storing.
            empty = LocalStore(directory / "empty")
            taker = Committer(empty, None, _Records(cleaned), topic, {}, tables_for(config),
                              RecordHandler(config, 1, "matches-by-league").deriver)
            started = time.perf_counter()
            asyncio.run(taker.read_changelog(0, ChangelogRule(), len(log)))
            take_up = time.perf_counter() - started
            same = {k: v for k, v in empty.scan(0, b"") if k != CHECKPOINT_KEY} == \
                   {k: v for k, v in live.items() if k != CHECKPOINT_KEY}
            store.close()
            empty.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        row = {"seconds": seconds, "records": len(log), "bytes": sum(len(k) + len(v or b"") for k, v in log),
               "records_cleaned": len(cleaned), "bytes_cleaned": sum(len(k) + len(v) for _, k, v in cleaned),
               "rows_cleaned": _rows(cleaned),
               "tombstones": sum(v is None for _, v in log), "local_keys": keys,
               "local_bytes": sum(len(k) + len(v) for k, v in live.items() if k != CHECKPOINT_KEY),
               "take_up_s": take_up, "take_up_equals_worker": same}
        row["cleaned_to_keys"] = row["records_cleaned"] / keys
        row["rows_cleaned_to_keys"] = row["rows_cleaned"] / keys
        out[case] = row
        print(f"  {case:<14} applied in {seconds:5.1f} s; changelog {row['records']:,} records, "
              f"{row['bytes'] / 1e6:.1f} MB ({row['tombstones']:,} tombstones); held after the bases' deletions "
              f"{row['records_cleaned']:,} records ({row['rows_cleaned']:,} counting a packed record's rows "
              f"each: {row['rows_cleaned_to_keys']:.2f} x), {row['bytes_cleaned'] / 1e6:.1f} MB, "
              f"{row['cleaned_to_keys']:.2f} x the {keys:,} local keys ({row['local_bytes'] / 1e6:.1f} MB); "
              f"empty-directory take-up {take_up:.2f} s, {'equal to' if same else 'DIFFERENT from'} the worker's store",
              flush=True)
    without, with_ = out["without bases"], out["with bases"]
    out["take_up_ratio"] = with_["take_up_s"] / without["take_up_s"]
    out["cleaned_ratio"] = with_["records_cleaned"] / without["records_cleaned"]
    print(f"  with bases / without: cleaned changelog {out['cleaned_ratio']:.3f} x, empty-directory take-up "
          f"{out['take_up_ratio']:.3f} x, applying {with_['seconds'] / without['seconds']:.2f} x", flush=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.changelog_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--matches", type=int, default=30_000)
    parser.add_argument("--leagues", type=int, default=10)
    parser.add_argument("--players", type=int, default=1_000)
    parser.add_argument("--only", choices=("entries", "corrections"))
    args = parser.parse_args()
    run(args.matches, args.leagues, args.players, args.only)
