"""uamp_asgi's UAMP WebSocket: a ``session.create`` naming a live session leaves it alone.

A fresh ``session.create`` on a second connection of the same principal that
names a session live on the first is refused (``session.error``
``duplicate_session``) before it begins anything: begun, it emptied the live
session's log and took it over, so that session's history was no longer in
its log. uvicorn serves the app; the scenarios (tests/_support/ws_duplicate.py,
one test each) run against ``uamp serve`` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import trio

import uamp_asgi
from tests._support import ws_duplicate
from tests._support.asgi import uvicorn_server
from tests._support.ws_duplicate import Served
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 30


class Echo:
    """Says back the last thing it was told (``hold``: once :attr:`hold` lets go); keeps
    every request in :attr:`requests`."""

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []
        self.hold = ws_duplicate.Hold()

    async def __call__(self, turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
        self.requests.append(turn)
        if turn.messages[-1].text == "hold":
            await self.hold.wait()
        yield turn.messages[-1].text


@pytest.fixture
def served() -> Iterator[Served]:
    """uamp_asgi with :class:`Echo`, API keys :data:`ws_duplicate.KEYS` and its memory log.

    Built outside Trio: the app's anyio primitives belong to uvicorn's asyncio loop.
    """
    agent = Echo()
    config = uamp_asgi.Config(authenticator=APIKeyAuthenticator(ws_duplicate.KEYS))
    app = uamp_asgi.app(function_agent(agent, name="echo"), config=config)
    with uvicorn_server(app) as base:
        url = base.replace("http://", "ws://") + "/agents/echo/uamp"
        yield Served(url, app.host.event_log, agent.requests, agent.hold)


@pytest.mark.parametrize("scenario", ws_duplicate.SCENARIOS, ids=lambda f: f.__name__)
async def test_two_connections_naming_one_session(
    served: Served, scenario: Callable[[Served], Awaitable[None]]
) -> None:
    with trio.fail_after(TIMEOUT):
        await scenario(served)
