"""Background tasks around a block whose exceptions stay its own.

A client that runs a reader task while its caller works (the HTTP/3 and gRPC
clients, the envelope clients) opens a nursery around the caller's block.
Trio wraps whatever escapes a nursery in an exception group, so a caller's
``except EnvelopeClientError`` would no longer see its own error.
:func:`background` re-raises the block's exception as it was, outside the
nursery, after cancelling the background tasks (as
:func:`~uamp_trio.engines.http.batched_writer` does for its writer).
Cancellation and other ``BaseException`` s take trio's ordinary way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["background"]


@asynccontextmanager
async def background() -> AsyncIterator[trio.Nursery]:
    """A nursery for background tasks, cancelled when the block ends; the block's error as is."""
    caught: Exception | None = None
    async with trio.open_nursery() as nursery:
        try:
            yield nursery
        except Exception as exc:  # re-raised below, outside the nursery
            caught = exc
        nursery.cancel_scope.cancel()
    if caught is not None:
        try:
            raise caught
        finally:
            del caught
