"""Clients: UAMP over WebSocket and HTTP+SSE (:mod:`.uamp`) and ``uamp chat`` (:mod:`.chat`).

See docs/clients.md and docs/architecture.md.
"""

from .uamp import (
    ClientError,
    ClientSession,
    PaymentHandler,
    ResponseResult,
    ResponseStream,
    SSEClient,
    ToolHandler,
    UampClient,
    connect,
    connect_sse,
)

__all__ = [
    "ClientError",
    "ClientSession",
    "PaymentHandler",
    "ResponseResult",
    "ResponseStream",
    "SSEClient",
    "ToolHandler",
    "UampClient",
    "connect",
    "connect_sse",
]
