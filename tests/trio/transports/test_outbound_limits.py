"""Outbound limits on the ACP and Realtime WebSockets against peers that do not read (issue 14).

The UAMP WebSocket queues events in its Outbox (tests/trio/engines/
test_hardening_limits.py); ACP answers each payload in a task of its own and
streams a prompt's updates through the turn's channel, and Realtime writes
each event from the agent's own ``emit``. These tests hold those paths to the
server's ``max_queued_events`` (payloads being answered per connection),
``max_session_queued_events`` (a session's queued updates) and
``websocket_send_timeout`` (a peer that does not read is dropped), on real
sockets with trio-websocket as the client; its queue of one unread message
makes it a peer that stops reading.
"""

from __future__ import annotations

import json
from typing import Any

import trio
import trio_websocket

from tests._support.agents import TestAgent
from tests._support.wire import recv, send
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import App
from uamp_trio.transports import acp, realtime

TIMEOUT = 20


class Flood(TestAgent):
    """Says ``count`` deltas of 1 KiB, counting how many its ``emit`` let through."""

    name = "flood"

    def __init__(self, count: int = 100_000, hold: bool = False) -> None:
        self.count = count
        self.hold = hold
        self.emitted = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for _ in range(self.count):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x" * 1024)))
            self.emitted += 1
        if self.hold:
            await trio.sleep_forever()


def tasks_named(fragment: str) -> int:
    """How many tasks of this trio run have ``fragment`` in their name."""
    found = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        found += fragment in task.name
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


async def settle(measure: Any, seconds: float = 0.5, least: int = 0) -> Any:
    """``measure()`` once it is at least ``least`` and has not changed for ``seconds``.

    ``least`` keeps a loaded machine's slow start (nothing answered yet, and
    nothing for half a second) from passing for the settled state.
    """
    last = measure()
    while True:
        await trio.sleep(seconds)
        now = measure()
        if now == last and now >= least:
            return now
        last = now


async def test_acp_payloads_answered_at_once_are_capped_per_connection(serve_app: Any) -> None:
    app = App([Flood()])
    acp.mount(app)
    server = await serve_app(app, max_queued_events=4, websocket_send_timeout=30)
    url = f"ws://127.0.0.1:{server.port}/agents/flood/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url, message_queue_size=1) as ws:
            # Each answer echoes its 16 KiB id: a few megabytes of answers
            # nobody reads fill the socket buffers, and the answering waits.
            big = "i" * 16384
            stop, flooded = trio.Event(), trio.Event()
            sent = 0
            answers: list[dict[str, Any]] = []

            async def flood() -> None:
                # Stopped between messages, never inside one: a frame cut
                # short would leave the server waiting for its rest, and the
                # close handshake at the end with it.
                nonlocal sent
                while sent < 600 and not stop.is_set():
                    call = {"jsonrpc": "2.0", "id": f"{big}{sent}", "method": "initialize"}
                    await ws.send_message(json.dumps(call))
                    sent += 1
                flooded.set()

            async def read() -> None:
                while True:
                    answers.append(json.loads(await ws.get_message()))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                answering = await settle(
                    lambda: tasks_named("serve_payloads.<locals>.answer"), least=1
                )
                stop.set()
                # Reading again, the server reads again: the flood's last
                # message goes out, and every payload is answered.
                nursery.start_soon(read)
                await flooded.wait()
                while len(answers) < sent:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            # Without a cap the server kept reading: one task (and one reply)
            # per payload, hundreds of them waiting for the socket.
            assert 1 <= answering <= 4
            # The peer gets every answer, in order.
            assert [a["id"] for a in answers] == [f"{big}{n}" for n in range(sent)]
            assert all("protocolVersion" in a["result"] for a in answers)


async def test_acp_session_queue_is_the_servers_per_session_limit(serve_app: Any) -> None:
    agent = Flood(count=3, hold=True)
    app = App([agent])
    acp.mount(app)
    server = await serve_app(app, max_session_queued_events=3)
    url = f"ws://127.0.0.1:{server.port}/agents/flood/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            new = {"cwd": "/", "mcpServers": []}
            call = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new}
            await ws.send_message(json.dumps(call))
            sid = json.loads(await ws.get_message())["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
            call = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt}
            await ws.send_message(json.dumps(call))
            while agent.emitted < 3:
                await trio.sleep(0.01)
            session = app.stores.acp_sessions.get("flood", sid, owner=ANONYMOUS)
            assert session.turn is not None
            # The channel between the agent and the writer holds the
            # configured limit (the default is 16).
            assert session.turn._receive.statistics().max_buffer_size == 3


async def test_realtime_peer_that_does_not_read_holds_its_agent_and_is_dropped(
    serve_app: Any,
) -> None:
    agent = Flood()
    app = App([agent])
    realtime.mount(app)
    server = await serve_app(app, websocket_send_timeout=0.5)
    url = f"ws://127.0.0.1:{server.port}/agents/flood/realtime?model=x"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url, message_queue_size=1) as ws:
            assert (await recv(ws))["type"] == "session.created"
            await send(ws, type="response.create")
            # The agent's emit waits for the socket: no queue grows while the
            # peer does not read, and the server drops it after the send timeout.
            while server.connection_count:
                await trio.sleep(0.05)
    assert 0 < agent.emitted < agent.count
