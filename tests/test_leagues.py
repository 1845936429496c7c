"""League configuration: globs in file order, a default, and start-up errors
that name the file, the table and the key."""

from pathlib import Path

import pytest

from stream_app.leagues import ConfigError, LeagueConfig, LeagueOptions
from stream_app.engine.elo import Elo
from stream_app.engine.pairwise import Pairwise

TOML = """
[default]
algorithm = "elo"
k = 20

[leagues."chess-*"]
algorithm = "elo"
points_method = 2
l = 8

[leagues."chess-960"]   # never reached: chess-* comes first
algorithm = "elo-pairwise"

[leagues."kart*"]
algorithm = "elo-pairwise"
ties = "half"
top_n = 3
k_top = 4
"""


def test_globs_match_in_file_order_and_default_catches_the_rest():
    config = LeagueConfig.from_toml(TOML, "leagues.toml")
    chess = config.system_for("chess-960")
    assert isinstance(chess, Elo) and chess.params.points_method == 2 and chess.params.l == 8.0
    assert chess.params.k == 32.0  # the default table's k does not leak into other tables
    kart = config.system_for("karting")
    assert isinstance(kart, Pairwise) and kart.params.ties == "half" and kart.params.k_for_top == 4.0
    other = config.system_for("go")
    assert isinstance(other, Elo) and other.params.k == 20.0
    assert config.rule_for("go") is config.default and config.default.pattern == "*"


def test_without_a_file_every_league_uses_elo_with_its_defaults():
    config = LeagueConfig.load(None)
    system = config.system_for("anything")
    assert isinstance(system, Elo)
    assert (system.params.k, system.params.scale, system.params.initial, system.params.points_method, system.params.l) == (
        32.0, 400.0, 1000.0, 0, 16.0)


def test_loads_from_a_file(tmp_path):
    path = tmp_path / "leagues.toml"
    path.write_text(TOML)
    assert isinstance(LeagueConfig.load(path).system_for("kart-1"), Pairwise)


@pytest.mark.parametrize(
    "text, words",
    [
        ('[leagues."x"]\nalgorithm = "glicko3"\n', ['[leagues."x"]', "'algorithm'", "unknown algorithm 'glicko3'"]),
        ('[leagues."x"]\nk = 3\n', ['[leagues."x"]', "'algorithm'", "required"]),
        ('[leagues."x"]\nalgorithm = "elo"\nkay = 3\n', ['[leagues."x"]', "'kay'", "unknown parameter"]),
        ('[leagues."x"]\nalgorithm = "elo"\nk = -3\n', ['[leagues."x"]', "'k'", "must be > 0"]),
        ('[leagues."x"]\nalgorithm = "elo"\nk = "big"\n', ['[leagues."x"]', "'k'", "must be a number"]),
        ('[leagues."x"]\nalgorithm = "elo-pairwise"\nties = "sometimes"\n', ['[leagues."x"]', "'ties'", "skip"]),
        ('[default]\nalgorithm = "elo"\npoints_method = 5\n', ["[default]", "'points_method'", "0, 1 or 2"]),
        ('[leagues."x"]\nalgorithm = "elo"\nk = inf\n', ['[leagues."x"]', "'k'", "finite"]),
        ('[league."x"]\nalgorithm = "elo"\n', ["unknown table or key 'league'"]),
        ('[leagues."x"]\nalgorithm = "elo"\nmin_matches = -1\n', ['[leagues."x"]', "'min_matches'", "integer >= 0"]),
        ('[leagues."x"]\nalgorithm = "elo"\nhistory_max = 2.5\n', ['[leagues."x"]', "'history_max'", "integer >= 0"]),
        ('[leagues."x"]\nalgorithm = "elo"\ninactive_days = 0\n', ['[leagues."x"]', "'inactive_days'", "number > 0"]),
        ('[leagues."x"]\nalgorithm = "elo-mmr"\nmax_uncertainty = "wide"\n', ["'max_uncertainty'", "number > 0"]),
        ('[leagues."x"]\nalgorithm = "elo"\nmax_uncertainty = 100\n', ["'max_uncertainty'", "'elo' ratings have no uncertainty",
                                                                        "elo-mmr"]),
        ("[default\n", ["not valid TOML"]),
    ],
)
def test_errors_name_the_file_the_table_and_the_key(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        LeagueConfig.load(path)
    message = str(err.value)
    assert message.startswith(str(path) + ":")
    for word in words:
        assert word in message


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read league configuration"):
        LeagueConfig.load(tmp_path / "nope.toml")


def test_the_shipped_demo_configuration_is_the_one_the_demo_uses():
    from pathlib import Path

    from stream_app.offline.sample import DEMO_CONFIG

    shipped = Path(__file__).parent.parent / "deploy" / "leagues.toml"
    assert shipped.read_text() == DEMO_CONFIG
    loaded, sample = LeagueConfig.load(shipped), LeagueConfig.from_toml(DEMO_CONFIG)
    assert [(r.pattern, r.algorithm, r.system.params) for r in [*loaded.rules, loaded.default]] == \
        [(r.pattern, r.algorithm, r.system.params) for r in [*sample.rules, sample.default]]


def test_league_options_are_read_apart_from_the_system_parameters():
    config = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\nk = 20\n'
                                    '[leagues."cf*"]\nalgorithm = "elo-mmr"\nmin_matches = 5\nmax_uncertainty = 120\n'
                                    'inactive_days = 90\nhistory_max = 0\n')
    options = config.options_for("cf-1")
    assert (options.min_matches, options.max_uncertainty, options.inactive_days, options.history_max) == (5, 120.0, 90.0, 0)
    assert options.inactive_seconds == 90 * 86400.0
    assert config.options_for("chess") == LeagueOptions()  # defaults: keep all history, rank everyone
    assert config.system_for("chess").params.k == 20.0


def test_every_shipped_configuration_loads():
    deploy = Path(__file__).parent.parent / "deploy"
    paths = sorted(deploy.glob("*.toml")) + sorted((deploy / "accuracy").glob("*.toml"))
    assert len(paths) >= 9
    for path in paths:
        config = LeagueConfig.load(path)
        assert config.default.algorithm in path.stem or path.stem == "leagues", path
