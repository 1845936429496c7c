"""What the HTTP API's views read (stream/reads.py `Reads`), called directly over a
real local store that the batch loop filled (tests/support/memory.py stands in
for the broker), against the replay of the same input (offline/ledger.py):
records, history pages, seasons, teammates, and the standings kept up to date
commit by commit, dropped at a re-rate, a take-up or `forget`."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from itertools import permutations
from types import SimpleNamespace

import orjson
import pytest

from stream_app.inputs import BadEvent, parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.ledger import Ledger
from stream_app.offline.sample import two_player_league
from stream_app.settings import Settings
from stream_app.stream import reads as reads_module
from stream_app.stream.batch_loop import BatchLoop
from stream_app.stream.intake import InputRecord, Intake
from stream_app.stream.partitioner import league_partition
from stream_app.stream.reads import Reads
from stream_app.stream.store import LocalStore
from stream_app.state.tables import player_state
from tests.support import corrections
from tests.support.leagues import interleave
from tests.support.memory import MemoryBroker

# The leagues of tests/support/corrections.py (voids, corrections, late results, monthly
# and manual seasons, teams), and one whose leaderboard applies every rule.
CONFIG = LeagueConfig.from_toml(corrections.CONFIG + '''
[leagues."ranked"]
algorithm = "glicko2"
min_matches = 13
max_uncertainty = 124
inactive_days = 2
history_max = 9
''')
SETTINGS = Settings(partitions=2)
_RNG = random.Random(11)
DOCS = interleave([corrections.corrected_leagues(7),
                   corrections.with_corrections(list(two_player_league("ranked", 16, 120, _RNG, spacing=4 * 3600)),
                                                _RNG)], _RNG)
BATCH = 60


def partition_of(league: str) -> int:
    return league_partition(league, SETTINGS.partitions)


def input_records(docs: list[dict]) -> list[InputRecord]:
    """The docs as the input topic holds them: each in its league's partition."""
    offsets = Counter()
    records = []
    for doc in docs:
        partition = partition_of(doc["league"])
        records.append(InputRecord(SETTINGS.match_topic, partition, offsets[partition], doc["league"].encode(),
                                   orjson.dumps(doc), 1000))
        offsets[partition] += 1
    return records


RECORDS = input_records(DOCS)


class Worker:
    """The batch loop over a local store, its `Reads` told of each commit and take-up as
    stream/app.py wires them."""

    def __init__(self, directory, broker: MemoryBroker):
        self.store = LocalStore(directory)
        self.loop = BatchLoop(SETTINGS, CONFIG, self.store, broker, broker, Intake({}, SETTINGS.batch_max, wait_ms=100))
        self.reads = Reads(self.store, SETTINGS.partitions, CONFIG)
        self.loop.committer.on_take_up = self.reads.taken_up
        self.loop.committer.on_commit = self.reads.committed

    async def feed(self, records: list[InputRecord]) -> None:
        for start in range(0, len(records), BATCH):
            await self.loop.apply_batch(records[start:start + BATCH])


def new_broker() -> MemoryBroker:
    broker = MemoryBroker(partitions=SETTINGS.partitions)
    broker.add_input({0: RECORDS})  # (a take-up checks that input still holds what was applied)
    return broker


def replayed(docs: list[dict]) -> Ledger:
    return corrections.run(docs, CONFIG)[0]


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    return replayed(DOCS)


@pytest.fixture(scope="module")
def reads(tmp_path_factory):
    """Reads of a store the batch loop filled with every doc."""
    worker = Worker(tmp_path_factory.mktemp("store"), new_broker())
    asyncio.run(worker.feed(RECORDS))
    yield worker.reads
    worker.store.close()


def last_time(ledger: Ledger, league: str, player: str) -> float | None:
    """The time of the player's last timed match: the replay's where it keeps it, else their newest history row's."""
    if league in ledger.last_times:
        return ledger.last_times[league].get(player)
    rows = ledger.histories.get((league, player), {})
    return next((rows[seq][2] for seq in sorted(rows, reverse=True) if rows[seq][2] is not None), None)


def brute_force(ledger: Ledger, league: str, without: str | None = None) -> list[tuple[str, float]]:
    """The league's ranked players by its leaderboard rules (leagues.py; one of them
    left out: `without`), from the replay: (player, rating), by rating then name."""
    options = CONFIG.options_for(league)
    latest = ledger.records[league].get("latest_time")
    cutoff = None if options.inactive_days is None or latest is None else latest - options.inactive_days * 86400

    def passes(name: str, state) -> dict[str, bool]:
        last = last_time(ledger, league, name)
        return {"min_matches": state.matches >= options.min_matches,
                "max_uncertainty": options.max_uncertainty is None or state.uncertainty <= options.max_uncertainty,
                "inactive_days": cutoff is None or last is None or last >= cutoff}

    ranked = [(name, state.rating) for name, state in ledger.leagues[league].items()
              if all(ok for rule, ok in passes(name, state).items() if rule != without)]
    return sorted(ranked, key=lambda row: (-row[1], row[0]))


def board(standings) -> list[tuple[str, float]]:
    return [(name, standing.rating) for _, name, standing in standings.page(0, 10**6)]


def test_league_and_player_records_are_the_replays(reads, ledger):
    for league, players in ledger.leagues.items():
        assert reads.league(league) == ledger.records[league]
        for name, state in players.items():
            data, last = player_state(reads.player(league, name))
            assert CONFIG.system_for(league).state_from_dict(data).public() == state.public(), (league, name)
            if league in ledger.last_times:
                assert last == ledger.last_times[league].get(name)
    for league, name in (("chess", "nobody"), ("chess", "go-p0000"), ("nowhere", "chess-p0000")):
        assert reads.player(league, name) is None
    assert reads.league("nowhere") is None


def test_each_partition_lists_its_leagues_records(reads, ledger):
    for partition in range(SETTINGS.partitions):
        expected = {league: record for league, record in ledger.records.items() if partition_of(league) == partition}
        assert expected and dict(reads.leagues(partition)) == expected


def test_a_history_pages_newest_first_following_the_cursor(reads, ledger):
    for (league, name) in ledger.histories:
        expected = ledger.history(league, name)[::-1]
        for limit in (1, 4, len(expected), 1000):
            pages, before = [], None
            while True:
                entries, after = reads.history(league, name, limit, before)
                pages.append(entries)
                if after is None:
                    break
                assert after == entries[-1]["seq"]  # the next page is below this page's last entry
                before = after
            assert pages == [expected[i:i + limit] for i in range(0, len(expected), limit)], (league, name, limit)


def test_a_history_page_before_a_seq_has_the_older_entries_only(reads, ledger):
    for league in ledger.leagues:
        name = max(ledger.leagues[league], key=lambda player: ledger.leagues[league][player].matches)
        expected = ledger.history(league, name)[::-1]
        for entry in expected:
            older = [e for e in expected if e["seq"] < entry["seq"]]
            cursor = older[2]["seq"] if len(older) > 3 else None
            assert reads.history(league, name, 3, entry["seq"]) == (older[:3], cursor)
        assert reads.history(league, name, 2, expected[0]["seq"] + 1)[0] == expected[:2]


def test_history_rows_are_the_replays_oldest_first(reads, ledger):
    for (league, name), rows in ledger.histories.items():
        assert reads.history_rows(league, name) == [rows[seq] for seq in sorted(rows)]
    assert reads.history_rows("chess", "nobody") == []


def test_seasons_and_their_final_standings_are_the_replays(reads, ledger):
    for league in ("month", "split"):
        seasons = reads.seasons(league)
        assert seasons == ledger.season_rows[league] and len(seasons) >= 3
        for number, season in enumerate(seasons, start=1):
            finals = ledger.finals.get((league, number), [])
            assert bool(finals) == ("end" in season)  # only an ended season has final standings
            assert reads.final_standings(league, number) == sorted(finals)
            for row in finals:
                assert reads.final_standing(league, number, row[0]) == row
            for name in set(ledger.leagues[league]) - {row[0] for row in finals}:
                assert reads.final_standing(league, number, name) is None
    assert reads.seasons("chess") == [] and reads.final_standings("chess", 1) == []


def test_teammates_are_the_sides_of_the_matches_that_count(reads):
    live = [doc for doc in corrections.cleaned(DOCS, CONFIG) if doc["league"] in ("team", "relay")]
    answers = Counter()
    for doc in live:
        teams = {p["player"]: p["team"] for p in doc["participants"]}
        for a, b in permutations(teams, 2):
            answers[same := reads.teammates(doc["league"], doc["match_id"], a, b)] += 1
            assert same == (teams[a] == teams[b]), (doc["match_id"], a, b)
    assert answers[True] and answers[False]
    counted = {doc["match_id"] for doc in live}
    voided = [doc for doc in DOCS if doc["league"] in ("team", "relay") and "schema" not in doc
              and doc["match_id"] not in counted]
    assert voided
    for doc in voided:  # a voided match has no sides
        a, b = [p["player"] for p in doc["participants"] if p["team"] == "t1"][:2]
        assert not reads.teammates(doc["league"], doc["match_id"], a, b)
    chess = next(doc for doc in DOCS if doc["league"] == "chess" and "schema" not in doc)
    assert not reads.teammates("chess", chess["match_id"], *[p["player"] for p in chess["participants"]])
    assert not reads.teammates("team", "no-such-match", "team-p0000", "team-p0001")


async def test_standings_built_on_first_read_rank_by_the_leagues_rules(reads, ledger):
    fresh = Reads(reads.store, SETTINGS.partitions, CONFIG)
    for league in ledger.records:
        standings = await fresh.standings(league)
        assert board(standings) == brute_force(ledger, league), league
        assert standings.players_total == len(ledger.leagues[league])
    assert fresh.builds == len(ledger.records)
    full = brute_force(ledger, "ranked")
    for rule in ("min_matches", "max_uncertainty", "inactive_days"):  # each rule leaves someone out
        assert brute_force(ledger, "ranked", without=rule) != full, rule


async def test_standings_move_at_each_commit_and_are_built_again_after_a_re_rate(tmp_path):
    worker = Worker(tmp_path, new_broker())
    held, revisions, rebuilt, moved = {}, {}, 0, 0
    for end in range(BATCH, len(DOCS) + BATCH, BATCH):
        await worker.feed(RECORDS[end - BATCH:end])
        ledger = replayed(DOCS[:end])
        for league, record in ledger.records.items():
            standings = await worker.reads.standings(league)
            assert board(standings) == brute_force(ledger, league), (league, end)
            if league in held:
                rerated = record.get("revision", 0) != revisions[league]
                assert (standings is not held[league]) == rerated, (league, end)
                rebuilt, moved = rebuilt + rerated, moved + (not rerated)
            held[league], revisions[league] = standings, record.get("revision", 0)
    assert rebuilt and moved and worker.reads.builds == len(held) + rebuilt


def first_re_rating_void() -> int:
    """The index in DOCS of the first void that re-rates its league (by the replay)."""
    ledger = Ledger(CONFIG)
    for at, doc in enumerate(DOCS):
        before = ledger.records.get(doc["league"], {}).get("revision", 0)
        try:
            ledger.apply(parse_input(orjson.dumps(doc)))
        except BadEvent:
            continue
        if doc.get("schema") == "match-voided.v1" and ledger.records[doc["league"]].get("revision", 0) != before:
            return at
    raise AssertionError("no void re-rates")


async def test_a_re_rate_during_a_build_forgets_it_and_the_read_builds_again(tmp_path, monkeypatch):
    at = first_re_rating_void()
    league = DOCS[at]["league"]
    gate = asyncio.Event()

    async def held(seconds: float) -> None:  # the build's pause between two chunks lasts until the gate opens
        await gate.wait()

    monkeypatch.setattr(reads_module, "BUILD_CHUNK", 1)
    monkeypatch.setattr(reads_module, "asyncio", SimpleNamespace(**{**vars(asyncio), "sleep": held}))
    worker = Worker(tmp_path, new_broker())
    await worker.feed(RECORDS[:at])
    building = asyncio.ensure_future(worker.reads.standings(league))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not building.done()  # held after its first player
    await worker.feed(RECORDS[at:at + 1])  # the void commits while the build runs
    gate.set()
    standings = await building
    assert board(standings) == brute_force(replayed(DOCS[:at + 1]), league)
    assert worker.reads.builds == 1  # the dropped build never finished


async def test_a_take_up_forgets_the_standings_of_its_partition_only(tmp_path):
    broker = new_broker()
    first, second = Worker(tmp_path / "first", broker), Worker(tmp_path / "second", broker)
    half = len(DOCS) // 2
    await first.feed(RECORDS[:half])
    leagues = sorted({doc["league"] for doc in DOCS[:half]})
    kept = {league: await first.reads.standings(league) for league in leagues}
    # Partition 1 moves to the second worker, which applies more of it, and comes back.
    await second.feed([record for record in RECORDS[half:] if record.partition == 1])
    first.loop.forget()
    await first.loop.take_up([1])
    ledger = replayed(DOCS[:half] + [doc for doc in DOCS[half:] if partition_of(doc["league"]) == 1])
    for league in leagues:
        standings = await first.reads.standings(league)
        assert (standings is kept[league]) == (partition_of(league) == 0), league
        assert board(standings) == brute_force(ledger, league), league


async def test_forget_drops_every_leagues_standings(reads, ledger):
    fresh = Reads(reads.store, SETTINGS.partitions, CONFIG)
    kept = {league: await fresh.standings(league) for league in ledger.records}
    fresh.forget()
    for league, standings in kept.items():
        again = await fresh.standings(league)
        assert again is not standings and board(again) == board(standings)
    assert fresh.builds == 2 * len(kept)
