"""ACP sessions and named MCP conversations keep a history bounded in bytes too (``uamp serve``)."""

from __future__ import annotations

from typing import Any

import httpx
import trio

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.mcp import tool_name
from uamp_proto.history import MAX_HISTORY_BYTES
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app

PROMPT = "p" * (256 * 1024)  # twenty of these: 5 MiB sent into one conversation


class History(TestAgent):
    """Says ``ok``; notes the bytes of history each turn was given."""

    name = "hist"

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.seen.append(sum(len(m.text) for m in request.messages[:-1]))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


def rpc(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def test_a_session_keeps_a_bounded_history(serve_app: Any) -> None:
    agent = History()
    server = await serve_app(create_app([agent]))
    url = f"{server.url}/agents/hist/acp"
    with trio.fail_after(60):
        async with httpx.AsyncClient(timeout=30) as http:
            new = await http.post(url, json=rpc("session/new", {"cwd": "/", "mcpServers": []}))
            sid = new.json()["result"]["sessionId"]
            for n in range(20):
                prompt = [{"type": "text", "text": f"{n} {PROMPT}"}]
                got = await http.post(
                    url, json=rpc("session/prompt", {"sessionId": sid, "prompt": prompt})
                )
                assert got.json()["result"]["stopReason"] == "end_turn"
    assert max(agent.seen) <= MAX_HISTORY_BYTES  # 5 MiB kept before the bound
    assert agent.seen[-1] > 0  # the newest exchanges are still there


async def test_a_named_conversation_keeps_a_bounded_history(serve_app: Any) -> None:
    agent = History()
    server = await serve_app(create_app([agent]))
    url = f"{server.url}/agents/hist/mcp"
    with trio.fail_after(60):
        async with httpx.AsyncClient(timeout=30) as http:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
            made = await http.post(url, json=rpc("initialize", hello))
            headers = {"mcp-session-id": made.headers["mcp-session-id"]}
            for n in range(20):
                args = {"prompt": f"{n} {PROMPT}", "session": "long"}
                call = {"name": tool_name("hist"), "arguments": args}
                got = await http.post(url, json=rpc("tools/call", call, n + 2), headers=headers)
                assert got.status_code == 200, got.text
                assert got.json()["result"]["isError"] is False
    assert max(agent.seen) <= MAX_HISTORY_BYTES  # 5 MiB kept before the bound
    assert agent.seen[-1] > 0  # the newest exchanges are still there


BIG = "b" * (600 * 1024)  # three of these fill a conversation (2 MiB at most)


async def test_a_principals_sessions_keep_one_budget_the_least_recent_start_afresh(
    serve_app: Any,
) -> None:
    agent = History()
    server = await serve_app(create_app([agent]))
    url = f"{server.url}/agents/hist/acp"
    sids: list[str] = []
    with trio.fail_after(120):
        async with httpx.AsyncClient(timeout=30) as http:

            async def prompt(sid: str, text: str) -> None:
                params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
                got = await http.post(url, json=rpc("session/prompt", params))
                assert got.json()["result"]["stopReason"] == "end_turn"

            for _ in range(10):  # ten sessions of ~1.8 MiB: over the 16 MiB budget
                new = await http.post(url, json=rpc("session/new", {"cwd": "/", "mcpServers": []}))
                sids.append(new.json()["result"]["sessionId"])
                for n in range(3):
                    await prompt(sids[-1], f"{n} {BIG}")
            await prompt(sids[0], "again")
            await prompt(sids[-1], "again")
    first, last = agent.seen[-2:]
    assert first == 0  # the least recently prompted session started afresh
    assert last > 3 * len(BIG) // 2  # the newest kept its conversation


async def test_a_principals_named_conversations_keep_one_budget(serve_app: Any) -> None:
    agent = History()
    server = await serve_app(create_app([agent]))
    url = f"{server.url}/agents/hist/mcp"
    with trio.fail_after(120):
        async with httpx.AsyncClient(timeout=30) as http:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
            made = await http.post(url, json=rpc("initialize", hello))
            headers = {"mcp-session-id": made.headers["mcp-session-id"]}
            calls = 0

            async def call(name: str, text: str) -> None:
                nonlocal calls
                calls += 1
                args = {"prompt": text, "session": name}
                body = rpc("tools/call", {"name": tool_name("hist"), "arguments": args}, calls + 1)
                got = await http.post(url, json=body, headers=headers)
                assert got.json()["result"]["isError"] is False, got.text

            for c in range(10):
                for n in range(3):
                    await call(f"c{c}", f"{n} {BIG}")
            await call("c0", "again")
            await call("c9", "again")
    first, last = agent.seen[-2:]
    assert first == 0
    assert last > 3 * len(BIG) // 2
