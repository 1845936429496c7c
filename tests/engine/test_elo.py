"""Two-player Elo against the Elo blog post's example and the ELO-Rating library's formulas, worked by hand."""

import pytest

from stream_app.engine import InvalidMatch, Match, ParamError, Participant, make_system


def match(*people, league="l", match_id="m"):
    return Match(league, match_id, tuple(Participant(*p) for p in people))


def rate(system, ratings, *people):
    before = [system.State(rating=r) for r in ratings]
    return [c.after.rating for c in system.rate(match(*people), before)]


def test_elo_blog_post_both_at_100_k30_winner_115_loser_85():
    elo = make_system("elo", {"k": 30, "initial": 100})
    start = elo.initial_state()
    changes = elo.rate(match(("winner", 1), ("loser", 2)), [start, start])
    assert changes[0].after.rating == 115.0
    assert changes[1].after.rating == 85.0
    assert [c.after.matches for c in changes] == [1, 1]
    assert changes[0].extras["expected_score"] == 0.5


# The ELO-Rating library with K=32, c=400, L=16, A at 1200 and B at 1000:
#   E_a = 1 / (1 + 10^((1000-1200)/400)) = 1 / (1 + 10^-0.5) = 1 / 1.316227766 = 0.759746927
#   E_b = 1 - E_a = 0.240253073
#   32 * (1 - 0.759746927) = 7.688098347;  32 * (0.5 - 0.759746927) = -8.311901653
E_A = 0.7597469266479578


@pytest.mark.parametrize(
    "ranks, expected",
    [
        ((1, 2), (1207.688098347, 992.311901653)),  # A wins: 1200 + 32(1 - E_a)
        ((2, 1), (1175.688098347, 1024.311901653)),  # A loses: 1200 + 32(0 - E_a)
        ((1, 1), (1191.688098347, 1008.311901653)),  # draw: 1200 + 32(0.5 - E_a)
    ],
)
def test_elo_rating_library_method_0(ranks, expected):
    elo = make_system("elo", {"points_method": 0})
    got = rate(elo, [1200.0, 1000.0], ("a", ranks[0]), ("b", ranks[1]))
    assert got == pytest.approx(expected, abs=1e-8)


def test_elo_rating_library_method_1_points_fraction_replaces_outcome():
    # 5 points to 1: S_a = 5/6 = 0.833333333; 1200 + 32 (0.833333333 - 0.759746927) = 1202.354765014
    elo = make_system("elo", {"points_method": 1})
    got = rate(elo, [1200.0, 1000.0], ("a", 1, 5.0), ("b", 2, 1.0))
    assert got == pytest.approx((1202.354765014, 997.645234986), abs=1e-8)
    # The loser on the board scoring more points still gains on method 1: only points count.
    got = rate(elo, [1200.0, 1000.0], ("a", 2, 1.0), ("b", 1, 5.0))
    assert got == pytest.approx((1200 + 32 * (1 / 6 - E_A), 1000 + 32 * (5 / 6 - (1 - E_A))), abs=1e-8)


@pytest.mark.parametrize(
    "ranks, points, expected",
    [
        # A wins 5-1: 1200 + 7.688098347 + (+1)(16)(5/6 = 0.833333) = 1221.021431681
        #             B: 1000 + 32(0 - 0.240253073) + (-1)(16)(1/6) = 989.645234986
        ((1, 2), (5.0, 1.0), (1221.021431681, 989.645234986)),
        # A loses 1-5: 1200 + 32(0 - 0.759746927) - 16(1/6) = 1173.021431681
        #              B: 1000 + 32(1 - 0.240253073) + 16(5/6) = 1037.645234986
        ((2, 1), (1.0, 5.0), (1173.021431681, 1037.645234986)),
        # Draw 2-2: S_a - E_a < 0 so p = -1: 1200 - 8.311901653 - 16(0.5) = 1183.688098347
        #           B: 1000 + 8.311901653 + 8 = 1016.311901653
        ((1, 1), (2.0, 2.0), (1183.688098347, 1016.311901653)),
    ],
)
def test_elo_rating_library_method_2_bonus_for_points(ranks, points, expected):
    elo = make_system("elo", {"points_method": 2})
    got = rate(elo, [1200.0, 1000.0], ("a", ranks[0], points[0]), ("b", ranks[1], points[1]))
    assert got == pytest.approx(expected, abs=1e-8)


def test_method_2_equal_ratings_draw_has_no_bonus():
    # S - E = 0 exactly, so p = 0 and the L term vanishes.
    elo = make_system("elo", {"points_method": 2})
    assert rate(elo, [1000.0, 1000.0], ("a", 1, 3.0), ("b", 1, 3.0)) == [1000.0, 1000.0]


def test_zero_zero_score_counts_as_an_even_split():
    elo = make_system("elo", {"points_method": 1})
    assert rate(elo, [1000.0, 1000.0], ("a", 1, 0.0), ("b", 1, 0.0)) == [1000.0, 1000.0]


def test_scale_is_the_elo_rating_librarys_c():
    elo = make_system("elo", {"scale": 200})
    got = rate(elo, [1100.0, 1000.0], ("a", 1), ("b", 2))
    assert got[0] == pytest.approx(1100 + 32 * (1 - 1 / (1 + 10 ** (-100 / 200))))


def test_elo_rejects_other_than_two_participants_with_a_clear_error():
    elo = make_system("elo")
    with pytest.raises(InvalidMatch) as err:
        elo.check(match(("a", 1), ("b", 2), ("c", 3)))
    assert err.value.code == "system_rule"
    assert err.value.field == "participants"
    assert "exactly 2 participants (got 3)" in err.value.message


def test_points_methods_need_non_negative_scores():
    elo = make_system("elo", {"points_method": 2})
    with pytest.raises(InvalidMatch, match=r"participants\[1\].score: required"):
        elo.check(match(("a", 1, 3.0), ("b", 2)))
    with pytest.raises(InvalidMatch, match=r"participants\[0\].score: must be >= 0"):
        elo.check(match(("a", 1, -1.0), ("b", 2, 0.0)))


def test_rate_does_not_mutate_the_states_it_is_given():
    elo = make_system("elo")
    before = [elo.initial_state(), elo.State(rating=1200.0, matches=7)]
    snapshot = [s.to_dict() for s in before]
    elo.rate(match(("a", 1), ("b", 2)), before)
    assert [s.to_dict() for s in before] == snapshot


@pytest.mark.parametrize(
    "params, key",
    [({"k": 0}, "k"), ({"scale": -1}, "scale"), ({"points_method": 3}, "points_method"), ({"kk": 1}, "kk"), ({"k": "x"}, "k")],
)
def test_bad_parameters_name_the_key(params, key):
    with pytest.raises(ParamError) as err:
        make_system("elo", params)
    assert err.value.key == key


def test_the_state_dict_has_every_field():
    import dataclasses

    from stream_app.engine.elo import EloState

    state = EloState(1012.5, 7)
    assert state.to_dict() == dataclasses.asdict(state) and EloState.from_dict(state.to_dict()) == state
