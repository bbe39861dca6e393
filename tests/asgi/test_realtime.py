"""The OpenAI Realtime API on uamp_asgi under uvicorn, with the openai SDK's realtime client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import openai
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.tools import WEATHER_REALTIME_TOOL
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import TurnRequest

TIMEOUT = 20


async def weather(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Calls the client's tool once, then says what it returned; without tools, echoes."""
    last = turn.messages[-1]
    if last.role == "tool":
        yield f"The tool said {last.text}"
    elif turn.tools:
        yield ev.ToolCall(call_id="call_1", name=turn.tools[0].function.name, arguments="{}")
    else:
        yield f"You said: {last.text}"


async def slow(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """One word, then nothing until cancelled."""
    yield "thinking"
    await anyio.sleep(60)
    yield "never"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    agents = [function_agent(weather), function_agent(slow)]
    with uvicorn_server(uamp_asgi.app(agents)) as url:
        yield url


@pytest.fixture(scope="module")
def paid() -> Iterator[str]:
    config = uamp_asgi.Config(payment_policy=TokenPolicy({"tok_ok"}))
    with uvicorn_server(uamp_asgi.app(function_agent(weather), config=config)) as url:
        yield url


def _client(base: str, agent: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="x", base_url=f"{base}/agents/{agent}", max_retries=0)


async def _say(conn: Any, text: str) -> None:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )


async def _until(conn: Any, kind: str, seen: list[Any]) -> Any:
    async for event in conn:
        seen.append(event)
        if event.type == kind:
            return event
    raise AssertionError(f"connection closed before {kind}")


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def _text(seen: list[Any]) -> str:
    return "".join(e.delta for e in seen if e.type == "response.output_text.delta")


def test_text_and_a_client_tool_round_trip(base: str) -> None:
    async def main() -> None:
        async with _client(base, "weather").realtime.connect(model="weather") as conn:
            assert (await conn.recv()).type == "session.created"
            await _say(conn, "hello")
            await conn.response.create()
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            assert done.response.status == "completed" and _text(seen) == "You said: hello"

            await conn.session.update(
                session={"type": "realtime", "tools": [WEATHER_REALTIME_TOOL]}
            )
            await _say(conn, "weather?")
            await conn.response.create()
            done = await _until(conn, "response.done", seen := [])
            call = done.response.output[0]
            assert call.type == "function_call" and call.name == "get_weather"
            await conn.conversation.item.create(
                item={"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
            )
            await conn.response.create()
            done = await _until(conn, "response.done", seen := [])
            assert _text(seen) == "The tool said sunny"

    _run(main())


def test_cancel_and_one_response_at_a_time(base: str) -> None:
    async def main() -> None:
        async with _client(base, "slow").realtime.connect(model="slow") as conn:
            assert (await conn.recv()).type == "session.created"
            await _say(conn, "go")
            await conn.response.create()
            seen: list[Any] = []
            await _until(conn, "response.output_text.delta", seen)
            # The busy policy asked for: reject (the default, enqueue, waits).
            await conn.response.create(response={"metadata": {"uamp.on_busy": "reject"}})
            busy = await _until(conn, "error", seen)
            assert busy.error.code == "conversation_already_has_active_response"
            await conn.response.cancel()
            done = await _until(conn, "response.done", seen)
            assert done.response.status == "cancelled"

    _run(main())


def test_no_agent_runs_until_a_token_pays(paid: str) -> None:
    async def main() -> None:
        async with _client(paid, "weather").realtime.connect(model="weather") as conn:
            assert (await conn.recv()).type == "session.created"
            await _say(conn, "pay me")
            await conn.recv()
            await conn.recv()
            await conn.response.create()
            required = json.loads(await conn.recv_bytes())
            assert required["type"] == "payment.required"
            bad = {"type": "payment.submit", "payment": {"token": "tok_bad"}}
            await conn.send(bad)  # type: ignore[arg-type]
            error = json.loads(await conn.recv_bytes())
            assert error["type"] == "payment.error" and error["can_retry"] is True
            good = {"type": "payment.submit", "payment": {"token": "tok_ok"}}
            await conn.send(good)  # type: ignore[arg-type]
            assert json.loads(await conn.recv_bytes())["type"] == "payment.accepted"
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            assert done.response.status == "completed" and _text(seen) == "You said: pay me"

    _run(main())
