"""A real headless Chromium page on another origin calls the AI SDK endpoint (CORS).

``uamp serve --allowed-origins`` runs as a subprocess; two static servers on
other ports of 127.0.0.1 (two more origins) serve the same page, which loads
the Vercel AI SDK (npm ``ai``, the interop tests' install) unbundled with an
import map and chats through ``DefaultChatTransport`` and
``readUIMessageStream``. The page of the allowed origin gets its answer (the
browser made a preflight, since the request is a JSON POST); the page of
the other origin is stopped by the browser itself. The answer of the allowed
page proves the preflight passed: a JSON POST is never sent without one.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tests._support.cli import uamp_serve
from tests._support.npm import install_client

PAGE = Path(__file__).parent / "ai_sdk_page"
CLIENT = Path(__file__).parents[1] / "interop" / "ai_sdk_client"


@contextlib.contextmanager
def static_site(root: Path) -> Iterator[str]:
    """``root`` served over HTTP on 127.0.0.1 (a port of its own: an origin of its own)."""
    handler = functools.partial(_Quiet, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("page")
    for name in ("index.html", "oidc-shim.js"):
        shutil.copyfile(PAGE / name, root / name)
    (root / "node_modules").symlink_to(install_client(CLIENT, "ai-sdk-client") / "node_modules")
    return root


def run_page(browser: WebDriver, page: str, api: str) -> dict[str, Any]:
    browser.get(f"{page}/index.html?api={api}")
    WebDriverWait(browser, 30).until(lambda b: b.execute_script("return window.result"))
    return browser.execute_script("return window.result")  # type: ignore[no-any-return]


def test_a_page_on_an_allowed_origin_chats_and_another_origin_is_stopped(
    browser: WebDriver, site_root: Path
) -> None:
    with (
        static_site(site_root) as allowed,
        static_site(site_root) as other,
        uamp_serve("--allowed-origins", allowed) as base,
    ):
        api = f"{base}/agents/demo/ai-sdk"
        got = run_page(browser, allowed, api)
        assert "error" not in got, got
        parts = got["message"]["parts"]
        assert [p["type"] for p in parts] == [
            "step-start",
            "dynamic-tool",
            "step-start",
            "text",
        ]
        assert parts[1]["toolName"] == "add" and parts[1]["output"] == "5"
        assert parts[-1]["text"] == "2 + 3 = 5"
        refused = run_page(browser, other, api)
    # The browser stopped it ("Failed to fetch"), and says CORS is why.
    assert refused["error"].startswith("TypeError"), refused
    console = " ".join(entry["message"] for entry in browser.get_log("browser"))
    assert "CORS" in console and other in console
