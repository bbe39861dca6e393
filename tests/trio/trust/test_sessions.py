"""Per-session authentication of multiplexed UAMP WebSocket sessions (spec 000 section 10.3).

A real server on 127.0.0.1 and a real WebSocket client. The upgrade carries
no token; each ``session.create`` brings its own. A refused session gets
``session.error`` ``unauthorized`` and only it: the socket and the other
sessions keep working. ``session.update`` re-authenticates, never to another
principal; an expired token fails the session's next response with
``unauthorized`` and a fresh one revives it.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import trio
import trio_websocket

from uamp_trio.app import App

from .agents import CountingAgent
from .issuer import Issuer

ISSUER = Issuer()


class Socket:
    """A UAMP WebSocket client that keeps every event it reads."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []

    async def send(self, **event: Any) -> None:
        await self.ws.send_message(orjson.dumps(event).decode())

    async def create(self, session_id: str, token: str | None) -> dict[str, Any]:
        extra = {} if token is None else {"token": token}
        await self.send(
            type="session.create",
            session_id=session_id,
            uamp_version="1.0",
            session={"modalities": ["text"]},
            **extra,
        )
        return await self.until_any(("session.created", "session.error"), session_id)

    async def until_any(self, kinds: tuple[str, ...], session_id: str) -> dict[str, Any]:
        with trio.fail_after(10):
            while True:
                event = orjson.loads(await self.ws.get_message())
                self.seen.append(event)
                if event["type"] in kinds and event.get("session_id") == session_id:
                    return event

    async def ask(self, session_id: str, text: str) -> dict[str, Any]:
        """One turn; returns its terminal event."""
        await self.send(type="input.text", session_id=session_id, text=text)
        await self.send(type="response.create", session_id=session_id)
        return await self.until_any(
            ("response.done", "response.error", "response.cancelled"), session_id
        )


@pytest.fixture
def connect(serve_app: Any, app: App, nursery: trio.Nursery) -> Any:
    async def open_socket(query: str = "") -> Socket:
        server = await serve_app(app)
        ws = await trio_websocket.connect_websocket_url(
            nursery, f"ws://127.0.0.1:{server.port}/agents/demo/uamp{query}"
        )
        return Socket(ws)

    return open_socket


async def test_each_session_authenticates_and_a_refused_one_leaves_the_others_alone(
    connect: Any, agent: CountingAgent
) -> None:
    sock = await connect()
    alice = await sock.create("s-alice", ISSUER.token("alice"))
    assert alice["type"] == "session.created"
    refused = await sock.create("s-bad", "not-a-jwt")
    assert refused["type"] == "session.error"
    assert refused["error"]["code"] == "unauthorized"
    missing = await sock.create("s-none", None)
    assert missing["error"]["code"] == "unauthorized"
    bob = await sock.create("s-bob", ISSUER.token("bob"))
    assert bob["type"] == "session.created"
    # The socket and the admitted sessions keep working, each as its principal.
    assert (await sock.ask("s-alice", "hi"))["type"] == "response.done"
    assert (await sock.ask("s-bob", "hello"))["type"] == "response.done"
    # The refused session does not exist: anything sent to it is refused.
    await sock.send(type="input.text", session_id="s-bad", text="let me in")
    await sock.send(type="response.create", session_id="s-bad")
    assert (await sock.ask("s-alice", "still here"))["type"] == "response.done"
    ended = [e for e in sock.seen if e["type"] == "session.error"]
    assert ended[-1]["error"]["code"] == "session_ended"
    assert [p.id for p in agent.runs] == ["alice", "bob", "alice"]


async def test_a_token_for_another_principal_never_takes_a_session_over(
    connect: Any, agent: CountingAgent
) -> None:
    sock = await connect()
    await sock.create("s1", ISSUER.token("alice"))
    await sock.send(type="session.update", session_id="s1", token=ISSUER.token("mallory"))
    error = await sock.until_any(("session.error", "session.updated"), "s1")
    assert error["type"] == "session.error"
    assert error["error"]["code"] == "unauthorized"
    assert (await sock.ask("s1", "who am I"))["type"] == "response.done"
    # A fresh token of the same principal is accepted.
    await sock.send(type="session.update", session_id="s1", token=ISSUER.token("alice"))
    assert (await sock.until_any(("session.error", "session.updated"), "s1"))[
        "type"
    ] == "session.updated"
    assert [p.id for p in agent.runs] == ["alice"]


async def test_an_expired_token_fails_the_next_response_and_a_fresh_one_revives_it(
    connect: Any, agent: CountingAgent
) -> None:
    sock = await connect()
    now = int(time.time())
    await sock.create("s1", ISSUER.token("alice", iat=now, exp=now + 2))
    assert (await sock.ask("s1", "before"))["type"] == "response.done"
    await trio.sleep(max(0.0, now + 2.2 - time.time()))
    failed = await sock.ask("s1", "after")
    assert failed["type"] == "response.error"
    assert failed["error"]["code"] == "unauthorized"
    await sock.send(type="session.update", session_id="s1", token=ISSUER.token("alice"))
    # Pipelined: the response waits for the token check of the update before it.
    assert (await sock.ask("s1", "again"))["type"] == "response.done"
    assert [p.id for p in agent.runs] == ["alice", "alice"]


async def test_an_upgrade_token_covers_sessions_that_bring_none(
    connect: Any, agent: CountingAgent
) -> None:
    sock = await connect(f"?token={ISSUER.token('carol')}")
    assert (await sock.create("s1", None))["type"] == "session.created"
    assert (await sock.ask("s1", "hi"))["type"] == "response.done"
    # A session's own token is still verified, and then names the session's principal.
    assert (await sock.create("s2", "bad"))["error"]["code"] == "unauthorized"
    assert (await sock.create("s3", ISSUER.token("dave")))["type"] == "session.created"
    assert (await sock.ask("s3", "hi"))["type"] == "response.done"
    assert [p.id for p in agent.runs] == ["carol", "dave"]
