"""A lean HTTP/1.1 client connection: one ``POST`` out, its response in.

The model providers call their servers with it, and ``uamp bench`` loads a
server with it (:mod:`uamp_trio.bench.drivers`).

Theory of operation
-------------------
A model call (or a benchmark's request) is one ``POST`` of a JSON body
whose head the caller knows in advance (host, path, its own headers:
:class:`Target`), answered by a JSON body with a ``Content-Length`` or by
server-sent events in chunked transfer coding. For that exchange httpx's
stack -- its request and response models, httpcore's connection and h11's
state machine, each layer with its own locks, traces and exception
mapping -- was a quarter of a uamp server's CPU per plain agent request
(``bench/peers.py``).

:meth:`Connection.request` does the common case directly: the request's
head and body leave in one ``send``; the response head is read with one
regular expression per line (:func:`parse_head`) and its body framed here
(a length, or chunks). Whatever else a server may answer -- an interim
``1xx``, HTTP/1.0, a body that ends when the connection closes, obs-fold,
bare LF line ends, repeated or conflicting lengths, a transfer coding
besides ``chunked`` -- makes :func:`parse_head` return ``None`` (or the
head's end is not found), and h11 reads that response from
the same bytes (its answer, or its error, is then the call's); such a
connection is not reused. A body with a ``Content-Encoding`` is decoded by
httpx's decoders (the caller wraps it in an ``httpx.Response``).

Failures are httpx's exception types (``httpx.ReadTimeout``,
``httpx.RemoteProtocolError`` ...), so the providers map them to
:class:`~uamp_agents.providers.base.ProviderError` as they map httpx's own.
Each network operation -- connect, the request's write, each read -- has
the call's timeout.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import AsyncIterator
from typing import Final

import attrs
import h11
import httpx
import trio

__all__ = ["MAX_HEAD", "Connection", "Head", "Response", "Target", "parse_head"]

#: The longest response head (and chunk-size or trailer line) read.
MAX_HEAD: Final = 100 * 1024

_READ: Final = 64 * 1024

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
# Field values and reason phrases: visible ASCII, obs-text, and inner SP/HTAB
# (RFC 9110 section 5.5); never CR, LF or another control character.
_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([0-9]{3})(?: [\t -~\x80-\xff]*)?")
_FIELD = re.compile(
    rb"(" + _TOKEN + rb"):[ \t]*((?:[!-~\x80-\xff](?:[\t -~\x80-\xff]*[!-~\x80-\xff])?)?)[ \t]*"
)
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[\t -~\x80-\xff]*)?")
_REQUEST_FIELD = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_REQUEST_VALUE = re.compile(r"[\t -~\x80-\xff]*")


@attrs.frozen
class Head:
    """A response head read by :func:`parse_head`.

    Attributes:
        status: The status code (200 to 599).
        headers: The fields, names in lowercase, in order.
        length: The body's length, or ``None`` for a chunked body.
        close: The server said it closes the connection after this response.
    """

    status: int
    headers: list[tuple[str, str]]
    length: int | None
    close: bool


def parse_head(head: bytes) -> Head | None:
    """The common shape of a response head (without its blank line), or ``None`` for h11.

    ``None`` for anything else (see the module docstring), including what
    h11 would reject: the caller then hands the bytes to h11.
    """
    lines = head.split(b"\r\n")
    match = _STATUS_LINE.fullmatch(lines[0])
    if match is None:
        return None
    status = int(match[1])
    if status < 200:
        return None
    headers: list[tuple[str, str]] = []
    length: int | None = None
    chunked = close = False
    for line in lines[1:]:
        field = _FIELD.fullmatch(line)
        if field is None:
            return None
        name = field[1].lower()
        value = field[2]
        if name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > 18:
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            value = value.lower()  # as h11 gives it
            if chunked or value != b"chunked":
                return None
            chunked = True
        elif name == b"connection" and b"close" in (t.strip().lower() for t in value.split(b",")):
            close = True
        headers.append((name.decode("ascii"), value.decode("latin-1")))
    if status in (204, 304):  # never a body
        return None if chunked or length else Head(status, headers, 0, close)
    if chunked == (length is not None):
        return None  # both (a smuggling risk), or neither (the body ends with the connection)
    return Head(status, headers, length, close)


class Target:
    """Where one provider's calls to one path go, and the head they start with.

    Args:
        url: The request URL (``http`` or ``https``).
        headers: The request's fields besides ``Host`` and ``Content-Length``.

    Raises:
        httpx.LocalProtocolError: A field name or value that cannot be sent.
    """

    def __init__(self, url: httpx.URL, headers: dict[str, str]) -> None:
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        self.tls = url.scheme == "https"
        self.host = url.host
        self.port = url.port or (443 if self.tls else 80)
        self.key = (self.tls, self.host, self.port)
        self.target = url.raw_path
        lines = [b"POST " + url.raw_path + b" HTTP/1.1", b"Host: " + url.netloc]
        for name, value in headers.items():
            if not _REQUEST_FIELD.fullmatch(name) or not _REQUEST_VALUE.fullmatch(value):
                raise httpx.LocalProtocolError(f"header {name!r} cannot be sent")
            if name.lower() in ("host", "content-length", "transfer-encoding"):
                continue
            lines.append(f"{name}: {value}".encode("latin-1"))
        self.prefix = b"\r\n".join(lines) + b"\r\nContent-Length: "

    def request(self, body: bytes) -> bytes:
        """The whole request: head and ``body``."""
        return b"".join((self.prefix, str(len(body)).encode(), b"\r\n\r\n", body))


class Connection:
    """One keep-alive HTTP/1.1 connection to a model server.

    Args:
        stream: The open connection (TCP, or TLS over TCP).
        key: The origin it goes to (:attr:`Target.key`).
    """

    def __init__(self, stream: trio.abc.Stream, key: tuple[bool, str, int]) -> None:
        self.stream = stream
        self.key = key
        self.idle_since = 0.0
        self._socket = _socket_of(stream)

    @classmethod
    async def open(cls, target: Target, timeout: float, ssl_context: ssl.SSLContext) -> Connection:
        """Connect to ``target``'s origin (and shake hands for TLS)."""
        try:
            with trio.fail_after(timeout):
                tcp = await trio.open_tcp_stream(target.host, target.port)
                if not target.tls:
                    return cls(tcp, target.key)
                stream = trio.SSLStream(
                    tcp, ssl_context, server_hostname=target.host, https_compatible=True
                )
                try:
                    await stream.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
                return cls(stream, target.key)
        except trio.TooSlowError as exc:
            raise httpx.ConnectTimeout(f"connecting to {target.host}:{target.port}") from exc
        except (OSError, trio.BrokenResourceError) as exc:
            reason = exc.__cause__ or exc  # trio's broken stream carries the TLS error as its cause
            raise httpx.ConnectError(
                f"connecting to {target.host}:{target.port}: {reason}"
            ) from exc

    def stale(self) -> bool:
        """Whether an idle connection has something to read: the server closed it."""
        return self._socket is None or self._socket.is_readable()

    async def aclose(self) -> None:
        """Close the connection at once."""
        await trio.aclose_forcefully(self.stream)

    async def request(self, target: Target, body: bytes, timeout: float) -> Response:
        """Send ``body`` to ``target``; the response with its body still to read."""
        with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
            try:
                await self.stream.send_all(target.request(body))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise httpx.WriteError(f"sending the request: {exc!r}") from exc
        if scope.cancelled_caught:
            raise httpx.WriteTimeout("sending the request timed out")
        buffer = bytearray()
        end = -1
        while end < 0:
            if len(buffer) > MAX_HEAD:
                raise httpx.RemoteProtocolError("response head too long")
            if not await _fill(self.stream, buffer, timeout):
                if not buffer:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response."
                    )
                raise httpx.RemoteProtocolError("connection closed in the response head")
            end = buffer.find(b"\r\n\r\n")
            if end < 0 and b"\n\n" in buffer:
                break  # a head with bare LF line ends: h11's to read
        head = parse_head(bytes(buffer[:end])) if end >= 0 else None
        if head is None:
            return await _H11Response.read(self, target, buffer, timeout)
        del buffer[: end + 4]
        return Response(self, head, buffer, timeout)


def _socket_of(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    return stream.socket if isinstance(stream, trio.SocketStream) else None


async def _fill(stream: trio.abc.Stream, buffer: bytearray, timeout: float) -> bool:
    """Read what arrives into ``buffer``; ``False`` at the end of the stream."""
    with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
        try:
            data = await stream.receive_some(_READ)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise httpx.ReadError(f"reading the response: {exc!r}") from exc
    if scope.cancelled_caught:
        raise httpx.ReadTimeout("reading the response timed out")
    buffer += data
    return bool(data)


class Response:
    """A response whose body is read from its connection (see the module docstring).

    ``reusable`` is true once the whole body was read from a connection that
    stays open; the pool takes such a connection back when the response is
    closed.
    """

    def __init__(
        self, connection: Connection, head: Head, buffer: bytearray, timeout: float
    ) -> None:
        self.connection = connection
        self.status_code = head.status
        self.raw_headers = head.headers
        self.headers = _joined(head.headers)
        self.reusable = False
        self._close = head.close
        self._length = head.length
        self._buffer = buffer
        self._timeout = timeout

    async def aread(self) -> bytes:
        """The whole body."""
        parts = [part async for part in self.aiter_bytes()]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        return self._fixed() if self._length is not None else self._chunked()

    async def _more(self) -> None:
        if not await _fill(self.connection.stream, self._buffer, self._timeout):
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )

    async def _fixed(self) -> AsyncIterator[bytes]:
        left = self._length or 0
        buffer = self._buffer
        while left:
            if not buffer:
                await self._more()
            part = bytes(buffer[:left])
            del buffer[:left]
            left -= len(part)
            yield part
        self._done()

    async def _chunked(self) -> AsyncIterator[bytes]:
        buffer = self._buffer
        parts: list[bytes] = []
        while True:
            end = buffer.find(b"\r\n")
            while end < 0:
                if len(buffer) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("chunk size line too long")
                if parts:
                    yield b"".join(parts)
                    parts.clear()
                await self._more()
                end = buffer.find(b"\r\n")
            size_line = _CHUNK_SIZE.fullmatch(buffer, 0, end)
            if size_line is None:
                raise httpx.RemoteProtocolError("malformed chunk size line")
            size = int(size_line[1], 16)
            del buffer[: end + 2]
            if size == 0:
                break
            while size:
                if not buffer:
                    if parts:
                        yield b"".join(parts)
                        parts.clear()
                    await self._more()
                part = bytes(buffer[:size])
                del buffer[:size]
                size -= len(part)
                parts.append(part)
            while len(buffer) < 2:
                if parts:
                    yield b"".join(parts)
                    parts.clear()
                await self._more()
            if buffer[:2] != b"\r\n":
                raise httpx.RemoteProtocolError("chunk data not followed by CRLF")
            del buffer[:2]
        if parts:
            yield b"".join(parts)
        trailers = 0
        while True:  # the trailer section, ignored, up to its blank line
            end = buffer.find(b"\r\n")
            while end < 0:
                if len(buffer) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("trailer section too long")
                await self._more()
                end = buffer.find(b"\r\n")
            del buffer[: end + 2]
            trailers += end + 2
            if not end:
                break
            if trailers > MAX_HEAD:
                raise httpx.RemoteProtocolError("trailer section too long")
        self._done()

    def _done(self) -> None:
        # Bytes after the body were not asked for: the connection is out of step.
        self.reusable = not self._close and not self._buffer

    async def aclose(self) -> None:
        """Nothing to do here: the pool decides the connection's fate (:attr:`reusable`)."""


class _H11Response(Response):
    """A response h11 reads (the uncommon shapes: see the module docstring); never reused."""

    def __init__(
        self,
        connection: Connection,
        h11_connection: h11.Connection,
        response: h11.Response,
        timeout: float,
    ) -> None:
        self.connection = connection
        self.status_code = response.status_code
        self.raw_headers = [(n.decode("ascii"), v.decode("latin-1")) for n, v in response.headers]
        self.headers = _joined(self.raw_headers)
        self.reusable = False
        self._h11 = h11_connection
        self._timeout = timeout

    @classmethod
    async def read(
        cls, connection: Connection, target: Target, buffer: bytearray, timeout: float
    ) -> _H11Response:
        h11_connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        try:
            # Bring h11 to where the connection is: the request sent (its bytes are not used).
            h11_connection.send(
                h11.Request(
                    method=b"POST",
                    target=target.target,
                    headers=[(b"host", target.host.encode("idna"))],
                )
            )
            h11_connection.send(h11.EndOfMessage())
            h11_connection.receive_data(bytes(buffer))
            while True:
                event = await cls._next(connection, h11_connection, timeout)
                if isinstance(event, h11.Response):
                    return cls(connection, h11_connection, event, timeout)
                if not isinstance(event, h11.InformationalResponse):
                    raise httpx.RemoteProtocolError(
                        f"unexpected {type(event).__name__} before the response"
                    )
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc

    @staticmethod
    async def _next(
        connection: Connection, h11_connection: h11.Connection, timeout: float
    ) -> object:
        while True:
            event = h11_connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = bytearray()
            await _fill(connection.stream, data, timeout)
            h11_connection.receive_data(bytes(data))

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._events()

    async def _events(self) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await self._next(self.connection, self._h11, self._timeout)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return
                else:
                    raise httpx.RemoteProtocolError("connection closed before the body's end")
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc


def _joined(fields: list[tuple[str, str]]) -> dict[str, str]:
    """The fields as a mapping: repeated names' values joined with commas (RFC 9110 section 5.3)."""
    joined: dict[str, str] = {}
    for name, value in fields:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined
