"""UAMP WebSocket under ``uamp serve``: a ``session.create`` naming a live session leaves it alone.

A fresh ``session.create`` on a second connection of the same principal that
names a session live on the first is refused (``session.error``
``duplicate_session``) before it begins anything: begun, it emptied the live
session's log and took it over, so that session's history was no longer in
its log. The scenarios (tests/_support/ws_duplicate.py, one test each) run
against uamp_asgi too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
from trio_websocket import open_websocket_url

from tests._support import wire, ws_duplicate
from tests._support.agents import Recording
from tests._support.ws_duplicate import SID, Served, create, is_duplicate, logged, turn
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.transports import uamp_ws
from uamp_trio.transports.sse_events import SSEEventsTransport
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20


class Echo(Recording):
    """Says back the last thing it was told (``hold``: once :attr:`hold` lets go)."""

    name = "echo"

    def __init__(self) -> None:
        super().__init__()
        self.hold = ws_duplicate.Hold()

    async def answer(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages[-1].text == "hold":
            await self.hold.wait()
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=request.messages[-1].text)))


@asynccontextmanager
async def serving() -> AsyncIterator[Served]:
    """``uamp serve`` (UAMP WebSocket, HTTP+SSE) with :class:`Echo`, API keys
    :data:`ws_duplicate.KEYS` and its memory log."""
    agent = Echo()
    app = App([agent], authenticator=APIKeyAuthenticator(ws_duplicate.KEYS))
    app.mount(uamp_ws.mount)
    app.mount(SSEEventsTransport(app).mount)
    async with wire.serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/echo/uamp"
        yield Served(url, app.stores.event_log, agent.requests, agent.hold)


@pytest.mark.parametrize("scenario", ws_duplicate.SCENARIOS, ids=lambda f: f.__name__)
async def test_two_connections_naming_one_session(
    scenario: Callable[[Served], Awaitable[None]],
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as served:
            await scenario(served)


async def test_a_session_token_naming_a_live_session_is_a_duplicate() -> None:
    """A ``session.create`` that brings its own token (verified before the session opens,
    on a connection that presented none) is refused the same way."""
    with trio.fail_after(TIMEOUT):
        async with (
            serving() as served,
            ws_duplicate.connect(served.url) as first,
            open_websocket_url(served.url) as second,
        ):
            await wire.create_session(first, session_id=SID)
            await turn(first, SID, "one")
            before = await logged(served.log, SID)
            is_duplicate(await create(second, SID, token="key-alice"), SID)
            assert await logged(served.log, SID) == before
            await turn(first, SID, "two")
            assert (await logged(served.log, SID)).count("response.done") == 2
