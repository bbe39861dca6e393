"""One prompt, every transport, the same reply.

``uamp serve`` runs as a real subprocess with its default agent (the UAP demo
agent), and every client people use asks it the same questions: the reply
text must be the same over Chat Completions (plain and streamed), the native
UAMP WebSocket, UAMP over HTTP+SSE, OpenAI Realtime, A2A (blocking and
streamed), AG-UI, ACP over stdio (``uamp acp``), the Anthropic Messages
API (plain and streamed), MCP (Streamable HTTP, and stdio with ``uamp mcp``),
the Vercel AI SDK (its npm client, under Node), and the OpenAI Responses API
(plain, streamed, and a background response read back through its resumed stream).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import trio

from tests._support.cli import ROOT, uamp_serve
from uamp_trio.client import connect, connect_sse

PROMPTS = ["hello cross transport", "what is 2+3?"]
EXPECTED = {"hello cross transport": "You said: hello cross transport", "what is 2+3?": "2 + 3 = 5"}
TIMEOUT = 30


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """``uamp serve --port 0`` in a subprocess; its base URL."""
    with uamp_serve() as url:
        yield url


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# --- one function per transport: prompt in, reply text out -----------------------


def completions_plain(base: str, prompt: str, agent: str = "demo") -> str:
    client = openai.OpenAI(base_url=f"{base}/agents/{agent}", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": prompt}]
    )
    return reply.choices[0].message.content or ""


def completions_streamed(base: str, prompt: str, agent: str = "demo") -> str:
    client = openai.OpenAI(base_url=f"{base}/agents/{agent}", api_key="x", max_retries=0)
    stream = client.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": prompt}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def _uamp_ask(connected: Any, prompt: str, agent: str) -> str:
    """One turn of a UAMP session with ``agent`` on the client ``connected`` opens."""

    async def main() -> str:
        with trio.fail_after(TIMEOUT):
            async with connected as client:
                session = await client.create_session(agent=agent)
                result = await session.ask(prompt)
                return str(result.text)

    return trio.run(main)


def uamp_websocket(base: str, prompt: str, agent: str = "demo") -> str:
    return _uamp_ask(connect(base.replace("http://", "ws://") + "/ws"), prompt, agent)


def uamp_http_sse(base: str, prompt: str, agent: str = "demo") -> str:
    return _uamp_ask(connect_sse(base), prompt, agent)


def realtime(base: str, prompt: str, agent: str = "demo") -> str:
    async def main() -> str:
        client = openai.AsyncOpenAI(api_key="x", base_url=f"{base}/agents/{agent}", max_retries=0)
        async with client.realtime.connect(model=agent) as conn:
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": prompt}],
                }
            )
            await conn.response.create()
            text = []
            async for event in conn:
                if event.type == "response.output_text.delta":
                    text.append(event.delta)
                if event.type == "response.done":
                    assert event.response.status == "completed"
                    return "".join(text)
        raise AssertionError("realtime connection closed early")

    return str(_run(main()))


def _a2a(base: str, prompt: str, streaming: bool, agent: str = "demo") -> str:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

    async def main() -> str:
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            card = await A2ACardResolver(http, f"{base}/agents/{agent}").get_agent_card()
            client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(
                card
            )
            request = SendMessageRequest(
                message=Message(role=Role.ROLE_USER, parts=[Part(text=prompt)], message_id="m")
            )
            events = [e async for e in client.send_message(request)]
            last = events[-1]
            final = last.status_update.status if streaming else last.task.status
            assert final.state == TaskState.TASK_STATE_COMPLETED
            return "".join(p.text for p in final.message.parts)

    return str(_run(main()))


def a2a_blocking(base: str, prompt: str, agent: str = "demo") -> str:
    return _a2a(base, prompt, streaming=False, agent=agent)


def a2a_streamed(base: str, prompt: str, agent: str = "demo") -> str:
    return _a2a(base, prompt, streaming=True, agent=agent)


def agui(base: str, prompt: str, agent: str = "demo") -> str:
    body = {
        "threadId": "thread-1",
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": prompt}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    with httpx.stream("POST", f"{base}/agents/{agent}/agui", json=body, timeout=TIMEOUT) as resp:
        assert resp.status_code == 200
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def acp_stdio(base: str, prompt: str, agent: str = "demo") -> str:
    import acp
    from acp.schema import AgentMessageChunk, TextContentBlock

    texts: list[str] = []

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if isinstance(update, AgentMessageChunk) and isinstance(
                update.content, TextContentBlock
            ):
                texts.append(update.content.text)

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise acp.RequestError.method_not_found("session/request_permission")

        def on_connect(self, conn: Any) -> None:
            pass

    async def main() -> str:
        spawned = acp.spawn_agent_process(
            Client(), sys.executable, "-m", "uamp_trio", "acp", cwd=str(ROOT)
        )
        async with spawned as (conn, _process):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            result = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block(prompt)]
            )
            assert result.stop_reason == "end_turn"
        return "".join(texts)

    return str(_run(main()))


def _anthropic(base: str, agent: str) -> Any:
    import anthropic

    return anthropic.Anthropic(
        base_url=f"{base}/agents/{agent}", api_key="x", max_retries=0, timeout=TIMEOUT
    )


def anthropic_plain(base: str, prompt: str, agent: str = "demo") -> str:
    reply = _anthropic(base, agent).messages.create(
        model=agent, max_tokens=1024, messages=[{"role": "user", "content": prompt}]
    )
    assert reply.stop_reason == "end_turn"
    return "".join(b.text for b in reply.content if b.type == "text")


def anthropic_streamed(base: str, prompt: str, agent: str = "demo") -> str:
    with _anthropic(base, agent).messages.stream(
        model=agent, max_tokens=1024, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        return "".join(stream.text_stream)


def _mcp_call(server: Any, prompt: str, agent: str) -> str:
    import anyio
    from mcp import Client

    async def main() -> str:
        with anyio.fail_after(TIMEOUT):
            async with Client(server) as client:
                result = await client.call_tool(agent, {"prompt": prompt})
        assert not result.is_error
        return str(result.content[0].text)

    return str(anyio.run(main))


def mcp_http(base: str, prompt: str, agent: str = "demo") -> str:
    return _mcp_call(f"{base}/agents/{agent}/mcp", prompt, agent)


def mcp_stdio(base: str, prompt: str, agent: str = "demo") -> str:
    from mcp.client.stdio import StdioServerParameters

    env = {"PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "uamp_trio", "mcp"]
    server = StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT), env=env)
    return _mcp_call(server, prompt, agent)


def ai_sdk(base: str, prompt: str, agent: str = "demo") -> str:
    """The Vercel AI SDK's own client (npm ``ai``: DefaultChatTransport, readUIMessageStream)."""
    from pathlib import Path

    from tests._support.npm import install_client, run_node

    client = install_client(Path(__file__).parent / "ai_sdk_client", "ai-sdk-client")
    args = json.dumps({"chatId": f"cross-{len(prompt)}", "text": prompt})
    got = run_node(client, "stream", f"{base}/agents/{agent}/ai-sdk", args)
    assert got["warnings"] == [] and got["errors"] == []
    parts = got["message"]["parts"]
    return "".join(p["text"] for p in parts if p["type"] == "text")


def _responses(base: str, agent: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base}/agents/{agent}/v1",
        api_key="x",
        max_retries=0,
        _strict_response_validation=True,
    )


def responses_plain(base: str, prompt: str, agent: str = "demo") -> str:
    reply = _responses(base, agent).responses.create(model=agent, input=prompt)
    assert reply.status == "completed"
    return reply.output_text


def responses_streamed(base: str, prompt: str, agent: str = "demo") -> str:
    stream = _responses(base, agent).responses.create(model=agent, input=prompt, stream=True)
    return "".join(e.delta for e in stream if e.type == "response.output_text.delta")


def responses_background(base: str, prompt: str, agent: str = "demo") -> str:
    client = _responses(base, agent)
    queued = client.responses.create(model=agent, input=prompt, background=True)
    with client.responses.stream(response_id=queued.id) as stream:
        return stream.get_final_response().output_text


TRANSPORTS = [
    completions_plain,
    completions_streamed,
    uamp_websocket,
    uamp_http_sse,
    realtime,
    a2a_blocking,
    a2a_streamed,
    agui,
    acp_stdio,
    anthropic_plain,
    anthropic_streamed,
    mcp_http,
    mcp_stdio,
    ai_sdk,
    responses_plain,
    responses_streamed,
    responses_background,
]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("ask", TRANSPORTS, ids=lambda f: f.__name__)
def test_same_prompt_same_reply_on_every_transport(base_url: str, ask: Any, prompt: str) -> None:
    assert ask(base_url, prompt) == EXPECTED[prompt]


# --- the same check against uamp_asgi mounted in FastAPI under uvicorn (docs/embedding.md) ---


def uamp_websocket_agent_url(base: str, prompt: str, agent: str = "demo") -> str:
    """UAMP over WebSocket at the agent's own URL (a mounted app's root routes move with it)."""
    return _uamp_ask(
        connect(f"{base.replace('http://', 'ws://')}/agents/{agent}/uamp"), prompt, agent
    )


def acp_websocket(base: str, prompt: str, agent: str = "demo") -> str:
    """ACP over WebSocket (``.../acp/stream``) with the ACP client."""
    import acp
    from acp.schema import AgentMessageChunk, TextContentBlock
    from acp.ws import create_websocket_stream

    texts: list[str] = []

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if isinstance(update, AgentMessageChunk) and isinstance(
                update.content, TextContentBlock
            ):
                texts.append(update.content.text)

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise acp.RequestError.method_not_found("session/request_permission")

        def on_connect(self, conn: Any) -> None:
            pass

    async def main() -> str:
        url = f"{base.replace('http://', 'ws://')}/agents/{agent}/acp/stream"
        conn = acp.connect_to_agent(Client(), await create_websocket_stream(url))
        try:
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            result = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block(prompt)]
            )
            assert result.stop_reason == "end_turn"
        finally:
            await conn.close()
        return "".join(texts)

    return str(_run(main()))


#: What the ASGI app serves of the transports above (the others are `uamp serve`'s).
ASGI_TRANSPORTS = [
    acp_websocket,
    ai_sdk,
    anthropic_plain,
    anthropic_streamed,
    completions_plain,
    completions_streamed,
    uamp_websocket_agent_url,
    uamp_http_sse,
    realtime,
    a2a_blocking,
    a2a_streamed,
    agui,
    mcp_http,
    responses_plain,
    responses_streamed,
]


@pytest.fixture(scope="module")
def asgi_url() -> Iterator[str]:
    """A pydantic-ai agent ("demo") and an OpenAI Agents SDK agent ("oaa") behind uamp_asgi."""
    pytest.importorskip("fastapi")
    from tests._support.asgi import fastapi_with_framework_agents

    with fastapi_with_framework_agents() as url:
        yield url


@pytest.mark.parametrize("agent", ["demo", "oaa"])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("ask", ASGI_TRANSPORTS, ids=lambda f: f.__name__)
def test_the_asgi_app_gives_the_same_replies(
    asgi_url: str, ask: Any, prompt: str, agent: str
) -> None:
    assert ask(asgi_url, prompt, agent) == EXPECTED[prompt]
