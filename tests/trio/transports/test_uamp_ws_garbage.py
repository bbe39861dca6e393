"""A finished UAMP WebSocket response leaves no garbage cycle behind.

A response's request holds the whole conversation. Held in a reference cycle
(the request, its interrupt port, the port's ``emit``, the runner, the
request again) it outlived its response until the garbage collector found
it, and each collection walked every such conversation: a response cost
more the longer its session was (docs/performance.md, "Time to first delta
on WebSocket"). With the collector off, the request must be freed as soon as
the response ends, on every way a response ends.
"""

from __future__ import annotations

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.garbage import Keeps, collector_off, question
from tests._support.wire import create_session, send, serving, until
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio import App
from uamp_trio.hosting.interrupts import Interrupts
from uamp_trio.transports import uamp_ws

TIMEOUT = 30


@pytest.mark.parametrize(
    ("said", "ends_with"),
    [("hello", "response.done"), ("fail", "response.error"), ("ask", "response.done")],
)
async def test_a_finished_responses_request_is_freed_without_the_collector(
    said: str, ends_with: str
) -> None:
    agent = Keeps()
    app = App([agent])
    app.mount(uamp_ws.mount)
    with collector_off(), trio.fail_after(TIMEOUT):
        async with (
            serving(app) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/keeps/uamp") as ws,
        ):
            sid = await create_session(ws)
            for _ in range(3):
                await send(ws, type="input.text", session_id=sid, text=said)
                await send(ws, type="response.create", session_id=sid)
                got = await until(ws, ends_with)
                assert got[-1]["type"] == ends_with
                await trio.sleep(0.01)  # the worker finishes its step
            assert len(agent.requests) == 3
            assert [ref() for ref in agent.requests] == [None, None, None]
    assert len({id(port) for port in agent.ports}) == 3


async def test_asking_through_the_port_of_a_finished_response_is_refused() -> None:
    host = Interrupts()
    request = TurnRequest(agent="a", session_id="s", response_id="r", messages=[])
    port = host.port(request, supported=True)

    async def emit(event: ev.Event) -> None:
        raise AssertionError("nothing is emitted for a finished response")

    port.emit = emit
    port.close()
    with pytest.raises(RuntimeError, match="has ended"):
        await port.ask(question())
    # A client that cannot answer still gets the policy's answer, as before.
    assert (await host.port(request, supported=False).ask(question())).approved is False
