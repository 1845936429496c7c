"""The replay's reader process (large files are read and parsed by a child
process): the same records as parsing in the replaying process, in the same
order, with the same errors, progress and clean-up."""

import gzip
import multiprocessing

import orjson
import pytest

from stream_app.engine import Match
from stream_app.inputs import BadEvent
from stream_app.leagues import LeagueConfig
from stream_app.offline import replay as replay_module
from stream_app.offline.replay import Ledger, ReplayError, replay
from tests.support.corrections import CONFIG as CORRECTIONS
from tests.support.corrections import corrected_leagues, run


def lines_of_every_kind() -> list[bytes]:
    """Results, voids, corrections and late results; teams, partial play,
    scores and times; blank, CRLF and invalid lines of several kinds."""
    lines = [orjson.dumps(doc) for doc in corrected_leagues(3)]
    people = [{"player": "a", "rank": 1, "team": "red"}, {"player": "b", "rank": 1, "team": "red", "weight": 1.0},
              {"player": "c", "rank": 2, "team": "blue", "weight": 0.5}, {"player": "d", "rank": 2, "team": "blue"}]
    lines[5:5] = [
        orjson.dumps({"league": "team-x", "match_id": "t1", "occurred_at": "2026-01-02T03:04:05Z", "participants": people}),
        orjson.dumps({"league": "scores", "match_id": "s1", "participants": [{"player": "a", "score": 3},
                                                                            {"player": "b", "score": 1.5}]}),
        orjson.dumps({"league": "scores", "match_id": "s2", "participants": [{"player": "a", "rank": 1, "score": 2},
                                                                            {"player": "b", "rank": 1, "score": 2}]}),
        b"",
        b"   ",
        b"not json",
        b"[1, 2]",
        b'{"league": "x"}',
        orjson.dumps({"league": "x", "match_id": "bad", "participants": [{"player": "a", "rank": 0},
                                                                          {"player": "b", "rank": 1}]}),
        orjson.dumps({"schema": "match-voided.v9", "league": "x", "match_id": "v"}),
        orjson.dumps({"league": "x", "match_id": "crlf", "participants": [{"player": "a", "rank": 1},
                                                                           {"player": "b", "rank": 2}]}) + b"\r",
    ]
    return lines + [b"", b""]


def write(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


class Positions:
    """A progress bar that records the positions it is given."""

    seen: list[int] = []

    def __init__(self, total, enabled):
        Positions.seen = []

    def update(self, position):
        Positions.seen.append(position)

    def close(self):
        pass


def parsed(path, in_child):
    lines, raw, _ = replay_module.open_lines(path)
    try:
        with replay_module._parsed_lines(path, lines, raw, Positions(None, False), in_child) as items:
            return list(items)
    finally:
        raw.close()


def described(item):
    """What an item is, field types included (equality alone lets 1 == 1.0 pass)."""
    if isinstance(item, BadEvent):
        return type(item), item.code, item.message, item.field, item.league, item.match_id, str(item)
    matches = [item] if isinstance(item, Match) else [getattr(item, "match", None)]
    kinds = [tuple(tuple(type(v) for v in vars_of(p)) for p in m.participants) for m in matches if m is not None]
    return type(item), item, kinds


def vars_of(participant):
    return (participant.player, participant.rank, participant.score, participant.team, participant.weight)


@pytest.mark.parametrize("packed", [False, True])
def test_the_reader_process_gives_the_same_records_in_the_same_order(tmp_path, packed):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind())
    if packed:
        path = tmp_path / "in.jsonl.gz"
        path.write_bytes(gzip.compress((tmp_path / "in.jsonl").read_bytes()))
    here, child = parsed(path, False), parsed(path, True)
    assert [number for number, _ in child] == list(range(1, len(lines_of_every_kind()) + 1))
    assert [(n, described(item)) for n, item in child] == [(n, described(item)) for n, item in here]
    kinds = {type(item).__name__ for _, item in here}
    assert kinds == {"Match", "Void", "Correction", "SeasonStart", "BadEvent", "NoneType"}


def test_messages_are_cut_at_the_size_limit_without_changing_anything(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind())
    here = parsed(path, False)
    monkeypatch.setattr(replay_module, "_MESSAGE_BYTES", 100)
    child = parsed(path, True)
    assert [(n, described(item)) for n, item in child] == [(n, described(item)) for n, item in here]
    assert len(Positions.seen) > 10 and Positions.seen == sorted(Positions.seen)
    assert Positions.seen[-1] == path.stat().st_size


def replayed(path, monkeypatch, in_child, **options):
    monkeypatch.setattr(replay_module, "READER_MIN_BYTES", 0 if in_child else 1 << 62)
    ledger = Ledger(LeagueConfig.from_toml(CORRECTIONS))
    problems = []
    report = replay(path, ledger, progress=False, on_problem=lambda n, e: problems.append((n, str(e))), **options)
    assert multiprocessing.active_children() == []
    return report, problems, ledger.snapshot()


def test_a_replay_through_the_reader_process_is_the_same_replay(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind())
    # Five bad lines, and the commands the corrected leagues hold that cannot apply (a duplicate is no problem).
    refused = sum(e.code != "duplicate_match" for e in run(corrected_leagues(3), LeagueConfig.from_toml(CORRECTIONS))[2])
    here = replayed(path, monkeypatch, False)
    child = replayed(path, monkeypatch, True)
    for report, _, _ in (here, child):
        report.seconds = 0.0
        report.problems = [(n, type(e), e.code, str(e)) for n, e in report.problems]  # exceptions compare by identity
        assert report.skipped == 5 + refused and report.commands > 0 and report.lines == len(lines_of_every_kind())
    assert child == here


def test_strict_stops_at_the_same_line_and_the_reader_process_is_ended(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind() * 50)
    lines = []
    for in_child in (False, True):
        monkeypatch.setattr(replay_module, "READER_MIN_BYTES", 0 if in_child else 1 << 62)
        with pytest.raises(ReplayError) as caught:
            replay(path, Ledger(LeagueConfig.from_toml(CORRECTIONS)), strict=True, progress=False)
        lines.append((caught.value.line, str(caught.value)))
        assert multiprocessing.active_children() == []
    assert lines[0] == lines[1]


def test_an_observer_error_ends_the_reader_process_too(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind() * 50)
    monkeypatch.setattr(replay_module, "READER_MIN_BYTES", 0)
    ledger = Ledger(LeagueConfig.from_toml(CORRECTIONS))

    def observer(match, prior):
        raise ZeroDivisionError("observer failed")

    ledger.observer = observer
    with pytest.raises(ZeroDivisionError):
        replay(path, ledger, progress=False)
    assert multiprocessing.active_children() == []


def test_a_read_error_comes_after_the_lines_read_before_it(tmp_path, monkeypatch):
    whole = gzip.compress(b"\n".join(lines_of_every_kind() * 20) + b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    outcomes = []
    for in_child in (False, True):
        monkeypatch.setattr(replay_module, "READER_MIN_BYTES", 0 if in_child else 1 << 62)
        ledger = Ledger(LeagueConfig.from_toml(CORRECTIONS))
        with pytest.raises(EOFError):
            replay(path, ledger, progress=False)
        outcomes.append((ledger.applied, ledger.snapshot()))
        assert multiprocessing.active_children() == []
    assert outcomes[0] == outcomes[1] and outcomes[0][0] > 0


def test_progress_reaches_the_end_of_the_file(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind() * 20)
    monkeypatch.setattr(replay_module, "_Progress", Positions)
    for in_child in (False, True):
        monkeypatch.setattr(replay_module, "READER_MIN_BYTES", 0 if in_child else 1 << 62)
        replay(path, Ledger(LeagueConfig.from_toml(CORRECTIONS)), progress=True)
        assert Positions.seen and Positions.seen == sorted(Positions.seen)
        assert Positions.seen[-1] <= path.stat().st_size
    assert Positions.seen[-1] == path.stat().st_size  # the reader's last message


def test_the_reader_process_is_used_for_large_files_only(tmp_path, monkeypatch):
    path = write(tmp_path / "in.jsonl", lines_of_every_kind())
    started = []
    real = replay_module._parsed_lines

    def spy(path, lines, raw, bar, in_child):
        started.append(in_child)
        return real(path, lines, raw, bar, in_child)

    monkeypatch.setattr(replay_module, "_parsed_lines", spy)
    replay(path, Ledger(LeagueConfig.from_toml(CORRECTIONS)), progress=False)
    monkeypatch.setattr(replay_module, "READER_MIN_BYTES", path.stat().st_size)
    replay(path, Ledger(LeagueConfig.from_toml(CORRECTIONS)), progress=False)
    assert started == [False, True]
