"""One headless Chromium per test process for every browser test (a start costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver import Chrome as WebDriver

from tests._support.browser import start_chrome


@pytest.fixture(scope="session")
def chrome() -> Iterator[WebDriver]:
    driver = start_chrome()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chrome: WebDriver) -> Iterator[WebDriver]:
    """The shared Chromium at desktop size, light scheme, with no saved theme or page."""
    chrome.set_window_size(1280, 800)
    chrome.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    chrome.get_log("browser")  # drained: what the test reads is its own
    chrome.get_log("performance")
    yield chrome
    chrome.execute_script("try { localStorage.clear(); } catch (e) {}")
    chrome.get("about:blank")  # no reconnecting page left behind for the next test
    chrome.get_log("browser")
    chrome.get_log("performance")
