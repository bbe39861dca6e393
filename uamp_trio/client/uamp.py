"""UAMP clients: native WebSocket (multiplexed) and HTTP+SSE, with one surface.

::

    async with connect("ws://127.0.0.1:8765/ws") as client:
        session = await client.create_session(agent="demo", on_tool_call=run_tool)
        async for event in session.respond("Hello"):
            ...                                   # response.created, deltas, ...
        result = await session.ask("What's the weather?")   # ResponseResult
        print(result.text, result.usage)

    async with connect_sse("http://127.0.0.1:8765") as client:   # same API
        ...

Theory of operation
-------------------
Both clients keep a :class:`~uamp_proto.connection.ClientConnection` (the
sans-IO core) and do the I/O around it. The client proposes each session's
id in ``session.create``, so every event -- ``session.created``, errors --
is routed by id, even before the server answered.

* :class:`UampClient` (WebSocket): one connection for every session
  (UAMP section 10). A reader task frames the socket (the same engines as the
  server, :mod:`uamp_trio.engines.ws_frames`), feeds the core, writes the replies the
  core owes (pongs, delta-window acks) and routes each event to its
  session. Writes share one lock.
* :class:`SSEClient` (UAMP section 13.2): one HTTP session, hence one core,
  per UAMP session; events are POSTed to ``/events`` and read from
  ``/events/stream`` by one task per session (httpx).

A :class:`ClientSession` delivers the events of its current response to
:meth:`ClientSession.respond` through a bounded channel; a consumer that does
not read stalls the connection's reader once that buffer is full (TCP-like
backpressure). ``tool.call`` events are also answered by the session's
``on_tool_call`` callback (sync or async), in a task of its own, with a
``tool.result``; the server then resumes the response (section 3.2).

Payment (UAMP 3.3, 7.2; spec 004): ``payment.required``, ``payment.accepted``,
``payment.error`` and ``payment.balance`` of a response reach its iterator
like any other event (those that arrive with no response being iterated, or
after its terminal event, are kept in :attr:`ClientSession.payments`). A session given an
``on_payment_required`` callback (sync or async) also answers each
``payment.required`` by itself: the callback gets the event and returns a
token, sent as ``payment.submit`` -- or ``None`` to leave it to the caller
(:meth:`ClientSession.pay`, or :meth:`ClientSession.cancel`). The server
holds or pauses the response meanwhile and resumes it once the payment is
accepted. The callback is asked once per ``payment.required``: when the
server refuses its token (``payment.error``, ``can_retry``) the response stays
held and the caller, who sees that event, pays again or cancels.

Signatures (spec 000 6.7, spec 004 "Response Signing"): :func:`connect` and
:func:`connect_sse` given ``verify=`` (a JWKS, its JSON object, a path or a
URL such as ``http://host:port/.well-known/jwks.json``) check every
``response.done``'s ``signature`` against the response's text deltas and the
bytes that carried its ``response.create`` (on the WebSocket that event's
message; over HTTP+SSE the body of the POST). A missing or bad signature
raises :class:`SignatureVerificationError` where the iteration would have
yielded ``response.done`` (the stream's :attr:`~ResponseStream.result` is
set all the same). Without ``verify=`` the signature is only kept, in
:attr:`ResponseResult.signature`, with the request bytes, for
:meth:`ResponseResult.saved` (what ``uamp verify`` reads).
"""

from __future__ import annotations

from .session import (
    ClientError,
    ClientSession,
    PaymentHandler,
    ResponseResult,
    ResponseStream,
    SignatureVerificationError,
    ToolHandler,
)
from .sse import SSEClient, connect_sse
from .websocket import Redial, UampClient, connect, open_websocket

__all__ = [
    "ClientError",
    "ClientSession",
    "PaymentHandler",
    "Redial",
    "ResponseResult",
    "ResponseStream",
    "SSEClient",
    "SignatureVerificationError",
    "ToolHandler",
    "UampClient",
    "connect",
    "connect_sse",
    "open_websocket",
]
