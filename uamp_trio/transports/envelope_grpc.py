"""Spec 003's gRPC binding: ``service uamp.v1.Agent`` around the envelope service.

The service (``uamp_trio/grpc/protos/uamp/v1/agent.proto``, shipped in the
package) has two methods, served by the gRPC layer (:mod:`uamp_trio.grpc`)
over the server's own HTTP/2:

* ``Send(Envelope) returns (stream Delta)``: one envelope (an ``ask``, or a
  ``confirm``/``cancel``/... naming an exchange in ``reply_to``) and the
  delta frames of its exchange until the final one. The client cannot send
  acknowledgements on this call, so every frame the gRPC stream has taken is
  counted as acknowledged: HTTP/2 flow control is the back-pressure, and a
  client that stops reading stops the agent after one window.
* ``Session(stream Envelope) returns (stream Delta)``: a long-lived exchange,
  like the length-prefixed WebSocket: envelopes, and ``progress`` delta
  frames acknowledging deltas (the ``delta_window`` of each ask is honoured),
  in any order; the frames of every exchange opened on the call come back
  interleaved, told apart by ``stream_id``. When the client half-closes, the
  call ends once its exchanges have; when it cancels, they are cancelled.

``Envelope.json`` is the envelope's JSON text, as the HTTP and WebSocket
bindings carry it (its ``sig`` covers the canonical form of exactly that
object); a ``Delta`` is the frame of Appendix A.2 with its ``payload`` as
JSON text. The agent is the one ``uamp-agent`` metadata names, else the one
the envelope's ``to`` names, else the only one.

Refusals
--------
A refused envelope or ack is answered with one ``error`` delta frame and,
for the codes that end a WebSocket (4.01, 4.03, 4.13) and on ``Send``
always, the call ends with the status of its code; on ``Session`` the other
codes leave the call open. The error frame's ``stream_id`` is the refused
envelope's stream (its ``stream_id``, else its ``id``; empty when it could
not be read), its ``delta_seq`` is 0 (it is outside the exchange's
sequence), and its payload is ``{"code", "message", "retry"}`` plus
``"envelope"``: the signed ``error`` envelope the HTTP binding would answer.

=====  ====================  ======================
code   gRPC status           also
=====  ====================  ======================
4.00   INVALID_ARGUMENT
4.01   UNAUTHENTICATED       bad or missing ``sig``, bad cap token
4.03   PERMISSION_DENIED     wrong ``aud``/scope, replayed ``id``
4.04   NOT_FOUND
4.09   FAILED_PRECONDITION   a bad or missing ``delta_seq`` in an ack
4.13   RESOURCE_EXHAUSTED    see below
5.04   UNAVAILABLE           ``retry-after`` trailer
=====  ====================  ======================

Every status carries the trailer ``uamp-error-code`` with the spec 003 code.
A message over the envelope size limit is 4.13's case, refused as the spec
asks from its declared length -- here the gRPC message prefix -- before it
is read: the gRPC layer ends the call ``RESOURCE_EXHAUSTED`` (trailers-only,
with no error frame and no ``uamp-error-code``, since nothing was read).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import trio

from uamp_proto.adapters.envelope import BAD_REQUEST, NOT_FOUND, EnvelopeRefused
from uamp_proto.envelope import Delta, Envelope, EnvelopeError, encode_envelope, parse_json
from uamp_proto.grpc import GrpcError, StatusCode
from uamp_proto.principal import ANONYMOUS

from ..envelope.service import ONE_WAY_INTENTS, EnvelopeService, Exchange
from ..grpc import AVAILABLE, Context, GrpcService, mount_service

if AVAILABLE:  # the grpc extra; without it mount() serves nothing
    from ..grpc.protos.uamp.v1 import agent_pb2
from ..hosting.host import Host
from ..hosting.router import RouteMeta

__all__ = ["AGENT_METADATA", "SERVICE", "STATUS_FOR_CODE", "EnvelopeGrpc", "mount"]

log = logging.getLogger("uamp_trio.envelope")

#: The full name of the service (spec 003 section 7).
SERVICE = "uamp.v1.Agent"
#: The call metadata that names the agent.
AGENT_METADATA = "uamp-agent"
#: The gRPC status of each spec 003 error code.
STATUS_FOR_CODE = {
    "4.00": StatusCode.INVALID_ARGUMENT,
    "4.01": StatusCode.UNAUTHENTICATED,
    "4.03": StatusCode.PERMISSION_DENIED,
    "4.04": StatusCode.NOT_FOUND,
    "4.09": StatusCode.FAILED_PRECONDITION,
    "4.13": StatusCode.RESOURCE_EXHAUSTED,
    "5.04": StatusCode.UNAVAILABLE,
}
#: Exchanges a Session call remembers (finished ones are forgotten past it).
_KEPT = 256
#: Codes after which a Session ends (those that close the WebSocket binding).
_FATAL = frozenset({"4.01", "4.03", "4.13"})

Send = Callable[[Any], Awaitable[None]]


def to_message(delta: Delta) -> Any:
    """A delta frame as a ``uamp.v1.Delta`` message."""
    payload = b"" if delta.payload is None else orjson.dumps(delta.payload)
    return agent_pb2.Delta(
        delta_seq=delta.delta_seq,
        stream_id=delta.stream_id,
        ts=delta.ts,
        type=delta.type.value,
        payload=payload,
    )


class EnvelopeGrpc:
    """The ``uamp.v1.Agent`` service of ``app``'s envelope service."""

    def __init__(self, app: Host, service: EnvelopeService) -> None:
        self.app = app
        self.service = service

    def grpc_service(self) -> GrpcService:
        """The service's methods, ready to mount."""
        grpc = GrpcService(SERVICE)
        grpc.add("Send", "server_stream", agent_pb2.Envelope, agent_pb2.Delta, self.send)
        grpc.add("Session", "bidi", agent_pb2.Envelope, agent_pb2.Delta, self.session)
        return grpc

    # --- refusals -------------------------------------------------------------------

    def _error_frame(
        self,
        refused: EnvelopeRefused,
        agent: str | None,
        envelope: Envelope | None,
        stream_id: str = "",
    ) -> Any:
        reply_to = envelope.id if envelope is not None else None
        error = self.service.error_envelope(refused, agent=agent, reply_to=reply_to)
        payload = {
            "code": refused.code,
            "message": refused.message,
            "retry": refused.error_code.retryable,
            "envelope": orjson.loads(encode_envelope(error)),
        }
        if envelope is not None:
            stream_id = envelope.stream_id or envelope.id
        data = orjson.dumps(payload)
        return agent_pb2.Delta(
            delta_seq=0, stream_id=stream_id, ts=error.ts, type="error", payload=data
        )

    @staticmethod
    def _status(refused: EnvelopeRefused) -> GrpcError:
        trailers = [("uamp-error-code", refused.code)]
        if refused.retry_after is not None:
            trailers.append(("retry-after", str(refused.retry_after)))
        code = STATUS_FOR_CODE.get(refused.code, StatusCode.UNKNOWN)
        return GrpcError(code, refused.message, trailers=trailers)

    # --- Send -------------------------------------------------------------------------

    async def send(self, message: Any, context: Context, send: Send) -> None:
        """``Send``: one envelope, the deltas of its exchange."""
        service = self.service
        name = context.metadata.get(AGENT_METADATA)
        envelope: Envelope | None = None
        try:
            envelope = service.decode(bytes(message.json))
            agent = service.resolve(name, envelope)
            name = agent.name
            submitted = await service.submit(agent, envelope)
        except EnvelopeRefused as refused:
            await send(self._error_frame(refused, name, envelope))
            raise self._status(refused) from None
        exchange = submitted.exchange
        if exchange is None or envelope.intent in ONE_WAY_INTENTS:
            return  # one-way: answered by nothing (the exchange it joined streams elsewhere)
        try:
            async for delta in exchange.deltas():
                await send(to_message(delta))
                exchange.acknowledge(delta.delta_seq)  # taken by the stream: acknowledged
        finally:
            if not exchange.finished and exchange.runner is not None:
                exchange.runner.cancel()  # the client left before the end

    # --- Session ---------------------------------------------------------------------------

    async def session(self, messages: AsyncIterator[Any], context: Context, send: Send) -> None:
        """``Session``: envelopes and acks in, every exchange's deltas out."""
        fatal: GrpcError | None = None
        async with trio.open_nursery() as nursery:
            peer = _SessionPeer(self, context.metadata.get(AGENT_METADATA), send, nursery)
            fatal = await peer.read(messages)
            if fatal is not None:
                nursery.cancel_scope.cancel()  # its exchanges end with the call
            # Else half-closed: the call ends when the exchanges opened on it have.
        if fatal is not None:
            raise fatal


class _SessionPeer:
    """One ``Session`` call: reads envelopes and acks, forwards every exchange's deltas."""

    def __init__(
        self, owner: EnvelopeGrpc, agent: str | None, send: Send, nursery: trio.Nursery
    ) -> None:
        self.owner = owner
        self.service = owner.service
        self.agent = agent
        self.send = send
        self.nursery = nursery
        #: Exchanges opened on this call, by stream_id (the finished ones too,
        #: so that a late ack is ignored rather than refused).
        self.exchanges: dict[str, Exchange] = {}
        #: The stream the message being handled names (an error frame's).
        self.stream_id = ""
        self.envelope: Envelope | None = None

    async def read(self, messages: AsyncIterator[Any]) -> GrpcError | None:
        """Handle every message; the status to end the call with after a fatal refusal."""
        async for message in messages:
            data = bytes(message.json)
            self.envelope, self.stream_id = None, ""
            try:
                await self._frame(data)
            except EnvelopeRefused as refused:
                error = self.owner._error_frame(refused, self.agent, self.envelope, self.stream_id)
                await self.send(error)
                if refused.code in _FATAL:
                    return self.owner._status(refused)
        return None

    async def _frame(self, data: bytes) -> None:
        service = self.service
        service.check_size(len(data))
        try:
            probe = parse_json(data)
        except EnvelopeError as exc:
            if exc.error_code is None:
                raise EnvelopeRefused(BAD_REQUEST, "a message is not JSON") from None
            raise EnvelopeRefused(exc.error_code, exc.reason) from None
        if isinstance(probe, dict) and "intent" in probe:
            envelope = self.envelope = service.decode(data)
            agent = service.resolve(self.agent, envelope)
            submitted = await service.submit(agent, envelope, nursery=self.nursery)
            exchange = submitted.exchange
            if submitted.opened and exchange and exchange.stream_id not in self.exchanges:
                self._remember(exchange)
                self.nursery.start_soon(self._forward, exchange)
            return
        stream_id = probe.get("stream_id") if isinstance(probe, dict) else None
        self.stream_id = stream_id if isinstance(stream_id, str) else ""
        acked = self.exchanges.get(self.stream_id)
        if acked is None:
            raise EnvelopeRefused(NOT_FOUND, f"no stream {stream_id!r} on this call")
        # The exchange was opened on this call: the ack needs no credential of its own.
        service.acknowledge(acked, data, ANONYMOUS)

    def _remember(self, exchange: Exchange) -> None:
        self.exchanges[exchange.stream_id] = exchange
        if len(self.exchanges) > _KEPT:
            oldest = next((k for k, x in self.exchanges.items() if x.finished), None)
            if oldest is not None:
                del self.exchanges[oldest]

    async def _forward(self, exchange: Exchange) -> None:
        try:
            async for delta in exchange.deltas():
                await self.send(to_message(delta))
        finally:
            if not exchange.finished and exchange.runner is not None:
                exchange.runner.cancel()


#: The routes' metadata: the auth gate lets them through (each envelope carries
#: its credential), and they are TLS 1.3 only over TLS (spec 003 section 6.1).
ROUTES = RouteMeta(transport="envelope-grpc", envelope=True, tls13=True)


def mount(app: Host) -> None:
    """Mount ``uamp.v1.Agent`` on ``app`` (a :data:`Transport`); none without envelope service."""
    if not AVAILABLE:
        return
    service = app.envelopes
    if service is not None:
        grpc = EnvelopeGrpc(app, service).grpc_service()
        # The protobuf message is the envelope's JSON plus a few bytes of
        # framing: an envelope over max_size is refused from the prefix.
        mount_service(app.router, grpc, meta=ROUTES, max_message=service.limits.max_size)
