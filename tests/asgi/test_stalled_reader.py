"""A WebSocket peer that asks for a long answer and never reads it, against uamp_asgi under uvicorn.

Each of uvicorn's WebSocket implementations (``websockets``, ``websockets-sansio``,
``wsproto``) applies flow control: once the socket's buffers are full, the app's
``send`` waits. Without a send timeout it waits for good -- the reproduction
below: the agent's response, the connection and its sessions stay pinned while
the peer reads nothing. With ``Config.websocket_send_timeout`` the peer is
dropped as ``uamp serve`` drops it: the response is cancelled, one line is
logged (no traceback), the connection ends, and other clients are served. The
UAMP WebSocket, Realtime and ACP transports get it from the one wrapper
(:class:`uamp_asgi.websocket.WebSocket`). ``bench/attacks.py`` has the row
(``asgi_ws_stalled_reader``).
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

#: uvicorn's WebSocket implementations (``--ws``).
IMPLEMENTATIONS = ("websockets", "websockets-sansio", "wsproto")
TRANSPORTS = ("uamp", "realtime", "acp")
TIMEOUT = 10.0
#: Each delta: 64 KiB, so a few fill any socket buffer.
CHUNK = "x" * 65536
#: Deltas of a flood: 25 MiB, many times what the sockets buffer (a few MiB on loopback).
FLOOD = 400

pytestmark = pytest.mark.filterwarnings("ignore:The `websockets` implementation is deprecated")


class Flood:
    """Streams 64 KiB deltas (``flood``: FLOOD of them, ``flood N``: N) or says ``ok``;
    notes how each flood ended."""

    name = "flood"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended = threading.Event()
        self.how: list[str] = []

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id=self.name, provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        words = request.messages[-1].text.split()
        if words[:1] != ["flood"]:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))
            return
        self.started.set()
        try:
            for _ in range(int(words[1]) if len(words) > 1 else FLOOD):
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=CHUNK)))
            self.how.append("finished")
        except BaseException as exc:
            self.how.append(type(exc).__name__)
            raise
        finally:
            self.ended.set()


def _frame(payload: bytes) -> bytes:
    """A masked client text frame (RFC 6455 section 5.2; a zero mask is allowed)."""
    n = len(payload)
    assert n < 65536
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return b"\x81" + size + b"\0\0\0\0" + payload


def _stalled(base: str, path: str, messages: list[dict[str, object]]) -> socket.socket:
    """Open a WebSocket at ``path``, send ``messages`` and read nothing more.

    Its receive buffer is small, so the server's writes fill it at once.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(TIMEOUT)
    sock.connect(("127.0.0.1", int(base.rsplit(":", 1)[1])))
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # the 101 alone: nothing past it is read
    assert head.startswith(b"HTTP/1.1 101"), head
    sock.sendall(b"".join(_frame(json.dumps(m).encode()) for m in messages))
    return sock


def _ask_for_a_flood(base: str, transport: str) -> socket.socket:
    """A stalled reader that asked ``transport`` for the flood."""
    if transport == "uamp":
        return _stalled(
            base,
            "/agents/flood/uamp",
            [
                {"type": "session.create", "uamp_version": "1.0"},
                {"type": "input.text", "text": "flood"},
                {"type": "response.create"},
            ],
        )
    if transport == "realtime":
        item = {"type": "message", "role": "user"}
        item["content"] = [{"type": "input_text", "text": "flood"}]
        return _stalled(
            base,
            "/agents/flood/realtime",
            [{"type": "conversation.item.create", "item": item}, {"type": "response.create"}],
        )
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new"}
    new["params"] = {"cwd": "/", "mcpServers": []}
    sid = httpx.post(f"{base}/agents/flood/acp", json=new, timeout=TIMEOUT).json()["result"]
    prompt = {"sessionId": sid["sessionId"], "prompt": [{"type": "text", "text": "flood"}]}
    return _stalled(
        base,
        "/agents/flood/acp/stream",
        [{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt}],
    )


def _answered(base: str) -> bool:
    """Whether another client gets a whole UAMP response now."""
    url = base.replace("http://", "ws://") + "/agents/flood/uamp"
    with ws_connect(url, open_timeout=TIMEOUT) as ws:
        ws.send(json.dumps({"type": "session.create", "uamp_version": "1.0"}))
        ws.send(json.dumps({"type": "input.text", "text": "hi"}))
        ws.send(json.dumps({"type": "response.create"}))
        while True:
            event = json.loads(ws.recv(timeout=TIMEOUT))
            if event["type"] in ("response.done", "response.error"):
                return bool(event["type"] == "response.done")


def _read_to_the_end(sock: socket.socket) -> tuple[bytes, bool]:
    """What the server sent the stalled reader (the last 64 KiB), and whether it then closed."""
    tail, deadline = b"", time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except OSError:
            return tail, False
        if not chunk:
            return tail, True
        tail = (tail + chunk)[-65536:]
    return tail, False


@contextmanager
def _serving(
    agent: Flood, ws: str, send_timeout: float, caplog: pytest.LogCaptureFixture | None = None
) -> Iterator[str]:
    """uvicorn serving ``agent``; its own log (which does not propagate) into ``caplog``,
    through its shutdown."""
    config = uamp_asgi.Config(websocket_send_timeout=send_timeout)
    uvicorn_log = logging.getLogger("uvicorn")
    with ExitStack() as stack:
        if caplog is not None:
            stack.callback(uvicorn_log.removeHandler, caplog.handler)  # after the server stops
        base = stack.enter_context(uvicorn_server(uamp_asgi.app([agent], config=config), ws=ws))
        if caplog is not None:  # uvicorn configured its loggers as it started
            uvicorn_log.addHandler(caplog.handler)
        yield base


def _troubles(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log records with a traceback or of level ERROR and above (uvicorn's included)."""
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ws", IMPLEMENTATIONS)
def test_without_a_send_timeout_a_stalled_reader_pins_its_response(
    ws: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The abuse, reproduced: the response neither runs on nor ends while nobody reads."""
    agent = Flood()
    with _serving(agent, ws, math.inf, caplog) as base:
        stalled = _ask_for_a_flood(base, transport)
        try:
            assert agent.started.wait(TIMEOUT)
            assert not agent.ended.wait(1.5)  # held in a send that waits for good
            assert _answered(base)
        finally:
            stalled.close()  # the peer goes: only now does the send return
        assert agent.ended.wait(TIMEOUT)
    # A peer that went away mid-answer is no error (uvicorn's ClientDisconnected is Closed).
    assert _troubles(caplog) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ws", IMPLEMENTATIONS)
def test_a_stalled_reader_is_dropped_after_the_send_timeout(
    ws: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="uamp_asgi")
    agent = Flood()
    with _serving(agent, ws, 0.3, caplog) as base:
        stalled = _ask_for_a_flood(base, transport)
        with stalled:
            assert agent.started.wait(TIMEOUT)
            assert agent.ended.wait(TIMEOUT)  # about 0.3 s after its send began to wait
            assert agent.how == ["CancelledError"]  # stopped, not finished
            assert _answered(base)  # the server serves on
            tail, closed = _read_to_the_end(stalled)
        assert closed  # what the server had buffered, then the end of the connection
        assert b"response.done" not in tail
    dropped = [r for r in caplog.records if "not reading" in r.getMessage()]
    assert [(r.name, r.levelno) for r in dropped] == [("uamp_asgi.websocket", logging.INFO)]
    assert re.search(r"not reading for 0\.3s", dropped[0].getMessage())
    assert _troubles(caplog) == []


def test_a_reader_that_keeps_up_is_served_to_the_end() -> None:
    """Only a peer that stops reading is dropped: a long answer read as it comes ends."""
    agent = Flood()
    with _serving(agent, "websockets-sansio", 0.3) as base:
        url = base.replace("http://", "ws://") + "/agents/flood/uamp"
        with ws_connect(url, open_timeout=TIMEOUT, max_size=None) as ws:
            ws.send(json.dumps({"type": "session.create", "uamp_version": "1.0"}))
            ws.send(json.dumps({"type": "input.text", "text": "flood 200"}))  # 12.5 MiB
            ws.send(json.dumps({"type": "response.create"}))
            deltas = 0
            while True:
                event = json.loads(ws.recv(timeout=TIMEOUT))
                deltas += event["type"] == "response.delta"
                if event["type"] in ("response.done", "response.error"):
                    break
    assert (event["type"], deltas, agent.how) == ("response.done", 200, ["finished"])


@pytest.mark.parametrize("value", [0, -1.0, math.nan])
def test_the_send_timeout_must_be_positive(value: float) -> None:
    with pytest.raises(ValueError, match="websocket_send_timeout must be positive"):
        uamp_asgi.Config(websocket_send_timeout=value)


def test_uamp_serve_s_flag_sets_it() -> None:
    from uamp_trio.asgi_options import serve_options

    assert serve_options(["--ws-send-timeout", "2.5"])["websocket_send_timeout"] == 2.5
    default = uamp_asgi.Config(**serve_options([])).websocket_send_timeout
    assert default == uamp_asgi.Config().websocket_send_timeout == 30.0
