"""A gRPC client on trio and h2: calls of any kind over one HTTP/2 connection.

::

    async with open_channel("http://127.0.0.1:8765") as channel:
        async with channel.call("/uamp.v1.Agent/Session", agent_pb2.Delta) as call:
            await call.send(agent_pb2.Envelope(json=...))
            async for delta in call:          # replies as they arrive
                ...
        call.status                           # (StatusCode, message) once it ended

Theory of operation
-------------------
:func:`open_channel` opens one TCP connection (TLS with ALPN ``h2`` for
``https://``, HTTP/2 prior knowledge for ``http://``) and runs a reader task
that feeds h2 and routes its events by stream id. A :class:`Call` is one
stream: ``send`` frames a message (the 5-byte prefix of
:mod:`uamp_proto.grpc`) and writes it under h2 flow control (waiting for
``WINDOW_UPDATE`` when the window is shut); ``done_sending`` half-closes;
the replies are cut out of the DATA frames by a
:class:`~uamp_proto.grpc.MessageReader` and decoded with the reply type; the
status comes from the trailers (or a trailers-only head). A call left before
its end is reset (``CANCEL``). The reader gives flow-control credit back as
soon as DATA arrives, and each call keeps its decoded replies until read.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import httpx
import trio

from uamp_proto.grpc import (
    CONTENT_TYPE,
    DEFAULT_MAX_MESSAGE,
    GrpcError,
    MessageReader,
    StatusCode,
    decode_message_text,
    encode_message,
)

from ..engines.tasks import background
from .service import MessageType

__all__ = ["Call", "Channel", "open_channel"]


class Call:
    """One gRPC call on a :class:`Channel` (see the module docstring).

    Attributes:
        status: ``(code, message)`` once the call ended, else ``None``.
        trailers: The trailers (or the trailers-only head), once the call ended.
        headers: The response head, once it came.
    """

    def __init__(self, channel: Channel, stream_id: int, reply_type: MessageType) -> None:
        self._channel = channel
        self.stream_id = stream_id
        self._type = reply_type
        self._reader = MessageReader(max_message=channel.max_message)
        self._send, self._receive = trio.open_memory_channel[Any](math.inf)
        self.status: tuple[StatusCode, str] | None = None
        self.trailers: dict[str, str] = {}
        self.headers: dict[str, str] = {}
        self.ended = trio.Event()

    # --- reader side (the channel's task) -----------------------------------------

    def _head(self, fields: list[tuple[bytes, bytes]], *, trailers: bool) -> None:
        decoded = {k.decode("latin-1"): v.decode("latin-1") for k, v in fields}
        if trailers or "grpc-status" in decoded:
            self.trailers = decoded
            if not trailers:
                self.headers = decoded
            self._end_with(decoded)
        else:
            self.headers = decoded

    def _data(self, data: bytes) -> None:
        try:
            for payload in self._reader.feed(data):
                self._send.send_nowait(self._type.FromString(payload))
        except GrpcError as exc:
            self._fail(exc.code, exc.message)
            self._channel._reset(self.stream_id)

    def _end_with(self, fields: dict[str, str]) -> None:
        raw = fields.get("grpc-status")
        if raw is None:
            status = fields.get(":status", "?")
            self._fail(StatusCode.UNKNOWN, f"no grpc-status (HTTP {status})")
            return
        try:
            code = StatusCode(int(raw))
        except ValueError:
            code = StatusCode.UNKNOWN
        self._finish(code, decode_message_text(fields.get("grpc-message", "")))

    def _finish(self, code: StatusCode, message: str) -> None:
        if self.status is None:
            self.status = (code, message)
        self._send.close()
        self.ended.set()

    def _fail(self, code: StatusCode, message: str) -> None:
        self._finish(code, message)

    # --- caller side ------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        """Send one request message (waits for HTTP/2 flow control)."""
        await self._channel._send_data(self.stream_id, encode_message(message.SerializeToString()))

    async def done_sending(self) -> None:
        """Half-close: no more request messages."""
        await self._channel._end_stream(self.stream_id)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._replies()

    async def _replies(self) -> AsyncIterator[Any]:
        async for reply in self._receive:
            yield reply

    async def receive(self) -> Any | None:
        """The next reply, or ``None`` once the call has ended."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None

    def raise_for_status(self) -> None:
        """Raise :class:`GrpcError` unless the call ended ``OK``."""
        if self.status is not None and self.status[0] is not StatusCode.OK:
            raise GrpcError(self.status[0], self.status[1])


class Channel:
    """One HTTP/2 connection to a gRPC server; made by :func:`open_channel`."""

    def __init__(self, stream: trio.abc.Stream, authority: str, scheme: str, max_message: int):
        self._stream = stream
        self.authority = authority
        self.scheme = scheme
        self.max_message = max_message
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self._calls: dict[int, Call] = {}
        self._lock = trio.StrictFIFOLock()
        self._window = trio.Event()
        self.closed = False

    async def _flush(self) -> None:
        async with self._lock:
            data = self._h2.data_to_send()
            if data:
                await self._stream.send_all(data)

    async def _start(self) -> None:
        self._h2.initiate_connection()
        await self._flush()

    async def _read(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(65536)
                if not data:
                    break
                for event in self._h2.receive_data(data):
                    self._event(event)
                await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed = True
            self._window.set()
            for call in list(self._calls.values()):
                call._fail(StatusCode.UNAVAILABLE, "the connection closed")

    def _event(self, event: h2.events.Event) -> None:
        call = self._calls.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and call is not None:
            call._head(list(event.headers), trailers=False)
        elif isinstance(event, h2.events.TrailersReceived) and call is not None:
            call._head(list(event.headers), trailers=True)
        elif isinstance(event, h2.events.DataReceived):
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if call is not None and event.data:
                call._data(bytes(event.data))
        elif isinstance(event, h2.events.StreamEnded) and call is not None:
            if call.status is None:
                call._fail(StatusCode.INTERNAL, "the stream ended without a status")
            self._calls.pop(event.stream_id, None)
        elif isinstance(event, h2.events.StreamReset) and call is not None:
            call._fail(StatusCode.CANCELLED, f"the server reset the stream ({event.error_code})")
            self._calls.pop(event.stream_id, None)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._window.set()
            self._window = trio.Event()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True

    async def _send_data(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        view = memoryview(data)
        while view:
            if self.closed:
                raise trio.ClosedResourceError("the gRPC connection closed")
            waiter = self._window
            window = min(
                self._h2.local_flow_control_window(stream_id), self._h2.max_outbound_frame_size
            )
            if window <= 0:
                await self._flush()
                await waiter.wait()
                continue
            size = min(window, len(view))
            last = end and size == len(view)
            self._h2.send_data(stream_id, view[:size].tobytes(), end_stream=last)
            view = view[size:]
        if end and not data:
            self._h2.end_stream(stream_id)
        await self._flush()

    async def _end_stream(self, stream_id: int) -> None:
        try:
            self._h2.end_stream(stream_id)
        except h2.exceptions.StreamClosedError:
            return
        await self._flush()

    def _reset(self, stream_id: int) -> None:
        with suppress(h2.exceptions.ProtocolError):
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        self._calls.pop(stream_id, None)

    @asynccontextmanager
    async def call(
        self,
        method: str,
        reply_type: MessageType,
        *,
        metadata: list[tuple[str, str]] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Call]:
        """Open a call of ``method`` (``/package.Service/Method``); reset if left unfinished."""
        stream_id = self._h2.get_next_available_stream_id()
        call = self._calls[stream_id] = Call(self, stream_id, reply_type)
        fields = [
            (b":method", b"POST"),
            (b":scheme", self.scheme.encode()),
            (b":authority", self.authority.encode()),
            (b":path", method.encode()),
            (b"content-type", CONTENT_TYPE.encode()),
            (b"te", b"trailers"),
        ]
        if timeout is not None:
            fields.append((b"grpc-timeout", f"{max(1, int(timeout * 1000))}m".encode()))
        fields += [(k.lower().encode(), v.encode()) for k, v in metadata or ()]
        self._h2.send_headers(stream_id, fields)
        await self._flush()
        try:
            yield call
        finally:
            if not call.ended.is_set() and not self.closed:
                self._reset(stream_id)
                with trio.move_on_after(1, shield=True):
                    await self._flush()

    async def unary_stream(
        self, method: str, request: Any, reply_type: MessageType, **options: Any
    ) -> AsyncIterator[Any]:
        """A call with one request message; its replies as they arrive (then the status)."""
        async with self.call(method, reply_type, **options) as call:
            await call.send(request)
            await call.done_sending()
            async for reply in call:
                yield reply
            await call.ended.wait()
            call.raise_for_status()


@asynccontextmanager
async def open_channel(
    url: str,
    *,
    verify: bool | str | ssl.SSLContext = True,
    max_message: int = DEFAULT_MAX_MESSAGE,
) -> AsyncIterator[Channel]:
    """Connect to the gRPC server at ``url`` (``http://`` prior knowledge, ``https://`` TLS).

    Args:
        verify: ``True`` (system CAs), a CA file, an ``SSLContext``, or ``False``.
        max_message: The largest reply message accepted.
    """
    parsed = httpx.URL(url)
    https = parsed.scheme == "https"
    port = parsed.port or (443 if https else 80)
    stream: trio.abc.Stream = await trio.open_tcp_stream(parsed.host, port)
    if https:
        if isinstance(verify, ssl.SSLContext):
            context = verify
        elif isinstance(verify, str):
            context = ssl.create_default_context(cafile=verify)
        else:
            context = ssl.create_default_context()
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        stream = trio.SSLStream(stream, context, server_hostname=parsed.host)
        await stream.do_handshake()
    channel = Channel(stream, parsed.netloc.decode(), "https" if https else "http", max_message)
    try:
        await channel._start()
        async with background() as nursery:
            nursery.start_soon(channel._read)
            yield channel
    finally:
        await trio.aclose_forcefully(stream)
