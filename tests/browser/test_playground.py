"""The playground in a real headless Chromium against a real ``uamp serve``.

Each test starts ``uamp serve`` on 127.0.0.1 (tests/_support/cli.py) and drives
the page through chromedriver: typing, Enter and Esc are real key events, the
page talks to the server over its own WebSocket, and every assertion reads
the DOM the user sees. The desktop screenshot is saved to
``build/screenshots/playground.png`` on every run; with
``UAMP_DOCS_SCREENSHOT=1`` it also replaces ``docs/img/playground.png``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from tests._support.browser import Relay
from tests._support.cli import ROOT, uamp, uamp_serve

AGENTS = ("--agent", "uamp_trio.cli:default_agent", "--agent", "tests._support.browser:Storyteller")
SCREENSHOTS = ROOT / "build" / "screenshots"
DOCS_IMAGE = ROOT / "docs" / "img" / "playground.png"
PNG = b"\x89PNG\r\n\x1a\n"


def no_page_errors(driver: WebDriver, allowed: str = "$^") -> None:
    """No script error and no refused resource (CSP) on the page so far, but ``allowed``."""
    errors = [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and not re.search(allowed, e["message"])
    ]
    assert errors == []


def wait(driver: WebDriver, what: Callable[[WebDriver], Any], seconds: float = 20) -> Any:
    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(what)


def websocket_urls(driver: WebDriver) -> list[str]:
    """The URLs of the WebSockets the page opened (from the network log)."""
    found = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.webSocketCreated":
            found.append(message["params"]["url"])
    return found


def panes(driver: WebDriver) -> list[WebElement]:
    return driver.find_elements(By.CSS_SELECTOR, "#sessions .session")


def open_page(driver: WebDriver, url: str) -> WebElement:
    """Load ``url``; the first pane once its session is created."""
    driver.get(url)
    wait(driver, lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "open")
    wait(driver, lambda d: panes(d) and panes(d)[0].get_attribute("data-state") == "ready")
    return panes(driver)[0]


def say(pane: WebElement, text: str) -> None:
    box = pane.find_element(By.TAG_NAME, "textarea")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def replies(pane: WebElement) -> list[WebElement]:
    return pane.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def finished(pane: WebElement, count: int, status: str = "completed") -> WebElement:
    """Wait for the ``count``-th reply of ``pane`` to end with ``status``."""
    driver = pane.parent
    wait(driver, lambda d: len(replies(pane)) >= count)
    reply = replies(pane)[count - 1]
    wait(driver, lambda d: reply.get_attribute("data-status") in (status, "error", "cancelled"))
    assert reply.get_attribute("data-status") == status, reply.text
    return reply


def save_screenshot(driver: WebDriver) -> Path:
    driver.execute_script(
        "document.querySelectorAll('.log')"
        ".forEach(l => l.scrollTo({top: 1e6, behavior: 'instant'}))"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / "playground.png"
    assert driver.save_screenshot(str(path))
    if os.environ.get("UAMP_DOCS_SCREENSHOT") == "1":
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGE)
    return path


def test_chat_streams_markdown_tools_and_cancel_side_by_side(browser: WebDriver) -> None:
    with uamp_serve(*AGENTS) as url:
        first = open_page(browser, url + "/")
        assert first.find_element(By.CSS_SELECTOR, ".agent-name").text == "demo"

        # A streamed answer, rendered as markdown; markup the agent echoes stays text.
        say(first, "hello **world** and <b>bold</b> `x`")
        reply = finished(first, 1)
        body = reply.find_element(By.CSS_SELECTOR, ".body")
        assert body.text == "You said: hello world and <b>bold</b> x"
        assert body.find_element(By.TAG_NAME, "strong").text == "world"
        assert body.find_element(By.TAG_NAME, "code").text == "x"
        assert first.find_elements(By.CSS_SELECTOR, ".log b") == []
        assert re.fullmatch(r"\d+ in · \d+ out", reply.find_element(By.CSS_SELECTOR, ".meta").text)

        # Shift+Enter is a new line, not a send.
        box = first.find_element(By.TAG_NAME, "textarea")
        box.send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.NULL, "line two")
        assert box.get_attribute("value") == "line one\nline two"
        assert len(replies(first)) == 1
        box.send_keys(Keys.ENTER)
        finished(first, 2)
        assert first.find_elements(By.CSS_SELECTOR, ".msg.user")[-1].text == "line one\nline two"

        # Markdown blocks, and only safe links: typed with Shift+Enter between the lines.
        box = first.find_element(By.TAG_NAME, "textarea")
        for line in ["see", "- [safe](https://example.com/a)", "- [bad](javascript:alert(1))",
                     "```", "<i>kept</i>", "```"]:  # fmt: skip
            box.send_keys(line, Keys.SHIFT, Keys.ENTER, Keys.NULL)
        box.send_keys(Keys.ENTER)
        body = finished(first, 3).find_element(By.CSS_SELECTOR, ".body")
        items = body.find_elements(By.CSS_SELECTOR, "ul > li")
        assert [li.text for li in items] == ["safe", "[bad](javascript:alert(1))"]
        links = body.find_elements(By.TAG_NAME, "a")
        assert [a.get_attribute("href") for a in links] == ["https://example.com/a"]
        assert links[0].get_attribute("rel") == "noopener noreferrer"
        assert body.find_element(By.CSS_SELECTOR, "pre code").text == "<i>kept</i>"
        assert body.find_elements(By.TAG_NAME, "i") == []

        # A tool call and its result, then the answer built on it.
        say(first, "what is 2+3?")
        reply = finished(first, 4)
        tool = reply.find_element(By.CSS_SELECTOR, ".tool")
        assert tool.get_attribute("data-status") == "done"
        assert tool.find_element(By.CSS_SELECTOR, ".tool-name").text == "add"
        assert tool.find_element(By.CSS_SELECTOR, ".tool-state").text == "→ 5"
        assert reply.find_element(By.CSS_SELECTOR, ".body").text == "2 + 3 = 5"
        tool.find_element(By.TAG_NAME, "summary").click()  # open the card: arguments, result
        assert '"a": 2' in tool.find_element(By.CSS_SELECTOR, ".tool-args").text
        assert tool.find_element(By.CSS_SELECTOR, ".tool-result").text == "5"
        totals = first.find_element(By.CSS_SELECTOR, ".totals").text
        assert re.fullmatch(r"\d+/\d+ tok", totals) and not totals.startswith("0/")

        # A second session beside the first, with the other agent, on the same socket.
        Select(browser.find_element(By.ID, "agent-picker")).select_by_value("story")
        browser.find_element(By.ID, "new-session").click()
        wait(
            browser,
            lambda d: len(panes(d)) == 2 and panes(d)[1].get_attribute("data-state") == "ready",
        )
        second = panes(browser)[1]
        assert second.find_element(By.CSS_SELECTOR, ".agent-name").text == "story"
        assert second.get_attribute("data-session-id") != first.get_attribute("data-session-id")
        assert second.rect["x"] > first.rect["x"] + first.rect["width"] - 1
        assert second.rect["y"] == first.rect["y"]

        # It streams: the text grows while the reply is still open; Esc stops it.
        say(second, "tell me a long story")
        wait(browser, lambda d: len(replies(second)) == 1)
        streaming = replies(second)[0]
        text = streaming.find_element
        wait(browser, lambda d: len(text(By.CSS_SELECTOR, ".body").text) > 40)
        seen = text(By.CSS_SELECTOR, ".body").text
        wait(browser, lambda d: len(text(By.CSS_SELECTOR, ".body").text) > len(seen) + 20)
        assert streaming.get_attribute("data-status") == "streaming"
        assert second.find_element(By.CSS_SELECTOR, ".stop").is_displayed()
        save_screenshot(browser)
        second.find_element(By.TAG_NAME, "textarea").send_keys(Keys.ESCAPE)
        finished(second, 1, status="cancelled")
        stopped = text(By.CSS_SELECTOR, ".body").text
        assert stopped.startswith("word0 word1 ") and len(stopped) < 1200 * 7
        # Thinking and cost came before the words; the cancelled reply keeps them.
        assert (
            streaming.find_element(By.CSS_SELECTOR, ".meta").text
            == "5 in · 0 out · $0.0042 · stopped"
        )
        thinking = streaming.find_element(By.CSS_SELECTOR, ".thinking")
        thinking.find_element(By.TAG_NAME, "summary").click()
        assert (
            thinking.find_element(By.CSS_SELECTOR, ".thinking-text").text
            == "Planning a long story."
        )
        assert second.find_element(By.CSS_SELECTOR, ".totals").text == "5/0 tok · $0.0042"
        assert second.find_element(By.CSS_SELECTOR, ".send").is_displayed()
        # The first session never noticed.
        assert len(replies(first)) == 4 and first.get_attribute("data-state") == "ready"
        no_page_errors(browser)

    shot = (SCREENSHOTS / "playground.png").read_bytes()
    assert shot.startswith(PNG) and len(shot) > 20_000


def test_agent_page_phone_width_and_theme(browser: WebDriver) -> None:
    with uamp_serve(*AGENTS) as url:
        browser.set_window_size(390, 844)
        pane = open_page(browser, url + "/agents/story/")
        assert pane.find_element(By.CSS_SELECTOR, ".agent-name").text == "story"
        assert browser.find_element(By.ID, "agent-picker").get_attribute("value") == "story"
        width = browser.execute_script("return [document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= width[1]  # nothing sticks out sideways at phone width
        say(pane, "a story on a phone")
        wait(browser, lambda d: len(replies(pane)) == 1 and replies(pane)[0].text)
        browser.find_element(By.CSS_SELECTOR, ".stop").click()
        finished(pane, 1, status="cancelled")
        # Alt+N opens another session; at phone width it stacks below the first.
        ActionChains(browser).key_down(Keys.ALT).send_keys("n").key_up(Keys.ALT).perform()
        wait(
            browser,
            lambda d: len(panes(d)) == 2 and panes(d)[1].get_attribute("data-state") == "ready",
        )
        below = panes(browser)[1]
        assert browser.switch_to.active_element == below.find_element(By.TAG_NAME, "textarea")
        assert below.rect["y"] >= pane.rect["y"] + pane.rect["height"]
        assert below.rect["x"] == pane.rect["x"]
        # Closing it leaves the first.
        below.find_element(By.CSS_SELECTOR, ".close").click()
        wait(browser, lambda d: len(panes(d)) == 1)

        def background() -> str:
            return str(
                browser.execute_script("return getComputedStyle(document.body).backgroundColor")
            )

        def dark(color: str) -> bool:
            r, g, b = (int(v) for v in re.findall(r"\d+", color)[:3])
            return r + g + b < 3 * 80

        assert not dark(background())
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
        )
        assert dark(background())  # the system's scheme, with no choice made
        toggle = browser.find_element(By.ID, "theme-toggle")
        toggle.click()
        assert not dark(background())  # the toggle wins over the system
        browser.refresh()
        wait(
            browser, lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "open"
        )
        assert not dark(background())  # and is remembered
        browser.find_element(By.ID, "theme-toggle").click()
        assert dark(background())
        no_page_errors(browser)


def test_a_dropped_connection_resumes_the_session_and_its_streaming_reply(
    browser: WebDriver,
) -> None:
    with uamp_serve("--agent", "tests._support.browser:ShortStory") as url:
        relay = Relay(int(url.rsplit(":", 1)[1]))
        pane = open_page(browser, f"http://127.0.0.1:{relay.port}/")
        session = pane.get_attribute("data-session-id")
        say(pane, "a short story")
        wait(browser, lambda d: len(replies(pane)) == 1)
        reply = replies(pane)[0]
        wait(browser, lambda d: "word5" in reply.text)
        # The network drops mid-reply (as a phone's does); the page reconnects by itself.
        relay.cut()
        wait(browser, lambda d: pane.get_attribute("data-state") == "offline", seconds=5)
        assert reply.get_attribute("data-status") == "streaming"
        finished(pane, 1)
        # The same session, every word once and in order: nothing lost, nothing twice.
        assert pane.get_attribute("data-session-id") == session
        words = reply.find_element(By.CSS_SELECTOR, ".body").text.split()
        assert words == [f"word{i}" for i in range(80)]
        notices = [n.text for n in pane.find_elements(By.CSS_SELECTOR, ".notice")]
        assert notices == ["reconnected: session resumed"]
        assert len(websocket_urls(browser)) == 2  # one drop, one reconnection
        # The resumed session keeps going.
        say(pane, "another")
        assert finished(pane, 2).find_element(By.CSS_SELECTOR, ".body").text.startswith("word0")
        no_page_errors(browser)
        relay.close()


def test_a_session_the_server_does_not_know_is_opened_again(browser: WebDriver) -> None:
    with uamp_serve() as first_url, uamp_serve() as second_url:
        relay = Relay(int(first_url.rsplit(":", 1)[1]))
        pane = open_page(browser, f"http://127.0.0.1:{relay.port}/")
        session = pane.get_attribute("data-session-id")
        say(pane, "hello")
        finished(pane, 1)
        # The connection drops and comes back to another server, which has no such session.
        relay.target_port = int(second_url.rsplit(":", 1)[1])
        relay.cut()
        wait(browser, lambda d: pane.get_attribute("data-session-id") != session)
        wait(browser, lambda d: pane.get_attribute("data-state") == "ready")
        notice = pane.find_elements(By.CSS_SELECTOR, ".notice")[-1].text
        assert notice.startswith("reconnected: a new session (unknown_session")
        say(pane, "again")
        assert finished(pane, 2).find_element(By.CSS_SELECTOR, ".body").text == "You said: again"
        no_page_errors(browser)
        relay.close()


def test_the_token_field_opens_sessions_on_a_gated_server(
    browser: WebDriver, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:k-browser-test-0123456789\n")
    with uamp_serve("--auth-api-keys", str(keys)) as url:
        browser.get(url + "/")  # the page is public
        wait(browser, lambda d: panes(d) and panes(d)[0].get_attribute("data-state") == "failed")
        pane = panes(browser)[0]
        notice = pane.find_element(By.CSS_SELECTOR, ".notice.error").text
        assert notice.startswith("unauthorized:")
        assert replies(pane) == []

        token = browser.find_element(By.ID, "token")
        assert browser.switch_to.active_element == token  # the page asks for one
        token.send_keys("not-the-key", Keys.ENTER)
        wait(browser, lambda d: len(pane.find_elements(By.CSS_SELECTOR, ".notice.error")) == 2)
        assert pane.get_attribute("data-state") == "failed"
        assert "not-the-key" not in pane.text  # the page never echoes a token

        token.clear()
        token.send_keys("k-browser-test-0123456789", Keys.ENTER)
        wait(browser, lambda d: pane.get_attribute("data-state") == "ready")
        # The token went in session.create, never in a URL the browser opened.
        assert websocket_urls(browser) == [url.replace("http:", "ws:") + "/uamp"]
        say(pane, "let me in")
        reply = finished(pane, 1)
        assert reply.find_element(By.CSS_SELECTOR, ".body").text == "You said: let me in"
        no_page_errors(browser)


def test_a_payment_prompt_takes_a_pasted_token(browser: WebDriver, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    issued = uamp("tokens", "issue", "--ledger", str(ledger), "--amount", "1.00")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    with uamp_serve("--ledger", str(ledger), "--price", "0.01") as url:
        pane = open_page(browser, url + "/")
        say(pane, "hello paid world")
        card = wait(browser, lambda d: pane.find_elements(By.CSS_SELECTOR, ".payment"))[0]
        assert (
            card.find_element(By.CSS_SELECTOR, ".payment-title").text
            == "Payment required $0.01 — agent_usage"
        )
        field = card.find_element(By.TAG_NAME, "input")
        assert browser.switch_to.active_element == field  # focused, ready for the paste
        field.send_keys("tok_not_issued", Keys.ENTER)
        wait(browser, lambda d: card.get_attribute("data-state") == "refused")
        assert replies(pane)[0].find_elements(By.CSS_SELECTOR, ".body") == []  # still held
        field.clear()
        field.send_keys(token, Keys.ENTER)
        reply = finished(pane, 1)
        assert card.get_attribute("data-state") == "accepted"
        assert card.find_element(By.CSS_SELECTOR, ".payment-note").text == "paid $0.01"
        assert reply.find_element(By.CSS_SELECTOR, ".body").text == "You said: hello paid world"
        assert pane.find_element(By.CSS_SELECTOR, ".totals").text.endswith("· $0.01")
        no_page_errors(browser)


# --- the markdown renderer, fed adversarial text in the real browser -------------------

#: What the renderer may produce: these tags, these attributes, these link schemes.
TAGS = {"p", "br", "strong", "em", "del", "code", "pre", "a", "ul", "ol", "li", "blockquote",
        "h3", "h4", "h5", "h6", "hr"}  # fmt: skip
ATTRIBUTES = {"a": {"href", "target", "rel"}, "pre": {"data-lang"}}
SCHEMES = ("http://", "https://", "mailto:")
# Markdown and HTML syntax, quotes, entities, schemes, newlines: what an attack is made of.
PIECES = ["<", ">", "&", '"', "'", "`", "```", "*", "**", "_", "__", "~~", "[", "]", "(", ")",
          "#", "- ", "1. ", "> ", "\n", " ", "javascript:", "https://x.example/", "mailto:a@b",
          "<script>", "<img src=x onerror=alert(1)>", "&lt;", "&#60;", "\u0000", "x", "\u00e9",
          'onclick="', "data:text/html,"]  # fmt: skip


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.bad.append(f"tag {tag}")
        for name, value in attrs:
            if name not in ATTRIBUTES.get(tag, set()):
                self.bad.append(f"{tag}[{name}]")
            elif name == "href" and not (value or "").startswith(SCHEMES):
                self.bad.append(f"href {value!r}")

    def handle_comment(self, data: str) -> None:
        self.bad.append("comment")


@pytest.fixture(scope="module")
def renderer(chrome: WebDriver) -> Iterator[Callable[[list[str]], list[str]]]:
    """``render(texts)``: each text through the page's own markdown renderer."""
    with uamp_serve(*AGENTS[:2]) as url:
        open_page(chrome, url + "/")

        def render(texts: list[str]) -> list[str]:
            return list(
                chrome.execute_script("return arguments[0].map(window.uampMarkdown)", texts)
            )

        yield render
        chrome.get("about:blank")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.lists(st.sampled_from(PIECES), max_size=30).map("".join), min_size=20, max_size=20)
)
def test_the_markdown_renderer_never_emits_markup_it_was_not_meant_to(
    renderer: Callable[[list[str]], list[str]], texts: list[str]
) -> None:
    for text, html in zip(texts, renderer(texts), strict=True):
        parser = _Tags()
        parser.feed(html)
        parser.close()
        assert parser.bad == [], (text, html)


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("**b** _i_ `c` ~~d~~", "<p><strong>b</strong> <em>i</em> <code>c</code> <del>d</del></p>"),
        ("a\nb\n\nc", "<p>a<br>b</p><p>c</p>"),
        ("- x\n- y\n1. z", "<ul><li>x</li><li>y</li></ul><ol><li>z</li></ol>"),
        ("# T\n> q", "<h3>T</h3><blockquote>q</blockquote>"),
        (
            "```py\n<b>**x**</b>\n```",
            '<pre data-lang="py"><code>&lt;b&gt;**x**&lt;/b&gt;</code></pre>',
        ),
        (
            "[a](https://e.example/p?q=1&r=2)",
            '<p><a href="https://e.example/p?q=1&amp;r=2" target="_blank" '
            'rel="noopener noreferrer">a</a></p>',
        ),
        ("[a](javascript:alert(1))", "<p>[a](javascript:alert(1))</p>"),
        ('<img src="x">', "<p>&lt;img src=&quot;x&quot;&gt;</p>"),
        ("snake_case_name and 2*3*4", "<p>snake_case_name and 2*3*4</p>"),
    ],
)
def test_the_markdown_renderer_table(
    renderer: Callable[[list[str]], list[str]], text: str, html: str
) -> None:
    assert renderer([text]) == [html]


def _room_events(bob: Any, until: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """What ``bob`` (a plain WebSocket client in the room) receives, up to ``until``."""
    got: list[dict[str, Any]] = []
    while True:
        event = json.loads(bob.recv(timeout=20))
        got.append(event)
        if until(event):
            return got


def test_a_room_shows_who_is_there_who_is_typing_and_every_message(browser: WebDriver) -> None:
    from websockets.sync.client import connect

    with uamp_serve(*AGENTS) as url:
        open_page(browser, url + "/")
        browser.find_element(By.ID, "room").send_keys("lobby")
        browser.find_element(By.ID, "username").send_keys("alice", Keys.ENTER)
        wait(
            browser,
            lambda d: len(panes(d)) == 2 and panes(d)[1].get_attribute("data-state") == "ready",
        )
        room = panes(browser)[1]
        assert room.get_attribute("data-room") == "lobby"
        assert room.find_element(By.CSS_SELECTOR, ".room-name").text == "#lobby"
        roster = room.find_element(By.CSS_SELECTOR, ".roster")
        wait(browser, lambda d: roster.text == "In #lobby: demo")  # the room's agent

        # Bob joins over a plain WebSocket: Alice's page lists him.
        with connect(url.replace("http", "ws", 1) + "/agents/demo/uamp") as bob:
            bob.send(
                json.dumps(
                    {
                        "type": "session.create",
                        "uamp_version": "1.0",
                        "chat": "lobby",
                        "session": {"extensions": {"chat": {"username": "bob"}}},
                    }
                )
            )
            _room_events(bob, lambda e: e["type"] == "capabilities")
            wait(browser, lambda d: roster.text == "In #lobby: demo, bob")
            assert "bob joined" in [n.text for n in room.find_elements(By.CSS_SELECTOR, ".notice")]

            # Bob types, then speaks: Alice sees both, and the typing line clears.
            typing = room.find_element(By.CSS_SELECTOR, ".typing")
            bob.send(json.dumps({"type": "input.typing", "is_typing": True, "chat_id": "lobby"}))
            wait(browser, lambda d: typing.text == "bob is typing…")
            hello = {"type": "input.text", "text": "hi alice", "context": {"chat_id": "lobby"}}
            bob.send(json.dumps(hello))
            wait(browser, lambda d: room.find_elements(By.CSS_SELECTOR, ".msg.room"))
            said = room.find_elements(By.CSS_SELECTOR, ".msg.room")[0]
            assert said.find_element(By.CSS_SELECTOR, ".sender").text == "bob"
            assert said.find_element(By.CSS_SELECTOR, ".body").text == "hi alice"
            assert typing.text == ""

            # Alice types: Bob is told; she sends, and the room's agent answers everyone.
            box = room.find_element(By.TAG_NAME, "textarea")
            box.send_keys("@demo hello room")
            started = _room_events(bob, lambda e: e["type"] == "presence.typing")[-1]
            assert (started["username"], started["is_typing"]) == ("alice", True)
            box.send_keys(Keys.ENTER)
            heard = _room_events(
                bob,
                lambda e: e["type"] == "message.created" and e["sender"]["kind"] == "agent",
            )
            posted = [e for e in heard if e["type"] == "message.created"]
            assert [(e["sender"]["name"], e["message"]["content"]) for e in posted[:1]] == [
                ("alice", "@demo hello room")
            ]
            assert any(
                e["type"] == "presence.typing" and e["username"] == "alice" and not e["is_typing"]
                for e in heard
            )
            answer = heard[-1]["message"]["content"]
            assert "hello room" in answer
            # Alice's message as the room has it (in its order), then the answer.
            wait(browser, lambda d: len(room.find_elements(By.CSS_SELECTOR, ".msg.room")) == 3)
            _, hers, reply = room.find_elements(By.CSS_SELECTOR, ".msg.room")
            assert hers.find_element(By.CSS_SELECTOR, ".sender").text == "alice"
            assert hers.find_element(By.CSS_SELECTOR, ".body").text == "@demo hello room"
            assert [hers.get_attribute("data-seq"), reply.get_attribute("data-seq")] == ["2", "3"]
            assert reply.get_attribute("data-kind") == "agent"
            assert reply.find_element(By.CSS_SELECTOR, ".sender").text == "demo"
            assert reply.find_element(By.CSS_SELECTOR, ".body").text == answer
            # The answer is drawn once: its stream is not a second reply.
            assert room.find_elements(By.CSS_SELECTOR, ".msg.assistant, .msg.user") == []

        # Bob hangs up: Alice's page says he left.
        wait(browser, lambda d: roster.text == "In #lobby: demo")
        assert "bob left" in [n.text for n in room.find_elements(By.CSS_SELECTOR, ".notice")]
        no_page_errors(browser)
