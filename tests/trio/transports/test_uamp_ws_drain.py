"""A graceful shutdown closes UAMP WebSockets with 1012 once their responses have ended."""

from __future__ import annotations

import os

import httpx
import orjson
import pytest
import trio
from trio_websocket import ConnectionClosed
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.raw import receive_or_eof
from tests._support.wire import create_session, recv, send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.client.uamp import open_websocket
from uamp_trio.engines.server import Server
from uamp_trio.engines.ws_frames import (
    CLOSE_NORMAL,
    CLOSE_SERVICE_RESTART,
    WebSocketClosed,
    make_engine,
)
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


def _masked(payload: bytes, opcode: int = 0x1) -> bytes:
    """One client frame (masked, as RFC 6455 asks of a client), written by hand."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x80 | opcode])
    head += bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_a_turn_that_crosses_the_go_away_is_not_acted_on() -> None:
    # The client sent its turn before it read the 1012: the server has said
    # it closes, so the turn is not run there. The session's record does not
    # name it, and the resuming client sends it again elsewhere (last_request).
    agent = Gated()
    agent.gate.set()  # a turn that ran would run to its end within the drain
    app = App([agent])
    app.mount(uamp_ws.mount)
    server = Server(app, port=0, shutdown_grace=10)
    served = trio.Event()

    async def serve(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await server.serve(task_status=task_status)
        served.set()

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            url = f"ws://127.0.0.1:{server.port}/agents/gated/uamp"
            stream, data = await open_websocket(url)
            frames = make_engine(client=True, max_message_size=None)
            create = {"type": "session.create", "uamp_version": "1.0", "session_id": "s1"}
            await stream.send_all(_masked(orjson.dumps({**create, "session": {}})))
            seen = [orjson.loads(m)["type"] for m in frames.feed(data)] if data else []
            while "capabilities" not in seen:
                seen += [orjson.loads(m)["type"] for m in frames.feed(await stream.receive_some())]
            server.shutdown()
            with pytest.raises(WebSocketClosed) as closed:
                while True:
                    frames.feed(await receive_or_eof(stream))
            for event in (
                {"type": "input.text", "session_id": "s1", "text": "go"},
                {"type": "response.create", "session_id": "s1", "event_id": "turn-1"},
            ):
                await stream.send_all(_masked(orjson.dumps(event)))
            await stream.send_all(_masked(CLOSE_NORMAL.to_bytes(2, "big"), opcode=0x8))
            rest = b""
            while data := await receive_or_eof(stream):
                rest += data
            await served.wait()  # drained: whatever it had started has ended
            await stream.aclose()
            record = await app.stores.event_log.load((ANONYMOUS.key, "s1"))
    assert closed.value.code == CLOSE_SERVICE_RESTART
    assert not agent.started.is_set()
    assert b"response.created" not in rest
    # What a resume elsewhere is told of: not this turn, so it is sent again.
    assert record.request is None and record.running is None
