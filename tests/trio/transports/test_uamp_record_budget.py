"""What the records of a principal's left UAMP sessions keep is bounded under ``uamp serve``.

A resumable session's record keeps its conversation in the event log after
its socket is gone, where the live budget no longer counts it. The memory
log bounds the records' conversations per principal
(``MemoryEventLog.max_record_bytes_per_principal``, 16 MiB) and in all; an
ended session's record keeps none. Real sockets, the real server,
trio-websocket as the client; the scenarios are
tests/_support/kept_records.py's, run against uamp_asgi too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from tests._support.kept_history import Kept
from tests._support.kept_records import SCENARIOS
from uamp_stores.event_log import MemoryEventLog
from uamp_trio.app import create_app
from uamp_trio.trust.auth import APIKeyAuthenticator


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_records_keep_at_most_the_budget(
    serve_app: Any, scenario: Callable[[str, MemoryEventLog], Awaitable[None]]
) -> None:
    keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
    authenticated = scenario.__name__ == "another_principal_records_untouched"
    app = create_app([Kept()], authenticator=keys if authenticated else None)
    server = await serve_app(app)
    url = server.url.replace("http", "ws", 1) + "/agents/kept/uamp"
    log = app.stores.event_log
    assert isinstance(log, MemoryEventLog)
    with trio.fail_after(120):
        await scenario(url, log)
