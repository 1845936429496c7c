// The web pages: leagues, a league's leaderboard (live, or an ended season's
// final standings), a player. One page with routes in the URL's hash;
// everything comes from the same worker's JSON API.
// Text from the API (player names are users' ids) goes in with textContent only.
"use strict";

const PAGE = 50;             // leaderboard rows per page
const RADIUS = 10;           // rows above and below a searched player
const CHART_MOST = 5000;     // history entries drawn at most
const RECENT = 20;           // matches listed on a player's page

const view = document.getElementById("view");
const where = document.getElementById("where");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// A 503 is a worker taking partitions up (rebalancing, or after a restart): it answers
// again within seconds, so ask again a few times before showing an error.
const RETRIES = [500, 1000, 2000, 4000];

async function api(path) {
  for (let attempt = 0; ; attempt++) {
    const reply = await fetch(path, { headers: { Accept: "application/json" } });
    let body = null;
    try { body = await reply.json(); } catch (e) { /* not JSON: reported below */ }
    if (reply.status === 503 && attempt < RETRIES.length) {
      await new Promise((resolve) => setTimeout(resolve, RETRIES[attempt]));
      continue;
    }
    if (!reply.ok) throw new ApiError(reply.status, (body && body.error) || `HTTP ${reply.status}`);
    return body;
  }
}

const seg = encodeURIComponent;
const leagueHref = (league, offset) => `#/league/${seg(league)}` + (offset ? `?offset=${offset}` : "");
const seasonHref = (league, season, offset) =>
  `#/league/${seg(league)}/season/${seg(season)}` + (offset ? `?offset=${offset}` : "");
const aroundHref = (league, player) => `#/league/${seg(league)}/around/${seg(player)}`;
const playerHref = (league, player) => `#/player/${seg(league)}/${seg(player)}`;
const versusHref = (league, player, opponent) => `${playerHref(league, player)}/vs/${seg(opponent)}`;
const when = (text) => (text ? text.replace("T", " ").replace("Z", " UTC") : "–");
// toFixed keeps the sign of a value that rounds to zero ("-0.0"): shown without it.
const fixed = (x, digits = 1) => {
  if (x === null || x === undefined) return "–";
  const text = Number(x).toFixed(digits);
  return /^-0(\.0*)?$/.test(text) ? text.slice(1) : text;
};
const percent = (p) => (p === null || p === undefined ? "–" : `${fixed(100 * p)}%`);
// A change: "+" before what rounds above zero; zero has no sign.
const signed = (x) => {
  const text = fixed(x);
  return text === "–" || text.startsWith("-") || Number(text) === 0 ? text : `+${text}`;
};

function problem(error) {
  return el("p", { class: "error", id: "message", text: error.message });
}

// An answer that may be missing (404: an unknown player, or a worker without the
// endpoint yet): null then; any other error is thrown.
async function optional(path) {
  try {
    return await api(path);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}

// -- the leagues --------------------------------------------------------------------
async function leaguesPage(draw) {
  where.textContent = "";
  const doc = await api("/leagues");
  const seasoned = doc.leagues.some((league) => "season" in league);
  const rows = doc.leagues.map((league) => el("tr", {},
    el("td", {}, el("a", { href: leagueHref(league.league), class: "league-link", text: league.league })),
    el("td", { text: league.algorithm }),
    seasoned ? el("td", { class: "season", text: league.season || "–" }) : null,
    el("td", { class: "num", text: league.players.toLocaleString("en") }),
    el("td", { class: "num", text: league.matches.toLocaleString("en") }),
    el("td", { text: when(league.latest_occurred_at) })));
  draw(el("h1", { text: "Leagues" }),
    rows.length ? el("table", { id: "leagues" },
      el("thead", {}, el("tr", {}, el("th", { text: "league" }), el("th", { text: "system" }),
        seasoned ? el("th", { text: "season" }) : null,
        el("th", { class: "num", text: "players" }), el("th", { class: "num", text: "matches" }),
        el("th", { text: "latest match" }))),
      el("tbody", {}, ...rows)) : el("p", { class: "note", text: "No league has a match yet." }));
}

// -- a league's leaderboard -----------------------------------------------------------
// The rows of a leaderboard, live or an ended season's: rank (none: not ranked),
// player, rating, uncertainty and tier when the rows have them, matches.
function boardTable(league, players, around) {
  const uncertain = players.some((row) => "uncertainty" in row);
  const tiered = players.some((row) => "tier" in row);
  const rows = players.map((row) => el("tr", row.player === around ? { class: "me" } : {},
    el("td", { class: "num rank", text: row.rank === null ? "–" : String(row.rank) }),
    el("td", { class: "player" }, el("a", { href: playerHref(league, row.player), class: "player-link", text: row.player })),
    el("td", { class: "num rating", text: fixed(row.rating) }),
    uncertain ? el("td", { class: "num uncertainty", text: fixed(row.uncertainty) }) : null,
    tiered ? el("td", { class: "tier", text: row.tier || "–" }) : null,
    el("td", { class: "num matches", text: String(row.matches) })));
  return el("table", { id: "leaderboard" },
    el("thead", {}, el("tr", {}, el("th", { class: "num", text: "#" }), el("th", { text: "player" }),
      el("th", { class: "num", text: "rating" }),
      uncertain ? el("th", { class: "num", text: "uncertainty" }) : null,
      tiered ? el("th", { text: "tier" }) : null,
      el("th", { class: "num", text: "matches" }))),
    el("tbody", {}, ...rows));
}

// Previous and next pages of `total` rows from `first`; `label` says what this one shows.
function pager(first, total, href, label) {
  const prev = el("button", { id: "prev", text: "‹ previous" });
  const next = el("button", { id: "next", text: "next ›" });
  prev.disabled = first === 0;
  next.disabled = first + PAGE >= total;
  prev.addEventListener("click", () => { location.hash = href(Math.max(first - PAGE, 0)); });
  next.addEventListener("click", () => { location.hash = href(first + PAGE); });
  return el("nav", { class: "pager" }, prev, next,
    el("span", { class: "note", text: label }));
}

// The season selector, when the league has seasons: "current" (the live
// leaderboard) and each ended season, newest first. Choosing one changes the route.
function seasonPicker(league, doc, chosen) {
  if (doc === null || !doc.seasons.length) return null;
  const current = doc.season === null ? "current" : `current (${doc.season}, in progress)`;
  const select = el("select", { id: "season-select", "aria-label": "season" }, el("option", { value: "", text: current }));
  for (const season of doc.seasons.slice().reverse()) {
    if (season.end === null) continue;  // the season in progress: the live leaderboard
    select.append(el("option", { value: season.season, text: `${season.season} (ended)` }));
  }
  const wanted = chosen === null ? "" : chosen;
  if (![...select.options].some((option) => option.value === wanted)) {
    select.append(el("option", { value: wanted, text: wanted }));  // in progress or unknown: as asked for
  }
  select.value = wanted;
  select.addEventListener("change", () => {
    location.hash = select.value ? seasonHref(league, select.value) : leagueHref(league);
  });
  return el("form", { id: "season-form", class: "bar" },
    el("label", { for: "season-select", text: "Season" }), select,
    doc.schedule ? el("span", { class: "note", id: "schedule", text: doc.schedule }) : null);
}

async function leaguePage(draw, league, offset, around) {
  where.textContent = `› ${league}`;
  const query = around !== null ? `around=${seg(around)}&radius=${RADIUS}` : `limit=${PAGE}&offset=${offset}`;
  const search = el("form", { id: "search" },
    el("input", { id: "search-player", type: "search", placeholder: "find a player", "aria-label": "player",
                  value: around || "" }),
    el("button", { type: "submit", text: "Find" }));
  search.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = search.querySelector("input").value.trim();
    location.hash = name ? aroundHref(league, name) : leagueHref(league);
  });
  const seasonsAsked = optional(`/leagues/${seg(league)}/seasons`);
  seasonsAsked.catch(() => {});  // (awaited below; not an unhandled rejection meanwhile)
  let board;
  try {
    board = await api(`/leagues/${seg(league)}/leaderboard?${query}`);
  } catch (error) {
    if (around !== null && error.status === 404) {
      // Not ranked (provisional or inactive) or unknown: say so, and offer the player's page.
      draw(el("h1", { text: league }), search, problem(error),
        el("p", {}, el("a", { href: playerHref(league, around), class: "player-link", text: `${around}'s page` })),
        el("p", {}, el("a", { href: leagueHref(league), text: "back to the leaderboard" })));
      return;
    }
    throw error;
  }
  const seasons = await seasonsAsked;
  const unlisted = board.players_total - board.eligible_total;
  const counts = el("p", { id: "counts", class: "note",
    text: `${board.algorithm} · ${board.players_total.toLocaleString("en")} players, ` +
          `${board.eligible_total.toLocaleString("en")} ranked` +
          (unlisted ? `; ${unlisted.toLocaleString("en")} not listed (provisional or inactive)` : "") });
  const first = board.offset;
  const shown = board.players.length;
  const nav = around === null
    ? pager(first, board.eligible_total, (at) => leagueHref(league, at),
      shown ? `ranks ${first + 1}–${first + shown}` : "no ranked player here")
    : el("nav", { class: "pager" }, el("a", { href: leagueHref(league), text: "‹ the whole leaderboard" }));
  draw(el("h1", { text: league }), seasonPicker(league, seasons, null), counts, search,
    boardTable(league, board.players, around), nav);
}

// An ended season's final standings: every player who played in it, the ranked
// first (by rank), then the others by rating.
async function seasonPage(draw, league, season, offset) {
  where.textContent = `› ${league} › ${season}`;
  const seasonsAsked = optional(`/leagues/${seg(league)}/seasons`);
  seasonsAsked.catch(() => {});
  let board;
  try {
    board = await api(`/leagues/${seg(league)}/seasons/${seg(season)}/leaderboard?limit=${PAGE}&offset=${offset}`);
  } catch (error) {
    if (error.status !== 404) throw error;
    // Unknown, or still in progress: the API says which; the selector stays.
    draw(el("h1", { text: league }), seasonPicker(league, await seasonsAsked, season), problem(error),
      el("p", {}, el("a", { href: leagueHref(league), text: "the live leaderboard" })));
    return;
  }
  const seasons = await seasonsAsked;
  const unranked = board.players_total - board.eligible_total;
  const counts = el("p", { id: "counts", class: "note",
    text: `Season ${board.season} (#${board.number}), ${when(board.start)} to ${when(board.end)} · ${board.algorithm} · ` +
          `${board.players_total.toLocaleString("en")} players, ${board.eligible_total.toLocaleString("en")} ranked` +
          (unranked ? `; ${unranked.toLocaleString("en")} not ranked at its end (provisional or inactive), listed last` : "") });
  draw(el("h1", {}, el("span", { text: league }), el("span", { class: "badge season", id: "season-name", text: board.season })),
    seasonPicker(league, seasons, season), counts,
    boardTable(league, board.players, null),
    pager(board.offset, board.players_total, (at) => seasonHref(league, season, at),
      board.players.length ? `players ${board.offset + 1}–${board.offset + board.players.length}` : "no player here"));
}

// -- a player -----------------------------------------------------------------------
async function playerPage(draw, league, player, opponent) {
  where.textContent = `› ${league} › ${player}`;
  const base = `/leagues/${seg(league)}/players/${seg(player)}`;
  const seasonsAsked = optional(`${base}/seasons`);
  seasonsAsked.catch(() => {});
  const doc = await api(base);
  const changes = [];
  for (let before = null; changes.length < CHART_MOST;) {
    const limit = Math.min(1000, CHART_MOST - changes.length);
    const page = await api(`${base}/history?limit=${limit}` + (before === null ? "" : `&before=${before}`));
    changes.push(...page.changes);
    if (page.next === null) break;
    before = page.next;
  }
  const status = doc.eligible ? "ranked" : doc.provisional ? "provisional" : "inactive";
  const facts = [["rating", "rating", fixed(doc.rating)], ["rank", "rank", doc.rank === null ? "–" : `#${doc.rank}`],
    ["percentile", "percentile", doc.percentile === null ? "–" : `${fixed(doc.percentile)}%`],
    ["matches", "matches", String(doc.matches)]];
  if ("soft_rating" in doc) facts.push(["soft-rating", "soft rating", fixed(doc.soft_rating)]);
  if ("uncertainty" in doc) facts.push(["uncertainty", "uncertainty", fixed(doc.uncertainty)]);
  if ("tier" in doc) facts.push(["tier", "tier", doc.tier || "–"]);
  if ("season" in doc) facts.push(["season", "season", doc.season || "–"]);
  facts.push(["last", "last match", when(doc.last_occurred_at)]);
  const seasons = await seasonsAsked;
  draw(
    el("h1", {}, el("span", { id: "player-name", text: player }),
      el("span", { id: "status", class: `badge ${status}`, text: status })),
    el("p", {}, el("a", { href: leagueHref(league), text: `‹ ${league}` }),
      doc.eligible ? el("span", {}, " · ", el("a", { href: aroundHref(league, player), text: "around this player" })) : null),
    el("dl", { class: "facts" }, ...facts.map(([id, label, value]) =>
      el("div", {}, el("dt", { text: label }), el("dd", { id, text: value })))),
    el("h2", { text: "Rating history" }),
    changes.length ? chart(changes.slice().reverse()) : el("p", { class: "note", text: "No history kept." }),
    seasons && seasons.seasons.length ? el("h2", { text: "Seasons" }) : null,
    seasons && seasons.seasons.length ? seasonsTable(league, seasons.seasons) : null,
    el("h2", { id: "versus-heading", text: "Against another player" }),
    versusForm(league, player, opponent),
    opponent === null ? null : await versusSection(league, player, opponent),
    el("h2", { text: "Recent matches" }),
    recentTable(changes.slice(0, RECENT)));
  // The comparison asked for is below the fold: brought into view, from its heading.
  const heading = opponent === null ? null : document.getElementById("versus-heading");
  if (heading !== null) heading.scrollIntoView({ block: "start" });
}

// Pick an opponent: the route names them, so the comparison can be linked to.
function versusForm(league, player, opponent) {
  const input = el("input", { id: "opponent", type: "search", placeholder: "opponent's id", "aria-label": "opponent" });
  if (opponent !== null) input.value = opponent;
  const form = el("form", { id: "versus-form" }, input, el("button", { type: "submit", text: "Compare" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = input.value.trim();
    if (name) location.hash = versusHref(league, player, name);
  });
  return form;
}

// What the league's system expects of a match between the two (win and draw
// probabilities, the rating at stake) and what they did when they met.
async function versusSection(league, player, opponent) {
  let record;
  try {
    record = await api(`/leagues/${seg(league)}/players/${seg(player)}/versus/${seg(opponent)}?limit=10`);
  } catch (error) {
    // An id the league does not know (mistyped?), or the player themself: said plainly,
    // with no prediction (one against a newcomer would look as sure as any other).
    if (!(error instanceof ApiError && (error.status === 404 || error.status === 400))) throw error;
    const text = error.status === 404 ? `Unknown opponent: no player ${opponent} in ${league}. Check the id.` : error.message;
    return el("section", { id: "versus" }, el("p", { class: "error", id: "versus-unknown", text }));
  }
  const odds = await api(`/leagues/${seg(league)}/predict?team=${seg(player)}&team=${seg(opponent)}`);
  const [mine, theirs] = odds.sides;
  const facts = [["win-player", `${player} wins`, percent(mine.win)], ["win-opponent", `${opponent} wins`, percent(theirs.win)]];
  if (odds.draw !== null) facts.push(["draw", "draw", percent(odds.draw)]);
  facts.push(["quality", "match quality", fixed(odds.quality, 2)]);
  const stake = "win" in (mine.change || {}) ? el("table", { id: "stake" },
    el("thead", {}, el("tr", {}, ...["", "if " + player + " wins", "draw", "if " + player + " loses"].map(
      (head, i) => el("th", { class: i ? "num" : "", text: head })))),
    el("tbody", {}, ...[[player, mine, ["win", "draw", "loss"]], [opponent, theirs, ["loss", "draw", "win"]]].map(
      ([name, side, outcomes]) => el("tr", { "data-player": name }, el("td", { text: name }),
        ...outcomes.map((outcome) => el("td", { class: `num ${outcome}`, text: signed(side.change[outcome][name]) }))))))
    : el("p", { class: "note", id: "stake-note", text: odds.change_unavailable || "No rating at stake for this match." });
  const against = record.against;
  const summary = against.matches === 0 && record.together.matches === 0
    ? el("p", { class: "note", id: "versus-none", text: "They have not played each other." })
    : el("p", { id: "versus-record", text: `Against each other: ${against.matches} matches, ${against.wins} won, `
        + `${against.draws} drawn, ${against.losses} lost by ${player}`
        + (record.together.matches ? `; on the same side: ${record.together.matches}, ${record.together.wins} won.` : ".") });
  const recent = record.recent.length ? el("table", { id: "versus-recent" },
    el("thead", {}, el("tr", {}, ...["match", "occurred at", "side", "places", player, opponent].map(
      (head, i) => el("th", { class: i > 2 ? "num" : "", text: head })))),
    el("tbody", {}, ...record.recent.map((m) => el("tr", {},
      el("td", { text: m.match_id }), el("td", { text: when(m.occurred_at) }), el("td", { text: m.side }),
      el("td", { class: "num", text: `${m.rank}–${m.opponent_rank}` }),
      el("td", { class: "num", text: signed(m.rating_after - m.rating_before) }),
      el("td", { class: "num", text: signed(m.opponent_rating_after - m.opponent_rating_before) })))))
    : null;
  return el("section", { id: "versus" },
    el("dl", { class: "facts" }, ...facts.map(([id, label, value]) =>
      el("div", {}, el("dt", { text: label }), el("dd", { id, text: value })))),
    stake, summary, recent);
}

// The player's final standing in each ended season they played in, oldest first.
function seasonsTable(league, seasons) {
  const tiered = seasons.some((s) => "tier" in s);
  const heads = [["season", ""], ["rank", "num"], ["percentile", "num"], ["rating", "num"],
    ...(tiered ? [["tier", ""]] : []), ["matches", "num"]];
  return el("table", { id: "seasons" },
    el("thead", {}, el("tr", {}, ...heads.map(([head, kind]) => el("th", { class: kind, text: head })))),
    el("tbody", {}, ...seasons.map((s) => el("tr", { "data-season": s.season },
      el("td", { class: "season" }, el("a", { href: seasonHref(league, s.season), class: "season-link", text: s.season })),
      el("td", { class: "num rank", text: s.rank === null ? "–" : `#${s.rank}` }),
      el("td", { class: "num percentile", text: s.percentile === null ? "–" : `${fixed(s.percentile)}%` }),
      el("td", { class: "num rating", text: fixed(s.rating) }),
      tiered ? el("td", { class: "tier", text: s.tier || "–" }) : null,
      el("td", { class: "num matches", text: String(s.matches) })))));
}

function recentTable(changes) {
  const rows = changes.map((c) => {
    const delta = signed(c.rating_after - c.rating_before);
    return el("tr", {},
      el("td", { class: "num", text: String(c.seq) }), el("td", { text: c.match_id }),
      el("td", { text: when(c.occurred_at) }), el("td", { class: "num", text: String(c.rank) }),
      el("td", { class: "num", text: fixed(c.rating_before) }), el("td", { class: "num", text: fixed(c.rating_after) }),
      el("td", { class: `num ${delta.startsWith("-") ? "down" : "up"}`, text: delta }));
  });
  return el("table", { id: "recent" },
    el("thead", {}, el("tr", {}, ...["seq", "match", "occurred at", "place", "before", "after", "change"].map(
      (head, i) => el("th", { class: [0, 3, 4, 5, 6].includes(i) ? "num" : "", text: head })))),
    el("tbody", {}, ...rows));
}

// The rating after each change against its seq, from the rating before the oldest
// change kept (the initial rating when the whole history is kept); a band of
// rating ± uncertainty where the system has one. Each point carries its seq and
// rating as data attributes (the exact numbers of the API); the start is a
// point of class "start" at the seq before.
function chart(points) {
  const width = 920, height = 300, left = 56, right = 12, top = 12, bottom = 28;
  const start = { seq: points[0].seq - 1, rating: points[0].rating_before };
  const banded = points.every((p) => typeof p.uncertainty === "number");
  const lows = points.map((p) => (banded ? p.rating_after - p.uncertainty : p.rating_after));
  const highs = points.map((p) => (banded ? p.rating_after + p.uncertainty : p.rating_after));
  let low = Math.min(start.rating, ...lows), high = Math.max(start.rating, ...highs);
  if (high - low < 1) { low -= 1; high += 1; }
  const firstSeq = start.seq, lastSeq = points[points.length - 1].seq;
  const x = (seq) => left + (lastSeq === firstSeq ? 0.5 : (seq - firstSeq) / (lastSeq - firstSeq)) * (width - left - right);
  const y = (r) => top + (1 - (r - low) / (high - low)) * (height - top - bottom);
  const root = svg("svg", { id: "history-chart", viewBox: `0 0 ${width} ${height}`, role: "img",
                            "aria-label": "rating after each match" });
  root.append(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }),
              svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }));
  for (const value of [low, (low + high) / 2, high]) {
    const label = svg("text", { x: left - 6, y: y(value) + 4, "text-anchor": "end" });
    label.textContent = fixed(value, 0);
    root.append(label);
  }
  // The first label starts at its point and the last ends at its own, so that
  // neither runs past the chart's edges.
  for (const [seq, anchor] of [[firstSeq, "start"], [lastSeq, "end"]]) {
    const label = svg("text", { class: "x-label", x: x(seq), y: height - 8, "text-anchor": anchor });
    label.textContent = seq === 0 ? "start" : `#${seq}`;
    root.append(label);
  }
  if (banded) {
    const upper = points.map((p, i) => `${x(p.seq)},${y(highs[i])}`);
    const lower = points.map((p, i) => `${x(p.seq)},${y(lows[i])}`).reverse();
    root.append(svg("polygon", { class: "band", points: upper.concat(lower).join(" ") }));
  }
  const line = [`${x(start.seq)},${y(start.rating)}`, ...points.map((p) => `${x(p.seq)},${y(p.rating_after)}`)];
  root.append(svg("polyline", { class: "line", points: line.join(" ") }));
  const radius = points.length > 300 ? 1.2 : 2.5;
  const first = svg("circle", { class: "start", cx: x(start.seq), cy: y(start.rating), r: radius,
                                "data-seq": String(start.seq), "data-rating": String(start.rating) });
  const startTip = svg("title", {});
  startTip.textContent = `before #${points[0].seq}: ${fixed(start.rating)}`;
  first.append(startTip);
  root.append(first);
  for (const p of points) {
    const dot = svg("circle", { cx: x(p.seq), cy: y(p.rating_after), r: radius,
                                "data-seq": String(p.seq), "data-rating": String(p.rating_after) });
    const tip = svg("title", {});
    tip.textContent = `#${p.seq} ${p.match_id}: ${fixed(p.rating_after)}`;
    dot.append(tip);
    root.append(dot);
  }
  return root;
}

// -- routes -------------------------------------------------------------------------
// Route changes so far. A route changed again while its page was loading (a
// second click, Back) is not drawn: its answers can come after the newer page's.
let routes = 0;

async function route() {
  const turn = ++routes;
  const newest = () => turn === routes;
  // (null: a part the page does not have; replaceChildren would show it as the text "null")
  const draw = (...nodes) => { if (newest()) view.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined)); };
  const hash = location.hash;
  const [path, query] = hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const offset = Math.max(parseInt(new URLSearchParams(query || "").get("offset") || "0", 10) || 0, 0);
  view.setAttribute("aria-busy", "true");
  try {
    if (parts[0] === "league" && parts.length === 2) await leaguePage(draw, parts[1], offset, null);
    else if (parts[0] === "league" && parts[2] === "around" && parts.length === 4) await leaguePage(draw, parts[1], 0, parts[3]);
    else if (parts[0] === "league" && parts[2] === "season" && parts.length === 4) await seasonPage(draw, parts[1], parts[3], offset);
    else if (parts[0] === "player" && parts.length === 3) await playerPage(draw, parts[1], parts[2], null);
    else if (parts[0] === "player" && parts[3] === "vs" && parts.length === 5) await playerPage(draw, parts[1], parts[2], parts[4]);
    else await leaguesPage(draw);
  } catch (error) {
    draw(problem(error), el("p", {}, el("a", { href: "#/", text: "the leagues" })));
  } finally {
    if (newest()) {
      view.setAttribute("data-route", hash);  // what is drawn (the browser tests wait for it)
      view.setAttribute("aria-busy", "false");
    }
  }
}

window.addEventListener("hashchange", route);
route();
