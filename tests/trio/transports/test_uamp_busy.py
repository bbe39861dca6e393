"""The busy policy on a UAMP session (WebSocket), over a real socket.

A ``response.create`` while the session's response runs: ``enqueue`` (the
default) holds it -- with the input it came with -- and runs it once the
running one ends; ``reject`` is ``session.error`` ``response_in_progress``
(what UAMP always answered before); ``interrupt`` ends the running response
with ``response.cancelled`` (its partial output stays in the conversation)
and runs the new one; ``rollback`` also drops the cancelled turn from the
conversation. The event's own ``uamp.on_busy`` overrides the server's policy.
The raw WebSocket is the client: the UAMP client library runs one response
per session at a time by design.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.busy import Holder
from tests._support.wire import create_session, recv, send, until
from uamp_proto.principal import ANONYMOUS
from uamp_trio.app import create_app

TIMEOUT = 15


@asynccontextmanager
async def _session(**config: Any) -> AsyncIterator[tuple[WebSocketConnection, str, Holder]]:
    agent = Holder()
    async with wire.serving(create_app([agent]), **config) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/holder/uamp"
        async with open_ws(url) as ws:
            yield ws, await create_session(ws), agent


async def _say(ws: WebSocketConnection, text: str, **create: Any) -> None:
    await send(ws, type="input.text", text=text)
    await send(ws, type="response.create", **create)


async def _started(ws: WebSocketConnection, agent: Holder, text: str) -> None:
    events = await until(ws, "response.delta")
    assert [e["type"] for e in events] == ["response.created", "response.delta"]
    assert events[-1]["delta"]["text"] == f"echo {text}"
    assert agent.started[-1] == text


@pytest.mark.parametrize("how", ["server", "event"])
async def test_enqueue_holds_the_second_response_until_the_first_ends(how: str) -> None:
    config = {"on_busy": "reject"} if how == "event" else {}
    extra = {"uamp.on_busy": "enqueue"} if how == "event" else {}
    with trio.fail_after(TIMEOUT):
        async with _session(**config) as (ws, _, agent):
            await _say(ws, "hold one")
            await _started(ws, agent, "hold one")
            await _say(ws, "two", **extra)
            with trio.move_on_after(0.3):
                raise AssertionError(f"not held: {await recv(ws)}")
            assert agent.started == ["hold one"]
            agent.release.set()
            first = await until(ws, "response.done")
            assert [e["type"] for e in first] == ["response.done"]
            second = await until(ws, "response.done")
            assert [e["type"] for e in second] == [
                "response.created",
                "response.delta",
                "response.done",
            ]
            assert second[0]["response_id"] != first[0]["response_id"]
    assert agent.seen["two"] == ["user:hold one", "assistant:echo hold one", "user:two"]


@pytest.mark.parametrize("how", ["server", "event"])
async def test_reject_is_response_in_progress(how: str) -> None:
    config = {"on_busy": "reject"} if how == "server" else {}
    extra = {"uamp.on_busy": "reject"} if how == "event" else {}
    with trio.fail_after(TIMEOUT):
        async with _session(**config) as (ws, _, agent):
            await _say(ws, "hold one")
            await _started(ws, agent, "hold one")
            await send(ws, type="response.create", **extra)
            refused = await recv(ws)
            assert refused["type"] == "session.error"
            assert refused["error"]["code"] == "response_in_progress"
            agent.release.set()
            assert (await until(ws, "response.done"))[-1]["type"] == "response.done"
    assert agent.started == ["hold one"]


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
async def test_interrupt_keeps_and_rollback_drops_the_cancelled_turn(
    policy: str, kept: bool
) -> None:
    with trio.fail_after(TIMEOUT):
        async with _session(on_busy=policy) as (ws, _, agent):
            await _say(ws, "hold one")
            await _started(ws, agent, "hold one")
            await _say(ws, "two")
            events = await until(ws, "response.done")
            assert [e["type"] for e in events] == [
                "response.cancelled",
                "response.created",
                "response.delta",
                "response.done",
            ]
            assert events[0]["partial_output"] == [{"type": "text", "text": "echo hold one"}]
            await _say(ws, "three")
            await until(ws, "response.done")
    assert agent.cancelled == ["hold one"]
    stopped = ["user:hold one", "assistant:echo hold one"] if kept else []
    assert agent.seen["two"] == [*stopped, "user:two"]
    assert agent.seen["three"] == [*stopped, "user:two", "assistant:echo two", "user:three"]


async def test_held_responses_are_bounded_and_run_in_order() -> None:
    with trio.fail_after(TIMEOUT):
        async with _session(busy_max_queued=2) as (ws, _, agent):
            await _say(ws, "hold one")
            await _started(ws, agent, "hold one")
            await _say(ws, "two")
            await _say(ws, "three")
            await _say(ws, "four")  # a third held one: over the bound
            refused = await recv(ws)
            assert refused["type"] == "session.error"
            assert refused["error"]["code"] == "queue_full"
            agent.release.set()
            for _ in range(3):
                await until(ws, "response.done")
    assert agent.started == ["hold one", "two", "three"]


async def test_a_session_that_ends_frees_its_held_places() -> None:
    with trio.fail_after(TIMEOUT):
        async with _session(busy_max_queued=1) as (ws, sid, agent):
            await _say(ws, "hold one")
            await _started(ws, agent, "hold one")
            await _say(ws, "two")
            await send(ws, type="session.end", session_id=sid)
            sid2 = await create_session(ws)
            await _say(ws, "fresh", session_id=sid2)
            events = await until(ws, "response.done")
            assert events[-1]["session_id"] == sid2
    assert "two" not in agent.started


# --- a run paused on a question to a person (docs/human-in-the-loop.md) -------


@asynccontextmanager
async def _approving(**config: Any) -> AsyncIterator[tuple[WebSocketConnection, Any]]:
    """The demo agent asking before ``add``, on a raw WebSocket session."""
    from tests.trio.transports.test_uamp_interrupts import approving_demo

    app = create_app([approving_demo()])
    async with (
        wire.serving(app, **config) as server,
        open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws,
    ):
        capabilities = {
            "id": "t",
            "provider": "test",
            "modalities": ["text"],
            "extensions": {"interrupts": True},
        }
        await create_session(ws, client_capabilities=capabilities)
        yield ws, app


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"].get("text") or "" for e in events if e["type"] == "response.delta")


async def _paused(ws: WebSocketConnection) -> str:
    await _say(ws, "what is 2+3?")
    events = await until(ws, "interrupt.request")
    return str(events[-1]["interrupt_id"])


async def test_a_paused_run_is_busy_and_its_answer_is_not_a_new_turn() -> None:
    with trio.fail_after(TIMEOUT):
        async with _approving() as (ws, app):
            interrupt_id = await _paused(ws)
            await _say(ws, "hello")  # enqueue: held behind the paused run
            with trio.move_on_after(0.3):
                raise AssertionError(f"not held: {await recv(ws)}")
            # The answer goes to the paused run, which goes on and ends first.
            await send(ws, type="interrupt.answer", interrupt_id=interrupt_id, approved=True)
            first = await until(ws, "response.done")
            assert "5" in _text(first)
            second = await until(ws, "response.done")
            assert second[0]["type"] == "response.created"
            assert _text(second) == "You said: hello"
            assert await app.interrupts.pending(ANONYMOUS) == []


async def test_interrupt_ends_a_paused_run_and_its_pending_question() -> None:
    with trio.fail_after(TIMEOUT):
        async with _approving(on_busy="interrupt") as (ws, app):
            interrupt_id = await _paused(ws)
            await _say(ws, "hello")
            events = await until(ws, "response.done")
            types = [e["type"] for e in events]
            assert "response.cancelled" in types
            assert types.index("response.cancelled") < types.index("response.created")
            assert _text(events[types.index("response.created") :]) == "You said: hello"
            assert await app.interrupts.pending(ANONYMOUS) == []
            # The question is gone: answering it now is answering nothing.
            await send(ws, type="interrupt.answer", interrupt_id=interrupt_id, approved=True)
            refused = await recv(ws)
            assert refused["type"] == "session.error"


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
async def test_http_sse_sessions_follow_the_policy_too(policy: str, kept: bool) -> None:
    agent = Holder()
    with trio.fail_after(TIMEOUT):
        async with (
            wire.serving(create_app([agent]), on_busy=policy) as server,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
        ):
            path = "/agents/holder/events"
            sid = (await wire.post(http, wire.CREATE, path=path)).headers["x-session-id"]
            async with wire.open_stream(http, sid, f"{path}/stream") as events:
                await events.until("capabilities")
                first = [{"type": "input.text", "text": "hold one"}, {"type": "response.create"}]
                await wire.post(http, first, sid, path=path)
                await events.until("response.delta")
                second = [{"type": "input.text", "text": "two"}, {"type": "response.create"}]
                await wire.post(http, second, sid, path=path)
                got = await events.until("response.done")
                assert [e["type"] for e in got][:2] == ["response.cancelled", "response.created"]
    assert agent.cancelled == ["hold one"]
    assert ("assistant:echo hold one" in agent.seen["two"]) is kept
    assert ("user:hold one" in agent.seen["two"]) is kept
