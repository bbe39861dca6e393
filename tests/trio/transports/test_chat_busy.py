"""The busy policy in a chat room: a message while the room's agent is still answering.

The conversation is the agent's answers in the room. Before the policy each
message got its own answer beside the running one (up to the room's
``max_answers``). Now ``enqueue`` answers in turn, ``reject`` tells the
poster ``session.error`` ``response_in_progress``, ``interrupt`` stops the
running answer and posts what it had said, ``rollback`` stops it and posts
nothing (the people's messages are the room's: they stay). An answer sees the
room in its order: an answer posted after a message comes after it. ``input.text``
``context["uamp.on_busy"]`` overrides the server's policy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.busy import Holder
from tests._support.wire import recv, send
from uamp_trio.app import create_app

TIMEOUT = 20


@asynccontextmanager
async def _room(**config: Any) -> AsyncIterator[tuple[WebSocketConnection, Holder]]:
    agent = Holder()
    async with (
        wire.serving(create_app([agent]), **config) as server,
        open_ws(f"ws://127.0.0.1:{server.port}/agents/holder/uamp") as ws,
    ):
        settings = {"username": "ann", "respond": "every"}
        await wire.create_session(ws, chat="r", session={"extensions": {"chat": settings}})
        yield ws, agent


async def _until(ws: WebSocketConnection, wanted: Any) -> list[dict[str, Any]]:
    """Events up to the first for which ``wanted(event)`` holds."""
    out = []
    while True:
        event = await recv(ws)
        out.append(event)
        if wanted(event):
            return out


def _posted(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (e["sender"]["id"], e["message"]["content"])
        for e in events
        if e["type"] == "message.created"
    ]


async def _started(ws: WebSocketConnection, agent: Holder) -> None:
    await send(ws, type="input.text", text="hold one")
    await _until(ws, lambda e: e["type"] == "response.delta")
    assert agent.started == ["hold one"]


@pytest.mark.parametrize("how", ["server", "context"])
async def test_enqueue_answers_in_turn(how: str) -> None:
    config = {"on_busy": "reject"} if how == "context" else {}
    context = {"context": {"uamp.on_busy": "enqueue"}} if how == "context" else {}
    with trio.fail_after(TIMEOUT):
        async with _room(**config) as (ws, agent):
            await _started(ws, agent)
            await send(ws, type="input.text", text="two", **context)
            with trio.move_on_after(0.3):
                while True:  # the second answer does not start
                    assert (await recv(ws))["type"] != "response.created"
            agent.release.set()
            events = await _until(ws, lambda e: _posted([e]) == [("holder", "echo two")])
    assert ("holder", "echo hold one") in _posted(events)
    assert agent.started == ["hold one", "two"]
    # The room's order: the answer was posted after "two" was.
    assert agent.seen["two"] == ["user:hold one", "user:two", "assistant:echo hold one"]


async def test_reject_tells_the_poster() -> None:
    with trio.fail_after(TIMEOUT):
        async with _room(on_busy="reject") as (ws, agent):
            await _started(ws, agent)
            await send(ws, type="input.text", text="two")
            refused = await _until(ws, lambda e: e["type"] == "session.error")
            error = refused[-1]["error"]
            assert error["code"] == "response_in_progress"
            assert error["details"] == {
                "agent": "holder",
                "chat_id": "r",
                "reason": "conversation_busy",
            }
            agent.release.set()
            await _until(ws, lambda e: _posted([e]) == [("holder", "echo hold one")])
    assert agent.started == ["hold one"]


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
async def test_interrupt_posts_and_rollback_drops_the_stopped_answer(
    policy: str, kept: bool
) -> None:
    with trio.fail_after(TIMEOUT):
        async with _room(on_busy=policy) as (ws, agent):
            await _started(ws, agent)
            await send(ws, type="input.text", text="two")
            events = await _until(ws, lambda e: _posted([e]) == [("holder", "echo two")])
    posted = _posted(events)
    assert (("holder", "echo hold one") in posted) is kept
    assert agent.cancelled == ["hold one"]
    stopped = ["assistant:echo hold one"] if kept else []
    assert agent.seen["two"] == ["user:hold one", "user:two", *stopped]
