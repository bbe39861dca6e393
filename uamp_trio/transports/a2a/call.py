"""What every binding of the A2A transport shares: the call, the stream it opens, body checks.

The operations of :class:`~uamp_trio.transports.a2a.A2ATransport` take a
:class:`Call` (the agent, the HTTP request, the object dialect) and answer
plain JSON objects; a streaming operation answers an :class:`Opened` stream
that each binding writes its own way (JSON-RPC responses or bare objects as
SSE, gRPC messages).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson

from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import Dialect
from uamp_proto.adapters.a2a_frames import TextChunkFrames
from uamp_proto.adapters.a2a_params import check_content_type
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.sse import encode_json

from ...engines.http import Request, SendChunk, StreamingResponse

__all__ = [
    "SSE_HEADERS",
    "Call",
    "Emit",
    "Opened",
    "SseEmit",
    "TextPen",
    "check_json_body",
    "sse",
]

SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]

#: Sends one stream result object (a binding writes it as SSE, a gRPC message...).
Emit = Callable[[dict[str, Any]], Awaitable[None]]


def sse(obj: Any, event: str | None = None) -> bytes:
    """One SSE event whose data is ``obj`` as JSON."""
    return encode_json(orjson.dumps(obj), event=event)


@attrs.frozen
class Call:
    """One request to an A2A operation, whatever binding carried it.

    Attributes:
        agent: The agent addressed.
        request: The HTTP request (principal, headers, body).
        dialect: The object dialect to read and answer in.
    """

    agent: Responder
    request: Request
    dialect: Dialect

    @property
    def principal(self) -> Principal:
        """Who the call acts for."""
        return self.request.principal

    @property
    def extensions(self) -> frozenset[str]:
        """The extension URIs the client activated (``A2A-Extensions``, comma-separated)."""
        value = self.request.headers.get("a2a-extensions") or ""
        return frozenset(v.strip() for v in value.split(",") if v.strip())


def check_json_body(request: Request) -> None:
    """Refuse a body declared as other than JSON (``a2a_params.check_content_type``)."""
    check_content_type(request.headers.get("content-type"))


@attrs.frozen
class TextPen:
    """Writes a stream's text chunks of one shape, ``head + JSON(text) + tail``, into ``send``.

    What :meth:`SseEmit.pen` gives the request that follows a task's turn,
    for the turn to write its text chunks itself (from its own task, while
    the request has written everything before them).
    """

    send: SendChunk
    head: bytes
    tail: bytes


class SseEmit:
    """The :data:`Emit` of an SSE stream; :meth:`update` frames text chunks from a template."""

    __slots__ = ("_frames", "_pen", "_send", "_wrap")

    def __init__(self, send: SendChunk, wrap: Callable[[dict[str, Any]], Any]) -> None:
        self._send = send
        self._wrap = wrap
        self._frames: TextChunkFrames | None = None
        self._pen: TextPen | None = None

    def _encode(self, result: dict[str, Any]) -> bytes:
        return sse(self._wrap(result))

    async def __call__(self, result: dict[str, Any]) -> None:
        await self._send(sse(self._wrap(result)))

    async def update(self, update: a2a.Update, dialect: Dialect) -> None:
        """Send ``update`` as ``self(render_update(update, dialect))`` would."""
        frames = self._frames
        if frames is None:
            frames = self._frames = TextChunkFrames(dialect, self._encode)
        await self._send(frames.frame(update))

    async def updates(self, updates: list[a2a.Update], dialect: Dialect) -> None:
        """Send ``updates`` as :meth:`update` would one by one, in one piece."""
        frames = self._frames
        if frames is None:
            frames = self._frames = TextChunkFrames(dialect, self._encode)
        frame = frames.frame
        await self._send(b"".join([frame(update) for update in updates]))

    def pen(self, update: a2a.Update, dialect: Dialect) -> TextPen | None:
        """What writes the text chunks shaped as ``update`` as :meth:`update` would."""
        frames = self._frames
        if frames is None:
            frames = self._frames = TextChunkFrames(dialect, self._encode)
        template = frames.template(update)
        if template is None:
            return None
        pen = self._pen
        if pen is None or (pen.head, pen.tail) != template:
            pen = self._pen = TextPen(self._send, *template)
        return pen


@attrs.frozen
class Opened:
    """A stream an operation has opened: what produces its results, what frees it if unsent."""

    produce: Callable[[Emit], Awaitable[None]]
    on_close: Callable[[], Awaitable[object]] | None = None

    def sse(self, wrap: Callable[[dict[str, Any]], Any]) -> StreamingResponse:
        """The stream as SSE, each result written as ``data: <wrap(result)>``."""

        async def producer(send: SendChunk) -> None:
            await self.produce(SseEmit(send, wrap))

        return StreamingResponse(
            producer=producer, headers=list(SSE_HEADERS), on_close=self.on_close
        )
