"""A real headless browser for the web page's tests: Debian's chromium driven
by selenium through chromium-driver (.ci/run installs both)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> tuple[str, str] | None:
    """(browser, driver) paths, or None when either is missing."""
    browser = next((path for path in map(shutil.which, CHROMIUM) if path), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def headless_chrome(window: tuple[int, int] = (1280, 900)) -> Any:
    """A headless Chrome webdriver; skips the test when chromium or its driver is missing."""
    found = chromium()
    if found is None:
        pytest.skip("no chromium and chromedriver: install the Debian packages chromium and chromium-driver "
                    "(.ci/run does) to run the web page's tests")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={window[0]},{window[1]}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(found[1]), options=options)


def load(driver: Any, url: str, timeout: float = 15.0) -> None:
    """Open a page of the app and wait until it has drawn it (the view is no longer busy)."""
    driver.get(url)
    settle(driver, timeout)


def settle(driver: Any, timeout: float = 15.0) -> None:
    """Wait until the page has drawn the route in the address bar (after a load, a click, a search)."""
    from selenium.webdriver.support.ui import WebDriverWait

    def drawn(d: Any) -> bool:
        return d.execute_script("const v = document.getElementById('view');"
                                "return v.getAttribute('aria-busy') === 'false' && v.dataset.route === location.hash;")

    WebDriverWait(driver, timeout).until(drawn)


def screenshot(driver: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path
