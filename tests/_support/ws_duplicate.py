"""Two UAMP WebSocket connections naming one session id, as both servers' tests drive them.

A session's event log is keyed by ``(principal, session id)``, not by
connection, and a new session begins its log afresh. The scenarios here
run against ``uamp serve`` (tests/trio/transports/test_uamp_ws_duplicate.py)
and uamp_asgi under uvicorn (tests/asgi/test_uamp_ws_duplicate.py), whose
agent says back the last thing it was told, keeps every request in
``requests`` and, told ``hold``, waits for its :class:`Hold` first. Callers
authenticate with an API key (:data:`KEYS`) in the upgrade's
``Authorization`` header.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import httpx
import orjson
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from uamp_proto.responder import TurnRequest
from uamp_stores.event_log import EventLog

from .wire import CREATE, Event, create_session, post, recv, resume_session, send, texts, until

#: The API keys the servers accept: ``(principal, key)``.
KEYS = [("alice", "key-alice"), ("bob", "key-bob")]
ALICE, BOB = ("api_key", "alice"), ("api_key", "bob")
SID = "sess_shared"


class Hold:
    """Holds a response until the test lets it go (the agent may run in another thread)."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.let_go = threading.Event()

    async def wait(self) -> None:
        """Called by the agent: returns once the test lets go (on Trio or asyncio)."""
        self.held.set()
        while not self.let_go.is_set():
            await anyio.sleep(0.01)


@attrs.frozen
class Served:
    """A server under test: its UAMP WebSocket URL (``.../agents/echo/uamp``), its event
    log, its agent's requests and its agent's :class:`Hold`."""

    url: str
    log: EventLog
    requests: list[TurnRequest]
    hold: Hold


@asynccontextmanager
async def connect(url: str, key: str = "key-alice") -> AsyncIterator[WebSocketConnection]:
    """A UAMP WebSocket to ``url`` as the principal of API key ``key``."""
    headers = [(b"authorization", f"Bearer {key}".encode())]
    async with open_websocket_url(url, extra_headers=headers) as ws:
        yield ws


async def logged(log: EventLog, sid: str, principal: tuple[str, str] = ALICE) -> list[str]:
    """The types of the events in ``principal`` 's log of ``sid``, oldest first."""
    return [orjson.loads(e.data)["type"] for e in await log.read((principal, sid), 0)]


async def released(log: EventLog, sid: str, principal: tuple[str, str] = ALICE) -> None:
    """Wait until no connection of the server's process writes that log any more."""
    while log.writing((principal, sid)):
        await trio.sleep(0.01)


async def turn(ws: WebSocketConnection, sid: str, text: str) -> list[Event]:
    """One turn of ``sid``: ``text`` asked, the events up to ``response.done``."""
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)
    return await until(ws, "response.done")


async def create(ws: WebSocketConnection, sid: str, **extra: Any) -> list[Event]:
    """A fresh ``session.create`` naming ``sid``: its answer, up to ``capabilities`` (opened)
    or the ``session.error`` that refuses it."""
    await send(
        ws, type="session.create", uamp_version="1.0", session_id=sid,
        session={"modalities": ["text"]}, **extra,
    )  # fmt: skip
    first = await recv(ws)
    return [first] if first["type"] == "session.error" else [first, await recv(ws)]


def is_duplicate(answer: list[Event], sid: str) -> None:
    """``answer`` refuses ``sid`` 's opening as a duplicate, scoped to it (the connection
    goes on)."""
    assert [e["type"] for e in answer] == ["session.error"], answer
    error = answer[0]
    assert error["session_id"] == sid
    assert error["error"]["code"] == "duplicate_session"
    assert error["error"]["details"] == {"field": "session_id"}


async def live_session_is_kept(served: Served) -> None:
    """A create naming a session live on another connection is refused; the live session,
    its log and its history stay, and the refused connection goes on."""
    url, log = served.url, served.log
    async with connect(url) as first, connect(url) as second:
        await create_session(first, session_id=SID)
        await turn(first, SID, "one")
        before = await logged(log, SID)
        assert before[:2] == ["session.created", "capabilities"], before
        # The second connection multiplexes: a session of its own first.
        own = await create_session(second, session_id="sess_own")
        is_duplicate(await create(second, SID), SID)
        assert await logged(log, SID) == before  # not begun afresh
        # The refused connection goes on, its other sessions too.
        assert texts(await turn(second, own, "mine")) == "mine"
        assert await create_session(second, session_id="sess_next") == "sess_next"
        # The live session is still logged, and resumable with its history.
        done = await turn(first, SID, "two")
        after = await logged(log, SID)
        assert after[: len(before)] == before and after.count("response.done") == 2
    await released(log, SID)
    async with connect(url) as third:
        resumed = await resume_session(third, SID, done[-1]["event_id"])
        assert resumed["extensions"] == {"resumed": True}, resumed
        assert texts(await turn(third, SID, "three")) == "three"
    told = [(m.role, m.text) for m in served.requests[-1].messages]
    assert told == [
        ("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two"),
        ("user", "three"),
    ]  # fmt: skip


async def reopened_once_let_go(served: Served) -> None:
    """As before the fix: once the connection is gone and its log let go, a create (not a
    resume) naming the session opens a new one, its log begun afresh."""
    url, log = served.url, served.log
    async with connect(url) as first:
        await create_session(first, session_id=SID)
        await turn(first, SID, "one")
    await released(log, SID)
    async with connect(url) as second:
        created, _ = await create(second, SID)
        assert created["type"] == "session.created" and "extensions" not in created
        assert await logged(log, SID) == ["session.created", "capabilities"]
        assert texts(await turn(second, SID, "again")) == "again"


async def another_principals_id_is_unused(served: Served) -> None:
    """Bob naming Alice's live session opens his own, answered as for an unused id; neither
    log moves."""
    url, log = served.url, served.log
    async with connect(url) as alice, connect(url, "key-bob") as bob:
        await create_session(alice, session_id=SID)
        await turn(alice, SID, "one")
        before = await logged(log, SID)
        theirs = await create(bob, SID)
        unused = await create(bob, "sess_unused")
        assert [e["type"] for e in theirs] == [e["type"] for e in unused]
        assert [e["type"] for e in theirs] == ["session.created", "capabilities"]
        assert texts(await turn(bob, SID, "bob's")) == "bob's"
        assert await logged(log, SID) == before
        await turn(alice, SID, "two")
        assert (await logged(log, SID)).count("response.done") == 2
        assert (await logged(log, SID, BOB)).count("response.done") == 1


async def lingering_session_is_kept(served: Served) -> None:
    """A session whose connection left while its response runs on into the log is still
    live: a create naming it is refused until the response ends and the log is let go."""
    url, log, hold = served.url, served.log, served.hold
    async with connect(url) as first:
        await create_session(first, session_id=SID)
        await send(first, type="input.text", session_id=SID, text="hold")
        await send(first, type="response.create", session_id=SID)
        await until(first, "response.created")
        while not hold.held.is_set():
            await trio.sleep(0.01)
    try:
        async with connect(url) as second:
            is_duplicate(await create(second, SID), SID)
    finally:
        hold.let_go.set()
    await released(log, SID)
    kinds = await logged(log, SID)
    assert kinds[:2] == ["session.created", "capabilities"] and kinds[-1] == "response.done"
    async with connect(url) as third:
        created, _ = await create(third, SID)
        assert created["type"] == "session.created"


async def sse_session_is_kept(served: Served) -> None:
    """The log is the principal's, whichever transport writes it: a WebSocket create naming
    the caller's live HTTP+SSE session is a duplicate too."""
    url, log = served.url, served.log
    base = url.replace("ws://", "http://", 1).removesuffix("/uamp")
    headers = {"authorization": "Bearer key-alice"}
    async with httpx.AsyncClient(base_url=base, headers=headers) as http:
        opened = await post(http, {**CREATE, "session_id": SID}, path="/events")
        assert opened.status_code == 200, opened.text
        before = await logged(log, SID)
        assert before[:2] == ["session.created", "capabilities"], before
        async with connect(url) as ws:
            is_duplicate(await create(ws, SID), SID)
        assert await logged(log, SID) == before
        ended = await post(http, {"type": "session.end"}, SID, path="/events")
        assert ended.status_code == 200, ended.text


#: Every scenario, as the servers' tests run them (parametrised).
SCENARIOS: list[Callable[[Served], Awaitable[None]]] = [
    live_session_is_kept,
    lingering_session_is_kept,
    reopened_once_let_go,
    another_principals_id_is_unused,
    sse_session_is_kept,
]
