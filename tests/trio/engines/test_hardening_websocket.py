"""WebSocket under hostile peers: ping floods, bad UTF-8, big messages, peers that stop reading.

Every test runs against the three server-side WebSocket paths: the UAMP
transport with each framing engine of :mod:`uamp_trio.engines.ws_frames`, and
the wsproto socket of :mod:`uamp_trio.engines.websocket` that the other
WebSocket transports use. The client is a raw socket writing frames by hand.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest
import trio

from tests._support.agents import TestAgent
from tests._support.raw import receive_or_eof
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App, Server
from uamp_trio.engines.websocket import ConnectionClosed, WebSocketRequest
from uamp_trio.engines.ws_frames import make_engine
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.transports import uamp_ws

TIMEOUT = 20
LIMIT = 1000
TARGETS = ["uamp-websockets", "uamp-wsproto", "engine-wsproto"]
OP_TEXT, OP_CONT, OP_CLOSE, OP_PING, OP_PONG = 1, 0, 8, 9, 10


class Endless(TestAgent):
    """Streams deltas until cancelled."""

    name = "endless"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        while True:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x" * 4000)))


def frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A client frame (masked with a zero key, which leaves the payload as it is)."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 65536:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    return bytes([first]) + length + b"\0\0\0\0" + payload


def parse_frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Take the whole (unmasked, server) frames off the front of ``buf``."""
    out = []
    while len(buf) >= 2:
        n = buf[1] & 0x7F
        start = 2
        if n == 126:
            if len(buf) < 4:
                break
            n, start = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, start = struct.unpack("!Q", buf[2:10])[0], 10
        if len(buf) < start + n:
            break
        out.append((buf[0] & 0x0F, bytes(buf[start : start + n])))
        del buf[: start + n]
    return out


@asynccontextmanager
async def serving(target: str, **config: object) -> AsyncIterator[tuple[Server, trio.Event]]:
    """A server on 127.0.0.1:0 with the WebSocket path ``target`` at ``/ws``.

    Yields the server and an event set when the engine-level handler ends.
    """
    ended = trio.Event()
    app = App([Endless()])
    if target.startswith("uamp-"):
        engine = target.removeprefix("uamp-")
        limits = SessionLimits(max_message_size=LIMIT, send_timeout=0.3)
        cfg = uamp_ws.UampWebSocketConfig(limits=limits, engine=engine)  # type: ignore[arg-type]
        app.mount(lambda a: uamp_ws.mount(a, cfg))
    else:

        async def flood_or_echo(pending: WebSocketRequest) -> None:
            ws = await pending.accept()
            try:
                while True:
                    message = await ws.receive()
                    if message == "flood":
                        while True:
                            await ws.send("x" * 4000)
                    await ws.send(message)
            except ConnectionClosed:
                pass
            finally:
                ended.set()

        app.router.add_websocket("/ws", flood_or_echo)
    server = Server(
        app,
        port=0,
        shutdown_grace=0.5,
        websocket_max_message_size=LIMIT,
        websocket_send_timeout=0.3,
        **config,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server, ended
        nursery.cancel_scope.cancel()


async def connect(port: int, rcvbuf: int | None = None) -> tuple[trio.SocketStream, bytearray]:
    sock = trio.socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    await stream.send_all(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += await stream.receive_some(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    return stream, bytearray(rest)


async def close_code(stream: trio.SocketStream, buf: bytearray) -> int | None:
    """Read until the server's close frame (its code) or the end of the stream (``None``)."""
    while True:
        for opcode, payload in parse_frames(buf):
            if opcode == OP_CLOSE:
                return int(struct.unpack("!H", payload[:2])[0])
        data = await receive_or_eof(stream)
        if not data:
            return None
        buf += data


@pytest.mark.parametrize("engine", ["websockets", "wsproto"])
def test_a_ping_flood_leaves_one_pong_queued(engine: str) -> None:
    frames = make_engine(client=False, max_message_size=LIMIT, engine=engine)  # type: ignore[arg-type]
    frames.feed(b"".join(frame(OP_PING, struct.pack("!I", i)) for i in range(10_000)))
    assert frames.owes
    pongs = parse_frames(bytearray(frames.take()))
    assert pongs == [(OP_PONG, struct.pack("!I", 9_999))]  # RFC 6455 section 5.5.3


@pytest.mark.parametrize("target", TARGETS)
async def test_a_ping_flood_over_a_socket_gets_few_pongs_ending_with_the_latest(
    target: str,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(target) as (server, _):
            stream, buf = await connect(server.port)
            count = 10_000
            await stream.send_all(
                b"".join(frame(OP_PING, struct.pack("!I", i)) for i in range(count))
            )
            pongs = 0
            last = b""
            while last != struct.pack("!I", count - 1):
                for opcode, payload in parse_frames(buf):
                    if opcode == OP_PONG:
                        pongs += 1
                        last = payload
                if last != struct.pack("!I", count - 1):
                    data = await stream.receive_some(65536)
                    assert data
                    buf += data
            # One pong per batch of pings the server read, not one per ping.
            assert pongs <= 100, pongs
            await stream.aclose()


async def _close_code_after(target: str, frames: list[bytes]) -> int | None:
    """The close code a fresh connection to ``target`` gets for ``frames``."""
    with trio.fail_after(TIMEOUT):
        async with serving(target) as (server, _):
            stream, buf = await connect(server.port)
            await stream.send_all(b"".join(frames))
            code = await close_code(stream, buf)
            await stream.aclose()
            return code


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "frames",
    [
        [frame(OP_TEXT, b'{"type": "\xff\xfe"}')],
        [frame(OP_TEXT, b'{"type": "\xc3', fin=False), frame(OP_CONT, b'\x28"}')],
    ],
    ids=["one-frame", "fragmented"],
)
async def test_invalid_utf8_in_a_text_message_closes_with_1007(
    target: str, frames: list[bytes]
) -> None:
    assert await _close_code_after(target, frames) == 1007


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "frames",
    [
        [frame(OP_TEXT, b"x" * (2 * LIMIT))],
        [frame(OP_TEXT, b"x" * 600, fin=False), frame(OP_CONT, b"x" * 600)],
    ],
    ids=["one-frame", "fragmented"],
)
async def test_a_message_over_the_limit_closes_with_1009(target: str, frames: list[bytes]) -> None:
    assert await _close_code_after(target, frames) == 1009


@pytest.mark.parametrize("target", TARGETS)
async def test_a_peer_that_stops_reading_is_dropped_after_the_send_timeout(target: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(target) as (server, ended):
            stream, _ = await connect(server.port, rcvbuf=16 * 1024)
            if target.startswith("uamp-"):
                for event in (
                    {
                        "type": "session.create",
                        "uamp_version": "1.0",
                        "agent": "endless",
                        "session": {"modalities": ["text"]},
                    },
                    {"type": "input.text", "text": "go"},
                    {"type": "response.create"},
                ):
                    await stream.send_all(frame(OP_TEXT, orjson.dumps(event)))
            else:
                await stream.send_all(frame(OP_TEXT, b"flood"))
            # Never read again: the server's writes stall on a full buffer
            # until the send timeout drops the connection.
            while server.connection_count:
                await trio.sleep(0.05)
            if not target.startswith("uamp-"):
                await ended.wait()
            await stream.aclose()
