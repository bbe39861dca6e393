"""UAMP 6.13 "Delegate forwarding": a sub-agent's thinking reaches the caller as tool progress.

Driven over a real UAMP WebSocket with raw JSON, as a client written from the
spec would: the parent agent delegates to a sub-agent whose model thinks; with
forwarding on, the client gets ``response.delta`` of type ``tool_progress``
(6.6: the delegate call's id and the text) carrying that thinking while the
call runs; off (the default), none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.wire import ask, create_session, serving, until
from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import function
from uamp_agents.providers.base import ModelRequest, ModelResponse, NamedProvider, ProviderEvent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_trio import App
from uamp_trio.transports import uamp_ws

TIMEOUT = 10


class Thinker(NamedProvider):
    """A model that thinks in two pieces, then answers."""

    provider_name = "thinker"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            message=ty.Message(role="assistant", content="Rain at noon."),
            thinking="Looking at the radar... clouds from the west.",
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        yield ev.Thinking(content="Looking at the radar... ", is_delta=True)
        yield ev.Thinking(content="clouds from the west.", is_delta=True)
        yield ev.ResponseDelta(delta=ty.DeltaText(text="Rain at noon."))
        yield await self.generate(request)


def _parent(forward: bool | None) -> Any:
    researcher = agent(name="researcher", model=Thinker("thinker-1"))

    def plan(messages: list[ty.Message], tools: Any) -> Any:
        if any(m.role == "tool" for m in messages):
            return "Take an umbrella."
        return [("researcher", {"task": "weather in Oslo"})]

    tool = researcher.to_tool() if forward is None else researcher.to_tool(forward_thinking=forward)
    return serve_agent(agent(name="lead", model=function(plan), tools=[tool]))


@pytest.mark.parametrize("forward", [True, False, None])
async def test_a_delegate_s_thinking_is_forwarded_only_when_asked(forward: bool | None) -> None:
    app = App([_parent(forward)])
    app.mount(uamp_ws.mount)
    async with serving(app) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/lead/uamp") as ws:
                await create_session(ws)
                await ask(ws, "should I take an umbrella?")
                events = await until(ws, "response.done")
    calls = [
        e["delta"]["tool_call"]["id"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "tool_call"
    ]
    deltas = [e["delta"] for e in events if e["type"] == "response.delta"]
    kinds = [d["type"] for d in deltas]
    tool_progress = [d["tool_progress"] for d in deltas if d["type"] == "tool_progress"]
    if forward:
        assert [p["text"] for p in tool_progress] == [
            "Looking at the radar... ",
            "clouds from the west.",
        ]
        assert {p["call_id"] for p in tool_progress} == {calls[0]}
        # In order: after the call, while it runs, before its result.
        at = [i for i, k in enumerate(kinds) if k == "tool_progress"]
        assert kinds.index("tool_call") < at[0] and at[-1] < kinds.index("tool_result")
        done = events[-1]["response"]
        assert done["status"] == "completed"
    else:
        assert tool_progress == []  # off by default
    assert "Take an umbrella." in "".join(
        e["delta"].get("text", "") for e in events if e["type"] == "response.delta"
    )
    # The caller never sees the delegate's thinking as its own thinking event.
    assert not [e for e in events if e["type"] == "thinking"]
