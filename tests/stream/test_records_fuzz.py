"""Fuzzing the validator, the engine and the processor (hypothesis).

Any input (random bytes, mutated events, JSON documents from a grammar close
to match-result events with hostile values) gives either an applied match or a
dead letter, never an exception out of `RecordHandler.handle` and never an
`internal_error` (that would be the engine failing on an input the validator
let through). A dead letter is valid against its schema; an applied match keeps
every rating (and every number in the stored state) finite and publishes valid
rating-changed events. Python floats (NaN, infinities, 1e308) go straight into
the validator too, and a match it accepts is rated by the league's system.

The number of examples run is printed at the end of the module (the README
reports it).
"""

from __future__ import annotations

import json
import math
from collections import Counter

import fastjsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_app.leagues import LeagueConfig
from stream_app.inputs import BadEvent, load_schema, parse_match, validate_match
from stream_app.published import MAX_DEAD_LETTER_BYTES
from stream_app.offline.replay import Ledger
from stream_app.apply import apply_match
from stream_app.stream.records import RecordHandler
from stream_app.stream.changelog import ChangelogRule, Checkpoint
from stream_app.stream.commit import apply_records
from stream_app.state.tables import tables_for
from stream_app.stream.transaction import PartitionTransaction

CONFIG = LeagueConfig.from_toml("""
[default]
algorithm = "elo"

[leagues."pts1-*"]
algorithm = "elo"
points_method = 1

[leagues."pts2-*"]
algorithm = "elo"
points_method = 2

[leagues."pw-*"]
algorithm = "elo-pairwise"
ties = "half"
top_n = 2
k_top = 16

[leagues."pws-*"]
algorithm = "elo-pairwise"
round = true

[leagues."mmr-*"]
algorithm = "elo-mmr"
""")
# 4,800 examples, about 30 s of CPU: `make test` runs them, `make check` (a minute) does not.
pytestmark = pytest.mark.slow
TOPIC = "fuzz.matches"
HANDLER = RecordHandler(CONFIG, 1, TOPIC + "-by-league")  # one partition: every league is local

COUNTS: Counter = Counter()


def _schema(name: str):
    schema = dict(load_schema(name))
    schema.pop("examples", None)
    return fastjsonschema.compile(schema)


DEAD_LETTER = _schema("dead-letter.v1")
RATING_CHANGED = _schema("rating-changed.v1")


@pytest.fixture(scope="module", autouse=True)
def report(request):
    yield
    total = sum(v for k, v in COUNTS.items() if k.startswith("examples:"))
    detail = ", ".join(f"{k} {v:,}" for k, v in sorted(COUNTS.items()))
    line = f"test_records_fuzz: {total:,} examples ({detail})"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is not None:
        with capture.global_and_fixture_disabled():
            print("\n" + line)
    else:  # pragma: no cover
        print(line)


# -- the grammar -------------------------------------------------------------------------

GOOD_IDS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "ann", "ben", "x.y", "a:b", "u@v", "p+q", "-_-"])
HOSTILE_TEXT = st.one_of(
    st.just(""), st.just("."), st.just(".."), st.just("a/b"), st.just("a b"), st.just("../etc"), st.just("a\nb"),
    st.just("a\x1fb"), st.just("é"), st.just("\U0001F600"), st.just("a\x00"),
    st.text(min_size=0, max_size=20),
    st.text(alphabet="ab.", min_size=120, max_size=140),  # around the length limit
    st.integers(0, 3).map(lambda n: "L" * (127 + n)),
)
NUMBERS = st.one_of(
    st.integers(-5, 50),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, 1.5, 2.0, 1e9, 1e9 + 1, float("nan"), float("inf"), -float("inf")]),
    st.booleans(),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=10))
NESTED = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)), max_leaves=12)
ANY_VALUE = st.one_of(SCALARS, NESTED)


def pick(draw, good, bad, odds: int):
    """`bad` with probability 1/odds, else `good`."""
    return draw(bad) if draw(st.integers(1, odds)) == 1 else draw(good)


PLAYERS = st.one_of(GOOD_IDS, st.integers(0, 400).map(lambda i: f"p{i}"))


@st.composite
def participant(draw, odds: int, style: int):
    doc = {}
    if draw(st.integers(0, 4 * odds)):  # almost always a player
        doc["player"] = pick(draw, PLAYERS, st.one_of(HOSTILE_TEXT, ANY_VALUE), odds)
    if draw(st.integers(0, 2 * odds)) == 0:
        style = draw(st.integers(0, 9))  # this one differs from the others
    if style < 6 or style == 9:
        doc["rank"] = pick(draw, st.integers(1, 6), st.one_of(NUMBERS, ANY_VALUE), odds)
    if style >= 6:
        doc["score"] = pick(draw, st.one_of(st.floats(0, 100), st.integers(0, 10)), st.one_of(NUMBERS, ANY_VALUE), odds)
    if draw(st.integers(0, 9)) == 0:
        doc[draw(st.text(max_size=6))] = draw(ANY_VALUE)
    return doc


@st.composite
def many_participants(draw):
    """A large field: valid players with random ranks or scores (the engine under load)."""
    n = draw(st.integers(2, 1500))
    seed = draw(st.integers(0, 2**32))
    scores = draw(st.booleans())
    out = []
    for i in range(n):
        v = (seed * 2654435761 + i * 40503) % 97
        out.append({"player": f"p{i}", "score": float(v) - 40.0} if scores else {"player": f"p{i}", "rank": v + 1})
    return out


@st.composite
def match_doc(draw):
    odds = draw(st.sampled_from([3, 8, 30, 30, 200, 200]))  # how hostile this document is: 1 bad value in `odds`
    doc = {}
    if draw(st.integers(0, 4 * odds)):
        doc["match_id"] = pick(draw, st.integers(0, 30).map(lambda i: f"m-{i}"), st.one_of(HOSTILE_TEXT, ANY_VALUE), odds)
    if draw(st.integers(0, 4 * odds)):
        doc["league"] = pick(draw, st.sampled_from(["chess", "pts1-a", "pts2-a", "pw-a", "pws-a", "mmr-a"]),
                             st.one_of(HOSTILE_TEXT, ANY_VALUE), odds)
    choice = draw(st.integers(0, 4 * odds))
    if choice == 0:
        pass  # missing
    elif choice == 1:
        doc["participants"] = draw(ANY_VALUE)
    elif choice in (2, 3):
        doc["participants"] = draw(many_participants())
    else:
        style = draw(st.sampled_from([0, 0, 0, 7, 9]))  # ranks, scores, both
        one = participant(odds, style)
        doc["participants"] = draw(st.lists(
            st.one_of(one, one, one, one, ANY_VALUE) if odds < 30 else one,
            min_size=draw(st.sampled_from([0, 2, 2, 2, 3])), max_size=12,
            # players mostly distinct: hypothesis likes to repeat list elements
            unique_by=(lambda d: repr(d.get("player")) if isinstance(d, dict) else repr(d)) if odds >= 30 else None))
    if draw(st.integers(0, 4)) == 0:
        doc["occurred_at"] = pick(draw, st.sampled_from(["2026-11-22T10:15:00Z", "2026-11-22T10:15:00.123456+01:00",
                                                        "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"]),
                                  st.one_of(st.sampled_from(["2026-11-22T10:15:00", "yesterday", "2026-02-30T10:00:00Z",
                                                             "2026-11-22T25:00:00Z", "0000-01-01T00:00:00Z"]), ANY_VALUE), odds)
    if draw(st.integers(0, 9)) == 0:
        doc["extra"] = draw(NESTED)
    kind = draw(st.integers(0, 9))
    if kind < 2:  # a command: void (dropping the standings) or correction
        doc["schema"] = pick(draw, st.just(["match-voided.v1", "match-corrected.v1"][kind]),
                             st.one_of(st.sampled_from(["match-result.v1", "match-deleted.v1"]), ANY_VALUE), odds)
        if draw(st.integers(0, 4 * odds)):
            doc["reason"] = pick(draw, st.text(min_size=1, max_size=20), st.one_of(st.just(""), ANY_VALUE), odds)
        if kind == 0 and draw(st.integers(0, 3)):
            doc.pop("participants", None)
    return doc


def encode(doc) -> bytes:
    """The wire form: Python's json (NaN/Infinity literals, integers of any size)."""
    return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


# -- the checks --------------------------------------------------------------------------------


class Harness:
    """A RecordHandler over a PartitionTransaction backed by an in-memory dict store, committing after every record."""

    def __init__(self):
        self.store: dict[bytes, bytes] = {}
        self.restored: dict[bytes, bytes] = {}  # the same, as the changelog makes it again
        self.state = PartitionTransaction(0, Checkpoint(), self.store.get, tables_for(CONFIG), scanner(self.store))
        self.reader = ChangelogRule()
        self.offset = 0

    def process(self, value: bytes | None, key: bytes | None = b"k"):
        result = HANDLER.handle(self.state, TOPIC, 0, self.offset, key, value)  # must not raise
        self.offset += 1
        check_result(result)
        records, mark, checkpoint, values = self.state.checkpoint_writes()
        written(self.store, values)
        self.state.checkpointed(checkpoint)
        for key, raw in self.store.items():
            assert_finite(orjson.loads(raw), repr(key))
        # The store is what the changelog says: its records, read by the rule, make it again.
        for record in (*records, mark):
            self.reader.feed(self.reader.position, *record)
        committed, at, _ = self.reader.take()
        again = PartitionTransaction(0, at, self.restored.get, tables_for(CONFIG), scanner(self.restored))
        apply_records(again, committed, HANDLER.deriver)
        written(self.restored, again.local_values())
        assert self.restored == {k: v for k, v in self.store.items()}
        return result


def scanner(store: dict[bytes, bytes]):
    return lambda start, end: sorted((key, value) for key, value in store.items() if start <= key < end)


def written(store: dict[bytes, bytes], values: dict[bytes, bytes | None]) -> None:
    for key, raw in values.items():
        if raw is None:
            store.pop(key, None)  # deleted (a re-rate's)
        else:
            store[key] = raw


def assert_finite(value, where: str) -> None:
    if isinstance(value, float):
        assert math.isfinite(value), f"{where}: {value!r}"
    elif isinstance(value, dict):
        for k, v in value.items():
            assert_finite(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            assert_finite(v, f"{where}[{i}]")


def check_result(result) -> None:
    assert not result.redelivered and not result.forwarded and result.pending is None
    done = [result.applied, result.rerated, result.dead_letter]
    assert sum(x is not None for x in done) == 1, "exactly one of applied / re-rated / dead letter"
    if result.rerated is not None:
        COUNTS["re-rated"] += 1
        for out in result.outputs:
            event = orjson.loads(out.value)
            assert out.kind == "change" and event["cause"] == "correction"
            RATING_CHANGED(event)
            assert_finite(event, "correction")
        return
    if result.dead_letter is not None:
        code = result.dead_letter.code
        COUNTS[f"dead letter {code}"] += 1
        assert code != "internal_error", f"the engine failed on a validated input: {result.dead_letter.message}"
        [out] = result.outputs
        assert out.kind == "dead_letter" and len(out.value) <= MAX_DEAD_LETTER_BYTES
        DEAD_LETTER(orjson.loads(out.value))
    else:
        COUNTS["applied"] += 1
        applied = result.applied
        assert len(result.outputs) == len(applied.match.participants) == len(applied.changes)
        for change in applied.changes:
            assert math.isfinite(change.before.rating) and math.isfinite(change.after.rating), change
            assert_finite(change.after.to_dict(), change.player)
        for out in result.outputs:
            assert out.kind == "change"
            event = orjson.loads(out.value)
            RATING_CHANGED(event)
            assert_finite(event, "rating-changed")
            assert math.isfinite(event["rating_after"]) and math.isfinite(event["delta"])


FUZZ = settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(st.lists(match_doc(), min_size=1, max_size=4))
def test_grammar_documents_are_applied_or_dead_lettered(docs):
    """The same documents through the wire (bytes) and straight into the validator (Python values)."""
    COUNTS["examples:grammar"] += 1
    harness = Harness()
    for doc in docs:
        COUNTS["records"] += 1
        raw = encode(doc)
        harness.process(raw)
        # Straight into the validator: NaN and infinities as Python floats, integers of any size.
        try:
            direct = validate_match(doc)
        except BadEvent as exc:
            direct = exc
        if isinstance(direct, BadEvent):
            assert direct.code not in ("internal_error", "invalid_json", "invalid_encoding", "too_large")
        else:
            for p in direct.participants:
                assert type(p.rank) is int and 1 <= p.rank <= 1_000_000_000
                assert p.score is None or math.isfinite(p.score)
            try:
                changes = apply_match(CONFIG, Ledger(CONFIG).tables, direct).changes
            except BadEvent as exc:
                assert exc.code == "system_rule", exc
            else:
                assert all(math.isfinite(c.after.rating) for c in changes)
        # Where the wire form means the same document, both paths agree.
        try:
            same = orjson.loads(raw) == doc
        except orjson.JSONDecodeError:
            same = False
        if same:
            try:
                wire = parse_match(raw)
            except BadEvent as exc:
                wire = exc
            if isinstance(direct, BadEvent):
                assert isinstance(wire, BadEvent) and (wire.code, wire.field) == (direct.code, direct.field)
            else:
                assert wire == direct


@FUZZ
@given(st.lists(st.binary(max_size=400), min_size=1, max_size=3))
def test_random_bytes_are_dead_lettered(blobs):
    COUNTS["examples:bytes"] += 1
    harness = Harness()
    for blob in blobs:
        COUNTS["records"] += 1
        harness.process(blob, key=None)


VALID = [
    encode({"match_id": "m1", "league": "chess", "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]}),
    encode({"match_id": "m2", "league": "pw-a", "occurred_at": "2026-11-22T10:15:00Z",
            "participants": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}, {"player": "c", "rank": 2}]}),
    encode({"match_id": "m3", "league": "mmr-a", "participants": [{"player": f"p{i}", "score": i} for i in range(8)]}),
    encode({"match_id": "m4", "league": "pts2-a", "participants": [{"player": "a", "score": 3}, {"player": "b", "score": 1.5}]}),
]


@st.composite
def mutated(draw):
    """A valid event with a few bytes replaced, inserted or deleted."""
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 2))
        if op == 0 and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == 1:
            data[at:at] = draw(st.sampled_from([b"\x00", b"\xff", b'"', b"\\", b",", b"}", b"]", b"1e999", b"NaN", b"-", b"\xc3", b"9" * 30]))
        elif at < len(data):
            del data[at]
    return bytes(data)


@FUZZ
@given(st.lists(st.one_of(mutated(), st.sampled_from(VALID)), min_size=1, max_size=6))
def test_mutated_events_are_applied_or_dead_lettered(blobs):
    COUNTS["examples:mutated"] += 1
    harness = Harness()
    for blob in blobs:
        COUNTS["records"] += 1
        harness.process(blob)


@st.composite
def extreme_match(draw):
    """A valid event whose numbers are extreme: scores anywhere in the finite doubles, ranks up to 1e9."""
    league = draw(st.sampled_from(["chess", "pts1-a", "pts2-a", "pw-a", "pws-a", "mmr-a"]))
    two = league in ("chess",) or league.startswith("pts")
    n = 2 if two else draw(st.integers(2, 10))
    players = draw(st.lists(st.sampled_from([f"q{i}" for i in range(12)]), min_size=n, max_size=n, unique=True))
    if draw(st.booleans()):
        scores = draw(st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                                         st.sampled_from([0.0, -0.0, 1e308, 5e-324, 1.7976931348623157e308])),
                               min_size=n, max_size=n))
        people = [{"player": p, "score": s} for p, s in zip(players, scores)]
    else:
        ranks = draw(st.lists(st.one_of(st.integers(1, 3), st.integers(1, 1_000_000_000)), min_size=n, max_size=n))
        people = [{"player": p, "rank": r} for p, r in zip(players, ranks)]
    return {"match_id": f"x-{draw(st.integers(0, 10**9))}", "league": league, "participants": people}


@FUZZ
@given(st.lists(extreme_match(), min_size=1, max_size=8))
def test_extreme_numbers_keep_every_rating_finite(docs):
    COUNTS["examples:extreme"] += 1
    harness = Harness()
    for doc in docs:
        COUNTS["records"] += 1
        result = harness.process(encode(doc))
        if result.dead_letter is not None:
            # Only the system's own rules may refuse a valid event (e.g. negative points in points_method 1).
            assert result.dead_letter.code in ("system_rule", "duplicate_match"), result.dead_letter
