"""A JSON-RPC peer that leaves while its call is answered is ordinary, not a server error.

ACP's ``session/load`` replays a session's history as ``session/update``
notifications, over an HTTP response stream or a WebSocket. A client that
closes partway used to make the method's handler log ``ACP method
session/load failed`` with a traceback per call (the same catch-all guards
MCP's methods): a stranger could fill the server's error log by opening and
dropping loads. Now the peer's going ends the call quietly, and the server
goes on answering everyone else.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from uamp_trio.app import App
from uamp_trio.demo import DemoAgent
from uamp_trio.transports.acp import mount

TIMEOUT = 20
#: Three prompts this big give ``session/load`` about 1.8 MB to replay: it
#: is still writing when the client leaves.
BIG = "x" * (600 * 1024)
LOADS = 6


def rpc(id: Any, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


async def _filled_session(base: str) -> str:
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
        made = await client.post("/agents/demo/acp", content=rpc(1, "session/new", {"cwd": "/"}))
        sid = str(made.json()["result"]["sessionId"])
        for n in range(3):
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": f"{n} {BIG}"}]}
            got = await client.post("/agents/demo/acp", content=rpc(2, "session/prompt", prompt))
            assert "result" in got.json(), got.text[:200]
    return sid


async def _served(serve_app: Any) -> tuple[Any, str]:
    """The demo agent with ACP mounted on a server of its own, and its base URL."""
    app = App([DemoAgent()])
    mount(app)
    server = await serve_app(app)
    return server, f"http://127.0.0.1:{server.port}"


def _load(sid: str) -> bytes:
    return rpc(3, "session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})


async def _answers_after(base: str, sid: str) -> None:
    """The server still answers the same session (nothing was left broken)."""
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "2 + 3"}]}
        got = await client.post("/agents/demo/acp", content=rpc(4, "session/prompt", prompt))
        assert got.json()["result"]["stopReason"] == "end_turn", got.text


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("uamp") and (r.exc_info or r.levelno >= logging.ERROR)
    ]


async def _reset(stream: trio.SocketStream) -> None:
    """Close with a reset, not a polite close: the server's next write fails."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def _settled(server: Any) -> None:
    """Wait until the server closed every connection the test left."""
    while server.connection_count:
        await trio.sleep(0.01)


async def test_a_client_leaving_an_http_load_logs_no_error(
    serve_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server, base = await _served(serve_app)
    with trio.fail_after(TIMEOUT):
        sid = await _filled_session(base)
        body = _load(sid)
        head = (
            f"POST /agents/demo/acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        for _ in range(LOADS):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(head + body)
            assert b"200" in await stream.receive_some(4096)
            await _reset(stream)
        await _settled(server)
        await _answers_after(base, sid)
    assert _errors(caplog) == []


async def test_a_client_leaving_a_websocket_load_logs_no_error(
    serve_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server, base = await _served(serve_app)
    url = f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream"
    with trio.fail_after(TIMEOUT):
        sid = await _filled_session(base)
        for _ in range(LOADS):
            async with trio_websocket.open_websocket_url(url, max_message_size=1 << 24) as ws:
                await ws.send_message(_load(sid).decode())
                note = json.loads(await ws.get_message())
                assert note["method"] == "session/update", note
                await _reset(ws._stream)  # gone without a close handshake
        await _settled(server)
        await _answers_after(base, sid)
    assert _errors(caplog) == []
