"""Rating-history charts: replay one league and draw chosen players over time."""

from __future__ import annotations

import sys
from array import array
from datetime import datetime, timezone
from pathlib import Path

from ..leagues import LeagueConfig
from ..inputs import BadEvent, parse_match
from .replay import Ledger, open_lines


class History:
    """Every rating change of one league, kept compact (a few arrays)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.player = array("i")
        self.when = array("d")
        self.rating = array("d")
        self.uncertainty = array("d")

    def record(self, player: str, when: float, rating: float, uncertainty: float) -> None:
        self.player.append(self.ids.setdefault(player, len(self.ids)))
        self.when.append(when)
        self.rating.append(rating)
        self.uncertainty.append(uncertainty)

    def series(self, player: str) -> tuple[list[float], list[float], list[float]]:
        import numpy as np

        rows = np.frombuffer(self.player, dtype=np.int32) == self.ids[player]
        pick = lambda values: np.frombuffer(values, dtype=np.float64)[rows].tolist()  # noqa: E731
        return pick(self.when), pick(self.rating), pick(self.uncertainty)

    @property
    def has_uncertainty(self) -> bool:
        return any(u == u for u in self.uncertainty[:1])  # NaN != NaN


def league_history(path: str | Path, config: LeagueConfig, league: str) -> tuple[Ledger, History, bool]:
    """Replay only `league` (leagues are independent, so this is exact)."""
    ledger = Ledger(config)
    history = History()
    timed = True
    lines, raw, _ = open_lines(path)
    index = 0
    try:
        for line in lines:
            if not line.strip() or league.encode() not in line:
                continue
            try:
                match = parse_match(line.rstrip(b"\r\n"))
                if match.league != league:
                    continue
                changes = ledger.apply(match)
            except BadEvent:
                continue
            if changes is None:
                continue
            index += 1
            if match.time is None:
                timed = False
            when = match.time if match.time is not None else float(index)
            for change in changes:
                view = change.after.public()
                history.record(change.player, when, view["rating"], view.get("uncertainty", float("nan")))
    finally:
        if raw is not None:
            raw.close()
    return ledger, history, timed


def draw(
    path: str | Path,
    config: LeagueConfig,
    league: str,
    output: str | Path,
    top: int = 10,
    players: list[str] | None = None,
) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ledger, history, timed = league_history(path, config, league)
    states = ledger.leagues.get(league)
    if not states:
        raise SystemExit(f"ratings plot: no applied match of league {league!r} in {path}")
    if players:
        missing = [p for p in players if p not in states]
        if missing:
            raise SystemExit(f"ratings plot: not in league {league!r}: {', '.join(missing)}")
        chosen = players
    else:
        chosen = [p for p, _ in sorted(states.items(), key=lambda kv: (-kv[1].rating, kv[0]))[:top]]
    algorithm = config.rule_for(league).algorithm
    fig, ax = plt.subplots(figsize=(11, 6), dpi=110)
    for player in chosen:
        when, rating, sigma = history.series(player)
        x = [datetime.fromtimestamp(t, timezone.utc) for t in when] if timed else when
        (line,) = ax.plot(x, rating, linewidth=1.3, label=f"{player} ({rating[-1]:.0f})")
        if history.has_uncertainty:
            ax.fill_between(
                x, [r - s for r, s in zip(rating, sigma)], [r + s for r, s in zip(rating, sigma)],
                color=line.get_color(), alpha=0.12, linewidth=0,
            )
    band = " (bands: rating ± uncertainty)" if history.has_uncertainty else ""
    ax.set_title(f"{league}: rating history, {algorithm}{band}")
    ax.set_xlabel("date" if timed else "match")
    ax.set_ylabel("rating")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)
    print(f"plot: {len(chosen)} players of {league} ({len(states):,} in the league) drawn to {output}", file=sys.stderr)
    return chosen
