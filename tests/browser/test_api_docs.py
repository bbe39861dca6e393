"""``GET /docs``: the OpenAPI document as a page, read in a real headless Chromium
(issue 32, item 7) -- its files from the package, nothing from another origin."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from urllib.parse import urljoin

import httpx
import pytest
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests._support.cli import Served


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with Served([sys.executable, "-m", "uamp_trio", "serve", "--port", "0"]) as srv:
        yield srv.url()


def test_the_page_and_its_files_come_from_this_server(server: str) -> None:
    page = httpx.get(f"{server}/docs", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    # Relative, so that the page works below a --root-path prefix too.
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(assets) == ["docs/docs.css", "docs/docs.js", "openapi.json"]
    for asset in ("docs/docs.js", "docs/docs.css"):
        body = httpx.get(urljoin(f"{server}/docs", asset), timeout=10)
        assert body.status_code == 200, asset
        assert not re.search(r"https?://", body.text), f"{asset} reaches another origin"
    assert httpx.get(f"{server}/docs/nope.js", timeout=10).status_code == 404


def test_a_browser_lists_every_operation_and_filters_them(server: str, browser: WebDriver) -> None:
    document = httpx.get(f"{server}/openapi.json", timeout=10).json()
    count = sum(
        1
        for item in document["paths"].values()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    )
    browser.get(f"{server}/docs")
    wait = WebDriverWait(browser, 20)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "details")) == count)
    paths = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "details .path")]
    assert "/agents/{agent}/chat/completions" in paths
    browser.find_element(By.ID, "filter").send_keys("healthz")
    visible = [e for e in browser.find_elements(By.CSS_SELECTOR, "details") if e.is_displayed()]
    assert [e.find_element(By.CSS_SELECTOR, ".path").text for e in visible] == ["/healthz"]
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
