"""An HTTP/3 client on trio: aioquic's sans-IO QUIC and H3, and an httpx transport over it.

::

    async with open_h3("https://127.0.0.1:8765", verify="ca.pem") as h3:
        async with httpx.AsyncClient(transport=h3.transport(), base_url=h3.base_url) as http:
            reply = await http.get("/healthz")

Theory of operation
-------------------
:func:`open_h3` opens a UDP socket, starts a :class:`~uamp_trio.engines.quic.QuicDriver`
(the same trio binding of aioquic the server uses) plus a reader task that
feeds it every datagram, and waits for the TLS 1.3 handshake (ALPN ``h3``).
Each request is one client bidirectional stream: the head and body are sent
at once; the response's head, body pieces and trailers are routed by stream
id to that request, whose body is read as it arrives (an SSE stream is
seen event by event). :meth:`H3Client.transport` adapts it to httpx, so any
code written against ``httpx.AsyncClient`` -- the envelope clients
included -- speaks HTTP/3 unchanged. Response bodies are buffered as QUIC
delivers them (aioquic gives flow-control credit on receipt).
"""

from __future__ import annotations

import math
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamReset

from uamp_proto.errors import UampError

from ..engines.quic import QuicDriver
from ..engines.tasks import background

__all__ = ["H3Client", "H3Error", "open_h3"]


class H3Error(UampError):
    """The HTTP/3 connection or a request on it failed."""


class _Response:
    """One request's response as it arrives."""

    def __init__(self) -> None:
        self.head = trio.Event()
        self.headers: list[tuple[bytes, bytes]] = []
        self.trailers: list[tuple[bytes, bytes]] = []
        self.send, self.receive = trio.open_memory_channel[bytes | BaseException](math.inf)
        self.ended = False
        self.failure: BaseException | None = None

    def fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.head.set()
        self.send.send_nowait(exc)


class _ClientConnection(QuicDriver):
    def __init__(self, quic: QuicConnection, sock: trio.socket.SocketType) -> None:
        super().__init__(quic, sock)
        self.h3 = H3Connection(quic)
        self.responses: dict[int, _Response] = {}
        self.ready = trio.Event()
        self.failure: H3Error | None = None

    def handle(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.ready.set()
        elif isinstance(event, ConnectionTerminated):
            self.closed = True
            self.failure = H3Error(f"the QUIC connection closed: {event.reason_phrase or 'closed'}")
            self.ready.set()
            for response in self.responses.values():
                if not response.ended:
                    response.fail(self.failure)
        elif isinstance(event, StreamReset):
            reset = self.responses.get(event.stream_id)
            if reset is not None and not reset.ended:
                reset.fail(H3Error(f"the server reset the stream ({event.error_code})"))
        for h3_event in self.h3.handle_event(event):
            if not isinstance(h3_event, HeadersReceived | DataReceived):
                continue
            found = self.responses.get(h3_event.stream_id)
            if found is None:
                continue
            response = found
            if isinstance(h3_event, HeadersReceived):
                if response.head.is_set():
                    response.trailers = list(h3_event.headers)
                else:
                    response.headers = list(h3_event.headers)
                    response.head.set()
            elif h3_event.data:
                response.send.send_nowait(h3_event.data)
            if h3_event.stream_ended:
                response.ended = True
                response.send.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, client: H3Client, stream_id: int, response: _Response) -> None:
        self._client = client
        self._stream_id = stream_id
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._response.receive:
            if isinstance(piece, BaseException):
                raise httpx.ReadError(str(piece)) from piece
            yield piece

    async def aclose(self) -> None:
        self._client._forget(self._stream_id)


class _Transport(httpx.AsyncBaseTransport):
    def __init__(self, client: H3Client) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [(k.lower(), v) for k, v in request.headers.raw if k.lower() != b"host"]
        headers = [h for h in headers if h[0] not in (b"connection", b"transfer-encoding")]
        target = request.url.raw_path
        stream_id, response = await self._client.start(
            request.method.encode(), target, request.url.netloc, headers, body
        )
        with trio.fail_after(self._client.timeout):
            await response.head.wait()
        if response.failure is not None:
            raise httpx.ConnectError(str(response.failure)) from response.failure
        status = 0
        fields: list[tuple[bytes, bytes]] = []
        for name, value in response.headers:
            if name == b":status":
                status = int(value)
            elif not name.startswith(b":"):
                fields.append((name, value))
        return httpx.Response(
            status,
            headers=fields,
            stream=_Body(self._client, stream_id, response),
            extensions={"http_version": b"HTTP/3"},
        )


class H3Client:
    """Requests over one HTTP/3 connection; made by :func:`open_h3`."""

    def __init__(self, conn: _ClientConnection, base_url: str, timeout: float) -> None:
        self._conn = conn
        self.base_url = base_url
        self.timeout = timeout

    def transport(self) -> httpx.AsyncBaseTransport:
        """An httpx transport that sends every request over this connection."""
        return _Transport(self)

    async def start(
        self,
        method: bytes,
        target: bytes,
        authority: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> tuple[int, _Response]:
        """Send a request; its stream id and its response, to read as it arrives."""
        conn = self._conn
        if conn.closed:
            raise httpx.ConnectError(str(conn.failure or "the QUIC connection is closed"))
        stream_id = conn.quic.get_next_available_stream_id()
        response = conn.responses[stream_id] = _Response()
        fields = [
            (b":method", method),
            (b":scheme", b"https"),
            (b":authority", authority),
            (b":path", target),
            *headers,
        ]
        conn.h3.send_headers(stream_id, fields, end_stream=not body)
        if body:
            conn.h3.send_data(stream_id, body, end_stream=True)
        conn.wake()
        return stream_id, response

    def _forget(self, stream_id: int) -> None:
        response = self._conn.responses.pop(stream_id, None)
        if response is not None and not response.ended and not self._conn.closed:
            try:
                self._conn.quic.reset_stream(stream_id, 0x10C)  # H3_REQUEST_CANCELLED
            except Exception:
                return
            self._conn.wake()


def _configuration(verify: bool | str | ssl.SSLContext, server_name: str) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=list(H3_ALPN))
    config.server_name = server_name
    if verify is False:
        config.verify_mode = ssl.CERT_NONE
    elif isinstance(verify, str):
        config.load_verify_locations(cafile=verify)
    elif isinstance(verify, ssl.SSLContext):
        raise TypeError("give verify as a CA file path (aioquic does not take an SSLContext)")
    return config


@asynccontextmanager
async def open_h3(
    url: str, *, verify: bool | str = True, timeout: float = 30.0
) -> AsyncIterator[H3Client]:
    """Connect to the HTTP/3 server of ``url`` (``https://host:port``); yield a client.

    Args:
        verify: ``True`` (the system's CAs), a CA file path, or ``False``.
        timeout: Seconds for the handshake and for each response head.

    Raises:
        H3Error: The handshake failed or timed out.
    """
    parsed = httpx.URL(url)
    host, port = parsed.host, parsed.port or 443
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    sock = trio.socket.socket(family, socket.SOCK_DGRAM)
    quic = QuicConnection(configuration=_configuration(verify, host))
    conn = _ClientConnection(quic, sock)
    base = f"https://{parsed.netloc.decode()}"
    try:
        await sock.connect(addr)
        async with background() as nursery:

            async def read() -> None:
                while True:
                    try:
                        data = await sock.recv(65536)
                    except OSError:
                        continue  # an ICMP error for an earlier datagram
                    conn.receive(data, addr)

            nursery.start_soon(read)
            quic.connect(addr, now=trio.current_time())
            await nursery.start(conn.run)
            conn.wake()
            with trio.move_on_after(timeout):
                await conn.ready.wait()
            if conn.failure is not None or not conn.ready.is_set():
                raise H3Error(f"HTTP/3 handshake with {host}:{port} failed: {conn.failure}")
            try:
                yield H3Client(conn, base, timeout)
            finally:
                quic.close()
                conn.wake()
                with trio.move_on_after(1, shield=True):
                    await conn.transmit()
    finally:
        sock.close()
