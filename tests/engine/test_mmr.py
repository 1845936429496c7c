"""Elo-MMR and Elo-MMchi (stream_app/engine/mmr/): cross-checks against the
authors' reference (elo_mmr_py, Rust bindings), the paper's properties
(the Elo-MMR paper: aligned incentives, Theorem 5.7, translation invariance), state
round trips and parameter validation."""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import replace

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.engine import Match, ParamError, Participant, make_system
from stream_app.engine.mmr import elo_mmr as mmr_module
from stream_app.engine.mmr import EloMmr, EloMmrParams, EloMmx, MmrState
from stream_app.engine.mmr.kernels import erfcx, inverse_mills
from tests.support.rounds import random_rounds, replay_rounds, round_match

em = pytest.importorskip("elo_mmr_py")

FAST = {"subsample_size": 100, "subsample_bucket": 2.0}


def _contest(rows: list[tuple[str, int]], name: str, time: int):
    """The same standings for elo_mmr_py: 0-based inclusive places, ties share lo..hi."""
    ranks = np.array([r for _, r in rows])
    ordered = np.sort(ranks)
    los = np.searchsorted(ordered, ranks, side="left")
    his = np.searchsorted(ordered, ranks, side="right") - 1
    return em.Contest(standings=[(p, int(a), int(b)) for (p, _), a, b in zip(rows, los, his)], name=name, time_seconds=time)


def perf_weights(state: MmrState) -> tuple[float, ...]:
    """The actual output weights omega_k pi / (sqrt 3 beta_k) of a state's factors: the stored ones times the scale."""
    return tuple(w * state.perf_scale for w in state.perf_w_out)


def _reference(rounds, system) -> dict:
    contests = [_contest(rows, str(k), 1000 * (k + 1)) for k, rows in enumerate(rounds)]
    return em.rate_latest(contests, system=system)


# ---- cross-checks against the reference ----

THREE = [
    [("A", 1), ("B", 2), ("C", 3)],
    [("B", 1), ("A", 2), ("C", 3)],
    [("A", 1), ("B", 1), ("C", 3)],
]


def test_known_values_after_first_round():
    states = replay_rounds(EloMmr(), THREE[:1])
    assert states["A"].rating == pytest.approx(1704.8667, abs=1e-4)
    assert states["B"].rating == pytest.approx(1500.0, abs=1e-4)
    assert states["C"].rating == pytest.approx(1295.1333, abs=1e-4)
    for p in "ABC":
        assert states[p].sigma == pytest.approx(171.1954, abs=1e-4)


@pytest.mark.parametrize("name, ref", [("elo-mmr", "mmr"), ("elo-mmx", "mmx")])
def test_three_players_every_round_matches_reference(name, ref):
    system = make_system(name)
    for k in range(1, len(THREE) + 1):
        ours = replay_rounds(system, THREE[:k])
        theirs = _reference(THREE[:k], ref)
        for p in "ABC":
            assert ours[p].rating == pytest.approx(theirs[p].mu, abs=0.01), (k, p)
            assert ours[p].sigma == pytest.approx(theirs[p].sig, abs=0.01), (k, p)
            assert ours[p].matches == theirs[p].contests_played


@pytest.mark.slow  # many examples against the reference: make test runs it, make check (a minute) does not
@pytest.mark.parametrize(
    "name, params, ref",
    [
        ("elo-mmr", {}, "mmr"),
        ("elo-mmx", {}, "mmx"),
        ("elo-mmr", FAST, "mmr-fast"),
        ("elo-mmx", FAST, "mmx-fast"),
    ],
)
def test_random_rounds_match_reference(name, params, ref):
    rounds = random_rounds(seed=1, count=100, pool=500, low=20, high=300)
    ours = replay_rounds(make_system(name, params), rounds)
    theirs = _reference(rounds, ref)
    assert set(ours) == set(theirs)
    for p, r in theirs.items():
        assert abs(ours[p].rating - r.mu) < 0.5, p
        assert abs(ours[p].sigma - r.sig) < 0.1, p


def test_options_match_reference():
    """split_ties, noob_delay and drift_per_day, against EloMmrConfig."""
    rounds = random_rounds(seed=2, count=30, pool=120, low=10, high=80)
    params = {"split_ties": True, "noob_delay": [0.5, 0.75], "drift_per_day": 500.0}
    config = em.EloMmrConfig("mmr", split_ties=True, noob_delay=[0.5, 0.75], drift_per_day=500.0)
    ours = replay_rounds(make_system("elo-mmr", params), rounds)
    theirs = _reference(rounds, config)
    for p, r in theirs.items():
        assert abs(ours[p].rating - r.mu) < 0.01, p
        assert abs(ours[p].sigma - r.sig) < 0.01, p


@pytest.mark.parametrize("name, params, ref", [("elo-mmr", {}, "mmr"), ("elo-mmr", FAST, "mmr-fast")])
def test_large_rounds_match_reference(name, params, ref):
    """Rounds big enough for the decomposed exact path (grid + Newton) and for subsampling to bite."""
    rounds = random_rounds(seed=3, count=4, pool=1500, low=900, high=1200)
    assert 900 * 900 > mmr_module.DENSE_LIMIT
    ours = replay_rounds(make_system(name, params), rounds)
    theirs = _reference(rounds, ref)
    for p, r in theirs.items():
        assert abs(ours[p].rating - r.mu) < 0.01, p
        assert abs(ours[p].sigma - r.sig) < 0.01, p


def test_exact_paths_agree(monkeypatch):
    """The decomposed exact path and the dense one solve the same equations."""
    rounds = random_rounds(seed=4, count=3, pool=900, low=600, high=800)
    decomposed = replay_rounds(EloMmr(), rounds)
    monkeypatch.setattr(mmr_module, "DENSE_LIMIT", 1 << 40)
    dense = replay_rounds(EloMmr(), rounds)
    for p in dense:
        assert decomposed[p].rating == pytest.approx(dense[p].rating, abs=1e-6)


def test_defaults_equal_reference():
    p = EloMmrParams()
    config = em.EloMmrConfig("mmr")
    assert (p.weight_limit, p.sig_limit, p.drift_per_day, p.split_ties) == (
        config.weight_limit,
        config.sig_limit,
        config.drift_per_day,
        config.split_ties,
    )
    assert p.subsample_size is None and config.subsample_size is None
    assert p.subsample_bucket == config.subsample_bucket
    assert (p.initial, p.initial_sigma, p.rho) == (1500.0, 350.0, 1.0)
    w = p.weights(np.array([0]))
    assert p.perf_sigma(w)[0] == pytest.approx(80.0 * math.sqrt(6.0))
    assert math.sqrt(p.drift_variance(w, np.zeros(1))[0]) == pytest.approx(80.0 * math.sqrt(0.2))
    fast = em.EloMmrConfig("mmr-fast")
    assert (fast.subsample_size, fast.subsample_bucket) == (FAST["subsample_size"], FAST["subsample_bucket"])


def test_beta_and_gamma_override():
    system = make_system("elo-mmr", {"beta": 150.0, "gamma": 0.0})
    a, b = system.initial_state(), system.initial_state()
    changes = system.rate(round_match([("a", 1), ("b", 2)]), [a, b])
    # gamma = 0: no drift, so sigma^-2 grows by exactly beta^-2.
    assert changes[0].after.sigma == pytest.approx((350.0**-2 + 150.0**-2) ** -0.5)
    default = EloMmr().rate(round_match([("a", 1), ("b", 2)]), [a, b])
    assert changes[0].after.rating != pytest.approx(default[0].after.rating)


# ---- the paper's properties ----

@st.composite
def rounds_with_states(draw, max_players: int = 7):
    n = draw(st.integers(2, max_players))
    states = []
    for _ in range(n):
        mu = draw(st.floats(500.0, 2500.0))
        sigma = draw(st.floats(60.0, 350.0))
        gsig = draw(st.floats(sigma, 400.0))
        k = draw(st.integers(0, 4))
        perfs = tuple(draw(st.lists(st.floats(mu - 600.0, mu + 600.0), min_size=k, max_size=k)))
        w_out = tuple(draw(st.lists(st.floats(1e-4, 0.00926), min_size=k, max_size=k)))
        states.append(
            MmrState.with_factors(
                rating=mu,
                sigma=sigma,
                matches=k,
                gauss_mu=mu,
                gauss_sigma=gsig,
                perfs=perfs,
                perf_w_arg=(0.004628,) * k,
                perf_w_out=w_out,
            )
        )
    ranks = draw(st.lists(st.integers(1, n), min_size=n, max_size=n))
    return states, ranks


def _rate(system, states, ranks):
    rows = [(f"p{i}", r) for i, r in enumerate(ranks)]
    return system.rate(round_match(rows), states)


@pytest.mark.parametrize("system", [EloMmr(), EloMmx(), EloMmr(EloMmrParams(split_ties=True))], ids=["mmr", "mmx", "mmr-split"])
@settings(max_examples=60, deadline=None)
@given(data=rounds_with_states(), who=st.integers(0, 100), better=st.integers(1, 7))
def test_better_rank_never_lowers_rating(system, data, who, better):
    states, ranks = data
    i = who % len(ranks)
    improved = list(ranks)
    improved[i] = max(1, ranks[i] - better)
    if improved[i] == ranks[i] or len(set(ranks)) == 1 or len(set(improved)) == 1:
        return
    worse = _rate(system, states, ranks)[i]
    good = _rate(system, states, improved)[i]
    assert good.after.rating >= worse.after.rating - 1e-7
    assert good.extras["performance"] >= worse.extras["performance"] - 1e-7


def _posterior_zero(gauss_mu, gauss_sigma, perfs, w_arg, w_out):
    """Zero of L' (Equation 6) by plain bisection, independently of the engine."""

    def slope(x):
        return (x - gauss_mu) / gauss_sigma**2 + sum(wo * math.tanh(wa * (x - p)) for p, wa, wo in zip(perfs, w_arg, w_out))

    lo, hi = min((gauss_mu, *perfs)), max((gauss_mu, *perfs))
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


@settings(max_examples=80, deadline=None)
@given(data=rounds_with_states(), outlier=st.booleans())
def test_single_round_change_is_bounded(data, outlier):
    """Theorem 5.7: |mu_t - mu_{t-1}| <= pi beta_0^2 / (beta sqrt 3), where mu_{t-1}
    is the zero of L' after the diffusion (which preserves it for consistent
    states) and beta_0 the Gaussian factor's deviation then (no compression)."""
    states, ranks = data
    if outlier:  # the lowest-rated player wins outright, the highest comes last
        order = np.argsort([s.rating for s in states])
        ranks = [2] * len(states)
        ranks[order[0]], ranks[order[-1]] = 1, 3
    if len(set(ranks)) == 1:
        return
    system = EloMmr()
    beta = system.params.perf_sigma(np.array([system.params.weight_limit]))[0]
    for change in _rate(system, states, ranks):
        a = change.after
        prior = _posterior_zero(a.gauss_mu, a.gauss_sigma, a.perfs[:-1], a.perf_w_arg[:-1], perf_weights(a)[:-1])
        bound = math.pi * a.gauss_sigma**2 / (beta * math.sqrt(3.0))
        assert abs(a.rating - prior) <= bound * (1 + 1e-9) + 1e-6


@pytest.mark.parametrize("system", [EloMmr(), EloMmx(), EloMmr(EloMmrParams(**FAST))], ids=["mmr", "mmx", "mmr-fast"])
@settings(max_examples=40, deadline=None)
@given(data=rounds_with_states(), shift=st.floats(-5000.0, 5000.0))
def test_translation_invariance(system, data, shift):
    states, ranks = data
    if len(set(ranks)) == 1:
        return
    moved = [
        MmrState.from_dict(
            {**s.to_dict(), "rating": s.rating + shift, "gauss_mu": s.gauss_mu + shift, "perfs": [p + shift for p in s.perfs]}
        )
        for s in states
    ]
    base = _rate(system, states, ranks)
    shifted = _rate(system, moved, ranks)
    for a, b in zip(base, shifted):
        assert b.after.rating == pytest.approx(a.after.rating + shift, abs=1e-6)
        assert b.after.sigma == pytest.approx(a.after.sigma, rel=1e-12)


# ---- states, determinism, edge cases ----

@pytest.mark.parametrize("name", ["elo-mmr", "elo-mmx"])
def test_state_json_round_trip(name):
    system = make_system(name, {"max_history": 3} if name == "elo-mmr" else {})
    rounds = random_rounds(seed=5, count=8, pool=12, low=5, high=10)
    states = replay_rounds(system, rounds)
    restored = {p: system.state_from_dict(orjson.loads(orjson.dumps(s.to_dict()))) for p, s in states.items()}
    assert restored == states
    rows = [(p, i + 1) for i, p in enumerate(sorted(states))]
    a = system.rate(round_match(rows, time=9e5), [states[p] for p, _ in rows])
    b = system.rate(round_match(rows, time=9e5), [restored[p] for p, _ in rows])
    assert [c.after for c in a] == [c.after for c in b]
    assert [c.extras for c in a] == [c.extras for c in b]


def test_history_is_bounded_and_compressed():
    system = make_system("elo-mmr", {"max_history": 3})
    rows = [("a", 1), ("b", 2), ("c", 3)]
    states = [system.initial_state() for _ in rows]
    for k in range(6):
        states = [c.after for c in system.rate(round_match(rows, str(k)), states)]
    assert all(len(s.perfs) == len(s.perf_w_arg) == len(s.perf_w_out) == 3 for s in states)
    # Folding old factors into the Gaussian one sharpens it.
    assert states[0].gauss_sigma < 350.0


def test_rate_is_deterministic_and_pure():
    system = make_system("elo-mmr", FAST)
    rounds = random_rounds(seed=6, count=5, pool=300, low=150, high=250)
    states = replay_rounds(system, rounds[:4])
    rows = rounds[4]
    before = [states.get(p) or system.initial_state() for p, _ in rows]
    snapshot = [s.to_dict() for s in before]
    a = system.rate(round_match(rows), before)
    b = system.rate(round_match(rows), before)
    assert [c.after for c in a] == [c.after for c in b]
    assert [s.to_dict() for s in before] == snapshot
    assert [c.player for c in a] == [p for p, _ in rows]


def test_outcome_free_match_changes_nothing():
    system = EloMmr()
    s = system.initial_state()
    changes = system.rate(round_match([("a", 2), ("b", 2)]), [s, s])
    assert all(c.after == replace(c.before, matches=1) for c in changes)
    assert all("performance" not in c.extras for c in changes)
    assert system.rate(round_match([("a", 1)]), [s])[0].after == replace(s, matches=1)


def test_public_and_extras():
    system = EloMmr()
    changes = system.rate(round_match([("a", 1), ("b", 2)]), [system.initial_state()] * 2)
    after = changes[0].after
    public = after.public()
    assert public == {
        "rating": after.rating,
        "uncertainty": after.sigma,
        "display_rating": after.rating - 3 * (after.sigma - 80.0),
        "matches": 1,
    }
    assert changes[0].extras["uncertainty"] == after.sigma
    assert changes[0].extras["uncertainty_before"] == 350.0
    assert changes[0].extras["display_rating"] == public["display_rating"]
    assert changes[0].extras["performance"] > changes[1].extras["performance"]
    assert make_system("elo-mmr", {"sig_limit": 100.0}).initial_state().display_rating == 1500.0 - 3 * 250.0


@pytest.mark.parametrize("name", ["elo-mmr", "elo-mmx"])
def test_each_change_of_a_round_has_its_own_extras(name):
    """Extras are made when asked: each change's from its own states, its performance the
    centre of the factor the round added (Elo-MMR) or its own (Elo-MMX)."""
    system = make_system(name, FAST)
    rows = [(f"p{i}", 1 + i // 2) for i in range(300)]
    before = [c.after for c in system.rate(round_match(rows), [system.initial_state()] * 300)]
    changes = system.rate(round_match(rows), before)
    performances = []
    for change, prior in zip(changes, before):
        extras = change.extras
        assert change.before is prior
        assert extras == {"uncertainty": change.after.sigma, "uncertainty_before": prior.sigma,
                          "display_rating": change.after.display_rating, "performance": extras["performance"]}
        if name == "elo-mmr":
            assert extras["performance"] == change.after.perfs[-1]
        performances.append(extras["performance"])
    assert len(set(performances)) > 100 and performances[0] > performances[-1]
    again = pickle.loads(pickle.dumps(changes))  # as a process pool would hand them over
    assert again == changes and [c.extras for c in again] == [c.extras for c in changes]
    assert copy.copy(changes[0]) == changes[0]


def test_time_gaps_add_drift():
    system = make_system("elo-mmr", {"drift_per_day": 100.0})
    rows = [("a", 1), ("b", 2)]
    first = [c.after for c in system.rate(round_match(rows, time=0.0), [system.initial_state()] * 2)]
    soon = system.rate(round_match(rows, time=86400.0), first)[0].after
    late = system.rate(round_match(rows, time=30 * 86400.0), first)[0].after
    untimed = system.rate(round_match(rows, time=None), first)[0].after
    assert late.sigma > soon.sigma
    assert untimed.sigma == pytest.approx(system.rate(round_match(rows, time=0.0), first)[0].after.sigma)
    assert untimed.last_time == 0.0 and late.last_time == 30 * 86400.0


# ---- parameters ----

@pytest.mark.parametrize(
    "name, params, key",
    [
        ("elo-mmr", {"nonsense": 1}, "nonsense"),
        ("elo-mmx", {"rho": 1.0}, "rho"),
        ("elo-mmx", {"max_history": 5}, "max_history"),
        ("elo-mmr", {"weight_limit": 0.0}, "weight_limit"),
        ("elo-mmr", {"sig_limit": -80.0}, "sig_limit"),
        ("elo-mmr", {"beta": 0.0}, "beta"),
        ("elo-mmr", {"gamma": -1.0}, "gamma"),
        ("elo-mmr", {"rho": -0.5}, "rho"),
        ("elo-mmr", {"drift_per_day": -1.0}, "drift_per_day"),
        ("elo-mmr", {"subsample_size": 0}, "subsample_size"),
        ("elo-mmr", {"subsample_size": 2.5}, "subsample_size"),
        ("elo-mmr", {"subsample_bucket": 0.0}, "subsample_bucket"),
        ("elo-mmr", {"max_history": 0}, "max_history"),
        ("elo-mmr", {"initial_sigma": 0.0}, "initial_sigma"),
        ("elo-mmr", {"split_ties": "yes"}, "split_ties"),
        ("elo-mmr", {"noob_delay": [0.5, 0.0]}, "noob_delay"),
        ("elo-mmr", {"noob_delay": "0.5"}, "noob_delay"),
        ("elo-mmx", {"noob_delay": [0.5, "x"]}, "noob_delay"),
        ("elo-mmr", {"initial": float("nan")}, "initial"),
    ],
)
def test_invalid_parameters_name_the_key(name, params, key):
    with pytest.raises(ParamError) as info:
        make_system(name, params)
    assert info.value.key == key
    assert repr(key) in str(info.value)


def test_valid_parameters_accepted():
    system = make_system("elo-mmr", {"rho": 0.0, "beta": 200, "gamma": 30, "noob_delay": [0.6, 0.8], **FAST})
    assert system.params.noob_delay == (0.6, 0.8)
    assert system.params.beta == 200.0
    assert make_system("elo-mmx", {"split_ties": True}).params.split_ties


# ---- numerics ----

def test_erfcx_and_inverse_mills():
    t = np.linspace(-5.0, 8.0, 2001)
    exact = np.array([math.exp(x * x) * math.erfc(x) for x in t])
    assert np.max(np.abs(erfcx(t) / exact - 1.0)) < 1e-10
    big = np.array([20.0, 50.0, 1e3])
    asymptotic = (1 - 1 / (2 * big**2) + 3 / (4 * big**4)) / (big * math.sqrt(math.pi))
    assert np.allclose(erfcx(big), asymptotic, rtol=1e-7, atol=0)
    z = np.array([-60.0, -8.0, 0.0, 3.0, 40.0])
    lam = inverse_mills(z)
    assert lam[0] == pytest.approx(60.0166, rel=1e-4)  # ~ -z for very negative z
    assert lam[2] == pytest.approx(math.sqrt(2.0 / math.pi))
    assert lam[4] == 0.0 and np.all(np.isfinite(lam))


# ---- the undecayed weights and the state builder (issue 3) ----


def test_state_round_trips_through_json_as_lists():
    state = MmrState.with_factors(
        (1500.5, -3.25e-7), (0.004628, 0.1), (0.00926, 1e-300), rating=1.0, sigma=2.0, matches=2, perf_scale=0.5,
        last_time=12.5,
    )
    data = orjson.loads(orjson.dumps(state.to_dict()))
    assert data["perfs"] == [1500.5, -3.25e-7] and data["perf_w_out"] == [0.00926, 1e-300]
    back = MmrState.from_dict(data)
    assert back == state and back.perfs == state.perfs and back.perf_w_arg == state.perf_w_arg
    assert back.to_dict() == state.to_dict()
    assert MmrState.from_dict({"rating": 1.0, "sigma": 2.0}).perfs == ()
    with pytest.raises(ValueError):
        MmrState.from_dict({"rating": 1.0, "sigma": 2.0, "perfs": [1.0], "perf_w_arg": [], "perf_w_out": []})


def test_weights_are_stored_undecayed_with_one_scale():
    system = make_system("elo-mmr", {"max_history": 4})
    rows = [("a", 1), ("b", 2), ("c", 3)]
    states = [system.initial_state() for _ in rows]
    history = []
    for k in range(6):
        states = [c.after for c in system.rate(round_match(rows, str(k)), states)]
        history.append(states[0])
    a = history[-1]
    # Each factor keeps the weight it was created with; the scale carries the decay.
    assert a.perf_w_out[-1] * a.perf_scale == pytest.approx(TANH_MULTIPLIER_BETA)
    assert a.perf_w_out[:-1] == history[-2].perf_w_out[1:]
    assert 0 < a.perf_scale < history[-2].perf_scale < 1


TANH_MULTIPLIER_BETA = math.pi / math.sqrt(3.0) / (80.0 * math.sqrt(6.0))


def test_tiny_scale_is_folded_into_the_weights(monkeypatch):
    """Below _MIN_SCALE the stored weights are rescaled, with the same ratings."""
    rounds = random_rounds(seed=8, count=12, pool=30, low=10, high=25)
    plain = replay_rounds(make_system("elo-mmr", {"max_history": 5}), rounds)
    monkeypatch.setattr(mmr_module, "_MIN_SCALE", 0.5)
    folded = replay_rounds(make_system("elo-mmr", {"max_history": 5}), rounds)
    assert any(s.perf_scale == 1.0 and s.matches >= 2 for s in folded.values())
    for p in plain:
        assert folded[p].perf_scale >= 0.5
        assert folded[p].rating == pytest.approx(plain[p].rating, abs=1e-9)
        assert perf_weights(folded[p]) == pytest.approx(perf_weights(plain[p]), rel=1e-12)


def test_built_states_are_mmr_states_and_rating_never_changes_its_inputs():
    from dataclasses import astuple, fields

    system = make_system("elo-mmr", FAST)
    rounds = random_rounds(seed=3, count=3, pool=20, low=5, high=12)
    states = replay_rounds(system, rounds)
    for s in states.values():
        assert type(s) is MmrState
        assert s == MmrState(**{f.name: getattr(s, f.name) for f in fields(MmrState)})
    players = sorted(states)[:6]
    before = [states[p] for p in players]
    copies = [astuple(s) for s in before]
    system.rate(Match("l", "x", tuple(Participant(p, i + 1) for i, p in enumerate(players))), before)
    assert [astuple(s) for s in before] == copies


@pytest.mark.parametrize("seed", range(6))
def test_net_counts_agree_with_counts(seed):
    from stream_app.engine.mmr.terms import Terms as _Terms

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    mu = rng.choice(rng.normal(1500.0, 300.0, max(1, n // int(rng.integers(1, 6)))), n)  # shared ratings: big terms
    delta = rng.choice([250.0, 260.0, 400.0], n)
    ranks = np.sort(rng.integers(1, max(2, n // int(rng.integers(1, 4))), n))  # ties
    lo = np.searchsorted(np.sort(ranks), ranks, side="left").astype(np.int64)
    terms = _Terms(mu, delta, lo, 2.0)
    beg, end = terms.windows(mu, int(rng.integers(1, 30)))
    width = int((end - beg).max())
    cols = np.minimum(beg[:, None] + np.arange(width)[None, :], terms.m - 1)
    less, equal, greater = terms.counts(lo, cols)
    net, eq, count = terms.net_counts(lo, beg, width)
    assert (net == greater - less).all()
    assert (eq == equal).all()
    assert (count == less + equal + greater).all()


