"""Match-result validation: every rule has a reason code and names its field;
the schemas are valid 2020-12 and agree with the validator."""

import json

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.engine import Match, Participant, RatingChange
from stream_app.engine.pairwise import PairwiseState
from stream_app.inputs import MAX_EVENT_BYTES, MAX_PARTICIPANTS, SCHEMA_NAMES, BadEvent, load_schema, parse_match
from stream_app.published import dead_letter, event_id, rating_changed_events


def validator(name):
    return jsonschema.Draft202012Validator(load_schema(name), format_checker=jsonschema.FormatChecker())


def good(**overrides):
    doc = {
        "match_id": "m-1",
        "league": "chess",
        "occurred_at": "2026-11-22T10:15:00Z",
        "participants": [{"player": "alice", "rank": 1}, {"player": "bob", "rank": 2}],
    }
    doc.update(overrides)
    return doc


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schemas_are_valid_2020_12_and_their_examples_validate(name):
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["examples"]
    for example in schema["examples"]:
        validator(name).validate(example)


def test_match_result_examples_parse():
    for example in load_schema("match-result.v1")["examples"]:
        assert isinstance(parse_match(orjson.dumps(example)), Match)


def test_a_valid_event_becomes_a_match():
    m = parse_match(orjson.dumps(good(extra={"ignored": True})))
    assert m.league == "chess" and m.match_id == "m-1"
    assert m.participants == (Participant("alice", 1), Participant("bob", 2))
    assert m.time == 1795342500.0  # 2026-11-22T10:15:00Z


def test_ranks_derive_from_scores_with_ties_sharing_the_best_place():
    m = parse_match(good(participants=[
        {"player": "a", "score": 3}, {"player": "b", "score": 7.5}, {"player": "c", "score": 3}, {"player": "d", "score": -1},
    ]))
    assert [p.rank for p in m.participants] == [2, 1, 2, 4]
    assert m.participants[1].score == 7.5


def test_time_offsets_are_honoured():
    a = parse_match(good(occurred_at="2026-11-22T11:15:00+01:00"))
    b = parse_match(good())
    assert a.time == b.time


CASES = [
    # (payload, reason, field, words in the message)
    (b"\xff\xfe{}", "invalid_encoding", None, "not UTF-8"),
    (b"{not json", "invalid_json", None, "not valid JSON"),
    (b'{"score": NaN}', "invalid_json", None, "not valid JSON"),
    (b'{"score": 1e400}', "invalid_json", None, "infinity"),
    (b"[1, 2]", "not_an_object", None, "JSON object"),
    (b'"text"', "not_an_object", None, "JSON object"),
    (good(match_id=None) | {"match_id": None}, "schema_violation", "match_id", "must be string"),
    ({k: v for k, v in good().items() if k != "league"}, "schema_violation", "league", "required"),
    (good(league=""), "schema_violation", "league", "longer than or equal to 1"),
    (good(league="a/b"), "schema_violation", "league", "1 to 128 characters"),
    (good(league=".."), "schema_violation", "league", "1 to 128 characters"),
    (good(league="x" * 129), "schema_violation", "league", "shorter than or equal to 128"),
    (good(league={"name": "chess"}), "schema_violation", "league", "must be string"),
    (good(match_id=["m"]), "schema_violation", "match_id", "must be string"),
    (good(participants=[]), "schema_violation", "participants", "at least 2 items"),
    (good(participants=[{"player": "a", "rank": 1}]), "schema_violation", "participants", "at least 2 items"),
    (good(participants="a,b"), "schema_violation", "participants", "must be array"),
    (good(participants=[{"player": "a", "rank": 1}, "b"]), "schema_violation", "participants[1]", "must be object"),
    (good(participants=[{"player": "a", "rank": 1}, {"rank": 2}]), "schema_violation", "participants[1].player", "required"),
    (good(participants=[{"player": "a", "rank": 0}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].rank", "bigger than or equal to 1"),
    (good(participants=[{"player": "a", "rank": -3}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].rank", "bigger than or equal to 1"),
    (good(participants=[{"player": "a", "rank": 1.5}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].rank", "must be integer"),
    (good(participants=[{"player": "a", "rank": "1"}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].rank", "must be integer"),
    (good(participants=[{"player": "a", "rank": True}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].rank", "must be integer"),
    (good(participants=[{"player": "a", "score": "9"}, {"player": "b", "score": 2}]), "schema_violation", "participants[0].score", "must be number"),
    (good(participants=[{"player": "a"}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0]", "rank or a score"),
    (good(participants=[{"player": ["a"], "rank": 1}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].player", "must be string"),
    (good(participants=[{"player": "a", "rank": 1}, {"player": "a", "rank": 2}]), "duplicate_player", "participants[1].player", "already appears"),
    (good(participants=[{"player": "a", "rank": 1}, {"player": "b", "score": 2}]), "inconsistent_standings", "participants[1].rank", "other participants have a rank"),
    (good(occurred_at="yesterday"), "schema_violation", "occurred_at", "date-time"),
    (good(occurred_at="2026-11-22T10:15:00"), "schema_violation", "occurred_at", "date-time"),
    (good(participants=[{"player": f"p{i}", "rank": 1} for i in range(MAX_PARTICIPANTS + 1)]), "too_many_participants", "participants", "at most 20000"),
    # Teams and partial play.
    (good(participants=[{"player": "a", "rank": 1, "team": "x y"}, {"player": "b", "rank": 2, "team": "z"}]), "schema_violation", "participants[0].team", "1 to 128 characters"),
    (good(participants=[{"player": "a", "rank": 1, "team": 7}, {"player": "b", "rank": 2, "team": "z"}]), "schema_violation", "participants[0].team", "must be string"),
    (good(participants=[{"player": "a", "rank": 1, "team": "red"}, {"player": "b", "rank": 2}]), "invalid_teams", "participants[1].team", "missing while other participants have a team"),
    (good(participants=[{"player": "a", "rank": 1, "team": "red"}, {"player": "b", "rank": 1, "team": "red"}]), "invalid_teams", "participants", "at least 2 teams"),
    (good(participants=[{"player": "a", "rank": 1, "team": "red"}, {"player": "b", "rank": 2, "team": "red"}, {"player": "c", "rank": 3, "team": "blue"}]), "inconsistent_standings", "participants[1].rank", "same team 'red'"),
    (good(participants=[{"player": "a", "score": 5, "team": "red"}, {"player": "b", "score": 5, "team": "blue"}, {"player": "c", "score": 4, "team": "red"}]), "inconsistent_standings", "participants[2].score", "share its score"),
    (good(participants=[{"player": "a", "rank": 1, "weight": 0}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].weight", "bigger than 0"),
    (good(participants=[{"player": "a", "rank": 1, "weight": 1.01}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].weight", "smaller than or equal to 1"),
    (good(participants=[{"player": "a", "rank": 1, "weight": "half"}, {"player": "b", "rank": 2}]), "schema_violation", "participants[0].weight", "must be number"),
]


@pytest.mark.parametrize("payload, reason, field, words", CASES)
def test_each_bad_event_has_its_reason_and_names_the_field(payload, reason, field, words):
    raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    with pytest.raises(BadEvent) as err:
        parse_match(raw)
    assert err.value.code == reason
    assert err.value.field == field
    assert words in err.value.message
    if field:
        assert err.value.message.startswith(field + ":")


def test_non_finite_score_given_in_python_is_rejected():
    with pytest.raises(BadEvent) as err:
        parse_match(good(participants=[{"player": "a", "score": float("nan")}, {"player": "b", "score": 1}]))
    assert err.value.field == "participants[0].score" and "finite" in err.value.message


def test_an_event_over_the_size_limit_is_rejected_before_parsing():
    raw = orjson.dumps(good(padding="x" * MAX_EVENT_BYTES))
    with pytest.raises(BadEvent) as err:
        parse_match(raw)
    assert err.value.code == "too_large"


def test_the_largest_real_round_fits_the_limits():
    # 16,783 participants with Codeforces-length handles, as in the largest real round.
    doc = good(participants=[{"player": f"handle_{i:07d}_x", "rank": i + 1} for i in range(16_783)])
    raw = orjson.dumps(doc)
    assert len(raw) < MAX_EVENT_BYTES
    assert len(parse_match(raw).participants) == 16_783


ids = st.text(alphabet=st.sampled_from("ab.:@+-_9/ é"), min_size=0, max_size=6)
participant = st.fixed_dictionaries(
    {"player": st.one_of(ids, st.integers())},
    optional={"rank": st.one_of(st.integers(-2, 4), st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
              "score": st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=2)),
              "team": st.one_of(st.sampled_from(["red", "blue", "r d"]), st.integers(0, 1)),
              "weight": st.one_of(st.floats(-0.5, 1.5, allow_nan=False), st.just(1), st.text(max_size=1))},
)
documents = st.fixed_dictionaries(
    {},
    optional={"match_id": st.one_of(ids, st.integers()), "league": ids,
              "participants": st.lists(participant, max_size=4),
              "occurred_at": st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01", "2026-01-01T00:00:00+05:30", "x"])},
)


def test_the_reference_validator_checks_date_time_formats():
    # Without rfc3339-validator installed, jsonschema skips "format": the cross-check would be blind.
    assert not validator("match-result.v1").is_valid(good(occurred_at="2026-01-01"))


@given(doc=documents)
@settings(max_examples=500, deadline=None)
def test_validator_agrees_with_the_json_schema(doc):
    schema_ok = validator("match-result.v1").is_valid(doc)
    try:
        parse_match(doc)
        ours = "ok"
    except BadEvent as exc:
        ours = exc.code
    if schema_ok:
        # Everything the schema admits parses, unless a rule beyond the schema says no.
        assert ours in ("ok", "duplicate_player", "inconsistent_standings", "invalid_teams"), ours
    else:
        assert ours != "ok"


def test_a_team_match_keeps_teams_and_weights_and_its_events_name_the_team():
    m = parse_match(good(participants=[
        {"player": "a", "score": 21, "team": "red"}, {"player": "b", "score": 21, "team": "red", "weight": 0.5},
        {"player": "c", "score": 17, "team": "blue"}, {"player": "d", "score": 17.0, "team": "blue"}]))
    assert [(x.team, x.rank, x.weight) for x in m.participants] == [
        ("red", 1, 1.0), ("red", 1, 0.5), ("blue", 3, 1.0), ("blue", 3, 1.0)]
    changes = [RatingChange(x.player, PairwiseState(1500.0), PairwiseState(1500.0 + i, 1)) for i, x in enumerate(m.participants)]
    events = rating_changed_events("weng-lin", m, changes)
    for event in events:
        validator("rating-changed.v1").validate(event)
    assert [e["team"] for e in events] == ["red", "red", "blue", "blue"]
    assert [e.get("weight") for e in events] == [None, 0.5, None, None]
    assert "team" not in rating_changed_events("elo", parse_match(good()), changes[:2])[0]


def test_rating_changed_events_validate_and_ids_are_deterministic():
    m = parse_match(good())
    before = PairwiseState(rating=0.0)
    after = PairwiseState(rating=8.0, matches=1, soft_sum=8.0)
    bob = PairwiseState(rating=-8.0, matches=1, soft_sum=-8.0)
    event, other = rating_changed_events("elo-pairwise", m, [RatingChange("alice", before, after, {"expected_rank": 1.5}),
                                                             RatingChange("bob", before, bob, {"expected_rank": 1.5})])
    validator("rating-changed.v1").validate(other)
    assert (event["rank"], other["rank"], other["player"]) == (1, 2, "bob")
    validator("rating-changed.v1").validate(event)
    assert event["delta"] == 8.0 and event["soft_rating"] == 8.0 and event["expected_rank"] == 1.5
    assert event["occurred_at"] == "2026-11-22T10:15:00Z"
    assert event["event_id"] == event_id("chess", "m-1", "alice")
    assert event_id("chess", "m-1", "alice") != event_id("chess", "m-1", "bob")
    assert event_id("a", "b:c", "d") != event_id("a:b", "c", "d")


def test_dead_letters_validate_and_keep_the_payload():
    for payload in (b"\xff\xfe", b"{oops", orjson.dumps(good(league="a/b"))):
        try:
            parse_match(payload)
        except BadEvent as exc:
            letter = dead_letter(exc, payload, {"topic": "match-results", "partition": 0, "offset": 7, "key": None})
        validator("dead-letter.v1").validate(letter)
        if letter["payload_encoding"] == "utf-8":
            assert letter["payload"].encode() == payload
        else:
            import base64

            assert base64.b64decode(letter["payload"]) == payload


def test_dead_letter_reason_codes_are_all_in_the_schema():
    reasons = set(load_schema("dead-letter.v1")["properties"]["reason"]["enum"])
    assert {case[1] for case in CASES} | {"too_large", "system_rule", "duplicate_match", "invalid_time"} <= reasons
    assert json.dumps(sorted(reasons))


def test_the_rating_changed_schema_names_every_system():
    from stream_app.engine import SYSTEMS

    assert set(load_schema("rating-changed.v1")["properties"]["algorithm"]["enum"]) == set(SYSTEMS)
