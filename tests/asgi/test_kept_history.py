"""ACP sessions and named MCP conversations keep a history bounded in bytes too (``uamp_asgi``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto.adapters.mcp import tool_name
from uamp_proto.history import MAX_HISTORY_BYTES
from uamp_proto.responder import TurnRequest

PROMPT = "p" * (256 * 1024)  # twenty of these: 5 MiB sent into one conversation


def rpc(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def test_a_session_keeps_a_bounded_history() -> None:
    seen: list[int] = []

    async def hist(turn: TurnRequest) -> AsyncIterator[str]:
        """Says ``ok``; notes the bytes of history each turn was given."""
        seen.append(sum(len(m.text) for m in turn.messages[:-1]))
        yield "ok"

    with uvicorn_server(uamp_asgi.app(function_agent(hist))) as base:
        url = f"{base}/agents/hist/acp"
        with httpx.Client(timeout=30) as http:
            new = http.post(url, json=rpc("session/new", {"cwd": "/", "mcpServers": []}))
            sid = new.json()["result"]["sessionId"]
            for n in range(20):
                prompt = [{"type": "text", "text": f"{n} {PROMPT}"}]
                got = http.post(
                    url, json=rpc("session/prompt", {"sessionId": sid, "prompt": prompt})
                )
                assert got.json()["result"]["stopReason"] == "end_turn"
    assert max(seen) <= MAX_HISTORY_BYTES  # 5 MiB kept before the bound
    assert seen[-1] > 0  # the newest exchanges are still there


def test_a_named_conversation_keeps_a_bounded_history() -> None:
    seen: list[int] = []

    async def hist(turn: TurnRequest) -> AsyncIterator[str]:
        """Says ``ok``; notes the bytes of history each turn was given."""
        seen.append(sum(len(m.text) for m in turn.messages[:-1]))
        yield "ok"

    with uvicorn_server(uamp_asgi.app(function_agent(hist))) as base:
        url = f"{base}/agents/hist/mcp"
        with httpx.Client(timeout=30) as http:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
            made = http.post(url, json=rpc("initialize", hello))
            headers = {"mcp-session-id": made.headers["mcp-session-id"]}
            for n in range(20):
                args = {"prompt": f"{n} {PROMPT}", "session": "long"}
                call = {"name": tool_name("hist"), "arguments": args}
                got = http.post(url, json=rpc("tools/call", call, n + 2), headers=headers)
                assert got.status_code == 200, got.text
                assert got.json()["result"]["isError"] is False
    assert max(seen) <= MAX_HISTORY_BYTES  # 5 MiB kept before the bound
    assert seen[-1] > 0  # the newest exchanges are still there
