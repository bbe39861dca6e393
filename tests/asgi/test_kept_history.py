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


BIG = "b" * (600 * 1024)  # three of these fill a conversation (2 MiB at most)


def _noting(seen: list[int]) -> Any:
    async def hist(turn: TurnRequest) -> AsyncIterator[str]:
        """Says ``ok``; notes the bytes of history each turn was given."""
        seen.append(sum(len(m.text) for m in turn.messages[:-1]))
        yield "ok"

    return function_agent(hist)


def test_a_principals_sessions_keep_one_budget_the_least_recent_start_afresh() -> None:
    seen: list[int] = []
    with uvicorn_server(uamp_asgi.app(_noting(seen))) as base:
        url = f"{base}/agents/hist/acp"
        with httpx.Client(timeout=30) as http:

            def prompt(sid: str, text: str) -> None:
                params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
                got = http.post(url, json=rpc("session/prompt", params))
                assert got.json()["result"]["stopReason"] == "end_turn"

            sids = []
            for _ in range(10):  # ten sessions of ~1.8 MiB: over the 16 MiB budget
                new = http.post(url, json=rpc("session/new", {"cwd": "/", "mcpServers": []}))
                sids.append(new.json()["result"]["sessionId"])
                for n in range(3):
                    prompt(sids[-1], f"{n} {BIG}")
            prompt(sids[0], "again")
            prompt(sids[-1], "again")
    first, last = seen[-2:]
    assert first == 0  # the least recently prompted session started afresh
    assert last > 3 * len(BIG) // 2  # the newest kept its conversation


def test_a_principals_named_conversations_keep_one_budget() -> None:
    seen: list[int] = []
    with uvicorn_server(uamp_asgi.app(_noting(seen))) as base:
        url = f"{base}/agents/hist/mcp"
        with httpx.Client(timeout=30) as http:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
            made = http.post(url, json=rpc("initialize", hello))
            headers = {"mcp-session-id": made.headers["mcp-session-id"]}
            rid = 1

            def call(name: str, text: str) -> None:
                nonlocal rid
                rid += 1
                args = {"prompt": text, "session": name}
                body = rpc("tools/call", {"name": tool_name("hist"), "arguments": args}, rid)
                got = http.post(url, json=body, headers=headers)
                assert got.json()["result"]["isError"] is False, got.text

            for c in range(10):
                for n in range(3):
                    call(f"c{c}", f"{n} {BIG}")
            call("c0", "again")
            call("c9", "again")
    first, last = seen[-2:]
    assert first == 0
    assert last > 3 * len(BIG) // 2
