"""ratings tune: a seeded search scored on the earlier part of a league's
results, reported on the later part it never saw."""

import orjson
import pytest

from stream_app.cli import main
from stream_app.engine import ParamError
from stream_app.inputs import parse_input
from stream_app.leagues import LeagueConfig
from stream_app.offline.accuracy import Accuracy
from stream_app.offline.ledger import Ledger
from stream_app.offline.synth import synthetic_rounds
from stream_app.offline.tune import Range, Tuner, candidates, search, with_params

PAIRWISE = LeagueConfig.from_toml('[default]\nalgorithm = "elo-pairwise"\nk = 20\n')


def rounds(players=200, count=30, seed=3):
    return [parse_input(e) for e in synthetic_rounds(players, count, seed=seed)]


def test_ranges_parse_numbers_and_choices_and_refuse_nonsense():
    assert Range.parse("k=1:30") == Range("k", 1.0, 30.0)
    assert Range.parse("ties=half,skip").choices == ("half", "skip")
    assert Range.parse("top_n=5,10").choices == (5, 10)
    for bad in ("k", "k=", "k=3:1", "k=a:b", "=1:2"):
        with pytest.raises(ValueError, match="--param"):
            Range.parse(bad)


def test_candidates_are_seeded_and_a_grid_covers_every_combination():
    ranges = [Range("k", 1.0, 3.0), Range("ties", choices=("half", "skip"))]
    assert candidates(ranges, 5, None, seed=1) == candidates(ranges, 5, None, seed=1)
    assert candidates(ranges, 5, None, seed=1) != candidates(ranges, 5, None, seed=2)
    assert all(1.0 <= c["k"] <= 3.0 for c in candidates(ranges, 50, None, seed=1))
    grid = candidates(ranges, None, 3, seed=0)
    assert grid == [{"k": k, "ties": t} for k in (1.0, 2.0, 3.0) for t in ("half", "skip")]


def test_with_params_changes_only_the_named_parameters_and_names_a_bad_one():
    rule = PAIRWISE.rule_for("x")
    changed = with_params(rule, {"top_n": 4.0}).rule_for("any")
    assert changed.system.params.top_n == 4 and type(changed.system.params.top_n) is int
    assert changed.system.params.k == 20
    with pytest.raises(ParamError) as err:
        with_params(rule, {"kk": 1})
    assert err.value.key == "kk" and "not a parameter of 'elo-pairwise'" in err.value.rule
    with pytest.raises(ParamError) as err:
        with_params(rule, {"k": -1.0})
    assert err.value.key == "k"


def test_training_never_sees_the_later_part_and_the_test_is_the_later_rounds_of_a_full_replay():
    items = rounds()
    tuner = Tuner(PAIRWISE.rule_for("synthetic"), items, train_share=0.5)
    trial = tuner.train({"k": 2.0})
    # Scrambling the later half changes nothing on the earlier half.
    scrambled = items[:15] + rounds(seed=99)[15:]
    other = Tuner(PAIRWISE.rule_for("synthetic"), scrambled, train_share=0.5)
    assert other.train({"k": 2.0}).train == trial.train
    tuner.evaluate(trial)
    other.evaluate(other_trial := other.train({"k": 2.0}))
    assert other_trial.test != trial.test
    # The test figures are rounds 16-30 of the replay of the whole file.
    ledger = Ledger(with_params(PAIRWISE.rule_for("x"), {"k": 2.0}))
    accuracy = Accuracy()
    ledger.observer = accuracy.observe
    for item in items:
        ledger.apply(item)
    assert trial.test == accuracy.report_rounds(15, 30)
    assert trial.whole == accuracy.report()


def test_search_picks_the_best_candidate_on_the_earlier_part():
    tuner = Tuner(PAIRWISE.rule_for("synthetic"), rounds(), train_share=0.5)
    configured, best, trials = search(tuner, [{"k": 40.0}, {"k": 1.5}, {"k": 0.05}])
    assert best.params == max(trials, key=lambda t: t.train["pair_inversion"]).params != {"k": 40.0}
    assert configured.params == {} and configured.test is not None and best.test is not None
    # k = 20 is far too big for these rounds: the tuned k predicts the unseen part better.
    assert best.test["pair_inversion"] > configured.test["pair_inversion"] + 1


def test_the_command_prints_both_parts_and_writes_every_trial(tmp_path, capsys):
    data = tmp_path / "syn.jsonl"
    data.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in synthetic_rounds(150, 20, seed=4)))
    config = tmp_path / "c.toml"
    config.write_text('[default]\nalgorithm = "elo-pairwise"\n')
    out = tmp_path / "tune.json"
    assert main(["tune", "-i", str(data), "-c", str(config), "-p", "k=0.5:8", "--trials", "4", "-o", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert doc["league"] == "synthetic" and len(doc["trials"]) == 4
    assert doc["best"]["params"] in [t["params"] for t in doc["trials"]]
    printed = capsys.readouterr()
    assert "earlier (train)" in printed.out and "later (test)" in printed.out
    assert f"{doc['best']['test']['pair_inversion']:.2f}%" in printed.out
    assert printed.err.startswith("tune: 4 trials of 'elo-pairwise' on league 'synthetic'")
    assert main(["tune", "-i", str(data), "-c", str(config), "-p", "kk=1:2"]) == 2
    assert "'kk': not a parameter of 'elo-pairwise'" in capsys.readouterr().err
    assert main(["tune", "-i", str(data), "-p", "k=1:2", "--league", "nope"]) == 2
    assert "league 'nope' has no results" in capsys.readouterr().err
