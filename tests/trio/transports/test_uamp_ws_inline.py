"""The WebSocket's reader runs a response itself, and hands its reading on when it blocks.

A response for a session without a worker runs in the task that read its
``response.create`` (``uamp_trio.hosting.ws_connection``, "The reader runs
the response"): no task switch on the way to the first delta. A response
that blocks keeps that task, and a new task reads on. These tests hold the
path on real sockets: where responses run, that reading goes on past a
blocked response (other sessions, a cancel), that a response cancelled in
the very read that asked for it never reaches its agent, that a cancel
landing after the agent's last checkpoint leaves the reading intact, and
that what a response sets in context variables stays its own.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import Marks, TestAgent
from tests._support.raw import open_raw_ws
from tests._support.wire import create_session, recv, send, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App, Server
from uamp_trio.hosting.sessions import SessionHost
from uamp_trio.transports import uamp_ws

TIMEOUT = 30


class Where(TestAgent):
    """``"N"``: N deltas; ``"hang"``: waits until cancelled. Notes the task of each response."""

    name = "where"

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[trio.lowlevel.Task] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.tasks.append(trio.lowlevel.current_task())
        text = request.messages[-1].text
        if text == "hang":
            await trio.sleep_forever()
        for i in range(int(text)):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"d{i} ")))


@asynccontextmanager
async def serving(agent: TestAgent) -> AsyncIterator[Server]:
    app = App([agent])
    app.mount(uamp_ws.mount)
    async with wire.serving(app) as server:
        yield server


def url(server: Server, name: str) -> str:
    return f"ws://127.0.0.1:{server.port}/agents/{name}/uamp"


async def ask(ws: Any, sid: str, text: str) -> None:
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)


def reads(task: trio.lowlevel.Task) -> bool:
    """Whether ``task`` is one of the connection's reading tasks."""
    return task.name.endswith("_Connection.read")


async def test_short_responses_run_in_the_task_that_read_them() -> None:
    agent = Where()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as server, open_ws(url(server, "where")) as ws:
            sid = await create_session(ws)
            for _ in range(3):
                await ask(ws, sid, "2")
                got = await until(ws, "response.done")
                assert [e["type"] for e in got].count("response.delta") == 2
    assert len(agent.tasks) == 3
    assert all(reads(task) for task in agent.tasks), [t.name for t in agent.tasks]
    assert len(set(agent.tasks)) == 1  # no task per response, and no worker task


async def test_a_blocked_response_keeps_its_task_and_a_new_task_reads_on() -> None:
    agent = Where()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as server, open_ws(url(server, "where")) as ws:
            blocked = await create_session(ws)
            other = await create_session(ws)
            await ask(ws, blocked, "hang")
            created = await recv(ws)
            assert created["type"] == "response.created"
            # The connection reads on: another session's response runs...
            await ask(ws, other, "1")
            got = await until(ws, "response.done")
            assert got[-1]["session_id"] == other
            # ...and a cancel of the blocked one is read and acted on.
            await send(ws, type="response.cancel", session_id=blocked)
            got = await until(ws, "response.cancelled")
            assert got[-1]["response_id"] == created["response_id"]
            await ask(ws, blocked, "1")  # the session goes on
            got = await until(ws, "response.done")
            assert got[-1]["session_id"] == blocked
    hung, second, third = agent.tasks
    assert reads(hung) and reads(second) and reads(third)
    assert second is not hung  # the blocked response kept the task that read it
    assert third is second  # the task reading now runs the next response


async def test_a_response_cancelled_in_the_read_that_asked_for_it_never_runs() -> None:
    agent = Where()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as server:
            stream, engine, first = await open_raw_ws(server.port, "/agents/where/uamp")
            messages: list[dict[str, Any]] = [orjson.loads(m) for m in first]

            async def until_type(kind: str) -> dict[str, Any]:
                while True:
                    for m in messages:
                        if m["type"] == kind:
                            return m
                    data = await stream.receive_some(65536)
                    assert data, "the server closed the connection"
                    messages.extend(orjson.loads(m) for m in engine.feed(data))

            engine.text(orjson.dumps({"type": "session.create"}))
            await stream.send_all(engine.take())
            sid = (await until_type("session.created"))["session_id"]
            for event in (
                {"type": "input.text", "session_id": sid, "text": "1"},
                {"type": "response.create", "session_id": sid},
                {"type": "response.cancel", "session_id": sid},
            ):
                engine.text(orjson.dumps(event))
            await stream.send_all(engine.take())  # one write: one read on the server
            cancelled = await until_type("response.cancelled")
            assert cancelled["session_id"] == sid
            assert agent.tasks == []  # the agent never ran
            messages.clear()
            engine.text(orjson.dumps({"type": "input.text", "session_id": sid, "text": "1"}))
            engine.text(orjson.dumps({"type": "response.create", "session_id": sid}))
            await stream.send_all(engine.take())
            done = await until_type("response.done")
            assert done["session_id"] == sid
            await stream.aclose()
    assert len(agent.tasks) == 1


class CancelsItself(TestAgent):
    """``"stop"``: one delta, then its own response is cancelled, after its last checkpoint.

    The cancel goes through the host's own ``_cancel`` (what ``response.cancel``
    and a busy gate's interrupt call), set up by the test in :attr:`cancel`.
    """

    name = "self-cancel"

    def __init__(self) -> None:
        super().__init__()
        self.cancel: Any = None

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="once ")))
        if request.messages[-1].text == "stop":
            self.cancel()


async def test_a_cancel_after_the_agents_last_checkpoint_leaves_the_reading_intact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cancel hits the reading task's scope, the response's; the response
    # ends (nothing checkpoints after it), and the task must read on in a
    # new scope rather than take the connection down.
    agent = CancelsItself()
    real = SessionHost.run_inline

    async def run_inline(host: SessionHost, session: Any, scope: Any, blocking: Any) -> None:
        agent.cancel = functools.partial(host._cancel, session, None)
        await real(host, session, scope, blocking)

    monkeypatch.setattr(SessionHost, "run_inline", run_inline)
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as server, open_ws(url(server, "self-cancel")) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "stop")
            ended = await recv(ws)
            while ended["type"] not in ("response.done", "response.cancelled"):
                ended = await recv(ws)
            for _ in range(3):  # the connection reads on
                await ask(ws, sid, "go")
                got = await until(ws, "response.done")
                assert [e["type"] for e in got][-2:] == ["response.delta", "response.done"]


async def test_what_a_response_sets_in_context_variables_stays_its_own() -> None:
    # A response run by the reader runs in a context of its own, as a
    # worker task's did: neither the reader's next responses (other
    # sessions) nor the task the reader hands its reading to see its marks.
    agent = Marks()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as server, open_ws(url(server, "marks")) as ws:
            first, second, third = [await create_session(ws) for _ in range(3)]
            await ask(ws, first, "first")
            await until(ws, "response.done")
            await ask(ws, second, "block second")  # the reading is handed on
            await until(ws, "response.delta")
            await ask(ws, third, "third")
            got = await until(ws, "response.done")
            assert got[-1]["session_id"] == third
            await send(ws, type="response.cancel", session_id=second)
            await until(ws, "response.cancelled")
    assert agent.found == [None, None, None]
