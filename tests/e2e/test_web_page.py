"""The web page (/ui/) in a real headless browser (Debian's chromium through
selenium), served by a real worker that does not own the leagues shown (so
every read is forwarded): what the page shows equals the API's answers."""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.parse
import urllib.request
from decimal import ROUND_HALF_UP, Decimal

import pytest

from stream_app.offline.sample import multi_player_league, two_player_league
from stream_app.stream.partitioner import league_partition
from tests.support.browser import headless_chrome, load, screenshot, settle
from tests.support.workers import applied_by, assigned

# Its tests share the workers of a module fixture: under pytest-xdist, one process runs them all.
pytestmark = pytest.mark.xdist_group("test_web_page")

CONFIG = """
[default]
algorithm = "elo"
min_matches = 12

[leagues."arena"]
algorithm = "elo-mmr"

[leagues."monthly"]
algorithm = "elo"
min_matches = 5
season = "monthly"
season_reset = {shrink = 0.5}
tiers = [{name = "Bronze"}, {name = "Silver", min_rating = 1000}]

[leagues."karting"]
algorithm = "elo-pairwise"
"""

# The monthly league: a result every 4 hours from 2026-01-01 to 2026-03-07, so two
# seasons have ended (2026-01, 2026-02) and 2026-03 is in progress; 60 players, so
# the seasons' final standings take two pages and some players are not ranked.
MONTHLY_PLAYERS, MONTHLY_MATCHES, MONTHLY_SPACING = 60, 400, 4 * 3600


def events() -> list[dict]:
    rng = random.Random(5)
    return (list(two_player_league("chess", 120, 900, rng)) + list(multi_player_league("arena", 30, 6, 12, rng))
            + list(two_player_league("monthly", MONTHLY_PLAYERS, MONTHLY_MATCHES, rng, spacing=MONTHLY_SPACING))
            + list(multi_player_league("karting", 20, 30, 6, rng)))


@pytest.fixture(scope="module")
def site(broker, tmp_path_factory):
    """(the URL of a worker that owns neither league, the API reader, the screenshots' directory)."""
    tmp = tmp_path_factory.mktemp("web")
    config = tmp / "leagues.toml"
    config.write_text(CONFIG)
    with applied_by(broker, tmp, config, events(), "web") as workers:
        # Serve the page from a worker that owns neither league, if one does; else from either.
        owners = {league_partition(league, 8) for league in ("chess", "arena")}
        page_worker = next((w for w in workers if not assigned(w) & owners), workers[1])

        def read(path: str):
            with urllib.request.urlopen(page_worker.url + path, timeout=30) as reply:
                return json.loads(reply.read())

        yield page_worker.url, read, tmp / "screenshots"


@pytest.fixture(scope="module")
def browser():
    driver = headless_chrome()
    yield driver
    driver.quit()


def by_css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def board_rows(driver) -> list[tuple[int, str, str]]:
    return [(int(row.find_element("css selector", ".rank").text), row.find_element("css selector", ".player").text,
             row.find_element("css selector", ".rating").text) for row in by_css(driver, "#leaderboard tbody tr")]


def fixed(x: float) -> str:
    """x as the page shows it, JavaScript's x.toFixed(1): an exact tie (a percentile of
    6.25) rounds away from zero, where Python's format rounds to even ("6.2")."""
    return str(Decimal(x).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def expected_rows(board: dict) -> list[tuple[int, str, str]]:
    return [(row["rank"], row["player"], fixed(row["rating"])) for row in board["players"]]


def chart_points(driver) -> list[tuple[int, float]]:
    """(seq, rating) of each point of the history chart after a change."""
    return [(int(c.get_attribute("data-seq")), float(c.get_attribute("data-rating")))
            for c in by_css(driver, "svg#history-chart circle:not(.start)")]


def chart_start(driver) -> tuple[int, float]:
    (start,) = by_css(driver, "svg#history-chart circle.start")
    return int(start.get_attribute("data-seq")), float(start.get_attribute("data-rating"))


def assert_axis_labels_inside_the_chart(driver) -> None:
    """The x axis's labels, as drawn, lie within the axis's span (the last one used to
    be centred on the axis's end, half of it past the chart's edge)."""
    axis, labels = driver.execute_script("""
        const chart = document.getElementById("history-chart");
        const box = (node) => { const r = node.getBoundingClientRect(); return [r.left, r.right]; };
        const axis = chart.querySelector("line.axis");
        return [box(axis), [...chart.querySelectorAll("text.x-label")].map(box)];""")
    assert len(labels) == 2 and labels[0][0] < labels[1][0], labels
    for left, right in labels:
        assert axis[0] - 0.5 <= left and right <= axis[1] + 0.5, (axis, labels)


def test_leagues_leaderboard_pages_and_a_player_page_show_what_the_api_says(site, browser):
    url, read, shots = site
    load(browser, url + "/ui/")
    assert [a.text for a in by_css(browser, "#leagues a.league-link")] == [doc["league"] for doc in read("/leagues")["leagues"]]
    screenshot(browser, shots / "leagues.png")

    next(a for a in by_css(browser, "a.league-link") if a.text == "chess").click()
    settle(browser)
    first = read("/leagues/chess/leaderboard?limit=50")
    assert board_rows(browser) == expected_rows(first) and len(first["players"]) == 50
    counts = by_css(browser, "#counts")[0].text
    assert f"{first['players_total']} players, {first['eligible_total']} ranked" in counts
    assert first["players_total"] > first["eligible_total"]  # min_matches leaves some players out
    assert f"{first['players_total'] - first['eligible_total']} not listed" in counts
    screenshot(browser, shots / "leaderboard.png")

    by_css(browser, "#next")[0].click()
    settle(browser)
    assert board_rows(browser) == expected_rows(read("/leagues/chess/leaderboard?limit=50&offset=50"))
    by_css(browser, "#prev")[0].click()
    settle(browser)
    assert board_rows(browser) == expected_rows(first)

    third = first["players"][2]["player"]
    next(a for a in by_css(browser, "a.player-link") if a.text == third).click()
    settle(browser)
    player = read(f"/leagues/chess/players/{third}")
    assert by_css(browser, "#player-name")[0].text == third
    assert by_css(browser, "#rank")[0].text == f"#{player['rank']}" == "#3"
    assert by_css(browser, "#rating")[0].text == fixed(player["rating"])
    assert by_css(browser, "#percentile")[0].text == fixed(player["percentile"]) + "%"
    assert by_css(browser, "#status")[0].text == "ranked"
    history = read(f"/leagues/chess/players/{third}/history?limit=1000")
    assert history["next"] is None and len(history["changes"]) == player["matches"]
    assert chart_points(browser) == [(c["seq"], c["rating_after"]) for c in reversed(history["changes"])]
    # The line starts at the initial rating, before the first match.
    assert chart_start(browser) == (0, history["changes"][-1]["rating_before"]) == (0, 1000.0)
    assert not by_css(browser, "svg#history-chart .band")  # elo has no uncertainty
    assert_axis_labels_inside_the_chart(browser)
    recent = [row.find_elements("css selector", "td")[1].text for row in by_css(browser, "#recent tbody tr")]
    assert recent == [c["match_id"] for c in history["changes"][:20]]
    screenshot(browser, shots / "player.png")


def test_the_search_box_shows_the_players_around_and_explains_an_unranked_one(site, browser):
    url, read, shots = site
    load(browser, url + "/ui/#/league/chess")
    board = read("/leagues/chess/leaderboard?limit=100000")
    middle = board["players"][len(board["players"]) // 2]["player"]
    box = by_css(browser, "#search-player")[0]
    box.clear()
    box.send_keys(middle + "\n")
    settle(browser)
    around = read(f"/leagues/chess/leaderboard?around={middle}&radius=10")
    assert board_rows(browser) == expected_rows(around) and len(around["players"]) == 21
    assert [row.find_element("css selector", ".player").text for row in by_css(browser, "#leaderboard tr.me")] == [middle]

    ranked = {row["player"] for row in board["players"]}
    rookie = next(f"chess-p{i:04d}" for i in range(1, 121) if f"chess-p{i:04d}" not in ranked)
    box = by_css(browser, "#search-player")[0]
    box.clear()
    box.send_keys(rookie + "\n")
    settle(browser)
    assert "provisional" in by_css(browser, "#message")[0].text
    by_css(browser, "a.player-link")[0].click()
    settle(browser)
    player = read(f"/leagues/chess/players/{rookie}")
    assert player["provisional"] and by_css(browser, "#status")[0].text == "provisional"
    assert by_css(browser, "#rank")[0].text == "–" and by_css(browser, "#matches")[0].text == str(player["matches"])
    screenshot(browser, shots / "provisional.png")


def test_a_player_with_an_uncertainty_gets_a_band_and_names_are_shown_as_text(site, browser):
    url, read, shots = site
    board = read("/leagues/arena/leaderboard?limit=1")
    name = board["players"][0]["player"]
    load(browser, url + "/ui/#/player/arena/" + urllib.parse.quote(name, safe=""))
    history = read(f"/leagues/arena/players/{name}/history")
    assert chart_points(browser) == [(c["seq"], c["rating_after"]) for c in reversed(history["changes"])]
    assert chart_start(browser) == (0, history["changes"][-1]["rating_before"]) == (0, 1500.0)
    assert len(by_css(browser, "svg#history-chart polygon.band")) == 1
    assert_axis_labels_inside_the_chart(browser)
    assert by_css(browser, "#uncertainty")[0].text == fixed(read(f"/leagues/arena/players/{name}")["uncertainty"])
    # An unknown player: the API's message, as text.
    load(browser, url + "/ui/#/player/arena/" + urllib.parse.quote("<b>nobody</b>", safe=""))
    message = by_css(browser, "#message")[0]
    assert "not found" in message.text or "characters" in message.text
    assert not by_css(browser, "#message b")
    assert screenshot(browser, shots / "player-arena.png").stat().st_size > 10_000


def test_the_page_files_are_served_with_their_types_and_nothing_else(site):
    url, _, _ = site

    def get(path: str):
        # http.client follows no redirect: /ui must answer with one itself.
        connection = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=30)
        try:
            connection.request("GET", path)
            reply = connection.getresponse()
            return reply.status, reply.getheader("Content-Type"), reply.getheader("Location"), reply.read()
        finally:
            connection.close()

    assert get("/ui")[0] == 301 and get("/ui")[2] == "/ui/"
    page = get("/ui/")
    assert page[:2] == (200, "text/html; charset=utf-8") and b'<script src="/ui/app.js">' in page[3]
    assert get("/ui/app.js")[1] == "text/javascript; charset=utf-8"
    assert get("/ui/style.css")[1] == "text/css; charset=utf-8"
    for path in ("/ui/nothing.js", "/ui/..%2Fstream%2Fui.py", "/ui/%2e%2e", "/ui/__init__.py"):
        assert get(path)[0] == 404, path


def test_a_page_left_while_it_loads_is_not_drawn_over_the_next(site, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    url, read, _ = site
    load(browser, url + "/ui/#/league/arena")
    player = read("/leagues/arena/leaderboard?limit=1")["players"][0]["player"]
    for _ in range(3):
        # The player page needs two answers (player, history), the leaderboard one: the
        # player page's come last, after the leaderboard asked for has been drawn.
        browser.execute_script(f"location.hash = '#/player/arena/{player}'; "
                               "setTimeout(() => { location.hash = '#/league/chess'; }, 5);")
        WebDriverWait(browser, 15).until(lambda d: d.execute_script("return location.hash") == "#/league/chess")
        settle(browser)
        time.sleep(0.5)  # time for the player page's late answers to arrive
        assert by_css(browser, "#view h1")[0].text == "chess" and not by_css(browser, "#player-name")
        load(browser, url + "/ui/#/league/arena")


def test_a_player_page_compares_with_an_opponent_as_the_api_predicts_and_counts(site, browser):
    url, read, shots = site
    board = read("/leagues/chess/leaderboard?limit=3")
    player, opponent = board["players"][0]["player"], board["players"][2]["player"]
    load(browser, url + "/ui/#/player/chess/" + urllib.parse.quote(player, safe=""))
    assert browser.execute_script("return window.scrollY") == 0
    box = by_css(browser, "#opponent")[0]
    box.send_keys(opponent + "\n")
    settle(browser)
    assert browser.execute_script("return location.hash") == f"#/player/chess/{player}/vs/{opponent}"
    assert_in_view(browser, "#versus")
    odds = read(f"/leagues/chess/predict?team={player}&team={opponent}")
    record = read(f"/leagues/chess/players/{player}/versus/{opponent}?limit=10")
    mine, theirs = odds["sides"]
    assert by_css(browser, "#win-player")[0].text == fixed(100 * mine["win"]) + "%"
    assert by_css(browser, "#win-opponent")[0].text == fixed(100 * theirs["win"]) + "%"
    assert by_css(browser, "#quality")[0].text == str(Decimal(odds["quality"]).quantize(Decimal("0.01"), ROUND_HALF_UP))
    assert not by_css(browser, "#draw")  # elo has no draw model

    def signed(x: float) -> str:
        return ("+" if x >= 0 else "") + fixed(x)

    stake = {row.get_attribute("data-player"): [cell.text for cell in row.find_elements("css selector", "td")[1:]]
             for row in by_css(browser, "#stake tbody tr")}
    assert stake == {player: [signed(mine["change"][o][player]) for o in ("win", "draw", "loss")],
                     opponent: [signed(theirs["change"][o][opponent]) for o in ("loss", "draw", "win")]}
    against = record["against"]
    assert by_css(browser, "#versus-record")[0].text.startswith(
        f"Against each other: {against['matches']} matches, {against['wins']} won, {against['draws']} drawn, "
        f"{against['losses']} lost by {player}")
    cells = [[cell.text for cell in row.find_elements("css selector", "td")] for row in by_css(browser, "#versus-recent tbody tr")]
    assert [row[0] for row in cells] == [m["match_id"] for m in record["recent"]]
    assert [row[4] for row in cells] == [signed(m["rating_after"] - m["rating_before"]) for m in record["recent"]]
    browser.execute_script("document.getElementById('versus-form').scrollIntoView()")
    screenshot(browser, shots / "versus.png")

    # Opened from its address, the comparison is brought into view too.
    load(browser, url + f"/ui/#/player/chess/{urllib.parse.quote(player, safe='')}/vs/{opponent}")
    assert_in_view(browser, "#versus")

    # An id the league does not know (mistyped): said plainly, and no prediction, as `ratings versus` refuses it.
    load(browser, url + f"/ui/#/player/chess/{urllib.parse.quote(player, safe='')}/vs/somebody-new")
    assert by_css(browser, "#versus-unknown")[0].text == "Unknown opponent: no player somebody-new in chess. Check the id."
    assert not by_css(browser, "#win-player") and not by_css(browser, "#stake") and not by_css(browser, "#versus-record")
    assert_in_view(browser, "#versus")
    # The player themself: the API's reason.
    load(browser, url + f"/ui/#/player/chess/{urllib.parse.quote(player, safe='')}/vs/{player}")
    assert by_css(browser, "#versus-unknown")[0].text == f"opponent: must be another player than '{player}'"


def assert_in_view(driver, selector: str) -> None:
    """The element's top is on the screen, below the page's top: the page was scrolled to it."""
    top, height, scrolled = driver.execute_script(
        f"return [document.querySelector({selector!r}).getBoundingClientRect().top, window.innerHeight, window.scrollY];")
    assert 0 <= top < height and scrolled > 0, (top, height, scrolled)


def test_no_negative_zero_on_the_page(site, browser):
    """A change that rounds to zero is shown "0.0", not "-0.0" (toFixed keeps the sign)."""
    url, read, _ = site
    board = read("/leagues/chess/leaderboard?limit=100000")["players"]
    # Two players of nearly the same rating: a draw moves the better one by a hair downwards.
    pair = next((a["player"], b["player"]) for a, b in zip(board, board[1:])
                if -0.05 < read(f"/leagues/chess/predict?team={a['player']}&team={b['player']}")
                ["sides"][0]["change"]["draw"][a["player"]] < 0)
    load(browser, url + f"/ui/#/player/chess/{pair[0]}/vs/{pair[1]}")
    draw = by_css(browser, f"#stake tr[data-player='{pair[0]}'] td.draw")[0].text
    assert draw == "0.0"
    texts = browser.execute_script("return [...document.querySelectorAll('#view td, #view dd, #view text')]"
                                   ".map((node) => node.textContent)")
    assert texts and not [text for text in texts if text.lstrip("+").startswith("-0") and not text.strip("-0.%")]
    # The page's own formatting, on the values that round to zero or near it.
    assert browser.execute_script("return [fixed(-0.04), fixed(-0.4, 0), signed(-0.04), signed(0.04), signed(-0.06), "
                                  "signed(0.06), percent(-0.0000001), fixed(-1e-9, 2)]") == [
        "0.0", "0", "0.0", "0.0", "-0.1", "+0.1", "0.0%", "0.00"]


def tiered_rows(driver) -> list[tuple[str, str, str, str, str]]:
    """(rank, player, rating, tier, matches) of each leaderboard row, as shown."""
    return [tuple(row.find_element("css selector", f".{cell}").text for cell in ("rank", "player", "rating", "tier", "matches"))
            for row in by_css(driver, "#leaderboard tbody tr")]


def expected_tiered(board: dict) -> list[tuple[str, str, str, str, str]]:
    return [("–" if row["rank"] is None else str(row["rank"]), row["player"], fixed(row["rating"]),
             row["tier"] or "–", str(row["matches"])) for row in board["players"]]


def test_a_league_with_seasons_shows_each_ended_seasons_standings_and_a_players_seasons(site, browser):
    from selenium.webdriver.support.ui import Select

    url, read, shots = site
    seasons = read("/leagues/monthly/seasons")
    assert seasons["schedule"] == "monthly" and seasons["season"] == "2026-03"
    assert [(s["season"], s["end"] is None) for s in seasons["seasons"]] == [
        ("2026-01", False), ("2026-02", False), ("2026-03", True)]

    # The live leaderboard: a tier column, and the selector on "current".
    load(browser, url + "/ui/#/league/monthly")
    live = read("/leagues/monthly/leaderboard?limit=50")
    assert {row["tier"] for row in live["players"]} == {"Bronze", "Silver"}
    assert tiered_rows(browser) == expected_tiered(live)
    picker = Select(by_css(browser, "#season-select")[0])
    assert [(o.get_attribute("value"), o.text) for o in picker.options] == [
        ("", "current (2026-03, in progress)"), ("2026-02", "2026-02 (ended)"), ("2026-01", "2026-01 (ended)")]
    assert picker.first_selected_option.get_attribute("value") == ""

    # An ended season: its final standings as the API gives them, in two pages.
    picker.select_by_value("2026-01")
    settle(browser)
    assert browser.execute_script("return location.hash") == "#/league/monthly/season/2026-01"
    first = read("/leagues/monthly/seasons/2026-01/leaderboard?limit=50")
    assert first["players_total"] > 50 and first["players_total"] > first["eligible_total"] > 0
    assert {row["tier"] for row in first["players"]} == {"Bronze", "Silver"}
    assert tiered_rows(browser) == expected_tiered(first) and len(first["players"]) == 50
    assert by_css(browser, "#season-name")[0].text == "2026-01"
    assert f"{first['players_total']} players, {first['eligible_total']} ranked" in by_css(browser, "#counts")[0].text
    screenshot(browser, shots / "season.png")
    by_css(browser, "#next")[0].click()
    settle(browser)
    assert browser.execute_script("return location.hash") == "#/league/monthly/season/2026-01?offset=50"
    second = read("/leagues/monthly/seasons/2026-01/leaderboard?limit=50&offset=50")
    assert tiered_rows(browser) == expected_tiered(second)
    assert second["players"][-1]["rank"] is None  # the unranked come last, without a rank
    assert by_css(browser, "#next")[0].get_attribute("disabled") is not None

    # The route is the choice: reloading it shows the same season, selected.
    load(browser, url + "/ui/#/league/monthly/season/2026-02")
    assert Select(by_css(browser, "#season-select")[0]).first_selected_option.get_attribute("value") == "2026-02"
    assert tiered_rows(browser) == expected_tiered(read("/leagues/monthly/seasons/2026-02/leaderboard?limit=50"))
    Select(by_css(browser, "#season-select")[0]).select_by_value("")
    settle(browser)
    assert browser.execute_script("return location.hash") == "#/league/monthly"
    assert tiered_rows(browser) == expected_tiered(live)
    # The season in progress has no final standings yet: the API's message.
    load(browser, url + "/ui/#/league/monthly/season/2026-03")
    assert "in progress" in by_css(browser, "#message")[0].text and by_css(browser, "#season-select")

    # A player who played in both ended seasons: the current tier and season, and a Seasons table.
    player = next(row["player"] for row in first["players"]
                  if len(read(f"/leagues/monthly/players/{row['player']}/seasons")["seasons"]) == 2)
    load(browser, url + "/ui/#/player/monthly/" + urllib.parse.quote(player, safe=""))
    doc = read(f"/leagues/monthly/players/{player}")
    assert by_css(browser, "#tier")[0].text == doc["tier"] and doc["tier"] in ("Bronze", "Silver")
    assert by_css(browser, "#season")[0].text == doc["season"] == "2026-03"
    mine = read(f"/leagues/monthly/players/{player}/seasons")["seasons"]
    shown = [tuple(cell.text for cell in row.find_elements("css selector", "td")) for row in by_css(browser, "#seasons tbody tr")]
    assert shown == [(s["season"], "–" if s["rank"] is None else f"#{s['rank']}",
                      "–" if s["percentile"] is None else fixed(s["percentile"]) + "%", fixed(s["rating"]),
                      s["tier"] or "–", str(s["matches"])) for s in mine]
    assert [th.text for th in by_css(browser, "#seasons thead th")] == ["season", "rank", "percentile", "rating", "tier", "matches"]
    browser.execute_script("document.getElementById('seasons').scrollIntoView()")
    screenshot(browser, shots / "player-seasons.png")
    # Each season links to its standings.
    by_css(browser, "#seasons a.season-link")[1].click()
    settle(browser)
    assert browser.execute_script("return location.hash") == "#/league/monthly/season/2026-02"

    # A league without seasons has no selector, and its player no tier, season or Seasons table.
    load(browser, url + "/ui/#/league/chess")
    assert not by_css(browser, "#season-select") and not by_css(browser, "#leaderboard .tier")
    assert "null" not in by_css(browser, "#view")[0].text
    name = read("/leagues/chess/leaderboard?limit=1")["players"][0]["player"]
    load(browser, url + "/ui/#/player/chess/" + urllib.parse.quote(name, safe=""))
    assert not by_css(browser, "#tier") and not by_css(browser, "#season") and not by_css(browser, "#seasons")
    assert "null" not in by_css(browser, "#view")[0].text  # parts a page does not have are left out, not "null"


def test_a_player_of_a_system_with_a_soft_rating_shows_it(site, browser):
    url, read, _ = site
    name = read("/leagues/karting/leaderboard?limit=1")["players"][0]["player"]
    load(browser, url + "/ui/#/player/karting/" + urllib.parse.quote(name, safe=""))
    doc = read(f"/leagues/karting/players/{name}")
    assert doc["soft_rating"] != doc["rating"]
    assert by_css(browser, "#soft-rating")[0].text == fixed(doc["soft_rating"])
    assert by_css(browser, "#rating")[0].text == fixed(doc["rating"])
    # Its history starts at the system's initial rating (0 for elo-pairwise).
    assert chart_start(browser) == (0, 0.0)
    # A system without one shows none.
    load(browser, url + "/ui/#/player/chess/" + read("/leagues/chess/leaderboard?limit=1")["players"][0]["player"])
    assert not by_css(browser, "#soft-rating")
