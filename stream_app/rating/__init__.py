"""Rating a match as an entry of its league's log, and the records that takes.
stream_app/apply.py decides where an input goes; `match_step.apply_at` is the one
step that rates a match, for a result at the end of the log and for each entry a
re-rate applies again (stream_app/rerate.py).

Each league keeps its log: the results it counts, in order, each under an
order key (its place in time, then its arrival). A result goes at the end of
the log, unless its league has `late_results = "in_order"` and it happened
before the latest result: then it goes at its place in time. A void, a
correction, or such a late result changes the log before its end, and the
league is re-rated from there (rerate.py). Every `snapshot_every` results
the log opens a boundary; the states a player had at each boundary are kept,
written once per player and boundary (when the player's state first changes
after it), so that a re-rate starts at the last boundary before the first
result it changes.

The league's records are read and written through `ports.LeagueState`, which
stream_app/state/ implements once over two backends: the worker's transaction
over RocksDB, the replay's memory.

The modules, by job:
- records.py: a player's stored record, and the markers the stores keep;
- applied.py: what a step decided (a match applied, a season started), for the
  stores to save and the events to publish;
- errors.py: a duplicate match, an unknown one;
- ports.py: what the steps read and write (`ApplyTarget`, `LeagueState`);
- history.py: a player's history rows;
- log_rows.py: order keys, and the league log's rows;
- snapshots.py: boundaries and the snapshot rows a step takes;
- tiers.py: standings built from records, and the tiers a change moves between;
- season_step.py: starting a season (the rules are stream_app/seasons.py's);
- match_step.py: rating a match as a log entry, and applying an entry again.
"""
