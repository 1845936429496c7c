"""The OpenAPI document (stream_app/stream/openapi.json) is valid OpenAPI 3.1,
documents every route the worker registers and no other, and states the
rules the views enforce: the parameters' bounds and defaults as api.py checks
them, the id rule of stream_app/inputs.py, each system's fields. The real
answers are checked against it end to end (tests/e2e/test_reads.py,
test_reads_cli.py)."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
from faust.sensors.prometheus import setup_prometheus_sensors
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from stream_app.engine import SYSTEMS
from stream_app.inputs import ID_RULE, is_id
from stream_app.leagues import LeagueConfig
from stream_app.predict import MAX_PLAYERS, PredictionError, parse_sides, predict
from stream_app.stream import api
from stream_app.stream.openapi import document, served
from tests.support.openapi import assert_matches, template_for

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = document()
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Api's methods that read an integer query parameter (int_param), by the path whose view calls them.
INT_PARAMS_OF = {"leaderboard": "/leagues/{league}/leaderboard",
                 "season_leaderboard": "/leagues/{league}/seasons/{season}/leaderboard",
                 "history": "/leagues/{league}/players/{player}/history",
                 "versus": "/leagues/{league}/players/{player}/versus/{opponent}"}


class Recorder:
    """Stands in for the Faust app: keeps what `@app.page(path)` registers."""

    def __init__(self) -> None:
        self.views: dict[str, type] = {}

    def page(self, path: str) -> Any:
        def register(view: type) -> type:
            assert path not in self.views, f"{path} registered twice"
            self.views[path] = view
            return view
        return register


def registered() -> dict[str, set[str]]:
    """Every route api.py and ui.py register, with the methods its view answers, and
    /metrics (Faust's Prometheus sensor, which stream/app.py sets up)."""
    app = Recorder()
    api.Api(None, None, None, None, None, None).routes(app)
    routes = {path: {method for method in METHODS if method in vars(view)} for path, view in app.views.items()}
    assert inspect.signature(setup_prometheus_sensors).parameters["pattern"].default == "/metrics"
    return {**routes, "/metrics": {"get"}}


def parameters(path: str, method: str = "get") -> list[dict[str, Any]]:
    """The operation's parameters, references resolved."""
    return [DOC["components"]["parameters"][found["$ref"].rpartition("/")[2]] if "$ref" in found else found
            for found in DOC["paths"][path][method].get("parameters", [])]


def parameter(path: str, name: str) -> dict[str, Any]:
    found = [p for p in parameters(path) if p["name"] == name]
    assert len(found) == 1, f"{path}: no parameter {name!r}"
    return found[0]


def test_the_document_is_valid_openapi_3_1():
    validate(DOC, cls=OpenAPIV31SpecValidator)
    assert DOC["openapi"].startswith("3.1.")
    assert orjson.loads(served()) == DOC


def test_every_route_is_documented_and_every_documented_path_is_a_route():
    routes = registered()
    documented = {path: {method for method in item if method in METHODS} for path, item in DOC["paths"].items()}
    assert set(routes) - set(documented) == set(), "routes missing from stream_app/stream/openapi.json"
    assert set(documented) - set(routes) == set(), "documented paths no view registers"
    assert documented == routes


def test_path_parameters_are_the_paths_placeholders():
    for path, item in DOC["paths"].items():
        for method in (method for method in item if method in METHODS):
            names = {p["name"] for p in parameters(path, method) if p["in"] == "path"}
            assert names == set(re.findall(r"\{(\w+)\}", path)), path


def int_params() -> dict[tuple[str, str], tuple[int | None, int, int]]:
    """(path, parameter) -> (default, low, high) of every int_param call in api.py, by reading it."""
    found = {}
    for node in ast.walk(ast.parse(Path(api.__file__).read_text())):
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "int_param":
                    name, default, low, high = (eval(compile(ast.Expression(arg), "api.py", "eval"), vars(api))
                                                for arg in call.args[1:])
                    found[(INT_PARAMS_OF[node.name], name)] = (default, low, high)
    return found


def test_integer_parameters_have_the_bounds_and_defaults_api_py_checks():
    checked = int_params()
    documented = {(path, p["name"]) for path in DOC["paths"] for p in parameters(path)
                  if p["schema"].get("type") == "integer"}
    assert documented == set(checked)
    for (path, name), (default, low, high) in checked.items():
        schema = parameter(path, name)["schema"]
        assert (schema.get("default"), schema["minimum"], schema["maximum"]) == (default, low, high), (path, name)
    assert checked[("/leagues/{league}/leaderboard", "limit")][2] == api.MAX_LEADERBOARD_LIMIT == 100_000


IDS = ["a", "chess-p0001", "ann+bo@x:1", "a.b_c:d@e+f-g", "...", ".a", "a..", "x" * 128]
NOT_IDS = ["", ".", "..", "x" * 129, "bad id", "a/b", "a,b", "é", "a%2B"]


def test_the_id_schema_is_the_id_rule_of_events():
    schema = DOC["components"]["schemas"]["Id"]
    assert ID_RULE.removeprefix("must be ") in schema["description"]
    for text in IDS + NOT_IDS:
        matches = schema["minLength"] <= len(text) <= schema["maxLength"] and re.search(schema["pattern"], text)
        assert bool(matches) == is_id(text), text
    for path in DOC["paths"]:  # every id in a path or a query is an Id
        for p in parameters(path):
            if p["name"] in ("league", "player", "opponent", "around", "season"):
                assert p["schema"] == {"$ref": "#/components/schemas/Id"}, (path, p["name"])


def test_the_team_parameter_is_the_rule_of_parse_sides():
    team = parameter("/leagues/{league}/predict", "team")
    assert f"{MAX_PLAYERS:,} players" in team["description"] and team["schema"]["minItems"] == 2
    pattern = team["schema"]["items"]["pattern"]
    for side in ["a", "a,b", "ann+bo@x:1,...,.a", ",".join(IDS), *NOT_IDS, "a,", ",a", "a,,b", "a,..", "..,a", "a b,c"]:
        try:
            parse_sides([side, "zz-other"])
            valid = True
        except PredictionError:
            valid = False
        assert bool(re.search(pattern, side)) == valid, side


def test_the_algorithms_and_their_fields_are_the_systems():
    schemas = DOC["components"]["schemas"]
    assert set(schemas["Algorithm"]["enum"]) == set(SYSTEMS)
    uncertain = {name for name, cls in SYSTEMS.items() if cls.has_uncertainty}
    assert set(schemas["AlgorithmWithUncertainty"]["enum"]) == uncertain
    for name in SYSTEMS:
        system = LeagueConfig.from_toml(f'[default]\nalgorithm = "{name}"\n').system_for("l")
        doc = {"league": "l", "player": "p", "algorithm": name, **system.initial_state().public(), "rank": None,
               "percentile": None, "eligible": False, "provisional": True, "last_occurred_at": None}
        assert_matches(DOC, "/leagues/{league}/players/{player}", 200, doc)
        assert_matches(DOC, "/leagues/{league}/players/{player}", 200, {**doc, "rank": 3, "percentile": 12.5,
                                                                         "eligible": True, "provisional": False})
        with pytest.raises(AssertionError):  # the extras of another system
            assert_matches(DOC, "/leagues/{league}/players/{player}", 200,
                           {**doc, "volatility": 0.06, "soft_rating": 1.0})


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_predictions_of_every_system_match_the_schema(name):
    system = LeagueConfig.from_toml(f'[default]\nalgorithm = "{name}"\n').system_for("l")
    two = predict(system, "l", [["a", "b"], ["c"]] if system.teams else [["a"], ["b"]], {})
    three = predict(system, "l", [["a"], ["b"], ["c"]], {})
    for doc in (two, three):
        assert_matches(DOC, "/leagues/{league}/predict", 200, doc)
    assert "change" in two["sides"][0] and "change" not in three["sides"][0]
    with pytest.raises(AssertionError):
        assert_matches(DOC, "/leagues/{league}/predict", 200, {**three, "change_unavailable": "no"})


def test_a_prediction_without_the_rating_at_stake_matches_the_schema():
    points = LeagueConfig.from_toml('[default]\nalgorithm = "elo"\npoints_method = 1\n').system_for("l")
    doc = predict(points, "l", [["a"], ["b"]], {})
    assert "change_unavailable" in doc
    assert_matches(DOC, "/leagues/{league}/predict", 200, doc)
    with pytest.raises(AssertionError):
        assert_matches(DOC, "/leagues/{league}/predict", 200, {key: value for key, value in doc.items()
                                                               if key != "change_unavailable"})


def test_the_helper_finds_the_template_and_refuses_what_the_document_does_not_say():
    assert template_for(DOC, "/leagues/chess/players/ann%2Bbo/history?limit=3") == \
        "/leagues/{league}/players/{player}/history"
    assert template_for(DOC, "/ui/") == "/ui/" and template_for(DOC, "/ui/app.js") == "/ui/{name}"
    assert_matches(DOC, "/leagues/{league}", 404, {"error": "league 'nope' not found"})
    with pytest.raises(AssertionError, match="not documented"):
        assert_matches(DOC, "/health", 503, {"error": "x"})
    league = {"league": "chess", "algorithm": "elo", "matches": 1, "players": 2, "latest_occurred_at": None,
              "rerates": 0}
    assert_matches(DOC, "/leagues/{league}", 200, league)
    with pytest.raises(AssertionError, match="latest_occurred_at"):  # formats are checked too
        assert_matches(DOC, "/leagues/{league}", 200, {**league, "latest_occurred_at": "yesterday"})


def test_the_version_is_the_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert DOC["info"]["version"] == project["version"]
