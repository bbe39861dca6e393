"""Clients for the JSON wire protocols as the server tests speak them.

A server on 127.0.0.1:0 for the length of a block (:func:`serving`); JSON
events over a WebSocket (:func:`send`, :func:`recv`, :func:`until`,
:func:`create_session` for UAMP's handshake); UAMP over HTTP+SSE
(:func:`post` events, :func:`open_stream` for ``GET .../events/stream``).
Events are plain dicts, as they crossed the socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import trio
from trio_websocket import WebSocketConnection

from uamp_proto.sse import SSEParser
from uamp_trio.app import App
from uamp_trio.engines.server import Server

Event = dict[str, Any]

#: ``session.create`` for a text session (HTTP+SSE bodies; the WebSocket uses create_session).
CREATE: Event = {
    "type": "session.create",
    "uamp_version": "1.0",
    "session": {"modalities": ["text"]},
}


@asynccontextmanager
async def serving(app: App, **config: Any) -> AsyncIterator[Server]:
    """A real server for ``app`` on 127.0.0.1:0 (``config``: ServerConfig fields), stopped
    when the block ends."""
    server = Server(app, port=0, shutdown_grace=0.5, **config)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


async def send(ws: WebSocketConnection, **event: Any) -> None:
    """Send one JSON event built from the keyword arguments."""
    await ws.send_message(orjson.dumps(event).decode())


async def recv(ws: WebSocketConnection) -> Event:
    """The next JSON event."""
    return orjson.loads(await ws.get_message())  # type: ignore[no-any-return]


async def until(ws: WebSocketConnection, etype: str) -> list[Event]:
    """Every event up to and including the first of type ``etype``."""
    out = []
    while True:
        event = await recv(ws)
        out.append(event)
        if event["type"] == etype:
            return out


async def create_session(ws: WebSocketConnection, **extra: Any) -> str:
    """UAMP's handshake for a text session; ``extra`` adds to ``session.create``
    (``session=`` to its session config). Checks the replies; returns the session id."""
    await send(
        ws,
        type="session.create",
        uamp_version="1.0",
        session={"modalities": ["text"], **extra.pop("session", {})},
        **extra,
    )
    created = await recv(ws)
    assert created["type"] == "session.created", created
    caps = await recv(ws)
    assert caps["type"] == "capabilities" and caps["session_id"] == created["session_id"]
    return str(created["session_id"])


async def resume_session(
    ws: WebSocketConnection, session_id: str, after: str, **extra: Any
) -> Event:
    """Ask to resume ``session_id`` after event ``after`` (extensions.resume_from); the reply."""
    await send(
        ws,
        type="session.create",
        uamp_version="1.0",
        session={"modalities": ["text"]},
        session_id=session_id,
        extensions={"resume_from": after},
        **extra,
    )
    return await recv(ws)


def texts(events: list[Event]) -> str:
    """The text of the ``response.delta`` events, joined."""
    return "".join(e["delta"]["text"] for e in events if e["type"] == "response.delta")


async def post(
    http: httpx.AsyncClient, body: Any, sid: str | None = None, path: str = "/events"
) -> httpx.Response:
    """POST one event (or a JSON array of them) to a UAMP HTTP+SSE endpoint."""
    headers = {"x-session-id": sid} if sid else {}
    return await http.post(path, content=orjson.dumps(body), headers=headers)


class SSEStream:
    """The UAMP events of an open ``GET .../events/stream`` response, one at a time."""

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.parser = SSEParser()
        self.queue: list[Event] = []
        #: The SSE ``id:`` of every event read so far.
        self.ids: list[str | None] = []
        self.chunks = resp.aiter_raw()

    async def next(self) -> Event:
        """The next event."""
        while not self.queue:
            for sse in self.parser.feed(await self.chunks.__anext__()):
                self.queue.append(orjson.loads(sse.data))
                self.ids.append(sse.id)
        return self.queue.pop(0)

    async def until(self, etype: str) -> list[Event]:
        """Every event up to and including the first of type ``etype``."""
        out = []
        while True:
            out.append(await self.next())
            if out[-1]["type"] == etype:
                return out


@asynccontextmanager
async def open_stream(
    http: httpx.AsyncClient, sid: str, path: str = "/events/stream", **headers: str
) -> AsyncIterator[SSEStream]:
    """``GET path`` for session ``sid``; checks it is an event stream."""
    async with http.stream(
        "GET", path, headers={"x-session-id": sid, **headers}, timeout=httpx.Timeout(10, read=None)
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "text/event-stream"
        yield SSEStream(resp)


async def ask(ws: WebSocketConnection, text: str, **input_extra: Any) -> None:
    """Send ``input.text`` (with ``input_extra``) and ``response.create``."""
    await send(ws, type="input.text", text=text, **input_extra)
    await send(ws, type="response.create")
