"""A ``session.create`` the server refuses, or never answers, does not leave the client waiting.

The real server refuses a session beyond its per-connection limit with a
``session.error`` naming the proposed id; servers that name it otherwise
(``details.event_id`` of the ``session.create``, or nothing while one
session is opening) fail that opening too. A connection lost before the
``session.created`` came (a node killed or draining, 1012) is dialled again
with ``auto_resume`` and the ``session.create`` sent again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import WebSocketConnection, WebSocketRequest, serve_websocket

from tests.trio.transports.test_uamp_ws import serving
from uamp_proto import events as ev
from uamp_trio.client import ClientError, connect
from uamp_trio.demo import DemoAgent
from uamp_trio.hosting.sessions import SessionLimits

#: A guard against a hang, not a timing assertion.
TIMEOUT = 20


async def test_a_session_beyond_the_connections_limit_fails_at_once() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving([DemoAgent()], SessionLimits(max_sessions=1)) as base,
            connect(base + "/agents/demo/uamp") as client,
        ):
            first = await client.create_session()
            with pytest.raises(ClientError) as refused:
                await client.create_session()
            assert refused.value.code == "too_many_sessions"
            assert list(client.sessions) == [first.id]
            assert (await first.ask("hello")).text  # the first one goes on


Answer = Callable[[dict[str, Any]], dict[str, Any]]


def _created(create: dict[str, Any]) -> dict[str, Any]:
    sid = create["session_id"]
    return {
        "type": "session.created",
        "session_id": sid,
        "uamp_version": "1.0",
        "session": {"id": sid},
    }


def _refusal(naming: str) -> Answer:
    def refuse(create: dict[str, Any]) -> dict[str, Any]:
        error: dict[str, Any] = {"code": "too_many_sessions", "message": "no more"}
        said: dict[str, Any] = {"type": "session.error", "error": error}
        if naming == "session_id":
            said["session_id"] = create["session_id"]
        elif naming == "event_id":
            error["details"] = {"event_id": create["event_id"], "event_type": "session.create"}
        else:
            error["details"] = {"event_type": "session.create"}
        return said

    return refuse


@asynccontextmanager
async def scripted(
    handle: Callable[[WebSocketConnection, int], Awaitable[None]],
) -> AsyncIterator[str]:
    """A WebSocket server on 127.0.0.1 whose ``n`` th connection ``handle`` serves."""
    count = 0

    async def accept(request: WebSocketRequest) -> None:
        nonlocal count
        count += 1
        ws = await request.accept()
        await handle(ws, count)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, accept, "127.0.0.1", 0, None)
        yield f"ws://127.0.0.1:{server.port}/uamp"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("naming", ["session_id", "event_id", "nothing"])
async def test_a_refusal_of_a_session_create_fails_that_opening(naming: str) -> None:
    """Two sessions open on one connection: the second ``session.create`` is refused."""
    refuse = _refusal(naming)

    async def handle(ws: WebSocketConnection, n: int) -> None:
        creates = 0
        while True:
            event = orjson.loads(await ws.get_message())
            if event["type"] == "session.create":
                creates += 1
                answer = _created(event) if creates == 1 else refuse(event)
                await ws.send_message(orjson.dumps(answer).decode())

    with trio.fail_after(TIMEOUT):
        async with scripted(handle) as url, connect(url) as client:
            first = await client.create_session()
            with pytest.raises(ClientError) as refused:
                await client.create_session()
            assert refused.value.code == "too_many_sessions"
            assert isinstance(refused.value.event, ev.SessionErrorEvent)
            assert list(client.sessions) == [first.id]


async def test_a_connection_lost_before_session_created_asks_again() -> None:
    """The first connection goes away (1012) without answering; the next one answers."""
    seen: list[tuple[int, dict[str, Any]]] = []

    async def handle(ws: WebSocketConnection, n: int) -> None:
        event = orjson.loads(await ws.get_message())
        seen.append((n, event))
        if n == 1:
            await ws.aclose(1012, "draining: reconnect and resume")
            return
        await ws.send_message(orjson.dumps(_created(event)).decode())
        await trio.sleep_forever()

    with trio.fail_after(TIMEOUT):
        async with scripted(handle) as url, connect(url, auto_resume=True) as client:
            session = await client.create_session(payment_token="tok")
            assert session.created is not None and session.created.session_id == session.id
            assert client.reconnects == 1
    (n1, first), (n2, again) = seen
    assert (n1, n2) == (1, 2)
    # The same session.create again, not a resume: it never began.
    assert again["session_id"] == first["session_id"] == session.id
    assert again["payment_token"] == "tok" and "extensions" not in again
