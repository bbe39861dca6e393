"""The request/response abstraction every HTTP endpoint is written against.

An endpoint is ``async def endpoint(request: Request) -> Response |
StreamingResponse``. The server fills a :class:`Request` the same way for
HTTP/1.1 (h11) and HTTP/2 (h2): method, path, query, headers, the whole body
(already size-checked) and the path parameters of the matched route. It then
writes the returned response with the framing of the connection: a full
:class:`Response` as one head+body write, a :class:`StreamingResponse` as
chunked encoding (HTTP/1.1) or DATA frames under h2 flow control (HTTP/2).

An endpoint reports a client error by raising :class:`HTTPError`; the server
turns it into a JSON body in the OpenAI error shape
``{"error": {"message", "type", "code", "param"}}``.

Two additions serve protocols that stream both ways over one request (gRPC):
a route that asks for it (the dispatcher's ``streams_body``) gets its body
as a :class:`BodyStream` in ``request.body_stream`` while it arrives, the
endpoint starting as soon as the head is in (HTTP/2 and HTTP/3 only; the
peer is held back by the stream's flow-control window, so an endpoint that
does not read holds at most one window); and a :class:`StreamingResponse`
may end with ``trailers`` (HTTP/2 and HTTP/3; HTTP/1.1 drops them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import attrs
import orjson
import trio

from uamp_proto import jsonbounds
from uamp_proto._fastinit import maker
from uamp_proto.errors import UampError
from uamp_proto.principal import ANONYMOUS, Principal

__all__ = [
    "BATCH_HIGH_WATER",
    "KNOWN_METHODS",
    "SSE_HEADERS",
    "YIELD_BEFORE",
    "BodyBudget",
    "BodyStream",
    "Endpoint",
    "HTTPError",
    "Headers",
    "Request",
    "Response",
    "SendChunk",
    "SerialBodyWriter",
    "StreamingResponse",
    "TLSInfo",
    "WriteBatch",
    "batched_writer",
    "error_body",
    "error_response",
    "json_response",
    "reason_phrase",
    "tls_info",
]

#: A request body or WebSocket message larger than this is handed on only
#: after a scheduler checkpoint: parsing it may take milliseconds, and the
#: requests that are ready meanwhile are served first.
YIELD_BEFORE = 64 * 1024

#: The methods of RFC 9110 section 9 and PATCH (RFC 5789). Methods are
#: case-sensitive: any other token, ``head`` included, is answered 501.
KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)


def reason_phrase(status: int) -> bytes:
    """The reason phrase of ``status`` for a status line (``b""`` when unknown)."""
    phrase = _REASONS.get(status)
    if phrase is None:
        try:
            phrase = HTTPStatus(status).phrase.encode("ascii")
        except ValueError:
            phrase = b""
        _REASONS[status] = phrase
    return phrase


#: RFC 9110 renamed these; Python before 3.13 still has the RFC 7231 names.
_REASONS: dict[int, bytes] = {413: b"Content Too Large", 422: b"Unprocessable Content"}


class BodyBudget:
    """Request body bytes buffered across all connections, against one cap.

    A connection :meth:`take` s each piece of a body it buffers while the body
    is still arriving and :meth:`give` s it back once the request has been
    handled (or the connection ended). A piece that would go over the cap is
    refused: the request is answered 503 instead of buffered.
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Count ``size`` more bytes buffered; ``False`` (nothing counted) when over the cap."""
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        """``size`` bytes taken before are no longer buffered."""
        self.used -= size


class BodyStream:
    """A request body read piece by piece while the peer sends it.

    The engine :meth:`feed` s each piece as it arrives and :meth:`end` s the
    body (or :meth:`fail` s it when the stream is reset); the endpoint reads
    with :meth:`receive`. Each piece read is reported to ``consumed`` (its
    size), with which the engine gives the peer its flow-control credit back:
    the peer can never be more than one window ahead of the reader.
    """

    __slots__ = ("_consumed", "_ended", "_error", "_pieces", "_waiter")

    def __init__(self, consumed: Callable[[int], Awaitable[object]]) -> None:
        self._consumed = consumed
        self._pieces: deque[bytes] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._waiter = trio.lowlevel.ParkingLot()

    def feed(self, piece: bytes) -> None:
        """Engine side: ``piece`` arrived."""
        if piece:
            self._pieces.append(piece)
            self._waiter.unpark_all()

    def end(self) -> None:
        """Engine side: the body is complete."""
        self._ended = True
        self._waiter.unpark_all()

    def fail(self, exc: BaseException) -> None:
        """Engine side: the body will not complete (the stream was reset)."""
        self._error = exc
        self._waiter.unpark_all()

    @property
    def ended(self) -> bool:
        """Whether the peer has sent the whole body (pieces may still be unread)."""
        return self._ended

    async def receive(self) -> bytes:
        """The next piece of the body; ``b""`` once it has all been read.

        Raises:
            trio.BrokenResourceError: The peer abandoned the request.
        """
        while not self._pieces:
            if self._error is not None:
                raise trio.BrokenResourceError("the request body was abandoned") from self._error
            if self._ended:
                return b""
            await self._waiter.park()
        piece = self._pieces.popleft()
        await self._consumed(len(piece))
        return piece


#: Writes one chunk of a streaming body; waits for flow control / the socket.
SendChunk = Callable[[bytes], Awaitable[None]]


class Headers:
    """Case-insensitive, order-keeping HTTP header list (names kept lowercase)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str | bytes, str | bytes]] = ()) -> None:
        self._items: list[tuple[str, str]] = [(_text(k).lower(), _text(v)) for k, v in items]

    @classmethod
    def from_normalized(cls, items: list[tuple[str, str]]) -> Headers:
        """Headers from pairs already in their stored form: lowercase ``str`` names, ``str`` values.

        Takes ``items`` as it is (no copy, no second pass): for a parser that
        produced that form itself.
        """
        headers = cls.__new__(cls)
        headers._items = items
        return headers

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name``, or ``default``."""
        name = name.lower()
        for key, value in self._items:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name`` in order."""
        name = name.lower()
        return [v for k, v in self._items if k == name]

    def has_token(self, name: str, token: str) -> bool:
        """Whether a comma-separated header (``Connection``...) lists ``token``."""
        token = token.lower()
        return any(
            part.strip().lower() == token for v in self.get_all(name) for part in v.split(",")
        )

    def items(self) -> list[tuple[str, str]]:
        """All ``(name, value)`` pairs."""
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


@attrs.frozen(kw_only=True)
class TLSInfo:
    """What a request's TLS connection established.

    Attributes:
        version: The protocol version (``"TLSv1.3"``...).
        alpn: The negotiated application protocol (``"h2"``, ``"h3"``...), if any.
        peer_certificate: The client's certificate (DER) under mutual TLS, else ``None``.
    """

    version: str | None = None
    alpn: str | None = None
    peer_certificate: bytes | None = None


def tls_info(stream: trio.abc.Stream) -> TLSInfo | None:
    """What the TLS handshake of ``stream`` established, or ``None`` in cleartext."""
    if not isinstance(stream, trio.SSLStream):
        return None
    return TLSInfo(
        version=stream.version(),
        alpn=stream.selected_alpn_protocol(),
        peer_certificate=stream.getpeercert(binary_form=True) or None,
    )


@attrs.define(kw_only=True)
class Request:
    """One HTTP request as endpoints see it.

    Attributes:
        method: The method as sent (one of :data:`KNOWN_METHODS`).
        path: The decoded path, without the query string.
        query: The raw query string (without ``?``), or ``""``.
        headers: Request headers.
        body: The whole request body (at most the server's body limit).
        path_params: Values of the ``{name}`` segments of the matched route.
        http_version: ``"1.0"``, ``"1.1"`` or ``"2"``.
        scheme: ``"http"`` or ``"https"``.
        client: The peer's ``(host, port)``, when known.
        principal: Who the request acts for, set by the authentication
            middleware (:data:`~uamp_proto.principal.ANONYMOUS` without one).
        body_stream: For a route that streams its body: the body as it
            arrives (``body`` is then empty); else ``None``.
        tls: What the TLS handshake established (``None`` in cleartext).
        stream_id: The QUIC stream the request came on (HTTP/3), else ``None``.
        root_path: The prefix a reverse proxy publishes the server under
            (``uamp serve --root-path``; ``path`` is without it), else ``""``:
            URLs given to the client start with it.
    """

    method: str
    path: str
    query: str = ""
    headers: Headers = attrs.field(factory=Headers)
    body: bytes = b""
    path_params: dict[str, str] = attrs.field(factory=dict)
    http_version: str = "1.1"
    scheme: str = "http"
    client: tuple[str, int] | None = None
    principal: Principal = ANONYMOUS
    body_stream: BodyStream | None = None
    tls: TLSInfo | None = None
    stream_id: int | None = None
    root_path: str = ""

    async def json(self) -> Any:
        """The body parsed as JSON.

        Parsed on the event loop: orjson keeps the GIL while it parses, so a
        worker thread would not let the loop run meanwhile (measured: the
        loop waited as long either way). A coroutine all the same, so that a
        parser that yields between slices can take its place without
        changing the callers.

        Raises:
            HTTPError: 400 ``invalid_json`` when the body is not JSON, 413
                ``json_too_complex`` when it holds more values than the
                server parses (:mod:`uamp_proto.jsonbounds`).
        """
        body = self.body
        if len(body) > jsonbounds.FLOOR[0]:  # else within every limit: not even the call
            try:
                jsonbounds.check(body)
            except jsonbounds.TooManyValues as exc:
                raise HTTPError(
                    413, f"The request body is not parsed: {exc}.", code="json_too_complex"
                ) from None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise HTTPError(
                400, f"The request body is not valid JSON: {exc}", code="invalid_json"
            ) from None


@attrs.define(kw_only=True)
class Response:
    """A complete response, written as one head+body send."""

    status: int = 200
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    body: bytes = b""


@attrs.define(kw_only=True)
class StreamingResponse:
    """A response whose body is produced while it is being sent.

    ``producer`` is called with a :data:`SendChunk` and writes the body chunk
    by chunk; it may open nurseries, and each ``await send(chunk)`` returns
    once the chunk is handed to the connection (backpressure). The response
    ends when ``producer`` returns. Use :meth:`from_iterable` for an async
    generator of chunks.

    ``on_close`` is awaited once when the server is done with the response,
    whether ``producer`` ran, failed, was cancelled or never started (the
    client left first, a ``HEAD`` request, a reset HTTP/2 stream): a
    response that holds something (a payment lock) releases it there. It is
    shielded from cancellation, so it must be short.

    ``trailers``, when the producer has set them by the time it returns,
    are sent after the body (HTTP/2, HTTP/3: a last HEADERS frame). With
    ``lazy_head`` (HTTP/2, HTTP/3) the head waits for the first body bytes,
    so ``headers`` may still change until then, and a body that ends empty
    with trailers is answered by one HEADERS frame holding head and trailers
    (gRPC's "trailers-only" response).
    """

    producer: Callable[[SendChunk], Awaitable[None]]
    status: int = 200
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    on_close: Callable[[], Awaitable[object]] | None = None
    trailers: list[tuple[str, str]] | None = None
    lazy_head: bool = False

    async def aclose(self) -> None:
        """Run ``on_close`` (once); the engines call it after sending, or not sending."""
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            with trio.CancelScope(shield=True):
                await on_close()

    @classmethod
    def from_iterable(
        cls,
        chunks: AsyncIterable[bytes],
        *,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
    ) -> StreamingResponse:
        """A streaming response that sends every chunk of ``chunks``."""

        async def produce(send: SendChunk) -> None:
            async for chunk in chunks:
                await send(chunk)

        return cls(producer=produce, status=status, headers=list(headers or []))


#: Writes one batch of body bytes; ``final`` is true for the last call, which
#: ends the body (its data may be empty).
WriteBatch = Callable[[bytes, bool], Awaitable[None]]

#: Bytes a streaming body may queue ahead of the socket before ``send`` waits.
BATCH_HIGH_WATER = 64 * 1024


class _Batcher:
    """The state shared by a streaming body's producer and its writer task."""

    __slots__ = (
        "abandoned",
        "closing",
        "ended",
        "error",
        "high_water",
        "idle",
        "on_error",
        "parked",
        "queue",
        "room",
        "size",
        "write",
    )

    def __init__(self, write: WriteBatch, high_water: int) -> None:
        self.write = write
        self.high_water = high_water
        self.queue: list[bytes] = []
        self.size = 0
        self.closing = False
        self.error: Exception | None = None
        self.idle = trio.lowlevel.ParkingLot()  # the writer, waiting for bytes
        #: Whether the writer waits in ``idle`` (a plain flag: cheaper to test
        #: on every chunk than the lot's length).
        self.parked = False
        self.room = trio.lowlevel.ParkingLot()  # the producer, waiting for room
        self.on_error: Callable[[], object] | None = None
        #: The producer failed: write nothing more.
        self.abandoned = False
        #: The body is over: a send waiting for room (from another task) raises.
        self.ended = False

    async def send(self, chunk: bytes) -> None:
        if self.error is not None:
            raise trio.BrokenResourceError("the response could not be written") from self.error
        if not chunk:
            return
        self.queue.append(chunk)
        self.size += len(chunk)
        if self.parked:
            self.wake()
        if self.size > self.high_water:
            while self.size > self.high_water and self.error is None and not self.ended:
                await self.room.park()
            if self.error is not None:
                raise trio.BrokenResourceError("the response could not be written") from self.error
            if self.ended:
                raise trio.BrokenResourceError("the response is over")

    def wake(self) -> None:
        """Wake the writer if it waits for bytes."""
        self.parked = False
        self.idle.unpark()

    def end(self) -> None:
        """The body is over (written or abandoned): wake a send waiting for room, which raises.

        The producer's own sends end with the block; this is for a send made
        from another task, which may still wait for room when the body ends
        (the client left): it fails instead of waiting for good.
        """
        self.ended = True
        if self.room:
            self.room.unpark_all()

    async def run(self) -> None:
        first = True
        try:
            while True:
                if self.abandoned:
                    return
                queue = self.queue
                if not queue:
                    if self.closing:
                        await self.write(b"", True)
                        return
                    if first:
                        # The producer is waiting before its first chunk:
                        # let the head go out now rather than with the chunk.
                        first = False
                        await self.write(b"", False)
                        continue
                    self.parked = True
                    await self.idle.park()
                    continue
                first = False
                final = self.closing  # the producer is done: nothing follows
                data = queue[0] if len(queue) == 1 else b"".join(queue)
                self.queue = []
                self.size = 0
                if self.room:
                    self.room.unpark_all()
                await self.write(data, final)
                if final:
                    return
        except Exception as exc:
            # Reported to the producer (its next send raises) and re-raised by
            # batched_writer() after its nursery; the producer is cancelled.
            self.error = exc
            self.room.unpark_all()
            if self.on_error is not None:
                self.on_error()


class SerialBodyWriter:
    """:func:`batched_writer` for a connection whose responses go one at a time (HTTP/1.1).

    One writer task, started in the connection's ``nursery`` with the first
    streamed body, writes every streamed body of the connection, so a
    response pays for neither a task group nor a task start (together about
    40 us on trio, as much as the rest of a short streamed response).

    :meth:`body` keeps :func:`batched_writer`'s contract, with one
    difference: a failed ``write`` cancels the whole ``nursery`` -- the
    connection, whose socket just failed -- rather than only the block,
    and the block then raises the write's exception. The connection must
    cancel ``nursery`` when it ends (the writer task waits for work until then).
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._current: _Batcher | None = None
        #: The body the writer task is writing; the producer writes its own
        #: body when it ends before the task got to it.
        self._running: _Batcher | None = None
        self._taken_over: _Batcher | None = None
        self._started = False
        self._work = trio.lowlevel.ParkingLot()  # the writer task, waiting for a body
        self._finished = trio.lowlevel.ParkingLot()  # a producer, waiting for its last write

    async def _serve(self) -> None:
        while True:
            batcher = self._current
            if batcher is None or batcher is self._taken_over:
                await self._work.park()
                continue
            self._running = batcher
            await batcher.run()
            self._running = None
            self._current = None
            self._finished.unpark_all()

    @asynccontextmanager
    async def body(
        self, write: WriteBatch, *, high_water: int = BATCH_HIGH_WATER
    ) -> AsyncIterator[SendChunk]:
        """A :data:`SendChunk` for one streamed body (see the class docstring).

        Raises:
            RuntimeError: Another body of this connection is still open.
        """
        if self._current is not None:
            raise RuntimeError("a streamed body is still being written on this connection")
        batcher = _Batcher(write, high_water)
        batcher.on_error = self._nursery.cancel_scope.cancel
        self._current = batcher
        self._taken_over = None
        if not self._started:
            self._started = True
            self._nursery.start_soon(self._serve)
        elif self._work:
            self._work.unpark()
        try:
            yield batcher.send
        except BaseException as exc:
            # Nothing more is written. A write in progress ends on its own;
            # the connection is closed after this, which ends it if it hangs.
            batcher.abandoned = True
            batcher.wake()
            batcher.end()
            if batcher.error is not None and isinstance(exc, trio.Cancelled):
                raise batcher.error from None  # the failed write cancelled the block
            raise
        try:
            if self._running is not batcher:
                # The producer never waited, so the writer task has not started
                # on this body: write it here, in one final write, and spare the
                # hand-over to the task and back.
                self._taken_over = batcher
                self._current = None
                queue = batcher.queue
                data = queue[0] if len(queue) == 1 else b"".join(queue)
                try:
                    await write(data, True)
                except Exception:
                    self._nursery.cancel_scope.cancel()
                    raise
                return
            batcher.closing = True
            batcher.wake()
            while self._current is batcher:
                await self._finished.park()
            if batcher.error is not None:
                raise batcher.error
        finally:
            batcher.end()


@asynccontextmanager
async def batched_writer(
    write: WriteBatch, *, high_water: int = BATCH_HIGH_WATER
) -> AsyncIterator[SendChunk]:
    """A :data:`SendChunk` that gathers whatever is queued into one write.

    ``send(chunk)`` queues the chunk and returns at once (it waits only when
    more than ``high_water`` bytes are queued: backpressure); a writer task
    takes *everything* queued since its last write and hands it to ``write``
    in one call. So a producer that emits faster than the socket takes its
    chunks, or that emits several before its next wait, pays for one framing
    and one ``send_all`` per batch instead of one per chunk; a producer that
    waits between chunks has each written as soon as it waits.

    The writer's first turn comes when the producer first waits; if nothing
    is queued by then it calls ``write(b"", False)`` so that the caller can
    send the response head without waiting for a chunk. On a clean exit of
    the block the rest is written with ``final=True`` (an empty final call
    when nothing is left). If the block raises, nothing more
    is written and the exception propagates unchanged. If ``write`` fails,
    the block is cancelled and the write's exception is raised instead.

    Another task may call ``send`` too while the block is open (the block's
    owner decides the order of their chunks). Once the body is over, a
    ``send`` that would wait for room raises ``trio.BrokenResourceError``,
    also one already waiting when the block ends: nobody makes room any more.
    """
    caught: BaseException | None = None
    async with trio.open_nursery() as nursery:
        # One body on a writer of its own: a failed write cancels this nursery.
        try:
            async with SerialBodyWriter(nursery).body(write, high_water=high_water) as send:
                yield send
        except BaseException as exc:
            # Re-raised below, outside the nursery, so that callers see the
            # body's (or the failed write's) own exception, not a group.
            caught = exc
        nursery.cancel_scope.cancel()  # the writer task waits for a next body
    if caught is not None:
        try:
            raise caught
        finally:
            del caught


#: What an HTTP endpoint is.
Endpoint = Callable[[Request], Awaitable[Response | StreamingResponse]]


class HTTPError(UampError):
    """An error an endpoint answers with; rendered as OpenAI-shaped JSON.

    Args:
        status: HTTP status code.
        message: A sentence a person can act on.
        code: Machine-readable code (``"invalid_json"``, ``"agent_not_found"``...).
        type: OpenAI error type; ``invalid_request_error`` for 4xx by default.
        param: The offending request parameter, when there is one.
        headers: Extra response headers (``Allow`` for 405...).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        param: str | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.param = param
        self.headers = headers or []

    def to_response(self) -> Response:
        """The JSON error response."""
        resp = error_response(
            self.status, self.message, code=self.code, type=self.type, param=self.param
        )
        resp.headers.extend(self.headers)
        return resp


def error_body(
    message: str,
    *,
    code: str | None = None,
    type: str = "invalid_request_error",
    param: str | None = None,
) -> dict[str, Any]:
    """The OpenAI error object ``{"error": {...}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


JSON_HEADERS = [("content-type", "application/json")]
#: The head of a server-sent events body (no caching, no proxy buffering).
SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]


#: ``Response(status=, headers=, body=)`` positionally: a class call with
#: keywords packs them in a dict that ``__init__`` unpacks again.
new_response = maker(Response, ("status", "headers", "body"))


def json_response(
    obj: Any, status: int = 200, headers: list[tuple[str, str]] | None = None
) -> Response:
    """A JSON response (orjson-encoded)."""
    body = orjson.dumps(obj)
    if headers:
        return new_response(status, [*JSON_HEADERS, *headers], body)
    return new_response(status, JSON_HEADERS.copy(), body)


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    type: str | None = None,
    param: str | None = None,
) -> Response:
    """A JSON error response in the OpenAI shape."""
    kind = type or ("invalid_request_error" if status < 500 else "server_error")
    return json_response(error_body(message, code=code, type=kind, param=param), status)
