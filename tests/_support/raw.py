"""Raw-socket helpers for tests that speak a protocol by hand."""

from __future__ import annotations

import socket
from typing import Any

import trio

from uamp_trio.client.websocket import _handshake
from uamp_trio.engines.ws_frames import make_engine


async def receive_or_eof(stream: trio.abc.ReceiveStream, max_bytes: int = 65536) -> bytes:
    """The next bytes from ``stream``; ``b""`` once the peer has closed or broken the connection."""
    try:
        return bytes(await stream.receive_some(max_bytes))
    except trio.BrokenResourceError:
        return b""


async def open_raw_ws(
    port: int, path: str, rcvbuf: int | None = None
) -> tuple[trio.SocketStream, Any, list[bytes]]:
    """A raw WebSocket client on 127.0.0.1, past the handshake: its stream, frame engine and
    the messages that came with the handshake's answer. ``rcvbuf`` sets a small receive buffer."""
    sock = trio.socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    rest = await _handshake(stream, f"127.0.0.1:{port}", path, [], [])
    frames = make_engine(client=True, max_message_size=None)
    return stream, frames, frames.feed(rest) if rest else []
