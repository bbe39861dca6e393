"""The UAMP clients (WebSocket and HTTP+SSE) against the real server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import DemoAgent, Server, create_app
from uamp_trio.client import ClientError, connect, connect_sse
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20

WEATHER = ty.ToolDefinition(
    function=ty.FunctionDefinition(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    )
)


class SlowAgent(TestAgent):
    """Two deltas, then waits until cancelled; records tokens."""

    name = "slow"

    def __init__(self) -> None:
        self.tokens: list[str | None] = []
        self.waiting = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.tokens.append(request.token)
        await emit(ev.Thinking(content="hmm", is_delta=True))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="part ")))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="one")))
        if request.messages and request.messages[-1].text == "wait":
            self.waiting.set()
            await trio.sleep_forever()


@asynccontextmanager
async def serving(*agents: Any) -> AsyncIterator[str]:
    server = Server(create_app(list(agents)), port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield f"127.0.0.1:{server.port}"
        nursery.cancel_scope.cancel()


def ws_client(addr: str, **kw: Any) -> AbstractAsyncContextManager[Any]:
    return connect(f"ws://{addr}/ws", **kw)


def sse_client(addr: str, **kw: Any) -> AbstractAsyncContextManager[Any]:
    return connect_sse(f"http://{addr}", **kw)


CLIENTS = pytest.mark.parametrize("open_client", [ws_client, sse_client], ids=["ws", "sse"])
Opener = Callable[..., AbstractAsyncContextManager[Any]]


@CLIENTS
async def test_respond_streams_events_and_ask_returns_the_result(open_client: Opener) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(DemoAgent()) as addr, open_client(addr) as client:
            session = await client.create_session("demo")
            assert session.agent == "demo" and session.capabilities.id == "demo"
            stream = session.respond("hello world")
            kinds = [event.type async for event in stream]
            assert kinds[0] == "response.created" and kinds[-1] == "response.done"
            assert stream.result is not None and stream.result.text == "You said: hello world"
            result = await session.ask("again")
            assert result.status == "completed" and result.text == "You said: again"
            assert result.usage is not None and result.usage.total_tokens is not None


@CLIENTS
async def test_tool_calls_are_answered_by_the_callback(open_client: Opener) -> None:
    calls: list[ty.ToolInvocation] = []

    async def weather(call: ty.ToolInvocation) -> str:
        calls.append(call)
        await trio.sleep(0)
        return '{"temp": 21}'

    with trio.fail_after(TIMEOUT):
        async with serving(DemoAgent()) as addr, open_client(addr) as client:
            session = await client.create_session("demo", tools=[WEATHER], on_tool_call=weather)
            result = await session.ask("get weather in Rome")
            assert [c.name for c in calls] == ["get_weather"]
            assert [c.id for c in result.tool_calls] == [calls[0].id]
            assert result.text == 'Tool get_weather returned: {"temp": 21}'
            assert [i.type for i in result.output] == ["tool_call", "tool_result", "text"]

            # A failing sync callback becomes an error result, not a crash.
            def broken(call: ty.ToolInvocation) -> str:
                raise ValueError("no network")

            session.on_tool_call = broken
            result = await session.ask("get weather in Oslo")
            assert "no network" in result.text


@CLIENTS
async def test_cancel_and_token_refresh(open_client: Opener) -> None:
    agent = SlowAgent()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as addr, open_client(addr) as client:
            session = await client.create_session("slow", token="t1")
            stream = session.respond("wait")
            seen = []
            async for event in stream:
                seen.append(event.type)
                if event.type == "response.delta" and len(seen) == 4:
                    await agent.waiting.wait()
                    await session.cancel()
            assert seen[-1] == "response.cancelled"
            assert stream.result is not None and stream.result.status == "cancelled"
            assert stream.result.text == "part one" and stream.result.thinking == "hmm"
            await session.update(token="t2")
            assert session.token == "t2"
            result = await session.ask("go")
            assert result.status == "completed"
            assert agent.tokens == ["t1", "t2"]


@CLIENTS
async def test_delta_windows_are_acknowledged_by_the_client(open_client: Opener) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(DemoAgent()) as addr, open_client(addr, delta_window=2) as client:
            session = await client.create_session("demo")
            assert session.delta_window == 2
            words = " ".join(f"w{i}" for i in range(30))
            result = await session.ask(words)
            assert result.text == f"You said: {words}"


@CLIENTS
async def test_unknown_agent_is_a_clear_error(open_client: Opener) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(DemoAgent()) as addr, open_client(addr) as client:
            with pytest.raises(ClientError) as info:
                await client.create_session("nobody")
            assert info.value.code == "agent_offline"  # UAMP 6.3
            assert info.value.reason == "agent_not_found"


async def test_several_sessions_share_one_websocket_concurrently() -> None:
    agents = [DemoAgent("a"), DemoAgent("b"), DemoAgent("c")]
    results: dict[str, str] = {}
    with trio.fail_after(TIMEOUT):
        async with serving(*agents) as addr, ws_client(addr) as client:
            sessions = [await client.create_session(a.name) for a in agents]
            assert len({s.id for s in sessions}) == 3

            async def run(session: Any) -> None:
                results[session.agent] = (await session.ask(f"hi {session.agent}")).text

            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(run, session)
            assert results == {n: f"You said: hi {n}" for n in "abc"}
            await client.ping()
            await sessions[0].end()
            assert sessions[0].id not in client.sessions
            with pytest.raises(ClientError):
                await sessions[0].ask("still there?")


async def test_a_second_response_on_a_busy_session_is_refused() -> None:
    agent = SlowAgent()
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as addr, ws_client(addr) as client:
            session = await client.create_session("slow")
            await session.send(ev.InputText(text="wait"), ev.ResponseCreate())
            await agent.waiting.wait()
            with pytest.raises(ClientError) as info:
                await session.ask("again")
            assert info.value.code == "response_in_progress"


async def test_sse_client_can_name_the_agent_in_session_create_instead_of_the_path() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(SlowAgent(), DemoAgent()) as addr,
            connect_sse(f"http://{addr}", agent_in_path=False) as client,
        ):
            session = await client.create_session("demo")
            assert session.agent == "demo"
            assert (await session.ask("by name")).text == "You said: by name"


@CLIENTS
async def test_a_refused_token_refresh_raises_and_the_session_goes_on(open_client: Opener) -> None:
    auth = APIKeyAuthenticator([("alice", "sk-alice"), ("alice", "sk-alice-2"), ("bob", "sk-bob")])
    server = Server(create_app([DemoAgent()], authenticator=auth), port=0, shutdown_grace=0.5)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            addr = f"127.0.0.1:{server.port}"
            bearer = ("authorization", "Bearer sk-alice")
            headers: Any = [bearer] if open_client is ws_client else dict([bearer])
            async with open_client(addr, headers=headers) as client:
                session = await client.create_session("demo", token="sk-alice")
                for refused in ("sk-bob", "sk-nobody"):  # another principal's; no one's
                    with pytest.raises(ClientError) as caught:
                        await session.update(token=refused)
                    assert caught.value.code == "unauthorized"
                    assert session.token == "sk-alice"  # what a resume would send again
                await session.update(token="sk-alice-2")
                assert session.token == "sk-alice-2"
                assert (await session.ask("still here")).text == "You said: still here"
            nursery.cancel_scope.cancel()
