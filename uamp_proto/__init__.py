"""uamp_proto: the sans-IO core of the Universal Agentic Message Protocol.

Bytes in, typed events out; events in, bytes out. Nothing here does I/O,
reads a clock or draws randomness it was not given, so the same core runs
under trio, asyncio, threads, or a test with no event loop at all.

* :func:`decode` / :func:`encode` -- JSON and typed events
  (:mod:`uamp_proto.events`, :mod:`uamp_proto.types`).
* :class:`ServerConnection` / :class:`ClientConnection` -- the per-connection
  state machine (sessions, responses, payment, delta windows).
* :class:`ResponseTracker` -- one response's lifecycle and output.
* :mod:`uamp_proto.sse`, :mod:`uamp_proto.flow`, :mod:`uamp_proto.payment`,
  :mod:`uamp_proto.responder` (the agent boundary), :mod:`uamp_proto.adapters`.

The map of the three packages and the path of one request: docs/architecture.md.
"""

from . import events, types
from .codec import DecodeError, decode, encode
from .connection import (
    NEED_DATA,
    ClientConnection,
    ConnectionConfig,
    ServerConnection,
)
from .errors import FlowControlError, LocalProtocolError, ProtocolError, RemoteProtocolError
from .payment import PaymentNegotiation
from .response import ResponseTracker

__all__ = [
    "NEED_DATA",
    "ClientConnection",
    "ConnectionConfig",
    "DecodeError",
    "FlowControlError",
    "LocalProtocolError",
    "PaymentNegotiation",
    "ProtocolError",
    "RemoteProtocolError",
    "ResponseTracker",
    "ServerConnection",
    "decode",
    "encode",
    "events",
    "types",
]

__version__ = "0.1.0"
