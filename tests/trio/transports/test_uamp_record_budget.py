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

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.kept_history import BIG, Kept, turn
from tests._support.kept_records import SCENARIOS
from tests._support.wire import create_session, resume_session, send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
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


class Held(Kept):
    """:class:`Kept`, but a turn saying ``hold`` waits for :attr:`go`, then answers ``held``."""

    def __init__(self) -> None:
        self.holding = trio.Event()
        self.go = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages and request.messages[-1].text == "hold":
            self.holding.set()
            await self.go.wait()
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="held")))
            return
        await super().respond(request, emit)


async def test_a_resume_refused_while_following_leaves_the_writer_its_log(serve_app: Any) -> None:
    """A resume that follows a response running on another socket, refused when the record
    budget drops the session's conversation meanwhile, leaves that socket its log: its
    response ends there and is logged, and the session goes on."""
    agent = Held()
    app = create_app([agent])
    server = await serve_app(app)
    url = server.url.replace("http", "ws", 1) + "/agents/kept/uamp"
    log = app.stores.event_log
    assert isinstance(log, MemoryEventLog)
    log.record_bytes.max_bytes = 2 * len(BIG)  # two turns of BIG: one fits, two do not
    with trio.fail_after(60):
        async with open_ws(url) as one, open_ws(url) as two, open_ws(url) as three:
            sid = await create_session(one)
            await send(one, type="input.text", session_id=sid, text=BIG)
            await send(one, type="response.create", session_id=sid)
            after = (await until(one, "response.done"))[-1]["event_id"]
            await send(one, type="input.text", session_id=sid, text="hold")
            await send(one, type="response.create", session_id=sid)
            await agent.holding.wait()
            resumed = await resume_session(two, sid, after)  # follows the held response
            assert resumed["type"] == "session.created", resumed
            other = await create_session(three)  # its record pushes the first one's out
            assert await turn(three, other, BIG) == "ok"
            refused = await until(two, "session.error")
            assert refused[-1]["error"]["code"] == "beyond_retention", refused
            agent.go.set()
            events = await until(one, "response.done")
            assert texts(events) == "held"
            key = (ANONYMOUS.key, sid)
            assert log.writing(key)
            window = await log.window(key)
            logged = await log.read(key, window.last - 1)
            assert orjson.loads(logged[-1].data)["type"] == "response.done"
            assert await turn(one, sid, "again") == "ok"
