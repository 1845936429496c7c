"""stream_app/versus.py: a head-to-head record from two players' history rows."""

from __future__ import annotations

from stream_app.versus import head_to_head


def row(seq: int, match_id: str, rank: int, before: float, after: float, time: float | None = None) -> list:
    return [seq, match_id, time, rank, before, after, None, "match"]


def test_only_matches_both_keep_count_and_each_result_lands_in_its_column():
    mine = [row(1, "m1", 1, 1000, 1010), row(2, "m2", 2, 1010, 1000), row(3, "m3", 1, 1000, 1005),
            row(4, "m4", 1, 1005, 1012, 1_700_000_000.0), row(5, "solo", 1, 1012, 1020)]
    theirs = [row(7, "m1", 2, 990, 980), row(8, "m2", 1, 980, 990), row(9, "m3", 1, 990, 995),
              row(10, "m4", 1, 995, 1001, 1_700_000_000.0), row(11, "other", 2, 1001, 999)]
    doc = head_to_head("l", "a", "b", mine, theirs, lambda match_id: match_id == "m4", recent=2)
    assert doc["matches"] == 4
    assert doc["against"] == {"matches": 3, "wins": 1, "draws": 1, "losses": 1}
    assert doc["together"] == {"matches": 1, "wins": 1}
    assert [m["match_id"] for m in doc["recent"]] == ["m4", "m3"]  # newest first, at most `recent`
    assert doc["recent"][0] == {"match_id": "m4", "occurred_at": "2023-11-14T22:13:20Z", "side": "same", "rank": 1,
                                "opponent_rank": 1, "rating_before": 1005, "rating_after": 1012,
                                "opponent_rating_before": 995, "opponent_rating_after": 1001}


def test_no_shared_match_is_an_empty_record():
    doc = head_to_head("l", "a", "b", [row(1, "x", 1, 0, 1)], [row(1, "y", 1, 0, 1)], lambda _: False)
    assert (doc["matches"], doc["against"]["matches"], doc["together"]["matches"], doc["recent"]) == (0, 0, 0, [])
