"""What the steps read and write (`ApplyTarget`), and all a league's records
(`LeagueState`): `state.league_tables.PartitionLeagues` implements both, for the
stream and the replay alike; a re-rate's view (rerate.py) the first."""

from __future__ import annotations

from typing import AbstractSet as Set, Any, Protocol, Sequence

from ..engine import RatingSystem
from ..leagues import LeagueRule
from ..standings import Standings
from .applied import Applied, SeasonStarted
from .records import Entry, PlayerRecord


class WorkingRecords(Protocol):
    """The records a re-rate rebuilds, by player (LeagueState.working; rerate.py)."""

    def get(self, name: str) -> PlayerRecord | None: ...

    def set(self, name: str, record: PlayerRecord | None) -> None: ...

    def flush(self) -> None:
        """Keep what was set (the end of a part)."""

    def names(self) -> list[str]:
        """Every player of the re-rate."""

    def forget(self, names: list[str]) -> None:
        """The re-rate is over: forget them (`names`: what `names` gave)."""


class ApplyTarget(Protocol):
    """What `apply_at` reads and writes: a LeagueState, or a re-rate's view of one."""

    # Whether `save` stores history entries: `apply` builds them only then (a
    # replay without --history would build a dict per participant for nothing).
    keeps_history: bool

    def player_records(self, league: str, names: Sequence[str], system: RatingSystem) -> list[PlayerRecord | None]:
        """Each named player's record (None: not rated in the league yet)."""

    def save(self, applied: "Applied") -> None:
        """Store the match as applied, as `apply_at` decided it: the players' new
        records, the snapshot rows they take, the league's new record, each
        participant's history entry, and for a new entry its place and log row, and
        the boundary it opens."""

    def league_players(self, league: str, system: RatingSystem) -> list[tuple[str, PlayerRecord]]:
        """Every player of the league with a record, by name (a season's start reads them all)."""

    def standings(self, league: str, rule: LeagueRule) -> Standings | None:
        """The league's standings as its players' records are (`build_standings`), which
        the steps that apply keep up to date: a tier can need a rank. None: no tiers are
        published from here (a re-rate's entries, a take-up)."""

    def seasons(self, league: str) -> list[dict[str, Any]]:
        """The league's seasons, first to last: season number n is item n - 1 (season_row)."""

    def save_season(self, started: "SeasonStarted") -> None:
        """Store a season's start as `start_season_at` decided it: the players' new
        records, their snapshot rows, the league's new record, the season that ended
        (closed) with its final standings, the new season, and for a new entry (a
        season-started command) its log row."""


class LeagueState(ApplyTarget, Protocol):
    """The records `apply` reads and writes."""

    # -- what applying a match at the end of the log needs (and ApplyTarget's) ----------
    def league(self, league: str) -> dict[str, Any] | None:
        """The league's record {"algorithm", "matches", "players", ...}; None before its first match."""

    def placed(self, league: str, match_id: str) -> dict[str, Any] | None:
        """The match's place: {"key": hex of its order key}, VOIDED, or None (never applied)."""

    # -- what a re-rate needs (rerate.py) -------------------------------------------------
    def put_league(self, league: str, record: dict[str, Any]) -> None: ...

    def put_placed(self, league: str, match_id: str, place: dict[str, Any]) -> None: ...

    def log(self, league: str, start: bytes, limit: int | None = None) -> list[tuple[bytes, Entry]]:
        """The league's log from this order key on, in order (the first `limit` entries)."""

    def put_log(self, league: str, key: bytes, match: Entry | None) -> None: ...

    def put_season(self, league: str, number: int, row: dict[str, Any]) -> None: ...

    def put_final(self, league: str, number: int, rows: list[list[Any]]) -> None:
        """Keep season `number`'s final standings (seasons.archive_row each)."""

    def forget_seasons(self, league: str, after: int) -> None:
        """Delete the seasons above `after` and the final standings of those from `after` on."""

    def forget_standings(self, league: str) -> None:
        """The league's players were replaced (a re-rate): its standings are built again when asked."""

    def boundary(self, league: str, number: int) -> tuple[bytes, dict[str, Any]] | None:
        """Boundary `number`'s order key and the league's record before it (None: none)."""

    def put_boundary(self, league: str, number: int, key: bytes | None, record: dict[str, Any] | None) -> None: ...

    def snapshot_records(self, league: str, first: int, names: Set[str],
                         system: RatingSystem) -> dict[str, PlayerRecord | None]:
        """For each of these players with a snapshot row at a boundary >= first, the
        first such row's record (None: ABSENT)."""

    def put_snapshot(self, league: str, number: int, player: str, record: PlayerRecord | None) -> None:
        """Write a snapshot row (None: ABSENT)."""

    def forget_snapshots(self, league: str, after: int) -> None:
        """Delete the snapshot rows and boundaries above `after`."""

    def put_player(self, league: str, name: str, record: PlayerRecord | None) -> None: ...

    def put_history(self, league: str, player: str, row: list[Any]) -> None:
        """Write a history row (and drop the one history_max pushes out)."""

    def forget_history(self, league: str, player: str, first: int, last: int) -> None:
        """Delete the player's history entries first..last (seq)."""

    def working(self, league: str, system: RatingSystem) -> WorkingRecords:
        """The working records of the league's re-rate."""

    def job(self, league: str) -> dict[str, Any]:
        """The league's re-rate job in progress."""

    def put_job(self, league: str, job: dict[str, Any] | None) -> None: ...
