"""HTTP/3 over QUIC: aioquic's sans-IO ``QuicConnection`` and ``H3Connection`` on trio UDP.

Theory of operation
-------------------
:class:`Http3Listener` owns one UDP socket, bound to the same address and
port number as the server's TCP listener. Its reader task parses each
datagram's QUIC header only as far as the destination connection id, and
hands the datagram to the connection that owns that id
(``receive_datagram``); an Initial packet of at least 1200 bytes (RFC 9000
section 14.1) for an unknown id opens a new connection, and a packet of a
QUIC version aioquic does not speak is answered with Version Negotiation.
Connection ids issued and retired by a connection update the table.

Each :class:`_QuicConnection` runs one task that sleeps until it is woken
(a datagram arrived, a response has bytes to send) or its QUIC timer is due
(``get_timer``/``handle_timer``: loss detection, idle timeout), then drains
``next_event()`` -- feeding each event to the ``H3Connection``, created once
ALPN ``h3`` is negotiated -- and sends ``datagrams_to_send()``. Time is
trio's clock, passed in as ``now``: the sans-IO objects never read a clock.

A request stream collects its header fields and body and, once the client
ends it, runs as its own task. A body over the route's limit (its
``RouteMeta.max_body``, at most ``max_body_size``) is refused with 413 in the
route's error style (on the spec 003 routes: the signed 4.13 envelope) as
soon as it is known: from a declared ``content-length`` in the HEADERS
before any DATA is read, else when the DATA received passes it; the client
is then asked to stop sending (STOP_SENDING). The body is buffered even for
routes that stream theirs on HTTP/2. The request runs as its own task:
the same :meth:`Server.dispatch` as HTTP/1.1 and HTTP/2, so every route is
served, streamed responses (SSE) included, through
:func:`~uamp_trio.engines.framed.send_response`. A streamed body waits after
each write until QUIC has sent it (the stream's send buffer is empty), so a
client that does not read holds at most one batch per stream. A stream the
client resets cancels its task. ``Request.stream_id`` is the request's QUIC
stream id: the spec 003 stream endpoint names its delta frames with it
(spec 003 section 7: "QUIC stream-ID == stream_id").

QUIC always runs TLS 1.3; the certificate is the server's. With
``client_ca`` (mutual TLS) every connection asks the client for a
certificate and serves nothing until it is verified against those CAs
(:mod:`~uamp_trio.engines.quic_mtls`); a client without one, or with one
from another CA, is closed with the TLS alert.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import trio
from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.h3.connection import H3_ALPN, ErrorCode, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.h3.exceptions import H3Error
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import (
    ConnectionIdIssued,
    ConnectionIdRetired,
    ConnectionTerminated,
    HandshakeCompleted,
    ProtocolNegotiated,
    QuicEvent,
    StreamReset,
)
from aioquic.quic.packet import (
    QuicPacketType,
    encode_quic_version_negotiation,
    pull_quic_header,
)
from cryptography.hazmat.primitives.serialization import Encoding

from . import quic_mtls
from .framed import content_length, request_from_fields, send_response
from .http import Request, Response, StreamingResponse, TLSInfo
from .quic import QuicDriver

if TYPE_CHECKING:
    from .server import Server

__all__ = ["Http3Listener", "quic_configuration"]

log = logging.getLogger("uamp_trio.server")

_DATAGRAM = 65536
#: Every QUIC connection runs TLS 1.3 (RFC 9001); ALPN h3 is all this listener offers.
_QUIC_TLS = TLSInfo(version="TLSv1.3", alpn="h3")


def quic_configuration(certfile: str, keyfile: str, *, idle_timeout: float) -> QuicConfiguration:
    """The server side of QUIC: ALPN ``h3``, the server's certificate, TLS 1.3."""
    configuration = QuicConfiguration(
        is_client=False, alpn_protocols=list(H3_ALPN), idle_timeout=idle_timeout
    )
    configuration.load_cert_chain(certfile, keyfile)
    return configuration


class Http3Listener:
    """Serves HTTP/3 for ``server`` on a UDP socket (see the module docstring)."""

    def __init__(
        self, server: Server, configuration: QuicConfiguration, *, client_ca: str | None = None
    ) -> None:
        self.server = server
        self.configuration = configuration
        #: Mutual TLS: the CAs every client certificate must chain to (quic_mtls).
        self.client_ca = client_ca
        if client_ca is not None:
            quic_mtls.check_supported()
        self.socket: trio.socket.SocketType | None = None
        self._connections: dict[bytes, _QuicConnection] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def connection_count(self) -> int:
        """Live QUIC connections."""
        return len(set(self._connections.values()))

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind ``(host, port)`` over UDP and serve until cancelled; reports the port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_DGRAM)
        try:
            await sock.bind((host, port))
            self.socket = sock
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(sock.getsockname()[1])
                while True:
                    try:
                        data, addr = await sock.recvfrom(_DATAGRAM)
                    except ConnectionResetError:  # an ICMP error for an earlier send
                        continue
                    self._datagram(data, addr)
        finally:
            for conn in set(self._connections.values()):
                conn.quic.close(error_code=ErrorCode.H3_NO_ERROR)
                conn.sock = sock
                with trio.move_on_after(0.5, shield=True):
                    await conn.transmit()
            sock.close()

    def shutdown(self) -> None:
        """Close every connection (graceful: the peer is told)."""
        for conn in set(self._connections.values()):
            conn.quic.close(error_code=ErrorCode.H3_NO_ERROR)
            conn.wake()

    def _datagram(self, data: bytes, addr: Any) -> None:
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self.configuration.connection_id_length
            )
        except ValueError:
            return
        versions = self.configuration.supported_versions
        if (
            header.packet_type != QuicPacketType.VERSION_NEGOTIATION
            and header.version is not None
            and header.version not in versions
        ):
            reply = encode_quic_version_negotiation(
                source_cid=header.destination_cid,
                destination_cid=header.source_cid,
                supported_versions=versions,
            )
            self._send_soon(reply, addr)
            return
        conn = self._connections.get(header.destination_cid)
        if conn is None:
            initial = header.packet_type == QuicPacketType.INITIAL
            if not initial or len(data) < SMALLEST_MAX_DATAGRAM_SIZE:
                return
            limit = self.server.config.max_connections
            if limit is not None and self.connection_count >= limit:
                return  # busy: the client retries or falls back to TCP
            kind = QuicConnection if self.client_ca is None else quic_mtls.ClientCertQuicConnection
            quic = kind(
                configuration=self.configuration,
                original_destination_connection_id=header.destination_cid,
            )
            conn = _QuicConnection(self, quic)
            conn.client = (str(addr[0]), int(addr[1]))
            self._connections[header.destination_cid] = conn
            self._connections[quic.host_cid] = conn
            assert self._nursery is not None
            self._nursery.start_soon(conn.run)
        conn.receive(data, addr)

    def _send_soon(self, data: bytes, addr: Any) -> None:
        async def send() -> None:
            if self.socket is not None:
                await self.socket.sendto(data, addr)

        if self._nursery is not None:
            self._nursery.start_soon(send)

    def _forget(self, conn: _QuicConnection) -> None:
        for cid, owner in list(self._connections.items()):
            if owner is conn:
                del self._connections[cid]


class _RequestStream:
    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        #: The body limit of the request's route, once the body may reach it.
        self.limit: int | None = None
        #: The 413 to answer instead of dispatching (the body is not read).
        self.refusal: Response | None = None
        self.scope: trio.CancelScope | None = None

    @property
    def rejected(self) -> bool:
        return self.refusal is not None


class _QuicConnection(QuicDriver):
    """One QUIC connection and its HTTP/3 requests."""

    def __init__(self, listener: Http3Listener, quic: QuicConnection) -> None:
        super().__init__(quic, listener.socket)
        self.listener = listener
        self.server = listener.server
        self.h3: H3Connection | None = None
        self.streams: dict[int, _RequestStream] = {}
        self.client: tuple[str, int] | None = None
        #: What the handshake established (the client certificate under mutual TLS).
        self.tls = _QUIC_TLS
        #: Whether requests may be served: at once, or under mutual TLS once
        #: the client's certificate was verified.
        self.verified = listener.client_ca is None

    def on_closed(self) -> None:
        self.listener._forget(self)

    def handle(self, event: QuicEvent) -> None:
        self._quic_event(event)

    def _quic_event(self, event: QuicEvent) -> None:
        table = self.listener._connections
        if isinstance(event, ConnectionIdIssued):
            table[event.connection_id] = self
        elif isinstance(event, ConnectionIdRetired):
            table.pop(event.connection_id, None)
        elif isinstance(event, ConnectionTerminated):
            self.closed = True
            for st in self.streams.values():
                if st.scope is not None:
                    st.scope.cancel()
        elif isinstance(event, ProtocolNegotiated):
            if event.alpn_protocol in H3_ALPN and self.h3 is None:
                self.h3 = H3Connection(self.quic)
        elif isinstance(event, StreamReset):
            reset = self.streams.pop(event.stream_id, None)
            if reset is not None and reset.scope is not None:
                reset.scope.cancel()
        elif isinstance(event, HandshakeCompleted) and not self.verified:
            self._verify_client()
        if self.h3 is None or not self.verified:
            # Under mutual TLS nothing reaches HTTP/3 before the client's
            # certificate is verified (1-RTT data cannot come earlier anyway).
            return
        try:
            h3_events = self.h3.handle_event(event)
        except H3Error as exc:
            log.debug("HTTP/3 protocol error: %s", exc)
            self.quic.close(error_code=ErrorCode.H3_GENERAL_PROTOCOL_ERROR)
            return
        for h3_event in h3_events:
            self._h3_event(h3_event)

    def _verify_client(self) -> None:
        ca = self.listener.client_ca
        assert ca is not None
        problem = quic_mtls.client_certificate_problem(self.quic, ca)
        if problem is not None:
            code, reason = problem
            log.info("HTTP/3 client %s refused: %s", self.client, reason)
            self.quic.close(error_code=code, reason_phrase=reason)
            self.wake()
            return
        peer = getattr(self.quic.tls, "_peer_certificate", None)
        der = peer.public_bytes(Encoding.DER) if peer is not None else None
        self.tls = TLSInfo(version="TLSv1.3", alpn="h3", peer_certificate=der)
        self.verified = True

    def _h3_event(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            st = self.streams.get(event.stream_id)
            if st is None:
                st = self.streams[event.stream_id] = _RequestStream(event.stream_id)
                st.headers = list(event.headers)
                declared = content_length(st.headers)
                if declared is not None and declared > self.server.body_floor:
                    self._check_size(st, declared)  # refused from the head: the body is not read
            # A second HEADERS frame is the request's trailers: nothing uses them.
            if event.stream_ended and not st.rejected:
                self._start(st)
        elif isinstance(event, DataReceived):
            st = self.streams.get(event.stream_id)
            if st is None:
                return
            if not st.rejected:
                st.size += len(event.data)
                if st.size > self.server.body_floor:
                    self._check_size(st, st.size)
                if not st.rejected:
                    st.body.append(event.data)
            if event.stream_ended and not st.rejected:
                self._start(st)

    def _head(self, st: _RequestStream) -> Request:
        request = request_from_fields(
            st.headers, body=b"", http_version="3", scheme="https", client=self.client
        )
        request.tls = self.tls
        request.stream_id = st.id
        return request

    def _check_size(self, st: _RequestStream, size: int) -> None:
        """Refuse (413 in the route's style) a body of ``size`` over its route's limit.

        The refusal is answered at once, and the client is asked to stop
        sending the rest (STOP_SENDING, H3_NO_ERROR: RFC 9114 section 4.1.1).
        """
        if st.limit is not None and size <= st.limit:
            return
        head = self._head(st)
        limit = st.limit = st.limit if st.limit is not None else self.server.body_limit(head)
        if size <= limit:
            return
        st.refusal = self.server.too_large(head, limit)
        st.body.clear()
        try:
            self.quic.stop_stream(st.id, ErrorCode.H3_NO_ERROR)
        except Exception as exc:  # the client already ended its side
            log.debug("HTTP/3 stop_sending on stream %d: %r", st.id, exc)
        self._start(st)

    def _start(self, st: _RequestStream) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(self._run_stream, st)

    async def _run_stream(self, st: _RequestStream) -> None:
        request = self._head(st)
        request.body = b"".join(st.body)
        st.body.clear()
        response: Response | StreamingResponse
        cfg = self.server.config
        try:
            with trio.CancelScope() as scope:
                st.scope = scope
                if st.refusal is not None:
                    response = st.refusal
                else:
                    with trio.move_on_after(cfg.response_head_timeout) as head:
                        response = await self.server.dispatch(request)
                    if head.cancelled_caught:
                        response = self.server.head_timed_out(request)
                began = trio.current_time()

                def limit() -> None:  # response_timeout in all, the idle timeout per write
                    now = trio.current_time()
                    total = began + cfg.response_timeout
                    scope.deadline = min(total, now + cfg.response_idle_timeout)

                try:
                    await send_response(
                        _H3Sink(self, st.id),
                        response,
                        head_only=request.method == "HEAD",
                        streaming=limit,
                        wrote=limit,
                    )
                finally:
                    if type(response) is StreamingResponse:
                        await response.aclose()
            if scope.cancelled_caught and st.id in self.streams:
                log.info("HTTP/3 response to %s timed out; stream reset", self.client)
                self._reset(st.id, ErrorCode.H3_REQUEST_CANCELLED)
        except (H3Error, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("HTTP/3 stream %d ended early: %r", st.id, exc)
        except Exception:
            log.exception("HTTP/3 stream %d failed", st.id)
            self._reset(st.id, ErrorCode.H3_INTERNAL_ERROR)
        finally:
            self.streams.pop(st.id, None)
            self.wake()

    def _reset(self, stream_id: int, code: int) -> None:
        try:
            self.quic.reset_stream(stream_id, code)
        except Exception as exc:  # the stream is already gone
            log.debug("HTTP/3 reset of stream %d: %r", stream_id, exc)
        self.wake()


class _H3Sink:
    """:class:`~uamp_trio.engines.framed.FrameSink` of one HTTP/3 request stream."""

    __slots__ = ("conn", "sid")

    def __init__(self, conn: _QuicConnection, sid: int) -> None:
        self.conn = conn
        self.sid = sid

    def _h3(self) -> H3Connection:
        if self.conn.closed or self.conn.h3 is None:
            raise trio.ClosedResourceError("the QUIC connection is closed")
        return self.conn.h3

    def headers(self, fields: list[tuple[bytes, bytes]], *, end_stream: bool) -> None:
        self._h3().send_headers(self.sid, fields, end_stream=end_stream)

    async def data(self, data: bytes, *, end_stream: bool) -> None:
        self._h3().send_data(self.sid, data, end_stream=end_stream)
        await self.conn.drained(self.sid)

    async def flush(self) -> None:
        self.conn.wake()
        await trio.lowlevel.checkpoint()

    def end(self) -> None:
        self._h3().send_data(self.sid, b"", end_stream=True)
