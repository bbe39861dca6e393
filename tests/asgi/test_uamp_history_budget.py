"""All of one principal's UAMP sessions keep one history budget under ``uamp_asgi``.

The scenarios of tests/trio/transports/test_uamp_history_budget.py
(tests/_support/kept_history.py): sessions filled near the core's
per-session bound on several sockets of one principal; the app keeps one
:class:`uamp_proto.history.SessionHistories` over all of them
(``Config.max_history_bytes_per_principal``, 16 MiB). uvicorn in a thread,
trio-websocket as the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.kept_history import (
    SCENARIOS,
    SMALL_BUDGET,
    Kept,
    budget_whoever_reports_last,
)
from uamp_proto.history import SessionHistories
from uamp_trio.trust.auth import APIKeyAuthenticator

Scenario = Callable[[str, SessionHistories], Awaitable[None]]


@pytest.fixture(params=SCENARIOS, ids=lambda s: s.__name__)
def served(request: Any) -> Iterator[tuple[Scenario, str, SessionHistories]]:
    """A scenario, and the app it runs against (made here: outside the test's trio run,
    whose loop the app's stores must not take for theirs)."""
    scenario = request.param
    config = None
    if scenario.__name__ == "another_principal_untouched":
        keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
        config = uamp_asgi.Config(authenticator=keys)
    app = uamp_asgi.app([Kept()], config=config)
    with uvicorn_server(app) as base:
        yield scenario, base.replace("http", "ws", 1) + "/agents/kept/uamp", app.host.uamp_histories


async def test_one_budget_per_principal(served: tuple[Scenario, str, SessionHistories]) -> None:
    scenario, url, histories = served
    with trio.fail_after(120):
        await scenario(url, histories)


@pytest.fixture
def small() -> Iterator[tuple[str, SessionHistories]]:
    """An app whose budget is ``SMALL_BUDGET`` (``Config``), and its base URL."""
    config = uamp_asgi.Config(max_history_bytes_per_principal=SMALL_BUDGET)
    app = uamp_asgi.app([Kept()], config=config)
    with uvicorn_server(app) as base:
        yield base, app.host.uamp_histories


@pytest.mark.parametrize("last", ["sse", "websocket"])
async def test_the_budget_is_the_configs_whoever_reports_last(
    small: tuple[str, SessionHistories], last: str
) -> None:
    """As ``uamp serve`` 's: WebSocket and HTTP+SSE sessions of one principal, reporting
    in either order, are held to ``Config.max_history_bytes_per_principal``."""
    base, histories = small
    with trio.fail_after(60):
        await budget_whoever_reports_last(base, histories, last)
