"""The validation fast path (inputs._fast_match) accepts only what the general
path accepts and builds the same Match (issue 3: validation speed)."""

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app import inputs
from stream_app.inputs import BadEvent, parse_match


def _general(doc):
    saved = inputs._fast_match
    inputs._fast_match = lambda doc: None
    try:
        return parse_match(doc)
    finally:
        inputs._fast_match = saved


ids = st.text(alphabet=st.sampled_from("ab.:@+-_9/ é\n"), min_size=0, max_size=6)
participant = st.fixed_dictionaries(
    {"player": st.one_of(ids, st.integers())},
    optional={
        "rank": st.one_of(st.integers(-2, 4), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none()),
        "score": st.one_of(st.integers(-5, 5), st.floats(allow_infinity=False), st.text(max_size=2), st.none()),
    },
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "match_id": st.one_of(ids, st.integers()),
        "league": ids,
        "participants": st.lists(participant, max_size=5),
        "occurred_at": st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01", "2026-01-01T00:00:00+05:30", "2026-02-30T00:00:00Z", "x", 5]),
    },
)


@given(doc=documents)
@settings(max_examples=1500, deadline=None)
def test_fast_path_agrees_with_the_general_path(doc):
    fast = inputs._fast_match(doc)
    try:
        general = _general(doc)
    except BadEvent:
        assert fast is None
        return
    assert fast is None or fast == general
    assert parse_match(doc) == general


def test_fast_path_takes_the_common_cases():
    ranked = {"match_id": "m", "league": "l", "occurred_at": "2026-01-01T00:00:00Z",
              "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 1}, {"player": "c", "rank": 3}]}
    scored = {"match_id": "m", "league": "l", "participants": [{"player": "a", "score": 2}, {"player": "b", "score": 7.5}]}
    for doc in (ranked, scored):
        assert inputs._fast_match(orjson.loads(orjson.dumps(doc))) == _general(doc)
    assert [p.rank for p in inputs._fast_match(scored).participants] == [2, 1]
    # A newline inside an id must not pass for two ids.
    assert inputs._fast_match({**ranked, "participants": [{"player": "a\nb", "rank": 1}, {"player": "c", "rank": 2}]}) is None
