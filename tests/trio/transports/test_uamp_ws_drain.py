"""A graceful shutdown closes UAMP WebSockets with 1012 once their responses have ended."""

from __future__ import annotations

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.wire import create_session, recv, send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.engines.server import Server
from uamp_trio.engines.ws_frames import CLOSE_SERVICE_RESTART
from uamp_trio.transports import uamp_ws

TIMEOUT = 15


class Gated(TestAgent):
    """Says ``started``, waits for :attr:`gate`, then says ``finished``."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.started = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="started ")))
        self.started.set()
        await self.gate.wait()
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="finished")))


async def _closed_with(ws: object) -> int:
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await recv(ws)  # type: ignore[arg-type]
    return int(info.value.reason.code)


@pytest.mark.parametrize("busy", [False, True])
async def test_a_draining_server_closes_websockets_with_1012_after_their_responses(
    busy: bool,
) -> None:
    agent = Gated()
    app = App([agent])
    app.mount(uamp_ws.mount)
    server = Server(app, port=0, shutdown_grace=10)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            url = f"ws://127.0.0.1:{server.port}/agents/gated/uamp"
            async with open_ws(url) as ws:
                first = await create_session(ws)
                await create_session(ws)  # a second, idle session on the same socket
                if busy:
                    await send(ws, type="input.text", text="go", session_id=first)
                    await send(ws, type="response.create", session_id=first)
                    await agent.started.wait()
                server.shutdown()
                if busy:
                    # The socket stays open for the running response ...
                    with trio.move_on_after(0.3):
                        await recv(ws)  # (its created/delta events)
                    async with httpx.AsyncClient() as http:
                        with pytest.raises(httpx.ConnectError):
                            await http.get(f"http://127.0.0.1:{server.port}/readyz")
                    agent.gate.set()
                    events = await until(ws, "response.done")
                    assert "finished" in texts(events)
                # ... and then closes with "service restart": reconnect and resume elsewhere.
                assert await _closed_with(ws) == CLOSE_SERVICE_RESTART
            nursery.cancel_scope.cancel()
