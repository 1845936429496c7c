"""A round's performance terms (Terms): the participants merged by bucket of
(mu, delta) and sorted as in the reference, each player's window of terms
(the reference's subsample), and how many of a term's members finished
ahead of, level with and behind a player."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..numeric import round_half_away


class Terms:
    """The round's performance terms, merged by bucket and sorted as in the reference."""

    def __init__(self, mu: np.ndarray, delta: np.ndarray, lo: np.ndarray, width: float):
        n = len(mu)
        bm = round_half_away(mu / width)
        bs = round_half_away(delta / width)
        order = np.lexsort((lo, bs, bm))
        bm_s, bs_s = bm[order], bs[order]
        new = np.ones(n, dtype=bool)
        new[1:] = (bm_s[1:] != bm_s[:-1]) | (bs_s[1:] != bs_s[:-1])
        self.start = np.flatnonzero(new)  # first member (in `order`) of each term
        self.count = np.diff(np.append(self.start, n))
        self.mu = np.add.reduceat(mu[order], self.start) / self.count
        self.delta = np.add.reduceat(delta[order], self.start) / self.count
        group = np.cumsum(new) - 1
        self.of_player = np.empty(n, dtype=np.int64)
        self.of_player[order] = group
        self.lo_sorted = lo[order]  # members' places, by term then place
        self.key_sorted = group * (n + 1) + self.lo_sorted
        self.n = n
        self.m = len(self.start)
        self.width = width
        # For net_counts: each term's members, best and worst places (the
        # worst as -1 for a lone member, which is level with nobody else)...
        first = self.lo_sorted[self.start]
        last = self.lo_sorted[self.start + self.count - 1]
        last_level = np.where(self.count > 1, last, -1)
        self.ends = tuple(v.astype(np.int32) for v in (self.count, first, last, last_level))
        # ...and key_sorted with a sentinel, with the length of the run of
        # equal keys starting at each index (at run starts: where searches land).
        self.keys = np.append(self.key_sorted, -1)
        run_start = np.flatnonzero(new | np.append(False, self.lo_sorted[1:] != self.lo_sorted[:-1]))
        self.runs = np.zeros(n + 1, dtype=np.int64)
        self.runs[run_start] = np.diff(np.append(run_start, n))

    def windows(self, player_mu: np.ndarray, size: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Each player's contiguous range of terms (the reference's subsample)."""
        m = self.m
        if size is None or size >= m:
            return np.zeros(self.n, dtype=np.int64), np.full(self.n, m, dtype=np.int64)
        buckets = round_half_away(self.mu / self.width)
        beg = np.searchsorted(buckets, round_half_away(player_mu / self.width), side="left").astype(np.int64)
        end = np.minimum(beg + 1, m)
        expand = (max(size - 1, 0) + 1) // 2
        beg = np.maximum(beg - expand, 0)
        end = np.minimum(end + expand, m)
        expand2 = np.maximum(size - (end - beg), 0)
        beg = np.maximum(beg - expand2, 0)
        end = np.minimum(end + expand2, m)
        return beg, end

    def counts(self, lo: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Members of term cols[i, k] placed ahead of, level with and behind player i."""
        # A term of one member (most of them): compare places. Others: count
        # the term's members (sorted by place) on each side by binary search.
        count = self.count[cols]
        place = self.lo_sorted[self.start][cols]  # the term's best place
        mine = lo[:, None]
        less = (place < mine).view(np.int8).astype(np.int64)
        equal = (place == mine).view(np.int8).astype(np.int64)
        greater = count - less - equal
        multi = np.flatnonzero(count > 1)
        if len(multi):
            c = cols.ravel()[multi]
            q = c * (self.n + 1) + lo[multi // cols.shape[1]]
            left = np.searchsorted(self.key_sorted, q, side="left")
            right = np.searchsorted(self.key_sorted, q, side="right")
            start = self.start[c]
            less.ravel()[multi] = left - start
            equal.ravel()[multi] = right - left
            greater.ravel()[multi] = start + self.count[c] - right
        return less, equal, greater

    def window(self, values: np.ndarray, beg: np.ndarray, width: int) -> np.ndarray:
        """values[min(beg_i + k, m - 1)] for k < width, row by row: rows of a
        sliding window (contiguous copies) instead of an index per cell."""
        padded = np.concatenate((values, np.repeat(values[-1:], width)))
        return sliding_window_view(padded, width)[beg]

    def net_counts(self, lo: np.ndarray, beg: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(behind - ahead, level, members) of term min(beg_i + k, m - 1)
        relative to the player placed lo_i, for k < width: what Elo-MMR needs
        of `counts`, cell by cell from the term's best and worst places
        (exact for a term of one or two members, or one wholly ahead of or
        behind the player); only the other cells search the term's places."""
        count, first, last, last_level = (self.window(v, beg, width) for v in self.ends)
        lo32 = lo.astype(np.int32)[:, None]
        first -= lo32
        last -= lo32
        equal = first == 0
        equal = equal.view(np.int8).astype(np.int32)
        equal += last_level == lo32
        between = first <= 0
        between &= last >= 0
        between &= count > 2
        np.sign(first, out=first)
        np.sign(last, out=last)
        net = first
        net += last
        # Both ends on one side give +-2, times members / 2; one or two members: exact.
        net *= count
        net >>= 1
        search = np.flatnonzero(between)
        if len(search):
            rows = search // width
            c = np.minimum(beg[rows] + search % width, self.m - 1)
            q = c * (self.n + 1) + lo[rows]
            left = np.searchsorted(self.key_sorted, q, side="left")
            # Members level with the player: the run of equal keys from `left`, if any.
            level = np.where(self.keys[left] == q, self.runs[left], 0)
            net.ravel()[search] = 2 * (self.start[c] - left) + self.count[c] - level
            equal.ravel()[search] = level
        return net, equal, count
