"""The busy policy on the Vercel AI SDK stream, with the SDK's own client (npm ``ai`` 7.x).

A chat id is the conversation. ``DefaultChatTransport`` posts a second
message while the chat's first answer still runs: ``reject`` is ``409``
(code ``conversation_busy``: the SDK raises it), ``enqueue`` streams the
second answer once the first has ended, ``interrupt`` ends the first answer
(``abort``, ``finish``) and answers the second at once, ``rollback`` too and
the first answer's ``finish`` says ``messageMetadata["uamp.on_busy"] ==
"rollback"`` (the chat's messages are the client's: it drops the turn). The
policy is the server's (``on_busy``) or the request's (``"uamp.on_busy"`` in
the body, what ``DefaultChatTransport(body=...)`` adds); the request's runs
against uamp_asgi too. Before the policy, a
new POST always superseded the running answer (interrupt).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests._support.busy import Holder, until
from tests._support.npm import install_client, run_node
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "ai_sdk_client"


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "ai-sdk-client", script="busy.mjs")


def _post(client_dir: Path, url: str, chat: str, text: str, **body: Any) -> dict[str, Any]:
    args = {"chatId": chat, "text": text, "body": body}
    got = run_node(client_dir, url, json.dumps(args), script="busy.mjs")
    assert got["warnings"] == [] and got["errors"] == [], got
    return got


class _Post(threading.Thread):
    """One message posted by the SDK in a thread of its own."""

    def __init__(self, client_dir: Path, url: str, text: str, **body: Any) -> None:
        super().__init__(daemon=True)
        self.args = (client_dir, url, "chat-1", text)
        self.body = body
        self.got: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.got = _post(*self.args, **self.body)
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self) -> dict[str, Any]:
        self.join(60)
        assert not self.is_alive(), "the post did not end"
        if self.error is not None:
            raise self.error
        assert self.got is not None
        return self.got


def _text(got: dict[str, Any]) -> str:
    return "".join(c["delta"] for c in got["chunks"] if c["type"] == "text-delta")


def _finish(got: dict[str, Any]) -> dict[str, Any]:
    [finish] = [c for c in got["chunks"] if c["type"] == "finish"]
    return finish  # type: ignore[no-any-return]


def _types(got: dict[str, Any]) -> list[str]:
    return [c["type"] for c in got["chunks"]]


#: policy -> (the second message's answer, the first answer stopped, its finish metadata)
CASES = {
    "reject": (None, False, None),
    "enqueue": ("echo two", False, None),
    "interrupt": ("echo two", True, None),
    "rollback": ("echo two", True, {"uamp.on_busy": "rollback"}),
}


@contextmanager
def _server(thread_server: Any, agent: Holder, on: str, default: str | None) -> Iterator[str]:
    """``agent`` 's ``/ai-sdk`` under ``uamp serve`` (busy by default as ``default``),
    or uamp_asgi under uvicorn (``enqueue`` by default, as ``uamp serve``'s)."""
    if on == "uamp serve":
        yield f"{thread_server(create_app([agent]), on_busy=default).url}/agents/holder/ai-sdk"
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    with uvicorn_server(uamp_asgi.app([agent])) as url:
        yield f"{url}/agents/holder/ai-sdk"


@pytest.mark.parametrize(
    ("how", "on"),
    [("server", "uamp serve"), ("body", "uamp serve"), ("body", "uamp_asgi")],
)
@pytest.mark.parametrize("policy", list(CASES))
def test_a_second_message_on_a_busy_chat(
    client_dir: Path, thread_server: Any, policy: str, how: str, on: str
) -> None:
    second_says, stopped, marked = CASES[policy]
    default = policy if how == "server" else ("reject" if policy == "enqueue" else "enqueue")
    agent = Holder()
    with _server(thread_server, agent, on, default) as url:
        _second_message(client_dir, agent, url, policy, how, second_says, stopped, marked)


def _second_message(
    client_dir: Path,
    agent: Holder,
    url: str,
    policy: str,
    how: str,
    second_says: str | None,
    stopped: bool,
    marked: dict[str, str] | None,
) -> None:
    body = {"uamp.on_busy": policy} if how == "body" else {}
    first = _Post(client_dir, url, "hold one")
    until(lambda: agent.started == ["hold one"], timeout=30)
    if policy == "enqueue":
        second = _Post(client_dir, url, "two", **body)
        # Another chat is never held; the server answered it while "two" waits.
        assert _text(_post(client_dir, url, "chat-2", "elsewhere")) == "echo elsewhere"
        assert agent.started == ["hold one", "elsewhere"]
        agent.release.set()
        got = second.result()
    else:
        got = _post(client_dir, url, "chat-1", "two", **body)
        agent.release.set()
    old = first.result()
    assert _text(old) == "echo hold one"  # what it said before anything happened to it
    if second_says is None:
        assert got["refused"] is not None and "conversation_busy" in got["refused"]
        assert got["chunks"] == []
        assert agent.started == ["hold one"]
    else:
        assert got["refused"] is None
        assert _text(got) == second_says
        assert _finish(got)["finishReason"] == "stop"
        assert got["message"]["role"] == "assistant"
    assert ("abort" in _types(old)) is stopped
    assert agent.cancelled == (["hold one"] if stopped else [])
    meta = _finish(old).get("messageMetadata") or {}
    assert {k: v for k, v in meta.items() if k == "uamp.on_busy"} == (marked or {})


def test_a_bad_policy_is_refused_400(client_dir: Path, thread_server: Any) -> None:
    agent = Holder()
    server = thread_server(create_app([agent]))
    got = _post(
        client_dir, f"{server.url}/agents/holder/ai-sdk", "c", "x", **{"uamp.on_busy": "later"}
    )
    assert got["refused"] is not None and "invalid_policy" in got["refused"]
    assert agent.started == []
