"""Which driver runs a transport: :func:`open_driver`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from functools import partial

from .config import BenchConfig
from .drive_acp import AcpDriver, AcpStdioDriver
from .drive_envelope import EnvelopeDriver
from .drive_mcp import McpDriver
from .drivers import Driver, RealtimeDriver, UampSSEDriver, UampWebSocketDriver, http_driver

__all__ = ["open_driver"]

#: The drivers that need nothing open for the whole run, by transport.
_SOCKET_DRIVERS: dict[str, Callable[[BenchConfig], Driver]] = {
    "uamp-ws": UampWebSocketDriver,
    "uamp-sse": UampSSEDriver,
    "acp": AcpDriver,
    "acp-stdio": AcpStdioDriver,
    "mcp": McpDriver,
    "realtime": RealtimeDriver,
    "envelope-http": partial(EnvelopeDriver, ws=False),
    "envelope-ws": partial(EnvelopeDriver, ws=True),
}


@contextlib.asynccontextmanager
async def open_driver(config: BenchConfig) -> AsyncIterator[Driver]:
    """The driver of ``config.transport``, open for the run."""
    make = _SOCKET_DRIVERS.get(config.transport)
    if make is not None:
        yield make(config)
        return
    async with http_driver(config) as driver:
        yield driver
