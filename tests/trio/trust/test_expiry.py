"""An upgrade token that expires while its WebSocket is open stops the next request.

Realtime and ACP over WebSocket, real servers on 127.0.0.1, trio-websocket as
the client. Realtime answers in its style (an ``error`` event, code
``unauthorized``, then close 1008: its clients reconnect with a fresh key);
ACP answers JSON-RPC ``-32000`` and ``authenticate`` (method ``bearer``)
renews the connection's token, for the same principal only. The agent never
runs for a refused request. (The UAMP WebSocket's per-session refresh is in
``test_sessions.py``.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import ConnectionClosed
from trio_websocket import open_websocket_url as open_ws

from tests._support.wire import recv, send, serving, until
from uamp_trio.app import create_app

from .agents import CountingAgent
from .issuer import Issuer

ISSUER = Issuer()


@pytest.fixture
def agent() -> CountingAgent:
    return CountingAgent()


async def _wait_past(exp: int) -> None:
    await trio.sleep(max(0.0, exp + 0.2 - time.time()))


@pytest.fixture
def setup(tmp_path: Path, agent: CountingAgent) -> tuple[Any, int, str]:
    """An app with JWT auth, and alice's token that expires in 2 s (with its ``exp``)."""
    app = create_app([agent], authenticator=ISSUER.authenticator(tmp_path))
    exp = int(time.time()) + 2
    return app, exp, ISSUER.token("alice", exp=exp)


async def test_realtime_refuses_the_first_event_after_expiry_and_closes(
    setup: tuple[Any, int, str], agent: CountingAgent
) -> None:
    app, exp, short = setup
    async with serving(app) as server:
        base = f"ws://127.0.0.1:{server.port}/agents/demo/realtime?token="
        with trio.fail_after(15):
            async with open_ws(base + short) as ws:
                await until(ws, "session.created")
                await send(ws, type="response.create")
                await until(ws, "response.done")
                await _wait_past(exp)
                await send(ws, type="response.create", event_id="evt_late")
                refused = await recv(ws)
                assert refused["type"] == "error"
                assert refused["error"]["code"] == "unauthorized"
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert closed.value.reason.code == 1008
            # The refresh path: a new connection with a fresh token.
            async with open_ws(base + ISSUER.token("alice")) as ws:
                await until(ws, "session.created")
                await send(ws, type="response.create")
                await until(ws, "response.done")
    assert [p.id for p in agent.runs] == ["alice", "alice"]


async def test_acp_refuses_after_expiry_and_authenticate_renews_for_the_same_principal(
    setup: tuple[Any, int, str], agent: CountingAgent
) -> None:
    app, exp, short = setup
    ids = iter(range(1, 100))

    async def call(ws: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = next(ids)
        await ws.send_message(
            orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        )
        while True:  # skip session/update notifications
            reply: dict[str, Any] = orjson.loads(await ws.get_message())
            if reply.get("id") == rid:
                return reply

    async with serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream?token={short}"
        with trio.fail_after(15):
            async with open_ws(url) as ws:
                init = await call(ws, "initialize", {"protocolVersion": 1})
                assert [m["id"] for m in init["result"]["authMethods"]] == ["bearer"]
                sid = (await call(ws, "session/new", {"cwd": "/", "mcpServers": []}))["result"][
                    "sessionId"
                ]
                prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "2 + 3"}]}
                assert "result" in await call(ws, "session/prompt", prompt)
                await _wait_past(exp)
                refused = await call(ws, "session/prompt", prompt)
                assert refused["error"]["code"] == -32000
                assert refused["error"]["data"] == {"status": 401, "code": "unauthorized"}
                # Another principal's token never takes the connection over.
                other = {"methodId": "bearer", "_meta": {"token": ISSUER.token("mallory")}}
                assert (await call(ws, "authenticate", other))["error"]["code"] == -32000
                bad = {"methodId": "bearer", "_meta": {"token": "not-a-jwt"}}
                assert (await call(ws, "authenticate", bad))["error"]["code"] == -32000
                assert (await call(ws, "session/prompt", prompt))["error"]["code"] == -32000
                fresh = {"methodId": "bearer", "_meta": {"token": ISSUER.token("alice")}}
                assert (await call(ws, "authenticate", fresh))["result"] == {}
                again = await call(ws, "session/prompt", prompt)
                assert again["result"]["stopReason"] == "end_turn"
    assert [p.id for p in agent.runs] == ["alice", "alice"]
