"""An ACP session's kept history is bounded in bytes, not only in messages (``uamp_asgi``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto.adapters.acp import MAX_HISTORY_BYTES
from uamp_proto.responder import TurnRequest

PROMPT = "p" * (256 * 1024)  # twenty of these: 5 MiB sent into one session


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


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
