"""The ASGI side of one HTTP exchange: a :class:`Request` in, a :class:`Reply` out.

An endpoint is ``async def endpoint(request) -> Reply``. The app reads the
whole body first (bounded by ``Config.max_body_size``: a larger declared
``Content-Length`` is refused before a byte is read, a body that grows past
it is refused when it does), then writes the endpoint's reply: a
:class:`JsonReply` in one message, a :class:`StreamReply` piece by piece as
its producer writes. While a stream is produced a second task waits for the
client's ``http.disconnect``; when the client leaves, the producer (and the
agent turn inside it) is cancelled -- or, for a ``detach`` reply, goes on
to its end with nowhere to write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import orjson
from anyio.abc import TaskGroup

from uamp_proto import jsonbounds
from uamp_proto.errors import UampError
from uamp_proto.principal import ANONYMOUS, Principal

__all__ = [
    "JSON_HEADERS",
    "SSE_HEADERS",
    "TRANSPORT",
    "HTTPError",
    "JsonReply",
    "Reply",
    "Request",
    "StreamReply",
    "Write",
    "read_body",
    "send_reply",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: Writes one piece of a streamed body.
Write = Callable[[bytes], Awaitable[None]]

JSON_HEADERS = [("content-type", "application/json")]
#: The transport of the request being served (what metrics count an agent run under).
TRANSPORT: ContextVar[str] = ContextVar("uamp_asgi_transport", default="-")
SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]


class HTTPError(UampError):
    """An endpoint's refusal: the app answers ``status`` in the route's error style."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or []


@attrs.define
class Request:
    """One HTTP request, its body read whole."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    query: str = ""
    path_params: dict[str, str] = attrs.field(factory=dict)
    principal: Principal = ANONYMOUS
    #: The whole path the client asked for (with where the app is mounted).
    full_path: str = ""
    scheme: str = "http"
    #: Where the app is mounted (ASGI's ``root_path``): ``full_path`` begins with it.
    root_path: str = ""
    #: Where work that may outlive the answer runs (routes mounted with
    #: ``background=True``); ``None`` elsewhere.
    background: TaskGroup | None = None

    def json(self) -> Any:
        """The body parsed as JSON, once :mod:`uamp_proto.jsonbounds` let it be (as ``uamp serve``).

        Raises:
            HTTPError: 400 ``invalid_json``; 413 ``json_too_complex`` when it
                holds more values, or nests deeper, than the server parses.
        """
        try:
            if len(self.body) > jsonbounds.FLOOR[0]:  # else within every limit
                jsonbounds.check(self.body)
            return orjson.loads(self.body)
        except jsonbounds.TooManyValues as exc:
            message = f"The request body is not parsed: {exc}."
            raise HTTPError(413, message, code="json_too_complex") from None
        except orjson.JSONDecodeError as exc:
            raise HTTPError(400, f"The body is not JSON: {exc}", code="invalid_json") from None


@attrs.frozen
class JsonReply:
    """A whole JSON response (``body`` as ``bytes``: JSON already encoded).

    ``after`` runs once the response is sent, inside the request's task (work
    the request started that outlives its answer, as Starlette's background
    tasks): the ASGI server waits for it before it shuts down.
    """

    body: Any
    status: int = 200
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    after: Callable[[], Awaitable[object]] | None = None
    content_type: str = "application/json"


@attrs.frozen
class StreamReply:
    """A streamed response: ``producer(write)`` writes its body.

    ``on_close`` runs once the response is over however it ended (a charge
    to release when the producer never ran). ``detach``: when the client
    leaves, the producer goes on to its end with its writes dropped (work
    that must not stop with its first reader, as an A2A task), instead of
    being cancelled.
    """

    producer: Callable[[Write], Awaitable[None]]
    headers: list[tuple[str, str]] = attrs.field(factory=lambda: list(SSE_HEADERS))
    status: int = 200
    on_close: Callable[[], Awaitable[object]] | None = None
    detach: bool = False


Reply = JsonReply | StreamReply


def scope_headers(scope: Scope) -> dict[str, str]:
    """The request's headers, names lowercased (the first of repeated names)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole request body, at most ``limit`` bytes.

    Raises:
        HTTPError: 413 when the body is larger; 400 when the client left.
    """
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"The body is larger than {limit} bytes.", code="body_too_large")
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HTTPError(400, "The client left before sending its body.", code="disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"The body is larger than {limit} bytes.", code="body_too_large")
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _head(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def send_reply(
    reply: Reply, send: Send, receive: Receive, *, head_only: bool = False
) -> None:
    """Write ``reply``; a stream is cancelled when the client disconnects."""
    if isinstance(reply, JsonReply):
        body = reply.body if isinstance(reply.body, bytes) else orjson.dumps(reply.body)
        head = [("content-type", reply.content_type), *reply.headers]
        if not any(name.lower() == "content-length" for name, _ in reply.headers):
            # Sized, so the server need not chunk it (a HEAD names the GET's size).
            head.append(("content-length", str(len(body))))
        await send({"type": "http.response.start", "status": reply.status, "headers": _head(head)})
        await send({"type": "http.response.body", "body": b"" if head_only else body})
        if reply.after is not None:
            await reply.after()
        return
    try:
        await _stream(reply, send, receive)
    finally:
        if reply.on_close is not None:
            with anyio.CancelScope(shield=True):
                await reply.on_close()


#: Bytes a stream may hold unsent before its producer waits for the socket.
HIGH_WATER = 256 * 1024
#: A producer that never waits passes a scheduler checkpoint this often
#: (writes), so that what it wrote goes out in batches of at most this many.
YIELD_EVERY = 64


class _Batch:
    """The body of a stream: the producer's writes, sent together as the writer gets to them.

    The producer's ``write`` only queues its bytes and wakes the writer task,
    which sends everything queued since its last send in one ASGI message: a
    producer that writes many small pieces between two waits costs one send,
    and one that writes a piece then waits (a model thinking) has it sent at
    once. Past :data:`HIGH_WATER` bytes queued the producer waits for the
    writer (backpressure).
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._parts: list[bytes] = []
        self._size = 0
        self._count = 0
        self._ready = anyio.Event()
        self._room = anyio.Event()
        self._done = False
        self._drained = anyio.Event()
        #: The client left: what is written goes nowhere.
        self.gone = False

    def leave(self) -> None:
        """The client left: drop what is queued and whatever is written from now on."""
        self.gone = True
        self._parts.clear()
        self._size = 0
        self._room.set()  # a producer waiting for room goes on
        self._ready.set()
        self._drained.set()

    async def write(self, data: bytes) -> None:
        if not data or self.gone:
            return
        self._parts.append(data)
        self._size += len(data)
        self._ready.set()
        if self._size > HIGH_WATER:
            await self._room.wait()
        else:
            self._count += 1
            if self._count >= YIELD_EVERY:
                self._count = 0
                await anyio.lowlevel.checkpoint()

    async def drain(self) -> None:
        """The writer task: send what is queued, until :meth:`finish`."""
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            if self.gone:
                return
            if self._parts:
                data = b"".join(self._parts)
                self._parts.clear()
                self._size = 0
                self._room.set()
                self._room = anyio.Event()
                await self._send({"type": "http.response.body", "body": data, "more_body": True})
            if self._done and not self._parts:
                self._drained.set()
                return

    async def finish(self) -> None:
        """The producer is done: wait until everything it wrote is sent."""
        self._done = True
        self._ready.set()
        await self._drained.wait()


async def _stream(reply: StreamReply, send: Send, receive: Receive) -> None:
    await send(
        {"type": "http.response.start", "status": reply.status, "headers": _head(reply.headers)}
    )
    batch = _Batch(send)
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if reply.detach:
                batch.leave()  # the client left: the producer goes on, unheard
            else:
                group.cancel_scope.cancel()  # the client left: stop producing

        async def drain() -> None:
            try:
                await batch.drain()
            except OSError:  # the server found the client gone first (a detached stream)
                if not reply.detach:
                    raise
                batch.leave()

        group.start_soon(watch)
        group.start_soon(drain)
        await reply.producer(batch.write)
        await batch.finish()
        if not batch.gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        group.cancel_scope.cancel()
