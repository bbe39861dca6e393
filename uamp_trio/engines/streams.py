"""Reading and writing a byte stream whose peer may go away at any moment.

Every engine, the WebSocket connection driver, the UAMP client and ACP over
stdio read their peer the same way: a broken or closed stream is simply its
end, ``b""``, which the caller's protocol machine then handles as the peer
leaving.

trio ends every socket operation with a scheduler round, also one the kernel
completed at once: a task that reads a request already waiting and writes a
response that fits the socket's buffer waits behind every other ready task
twice. Under a flood (thousands of connections closing in one burst) each of
those rounds is long, and a health check needs several of them. On a plain
TCP stream :func:`received` and :func:`send_now` first try the operation
without a round (as asyncio's transports write at once when their buffer is
empty) and fall back to trio's own, which then also reports any error in
trio's terms. Callers use them where the task has just been woken or started,
so each still yields once per wake-up; a loop over already-buffered work
keeps using the awaited operations.
"""

from __future__ import annotations

import os
from typing import Final

import trio

__all__ = [
    "FRAMES_READ_SIZE",
    "READ_SIZE",
    "receive_or_eof",
    "receive_when_ready",
    "received",
    "send_now",
    "written_now",
]

#: Bytes asked of a socket per read.
READ_SIZE: Final = 65536
#: Bytes asked per read where parsing costs per frame, not per byte
#: (WebSocket): a read is parsed without yielding to other tasks, and 64 KiB
#: of 7-byte pings took 30 ms to parse; 8 KiB bounds that wait to an eighth.
FRAMES_READ_SIZE: Final = 8192


async def receive_or_eof(stream: trio.abc.ReceiveStream, max_bytes: int = READ_SIZE) -> bytes:
    """The next bytes of ``stream``; ``b""`` (its end) once the peer is gone or it closed."""
    try:
        return bytes(await stream.receive_some(max_bytes))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


async def receive_when_ready(stream: trio.abc.ReceiveStream, max_bytes: int = READ_SIZE) -> bytes:
    """:func:`receive_or_eof` for a task that has nothing to do until its peer sends.

    On a plain TCP stream it waits for the socket to be readable and then
    reads once: trio's ``receive_some`` reads first, fails (nothing yet),
    waits and reads again, through a dozen more Python calls. Either way the
    task yields once per read. Only for a stream one task reads at a time
    (trio's check of concurrent readers is bypassed).
    """
    if type(stream) is not trio.SocketStream:
        return await receive_or_eof(stream, max_bytes)
    sock = stream.socket
    while True:
        fd = sock.fileno()
        if fd < 0:
            return b""  # closed here (trio's own read says ClosedResourceError)
        try:
            await trio.lowlevel.wait_readable(fd)
            return os.read(fd, max_bytes)
        except BlockingIOError:
            continue  # woken with nothing to read after all: wait again
        except (OSError, trio.ClosedResourceError):
            return b""  # reset, closed here meanwhile: the end, as receive_or_eof says


def received(stream: trio.abc.ReceiveStream, max_bytes: int = READ_SIZE) -> bytes | None:
    """Bytes already waiting on a plain TCP ``stream`` (``b""``: its end), read at once.

    ``None`` when none are waiting, on an error, or for any other kind of
    stream: then ``await stream.receive_some()`` is the way (and reports the
    error).
    """
    if type(stream) is not trio.SocketStream:
        return None
    try:
        return os.read(stream.socket.fileno(), max_bytes)
    except OSError:  # nothing yet (EAGAIN), closed (EBADF) or broken
        return None


def written_now(stream: trio.abc.SendStream, data: bytes) -> int:
    """How much of ``data`` a plain TCP ``stream`` took at once, without waiting.

    0 when the socket is full, on an error (trio's ``send_all`` then says
    which) and for any other kind of stream. Only for a stream one task
    writes at a time (trio's own check of concurrent writers is bypassed).
    """
    if type(stream) is not trio.SocketStream:
        return 0
    try:
        return os.write(stream.socket.fileno(), data)
    except OSError:  # full (EAGAIN), closed or broken: trio's path says which
        return 0


async def send_now(stream: trio.abc.SendStream, data: bytes) -> None:
    """``stream.send_all(data)``, without a scheduler round when the kernel takes it whole.

    Only for a stream one task writes at a time (see :func:`written_now`).
    """
    if data:
        sent = written_now(stream, data)
        if sent == len(data):
            return
        if sent:
            data = data[sent:]
    await stream.send_all(data)
