"""aioquic's own asyncio client, run in a thread: HTTP/3 requests for the tests.

The server under test runs in its own thread (``thread_server``); each call
here runs an asyncio loop with aioquic's ``connect`` and an ``H3Connection``
and returns every response whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import attrs
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent


@attrs.define
class H3Response:
    """One response: head, body pieces as they came, trailers, and the QUIC stream id."""

    stream_id: int
    headers: dict[str, str] = attrs.field(factory=dict)
    pieces: list[bytes] = attrs.field(factory=list)
    trailers: dict[str, str] = attrs.field(factory=dict)

    @property
    def status(self) -> int:
        return int(self.headers[":status"])

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


class H3Closed(Exception):
    """The server closed the QUIC connection: its error code and reason."""

    def __init__(self, event: ConnectionTerminated) -> None:
        super().__init__(f"closed with {event.error_code:#x}: {event.reason_phrase}")
        self.error_code = event.error_code
        self.reason = event.reason_phrase


class _Client(QuicConnectionProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting: dict[int, tuple[H3Response, asyncio.Future[H3Response]]] = {}
        self.on_piece: Callable[[H3Response], None] | None = None
        self.closed: H3Closed | None = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self.closed = H3Closed(event)
            for _, done in self.waiting.values():
                if not done.done():
                    done.set_exception(self.closed)
        for h3_event in self.h3.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: H3Event) -> None:
        if not isinstance(event, HeadersReceived | DataReceived):
            return
        entry = self.waiting.get(event.stream_id)
        if entry is None:
            return
        response, done = entry
        if isinstance(event, HeadersReceived):
            fields = {k.decode(): v.decode() for k, v in event.headers}
            (response.trailers if response.headers else response.headers).update(fields)
        elif event.data:
            response.pieces.append(event.data)
            if self.on_piece is not None:
                self.on_piece(response)
        if event.stream_ended and not done.done():
            done.set_result(response)

    async def request(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        *,
        head_only: bool = False,
    ) -> H3Response:
        if self.closed is not None:
            raise self.closed
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", b"127.0.0.1"),
            (b":path", path.encode()),
        ]
        fields += [(k.lower().encode(), v.encode()) for k, v in headers]
        done: asyncio.Future[H3Response] = asyncio.get_running_loop().create_future()
        self.waiting[stream_id] = (H3Response(stream_id), done)
        self.h3.send_headers(stream_id, fields, end_stream=not body and not head_only)
        if body and not head_only:
            self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()
        return await done


@attrs.frozen
class H3Request:
    """One request; ``head_only``: send the HEADERS, leave the stream open, never send a body."""

    method: str
    path: str
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    body: bytes = b""
    head_only: bool = False


def h3_requests(
    port: int,
    requests: list[H3Request],
    *,
    cafile: str | None,
    timeout: float = 10.0,
    concurrent: bool = False,
    cert: tuple[str, str] | None = None,
) -> list[H3Response]:
    """Send ``requests`` over one QUIC connection to 127.0.0.1:``port``; their responses.

    ``cert``: the client's ``(certfile, keyfile)`` for mutual TLS.

    Raises:
        H3Closed: The server closed the connection.
    """

    async def run() -> list[H3Response]:
        config = QuicConfiguration(is_client=True, alpn_protocols=list(H3_ALPN))
        config.server_name = "localhost"
        if cafile is not None:
            config.load_verify_locations(cafile)
        if cert is not None:
            config.load_cert_chain(*cert)
        async with connect("127.0.0.1", port, configuration=config, create_protocol=_Client) as c:
            client: _Client = c  # type: ignore[assignment]
            calls = [
                client.request(r.method, r.path, r.headers, r.body, head_only=r.head_only)
                for r in requests
            ]
            if concurrent:
                return list(await asyncio.gather(*calls))
            return [await call for call in calls]

    return asyncio.run(asyncio.wait_for(run(), timeout))
