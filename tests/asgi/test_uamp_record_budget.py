"""What the records of a principal's left UAMP sessions keep is bounded under ``uamp_asgi``.

The scenarios of tests/trio/transports/test_uamp_record_budget.py
(tests/_support/kept_records.py) against the ASGI app's default memory log:
its records' conversations are bounded per principal and in all, and an
ended session's record keeps none. uvicorn in a thread, trio-websocket as
the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.kept_history import Kept
from tests._support.kept_records import SCENARIOS
from uamp_stores.event_log import MemoryEventLog
from uamp_trio.trust.auth import APIKeyAuthenticator

Scenario = Callable[[str, MemoryEventLog], Awaitable[None]]


@pytest.fixture(params=SCENARIOS, ids=lambda s: s.__name__)
def served(request: Any) -> Iterator[tuple[Scenario, str, MemoryEventLog]]:
    """A scenario, and the app it runs against (made outside the test's trio run)."""
    scenario = request.param
    config = uamp_asgi.Config()
    if scenario.__name__ == "another_principal_records_untouched":
        keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
        config = uamp_asgi.Config(authenticator=keys)
    app = uamp_asgi.app([Kept()], config=config)
    log = app.host.event_log
    assert isinstance(log, MemoryEventLog)
    with uvicorn_server(app) as base:
        yield scenario, base.replace("http", "ws", 1) + "/agents/kept/uamp", log


async def test_records_keep_at_most_the_budget(
    served: tuple[Scenario, str, MemoryEventLog],
) -> None:
    scenario, url, log = served
    with trio.fail_after(120):
        await scenario(url, log)
