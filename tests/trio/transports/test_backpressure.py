"""Backpressure and delta windows through the real server on loopback."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App, Server
from uamp_trio.client.websocket import _handshake
from uamp_trio.engines.ws_frames import make_engine
from uamp_trio.transports import uamp_ws

TOTAL = 100_000


class FloodAgent(TestAgent):
    """Emits as many deltas ``"<i> "`` as its input text says; counts them."""

    name = "flood"

    def __init__(self) -> None:
        self.produced = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(int(request.messages[-1].text)):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"{i} ")))
            self.produced += 1


@asynccontextmanager
async def serving(agent: FloodAgent) -> AsyncIterator[int]:
    app = App([agent])
    app.mount(uamp_ws.mount)
    server = Server(app, port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server.port
        nursery.cancel_scope.cancel()


def message(**event: Any) -> bytes:
    return orjson.dumps(event)


async def test_a_client_that_stops_reading_stalls_the_agent_then_gets_everything_in_order() -> None:
    agent = FloodAgent()
    with trio.fail_after(180):
        async with serving(agent) as port:
            sock = trio.socket.socket()
            # A small receive buffer: what the kernel holds for us stays small too.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
            await sock.connect(("127.0.0.1", port))
            stream = trio.SocketStream(sock)
            rest = await _handshake(stream, f"127.0.0.1:{port}", "/agents/flood/uamp", [], [])
            frames = make_engine(client=True, max_message_size=None)
            for m in (
                message(
                    type="session.create", uamp_version="1.0", session={"modalities": ["text"]}
                ),
                message(type="input.text", text=str(TOTAL)),
                message(type="response.create"),
            ):
                frames.text(m)
            await stream.send_all(frames.take())
            pending = frames.feed(rest) if rest else []

            # Stop reading. The agent must stall once the bounded buffers fill.
            last, still = -1, 0
            while still < 20:
                await trio.sleep(0.05)
                still = still + 1 if agent.produced == last else 0
                last = agent.produced
            stalled_at = agent.produced
            assert 0 < stalled_at < TOTAL // 10, stalled_at

            # Resume: every delta arrives, in order, then response.done.
            expected = 0
            done = None
            while done is None:
                while not pending:
                    data = bytes(await stream.receive_some(262144))
                    assert data, "the server closed the connection"
                    pending = frames.feed(data)
                for raw in pending:
                    event = orjson.loads(raw)
                    if event["type"] == "response.delta":
                        assert event["delta"]["text"] == f"{expected} "
                        expected += 1
                    elif event["type"] == "response.done":
                        done = event
                pending = []
            assert expected == TOTAL
            assert agent.produced == TOTAL
            assert done["response"]["status"] == "completed"
            await stream.aclose()


async def test_a_full_delta_window_stalls_its_session_but_not_the_neighbour() -> None:
    agent = FloodAgent()
    with trio.fail_after(60):
        async with (
            serving(agent) as port,
            open_ws(f"ws://127.0.0.1:{port}/agents/flood/uamp") as ws,
        ):
            await ws.send_message(
                message(
                    type="session.create",
                    uamp_version="1.0",
                    session={"modalities": ["text"], "extensions": {"flow": {"delta_window": 4}}},
                )
            )
            created = orjson.loads(await ws.get_message())
            assert created["session"]["config"]["extensions"]["flow"]["delta_window"] == 4
            slow = created["session_id"]
            await ws.get_message()  # capabilities
            await ws.send_message(
                message(type="session.create", uamp_version="1.0", session={"modalities": ["text"]})
            )
            fast = orjson.loads(await ws.get_message())["session_id"]
            await ws.get_message()
            for sid in (slow, fast):
                await ws.send_message(message(type="input.text", session_id=sid, text="50"))
                await ws.send_message(message(type="response.create", session_id=sid))

            seen: dict[str, list[dict[str, Any]]] = {slow: [], fast: []}
            while not any(e["type"] == "response.done" for e in seen[fast]):
                event = orjson.loads(await ws.get_message())
                seen[event["session_id"]].append(event)
            slow_deltas = [e for e in seen[slow] if e["type"] == "response.delta"]
            # The neighbour finished; the session that never acked sits at its window.
            assert len([e for e in seen[fast] if e["type"] == "response.delta"]) == 50
            assert [e["delta_seq"] for e in slow_deltas] == [0, 1, 2, 3]
            assert not any(e["type"] == "response.done" for e in seen[slow])

            # Acknowledging opens the window; the response then completes in order.
            rid = seen[slow][0]["response_id"]
            while not any(e["type"] == "response.done" for e in seen[slow]):
                last_seq = max(e["delta_seq"] for e in seen[slow] if e["type"] == "response.delta")
                await ws.send_message(
                    message(
                        type="progress",
                        session_id=slow,
                        target="response",
                        target_id=rid,
                        stage="ack",
                        delta_seq=last_seq,
                    )
                )
                event = orjson.loads(await ws.get_message())
                seen[event["session_id"]].append(event)
                while event["type"] == "response.delta" and event["delta_seq"] < last_seq + 4:
                    if event["delta_seq"] == 49:
                        break
                    event = orjson.loads(await ws.get_message())
                    seen[event["session_id"]].append(event)
            seqs = [e["delta_seq"] for e in seen[slow] if e["type"] == "response.delta"]
            assert seqs == list(range(50))
            texts = "".join(e["delta"]["text"] for e in seen[slow] if e["type"] == "response.delta")
            assert texts == "".join(f"{i} " for i in range(50))
