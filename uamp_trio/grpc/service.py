"""gRPC services served as routes of uamp's HTTP/2 (and HTTP/3) engine.

Theory of operation
-------------------
Each method of a :class:`GrpcService` becomes one route, ``POST
/<service>/<method>``, whose :class:`~uamp_trio.hosting.router.RouteMeta`
asks the engine for the body while it arrives (``stream_body``) and answers
refusals as gRPC statuses (``error_style="grpc"``). The route's endpoint
checks the call's head (HTTP/2 or later, ``application/grpc`` content type,
``grpc-encoding``, ``grpc-timeout``; a failure is a trailers-only answer, or
415 for a content type that is not gRPC, as gRPC's HTTP/2 protocol says)
and returns a :class:`~uamp_trio.engines.http.StreamingResponse` with a
lazy head whose producer runs the handler:

* request messages come from :class:`~uamp_proto.grpc.MessageReader` fed by
  ``request.body_stream``, decoded with the method's request class;
* each response message is framed and sent through the engine's flow
  control; the head leaves with the first one;
* the handler's end (or its :class:`~uamp_proto.grpc.GrpcError`, or an
  unexpected exception: ``INTERNAL`` with no detail, logged) becomes the
  ``grpc-status`` / ``grpc-message`` trailers; with no message sent before,
  head and trailers go in one frame (trailers-only);
* ``grpc-timeout`` is a deadline around the whole call: past it the handler is
  cancelled and the call ends with ``DEADLINE_EXCEEDED``;
* a client that cancels resets the stream; the engine cancels the call's task,
  so the handler sees :class:`trio.Cancelled` and nothing more is sent.

Handlers, by kind (``context`` is the call's :class:`Context`)::

    unary          async def f(request, context) -> Response
    server_stream  async def f(request, context, send) -> None   # await send(msg)
    client_stream  async def f(requests, context) -> Response    # async for r in requests
    bidi           async def f(requests, context, send) -> None
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, Protocol, TypeVar

import attrs
import trio

from uamp_proto.grpc import (
    ACCEPT_ENCODINGS,
    CONTENT_TYPE,
    DEFAULT_MAX_MESSAGE,
    GrpcError,
    MessageReader,
    StatusCode,
    encode_message,
    is_grpc_content_type,
    parse_timeout,
    status_trailers,
)
from uamp_proto.principal import Principal

from ..engines.http import Headers, HTTPError, Request, Response, StreamingResponse
from ..hosting.router import RouteMeta, Router

__all__ = [
    "Context",
    "GrpcService",
    "Message",
    "MethodKind",
    "mount_service",
    "trailers_only",
    "unimplemented",
]

log = logging.getLogger("uamp_trio.grpc")

MethodKind = Literal["unary", "server_stream", "client_stream", "bidi"]


class Message(Protocol):
    """What a method's request and response types are: generated protobuf messages."""

    def SerializeToString(self) -> bytes:
        """The message's wire bytes."""
        ...


class MessageType(Protocol):
    """A generated protobuf message class, as the layer uses it."""

    def FromString(self, data: bytes) -> Any:
        """Parse wire bytes into a message."""
        ...


H = TypeVar("H", bound=Callable[..., Awaitable[Any]])
#: Sends one response message (waits for flow control).
Send = Callable[[Any], Awaitable[None]]


@attrs.frozen
class Method:
    """One method of a service: its name, kind, message types and handler."""

    name: str
    kind: MethodKind
    request_type: MessageType
    response_type: MessageType
    handler: Callable[..., Awaitable[Any]]


class GrpcService:
    """A gRPC service: methods registered by name, mounted with :func:`mount_service`.

    Args:
        name: The full service name, ``package.Service`` (``uamp.v1.Agent``).
    """

    def __init__(self, name: str) -> None:
        if not name or "/" in name:
            raise ValueError(f"not a full service name: {name!r}")
        self.name = name
        self.methods: dict[str, Method] = {}

    def add(
        self,
        name: str,
        kind: MethodKind,
        request_type: MessageType,
        response_type: MessageType,
        handler: Callable[..., Awaitable[Any]],
    ) -> None:
        """Register ``handler`` as method ``name`` of ``kind`` (see the module docstring)."""
        if name in self.methods:
            raise ValueError(f"{self.name}/{name} is registered twice")
        self.methods[name] = Method(name, kind, request_type, response_type, handler)

    def _decorator(
        self, kind: MethodKind, name: str, request_type: MessageType, response_type: MessageType
    ) -> Callable[[H], H]:
        def register(handler: H) -> H:
            self.add(name, kind, request_type, response_type, handler)
            return handler

        return register

    def unary(self, name: str, request_type: MessageType, response_type: MessageType) -> Any:
        """Decorator: ``async def f(request, context) -> response``."""
        return self._decorator("unary", name, request_type, response_type)

    def server_stream(
        self, name: str, request_type: MessageType, response_type: MessageType
    ) -> Any:
        """Decorator: ``async def f(request, context, send) -> None``."""
        return self._decorator("server_stream", name, request_type, response_type)

    def client_stream(
        self, name: str, request_type: MessageType, response_type: MessageType
    ) -> Any:
        """Decorator: ``async def f(requests, context) -> response``."""
        return self._decorator("client_stream", name, request_type, response_type)

    def bidi(self, name: str, request_type: MessageType, response_type: MessageType) -> Any:
        """Decorator: ``async def f(requests, context, send) -> None``."""
        return self._decorator("bidi", name, request_type, response_type)

    def path(self, method: str) -> str:
        """The HTTP path of ``method``: ``/package.Service/Method``."""
        return f"/{self.name}/{method}"


class Context:
    """One call as its handler sees it.

    Attributes:
        request: The HTTP request of the call (``principal`` set by the
            authentication middleware, ``tls``, ``client``).
        method: The full method path (``/uamp.v1.Agent/Send``).
        deadline: The call's deadline in trio time (``math.inf``: none).
        trailers: Extra trailers to send with the status (append to it).
    """

    def __init__(self, request: Request, method: str, deadline: float) -> None:
        self.request = request
        self.method = method
        self.deadline = deadline
        self.trailers: list[tuple[str, str]] = []

    @property
    def metadata(self) -> Headers:
        """The call's metadata: the request headers (names in lowercase)."""
        return self.request.headers

    @property
    def principal(self) -> Principal:
        """Who the call acts for."""
        return self.request.principal

    def time_remaining(self) -> float:
        """Seconds left before the deadline (``math.inf`` without one)."""
        return self.deadline - trio.current_time()


def _head() -> list[tuple[str, str]]:
    return [("content-type", CONTENT_TYPE), ("grpc-accept-encoding", ACCEPT_ENCODINGS)]


def trailers_only(
    code: StatusCode, message: str = "", extra: list[tuple[str, str]] | None = None
) -> Response:
    """A complete answer that is nothing but a status: HTTP 200 with the status in the head."""
    return Response(status=200, headers=[*_head(), *status_trailers(code, message, extra)])


async def unimplemented(request: Request) -> Response:
    """The answer to a gRPC call of a method no service has: ``UNIMPLEMENTED``."""
    return trailers_only(StatusCode.UNIMPLEMENTED, f"Method not found: {request.path}")


class _Messages:
    """The request messages of one call, decoded as they arrive."""

    def __init__(self, request: Request, reader: MessageReader, message_type: MessageType):
        self._request = request
        self._reader = reader
        self._type = message_type
        self._ready: list[bytes] = []
        self._done = False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            payload = await self._next()
            if payload is None:
                return
            yield self._decode(payload)

    def _decode(self, payload: bytes) -> Any:
        try:
            return self._type.FromString(payload)
        except Exception as exc:  # protobuf's DecodeError and friends
            text = f"The request message does not parse: {exc}"
            raise GrpcError(StatusCode.INTERNAL, text) from None

    async def _next(self) -> bytes | None:
        while not self._ready:
            if self._done:
                return None
            stream = self._request.body_stream
            if stream is None:
                # The engine buffered the whole body (a request that ended
                # with its head, or an engine that does not stream).
                self._ready.extend(self._reader.feed(self._request.body))
                self._reader.end()
                self._done = True
                continue
            piece = await stream.receive()
            if not piece:
                self._reader.end()
                self._done = True
                continue
            self._ready.extend(self._reader.feed(piece))
        return self._ready.pop(0)

    async def single(self) -> Any:
        """The one message of a unary request (read to the end of the body)."""
        first = await self._next()
        if first is None:
            raise GrpcError(StatusCode.INTERNAL, "The call ended without a request message.")
        if await self._next() is not None:
            raise GrpcError(StatusCode.INTERNAL, "A unary call sent more than one message.")
        return self._decode(first)


async def _run_handler(method: Method, messages: _Messages, context: Context, send: Send) -> None:
    handler = method.handler
    if method.kind == "unary":
        await send(await handler(await messages.single(), context))
    elif method.kind == "server_stream":
        await handler(await messages.single(), context, send)
    elif method.kind == "client_stream":
        await send(await handler(messages, context))
    else:
        await handler(messages, context, send)


def _check_head(request: Request, max_message: int) -> tuple[MessageReader, float]:
    """The call's message reader and deadline (trio time) from its head.

    Raises:
        HTTPError: 415 for a content type that is not gRPC, 505 below HTTP/2.
        GrpcError: A bad ``grpc-encoding`` or ``grpc-timeout``.
    """
    if not is_grpc_content_type(request.headers.get("content-type")):
        raise HTTPError(415, "gRPC calls carry content-type application/grpc.", code="grpc_only")
    if request.http_version in ("1.0", "1.1"):
        raise HTTPError(505, "gRPC needs HTTP/2 or HTTP/3.", code="grpc_needs_http2")
    reader = MessageReader(
        max_message=max_message, encoding=request.headers.get("grpc-encoding") or "identity"
    )
    timeout = request.headers.get("grpc-timeout")
    deadline = math.inf if timeout is None else trio.current_time() + parse_timeout(timeout)
    return reader, deadline


def _endpoint(
    method: Method, path: str, max_message: int
) -> Callable[[Request], Awaitable[Response | StreamingResponse]]:
    async def call(request: Request) -> Response | StreamingResponse:
        try:
            reader, deadline = _check_head(request, max_message)
        except GrpcError as exc:
            return trailers_only(exc.code, exc.message, exc.trailers)
        context = Context(request, path, deadline)
        messages = _Messages(request, reader, method.request_type)
        response = StreamingResponse(producer=_noop, headers=_head(), lazy_head=True)

        async def produce(send_chunk: Callable[[bytes], Awaitable[None]]) -> None:
            async def send(message: Any) -> None:
                await send_chunk(encode_message(message.SerializeToString()))

            code, text, extra = StatusCode.OK, "", []
            try:
                with trio.move_on_at(deadline) as scope:
                    await _run_handler(method, messages, context, send)
                if scope.cancelled_caught:
                    code, text = StatusCode.DEADLINE_EXCEEDED, "The call's deadline passed."
            except GrpcError as exc:
                code, text, extra = exc.code, exc.message, exc.trailers
            except trio.BrokenResourceError:
                raise  # the peer went away: nothing to answer
            except Exception:
                log.exception("gRPC handler %s failed", path)
                code, text = StatusCode.INTERNAL, "The server failed while handling the call."
            response.trailers = status_trailers(code, text, [*context.trailers, *extra])

        response.producer = produce
        return response

    return call


async def _noop(send: Callable[[bytes], Awaitable[None]]) -> None:
    return None


def mount_service(
    router: Router,
    service: GrpcService,
    *,
    transport: str = "",
    meta: RouteMeta | None = None,
    max_message: int = DEFAULT_MAX_MESSAGE,
    public: bool = False,
) -> None:
    """Serve every method of ``service`` on ``router`` at ``/<service>/<method>``.

    Args:
        router: The route table (``host.router`` in a transport's ``mount``).
        service: The service.
        transport: The transport's name, for middleware and metrics.
        meta: The routes' metadata when more than ``transport`` and ``public``
            is needed (``tls13``...); its error style and body streaming are
            always gRPC's.
        max_message: The largest request message (``RESOURCE_EXHAUSTED`` above).
        public: Let calls past the authentication gate with no credential.
    """
    base = meta if meta is not None else RouteMeta(transport=transport, public=public)
    meta = attrs.evolve(base, error_style="grpc", stream_body=True)
    for name, method in service.methods.items():
        path = service.path(name)
        router.add("POST", path, _endpoint(method, path, max_message), meta=meta)
