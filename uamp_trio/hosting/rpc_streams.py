"""JSON-RPC over a stream of payloads: each answered in its own task, stdio as NDJSON.

The Agent Client Protocol and MCP both run JSON-RPC over a process's
stdin/stdout (one message per line) and, for ACP, over a WebSocket (one per
message). Both need the same loop: read a payload, answer it in a task of
its own (so a cancel notification is read while a long call runs), and stop
reading while too many are being answered (a peer that sends and never
reads would otherwise grow a task and a reply per payload).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable

import trio

from uamp_proto import jsonrpc as rpc
from uamp_proto.jsonrpc import answer_payload

from ..engines.streams import receive_or_eof
from ..engines.websocket import ConnectionClosed

__all__ = [
    "PEER_GONE",
    "Handle",
    "SendPayload",
    "answer_payload",
    "serve_ndjson",
    "serve_payloads",
]

#: What a write to a peer that left raises (a socket reset or closed, a
#: WebSocket closed). A call whose peer left ends with it: nobody is there
#: to answer, and it is no failure of the server's.
PEER_GONE: tuple[type[Exception], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ConnectionClosed,
)

#: Send one JSON-RPC payload (already encoded) to the peer.
SendPayload = Callable[[bytes], Awaitable[None]]

#: Answer one payload: the reply, or ``None`` when none is owed.
Handle = Callable[[bytes | str], Awaitable[bytes | None]]


async def serve_payloads(
    handle: Handle,
    receive: Callable[[], Awaitable[bytes | str | None]],
    send: SendPayload,
    *,
    drain: bool,
    max_pending: int = 64,
) -> None:
    """Read payloads until ``receive`` returns ``None``; answer each in its own task.

    Args:
        drain: At end of input, let running requests finish and answer
            (stdio: the reader may still be listening after closing our
            stdin); otherwise cancel them (a closed socket reads nothing).
        max_pending: Most payloads being answered at once; with that many,
            nothing more is read until one is answered.
    """
    slots = trio.Semaphore(max_pending)

    async def answer(data: bytes | str) -> None:
        try:
            with contextlib.suppress(*PEER_GONE):  # its notifications or its reply
                reply = await handle(data)
                if reply is not None:
                    await send(reply)
        finally:
            slots.release()

    async with trio.open_nursery() as nursery:
        while True:
            await slots.acquire()
            data = await receive()
            if data is None:
                slots.release()
                break
            nursery.start_soon(answer, data)
        if not drain:
            nursery.cancel_scope.cancel()


async def serve_ndjson(
    handler_for: Callable[[SendPayload], Handle],
    *,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    max_line: int = 16 * 1024 * 1024,
) -> None:
    """Serve newline-delimited JSON-RPC on ``stdin``/``stdout`` until EOF.

    Args:
        handler_for: Given the function that writes to the peer (for
            notifications), the function that answers one payload.
        stdin: Where requests arrive (default: the process's fd 0).
        stdout: Where answers go (default: fd 1); writes never interleave.
        max_line: Longest accepted line; longer ones get ``-32600``.
    """
    own: list[trio.lowlevel.FdStream] = []
    if stdin is None:
        fd_in = trio.lowlevel.FdStream(os.dup(0))
        own.append(fd_in)
        stdin = fd_in
    if stdout is None:
        fd_out = trio.lowlevel.FdStream(os.dup(1))
        own.append(fd_out)
        stdout = fd_out
    lock = trio.StrictFIFOLock()
    out, source = stdout, stdin

    async def send(payload: bytes) -> None:
        async with lock:
            await out.send_all(payload + b"\n")

    lines = rpc.LineBuffer(max_line)

    async def receive() -> bytes | None:
        while True:
            try:
                line = lines.next_line()
            except rpc.LineTooLong as exc:
                await send(rpc.encode(rpc.error_response(None, rpc.INVALID_REQUEST, str(exc))))
                continue
            if line is not None:
                return line
            if lines.eof:
                return None
            lines.receive_data(await receive_or_eof(source))

    try:
        await serve_payloads(handler_for(send), receive, send, drain=True)
    finally:
        for stream in own:
            with contextlib.suppress(Exception):
                await stream.aclose()
