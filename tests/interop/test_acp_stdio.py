"""``uamp acp`` as a real subprocess, driven by agent-client-protocol's own client.

The client side is the library's ``ClientSideConnection`` (via
``spawn_agent_process``) with a small ``Client`` that records every
``session/update`` it is sent.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import (
    AgentMessageChunk,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)

from tests._support.agents import TestAgent, Words
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30


#: Says one word, then waits (until cancelled); used for session/cancel.
slow_agent = Words("slow", "Thinking", " never", pause=60)


class ToolAgent(TestAgent):
    """Thinks, runs one server-side tool and answers; exercises every update kind."""

    name = "tooly"
    modalities = ("text", "image")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.Thinking(content="Let me look.", is_delta=True))
        frag = ty.ToolCallFragment(id="call_1", name="lookup", arguments='{"q": "x"}')
        await emit(ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=frag)))
        result = ty.ToolResultFragment(call_id="call_1", result="42", status="ok")
        await emit(ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=result)))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="It is 42.")))


class Recorder:
    """An ACP client that keeps every session/update notification."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def on_connect(self, conn: Any) -> None:
        pass

    def texts(self, session_id: str, kind: type = AgentMessageChunk) -> str:
        return "".join(
            u.content.text
            for sid, u in self.updates
            if sid == session_id and isinstance(u, kind) and isinstance(u.content, TextContentBlock)
        )


def _spawn(*args: str) -> Any:
    return acp.spawn_agent_process(
        Recorder(), sys.executable, "-m", "uamp_trio", "acp", *args, cwd=str(ROOT)
    )


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def _client(conn: Any) -> Recorder:
    # spawn_agent_process wraps our client; reach the instance we passed.
    return conn._session_updates._client  # type: ignore[no-any-return]


def test_initialize_new_session_prompt_streams_updates() -> None:
    async def main() -> None:
        async with _spawn() as (conn, _process):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            assert init.protocol_version == 1
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.load_session is True
            assert init.agent_info is not None and init.agent_info.name == "demo"

            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            assert session.session_id.startswith("sess_")

            result = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block("hello there agent")]
            )
            assert result.stop_reason == "end_turn"
            assert result.usage is not None and result.usage.output_tokens == 5
            recorder = _client(conn)
            assert recorder.texts(session.session_id) == "You said: hello there agent"
            chunks = [u for _, u in recorder.updates if isinstance(u, AgentMessageChunk)]
            assert len(chunks) == 5  # one update per streamed word

            # The session keeps its history: a second prompt sees the first.
            result = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block("again")]
            )
            assert result.stop_reason == "end_turn"
            assert recorder.texts(session.session_id).endswith("You said: again")

    _run(main())


def test_load_session_replays_history() -> None:
    async def main() -> None:
        async with _spawn() as (conn, _process):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("remember me")])
            recorder = _client(conn)
            recorder.updates.clear()
            await conn.load_session(cwd=str(ROOT), session_id=session.session_id, mcp_servers=[])
            users = recorder.texts(session.session_id, UserMessageChunk)
            agents = recorder.texts(session.session_id, AgentMessageChunk)
            assert users == "remember me"
            assert agents == "You said: remember me"

            with pytest.raises(acp.RequestError) as info:
                await conn.load_session(cwd=str(ROOT), session_id="sess_nope", mcp_servers=[])
            assert info.value.code == -32002

    _run(main())


def test_cancel_answers_cancelled() -> None:
    async def main() -> None:
        agent = "tests.interop.test_acp_stdio:slow_agent"
        async with _spawn("--agent", agent) as (conn, _process):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            recorder = _client(conn)
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")])
            )
            while not recorder.texts(session.session_id):
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=session.session_id)
            result = await prompt
            assert result.stop_reason == "cancelled"
            assert recorder.texts(session.session_id) == "Thinking"

            # The session survives the cancel.
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[acp.text_block("again")])
            )
            await asyncio.sleep(0.2)
            await conn.cancel(session_id=session.session_id)
            assert (await prompt).stop_reason == "cancelled"

    _run(main())


def test_thinking_and_tool_updates() -> None:
    async def main() -> None:
        agent = "tests.interop.test_acp_stdio:ToolAgent"
        async with _spawn("--agent", agent) as (conn, _process):
            init = await conn.initialize(protocol_version=1)
            assert init.agent_capabilities.prompt_capabilities.image is True
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            result = await conn.prompt(
                session_id=session.session_id,
                prompt=[
                    acp.text_block("look it up"),
                    acp.image_block("aGVsbG8=", "image/png"),
                ],
            )
            assert result.stop_reason == "end_turn"
            updates = [u for _, u in _client(conn).updates]
            kinds = [u.session_update for u in updates]
            assert kinds == [
                "agent_thought_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk",
            ]
            start = updates[1]
            assert isinstance(start, ToolCallStart)
            assert start.tool_call_id == "call_1" and start.title == "lookup"
            done = updates[2]
            assert isinstance(done, ToolCallProgress)
            assert done.status == "completed" and done.raw_output == "42"
            assert done.raw_input == {"q": "x"}

    _run(main())


def test_payment_required_then_retry_with_token(tmp_path: Path) -> None:
    from uamp_trio.trust.ledger import Ledger

    with Ledger(tmp_path / "ledger.db") as ledger:
        token = ledger.issue("1.00", "USD")

    async def main() -> None:
        async with _spawn("--ledger", str(tmp_path / "ledger.db")) as (conn, _process):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            with pytest.raises(acp.RequestError) as info:
                await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
            assert info.value.code == -32402
            accepts = info.value.data["accepts"]
            assert accepts[0]["scheme"] == "token" and accepts[0]["amount"] == "0.01"

            with pytest.raises(acp.RequestError) as info:
                await conn.prompt(
                    session_id=session.session_id,
                    prompt=[acp.text_block("hi")],
                    payment_token="tok_bad",
                )
            assert info.value.code == -32402
            assert info.value.data["code"] == "token_invalid"

            # The ACP client library carries extra fields in _meta.
            result = await conn.prompt(
                session_id=session.session_id,
                prompt=[acp.text_block("paid")],
                payment_token=token,
            )
            assert result.stop_reason == "end_turn"
            assert _client(conn).texts(session.session_id) == "You said: paid"

    _run(main())


def test_errors_keep_the_connection() -> None:
    async def main() -> None:
        async with _spawn() as (conn, _process):
            await conn.initialize(protocol_version=1)
            with pytest.raises(acp.RequestError) as info:
                await conn.prompt(session_id="sess_unknown", prompt=[acp.text_block("x")])
            assert info.value.code == -32002
            with pytest.raises(acp.RequestError) as info:
                await conn._conn.send_request("session/new", {"mcpServers": []})
            assert info.value.code == -32602
            with pytest.raises(acp.RequestError) as info:
                await conn._conn.send_request("no/such_method", {})
            assert info.value.code == -32601
            session = await conn.new_session(cwd="/", mcp_servers=[])
            assert (
                await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("ok")])
            ).stop_reason == "end_turn"

    _run(main())
