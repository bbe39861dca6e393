"""Reading a byte stream whose peer may go away at any moment.

Every engine, the WebSocket connection driver, the UAMP client and ACP over
stdio read their peer the same way: a broken or closed stream is simply its
end, ``b""``, which the caller's protocol machine then handles as the peer
leaving.
"""

from __future__ import annotations

from typing import Final

import trio

__all__ = ["FRAMES_READ_SIZE", "READ_SIZE", "receive_or_eof"]

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
