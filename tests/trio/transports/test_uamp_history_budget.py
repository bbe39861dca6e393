"""All of one principal's UAMP sessions keep one history budget under ``uamp serve``.

Each session's kept conversation is bounded in the core (4 MiB), but one
principal may hold 64 sessions per connection on as many connections as the
server admits. The app keeps one :class:`uamp_proto.history.SessionHistories`
over all of them (``ServerConfig.max_history_bytes_per_principal``, 16 MiB):
past it, that principal's least recently used sessions start afresh, never
another principal's; ended sessions and closed connections give their bytes
back. Real sockets, the real server, trio-websocket as the client; the
scenarios are tests/_support/kept_history.py's, run against uamp_asgi too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from tests._support.kept_history import (
    SCENARIOS,
    SMALL_BUDGET,
    Kept,
    budget_whoever_reports_last,
)
from uamp_proto.history import SessionHistories
from uamp_trio.app import create_app
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.transports import sse_events, uamp_ws
from uamp_trio.trust.auth import APIKeyAuthenticator


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_one_budget_per_principal(
    serve_app: Any, scenario: Callable[[str, SessionHistories], Awaitable[None]]
) -> None:
    keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
    authenticated = scenario.__name__ == "another_principal_untouched"
    app = create_app([Kept()], authenticator=keys if authenticated else None)
    server = await serve_app(app)
    url = server.url.replace("http", "ws", 1) + "/agents/kept/uamp"
    with trio.fail_after(120):
        await scenario(url, app.uamp_histories)


def _ws_own_limits(app: Any) -> None:
    """The UAMP WebSocket mounted with limits of its own (none of them the budget's)."""
    limits = SessionLimits(max_sessions=8, outbox_size=16, session_outbox_size=8)
    uamp_ws.mount(app, uamp_ws.UampWebSocketConfig(limits=limits))


@pytest.mark.parametrize("last", ["sse", "websocket"])
async def test_the_budget_is_the_servers_whoever_reports_last(serve_app: Any, last: str) -> None:
    """The WebSocket and HTTP+SSE connections, each with its own limits, cannot set the
    budget: it is ``ServerConfig.max_history_bytes_per_principal`` whichever reports
    last (a connection's settings once set it for every connection of the app)."""
    app = create_app([Kept()], transports=[_ws_own_limits, sse_events.mount])
    server = await serve_app(app, max_history_bytes_per_principal=SMALL_BUDGET)
    with trio.fail_after(60):
        await budget_whoever_reports_last(server.url, app.uamp_histories, last)
