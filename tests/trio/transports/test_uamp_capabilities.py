"""UAMP capabilities over a real WebSocket, as a client written from the spec sees them.

Section 6.4: ``capabilities`` is sent after ``session.created``, in answer to
``capabilities.query``, and when the agent's model changes mid-session.
Section 5.4: ``capabilities.query`` may name a ``model``.
"""

from __future__ import annotations

from typing import Any

import orjson
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.wire import ask, create_session, recv, send, until
from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import demo, openai
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.transports import uamp_ws

TIMEOUT = 15


class Swapper(TestAgent):
    """Answers one word; a turn whose text is ``swap`` moves it to another model."""

    name = "swapper"

    def __init__(self) -> None:
        self.model = "small-1"

    def capabilities(self) -> ty.Capabilities:
        caps = super().capabilities()
        return ty.Capabilities(
            id=caps.id, provider=caps.provider, modalities=caps.modalities,
            extensions={"model": self.model},
        )  # fmt: skip

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        last = request.messages[-1].content if request.messages else None
        if last == "swap":
            self.model = "large-2"
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


async def _serving(*agents: Any) -> Any:
    app = App(list(agents))
    app.mount(uamp_ws.mount)
    return wire.serving(app)


async def _quiet(ws: Any) -> list[dict[str, Any]]:
    """Every event before the answer to a ping: what the server had still queued."""
    await send(ws, type="ping", event_id="probe")
    return (await until(ws, "pong"))[:-1]


async def test_a_model_changed_during_a_turn_is_announced_after_it() -> None:
    swapper = Swapper()
    with trio.fail_after(TIMEOUT):
        async with await _serving(swapper) as server, open_ws(_url(server)) as ws:
            sid = await create_session(ws)
            await ask(ws, "hello")
            await until(ws, "response.done")
            assert await _quiet(ws) == []  # nothing changed: nothing pushed
            await ask(ws, "swap")
            await until(ws, "response.done")
            pushed = await recv(ws)
            assert pushed["type"] == "capabilities" and pushed["session_id"] == sid
            assert pushed["capabilities"]["extensions"]["model"] == "large-2"
            await ask(ws, "hello")
            events = await until(ws, "response.done")
            assert "capabilities" not in [e["type"] for e in events]
            assert await _quiet(ws) == []


async def test_a_model_changed_between_turns_is_announced_before_the_next_output() -> None:
    swapper = Swapper()
    with trio.fail_after(TIMEOUT):
        async with await _serving(swapper) as server, open_ws(_url(server)) as ws:
            await create_session(ws)
            swapper.model = "medium-3"  # the operator swaps it while the session idles
            await ask(ws, "hello")
            first = await recv(ws)
            assert first["type"] == "capabilities"
            assert first["capabilities"]["extensions"]["model"] == "medium-3"
            assert (await recv(ws))["type"] == "response.created"


async def test_a_served_agent_whose_tool_swaps_its_model_pushes_the_new_facts() -> None:
    def switch_model(query: str) -> str:
        """Move the agent to the next model."""
        switcher.model = demo("uamp-demo-2")
        return "switched"

    switcher = agent(name="switcher", model=demo("uamp-demo-1"), tools=[switch_model])
    with trio.fail_after(TIMEOUT):
        async with await _serving(serve_agent(switcher)) as server, open_ws(_url(server)) as ws:
            await create_session(ws)
            await ask(ws, "please switch_model")
            done = (await until(ws, "response.done"))[-1]
            assert "switched" in orjson.dumps(done["response"]["output"]).decode()
            pushed = await recv(ws)
            assert pushed["type"] == "capabilities"
            assert pushed["capabilities"]["extensions"]["uap"]["model"] == "uamp-demo-2"


async def test_capabilities_query_with_a_model_answers_for_that_model() -> None:
    served = serve_agent(agent(name="gpt", model=openai("gpt-4o", api_key="unused")))
    with trio.fail_after(TIMEOUT):
        async with await _serving(served, Swapper()) as server, open_ws(_url(server)) as ws:
            sid = await create_session(ws, agent="gpt")
            await send(ws, type="capabilities.query", session_id=sid, model="gpt-5")
            other = await recv(ws)
            assert other["type"] == "capabilities" and other["session_id"] == sid
            caps = other["capabilities"]
            assert caps["supports_thinking"] is True and caps["context_window"] == 400_000
            assert caps["extensions"]["uap"]["model"] == "gpt-5"
            # Its own model, or no model: the session's agent as it is.
            for model in ("gpt-4o", None):
                query = {"model": model} if model else {}
                await send(ws, type="capabilities.query", session_id=sid, **query)
                own = (await recv(ws))["capabilities"]
                assert own["supports_thinking"] is False and own["context_window"] == 128_000
            # Another hosted agent by name.
            await send(ws, type="capabilities.query", session_id=sid, model="swapper")
            assert (await recv(ws))["capabilities"]["id"] == "swapper"
            # A model nobody knows: a clear refusal naming the field, the session lives.
            await send(ws, type="capabilities.query", session_id=sid, model="no-such-model")
            refused = await recv(ws)
            assert refused["type"] == "session.error" and refused["session_id"] == sid
            assert refused["error"]["code"] == "unsupported"
            assert refused["error"]["details"] == {"field": "model"}
            assert await _quiet(ws) == []


def _url(server: Any) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"
