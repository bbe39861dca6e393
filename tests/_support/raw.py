"""Raw-socket helpers for tests that speak a protocol by hand."""

from __future__ import annotations

import trio


async def receive_or_eof(stream: trio.abc.ReceiveStream, max_bytes: int = 65536) -> bytes:
    """The next bytes from ``stream``; ``b""`` once the peer has closed or broken the connection."""
    try:
        return await stream.receive_some(max_bytes)
    except trio.BrokenResourceError:
        return b""
