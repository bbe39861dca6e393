"""Requests and responses of the framed protocols: HTTP/2 (h2) and HTTP/3 (aioquic).

Both carry a request as a list of header fields (pseudo-headers first) and a
response as HEADERS, DATA and optional trailing HEADERS frames on one
stream. :func:`request_from_fields` turns the fields of a request into a
:class:`~uamp_trio.engines.http.Request`; :func:`send_response` writes a
response through a :class:`FrameSink`, the few stream operations each
engine provides, so that the rules -- ``content-length`` on complete
responses, a streamed body batched by
:func:`~uamp_trio.engines.http.batched_writer`, a lazy head, trailers, and a
trailers-only answer for an empty body with trailers -- live in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .http import Headers, Request, Response, StreamingResponse, batched_writer
from .http1 import split_target

__all__ = [
    "FrameSink",
    "content_length",
    "head_fields",
    "request_from_fields",
    "send_response",
    "to_fields",
]

_SERVER = (b"server", b"uamp")


def to_fields(pairs: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """``(name, value)`` pairs as header fields (names lowercased, latin-1)."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


def head_fields(response: Response | StreamingResponse) -> list[tuple[bytes, bytes]]:
    """The response head as header fields (without ``content-length``)."""
    return [(b":status", str(response.status).encode()), *to_fields(response.headers), _SERVER]


def content_length(fields: list[tuple[bytes, bytes]]) -> int | None:
    """The ``content-length`` of a request's header fields (``None``: none, or not a number)."""
    for name, value in fields:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def request_from_fields(
    fields: list[tuple[bytes, bytes]],
    *,
    body: bytes,
    http_version: str,
    scheme: str,
    client: tuple[str, int] | None,
) -> Request:
    """The :class:`Request` of a request's header fields and body (``:authority`` as ``host``)."""
    pseudo: dict[bytes, bytes] = {}
    regular: list[tuple[str, str]] = []
    has_host = False
    for name, value in fields:
        if name.startswith(b":"):
            pseudo[name] = value
        else:
            # Decoded once, straight into the stored form of Headers: h2 and
            # aioquic refuse upper-case field names (RFC 9113 section 8.2.1,
            # RFC 9114 section 4.2), lower() only guards against a peer they let by.
            text = name.decode("latin-1").lower()
            has_host = has_host or text == "host"
            regular.append((text, value.decode("latin-1")))
    authority = pseudo.get(b":authority")
    if authority is not None and not has_host:
        regular.append(("host", authority.decode("latin-1")))
    path, query = split_target(pseudo.get(b":path", b"/").decode("latin-1"))
    return Request(
        method=pseudo.get(b":method", b"GET").decode("ascii", "replace"),
        path=path,
        query=query,
        headers=Headers.from_normalized(regular),
        body=body,
        http_version=http_version,
        scheme=scheme,
        client=client,
    )


class FrameSink(Protocol):
    """The stream operations :func:`send_response` needs from an engine."""

    def headers(self, fields: list[tuple[bytes, bytes]], *, end_stream: bool) -> None:
        """Queue a HEADERS frame (the head, or trailers)."""
        ...

    async def data(self, data: bytes, *, end_stream: bool) -> None:
        """Send body bytes, waiting for flow control; sends what is queued before them."""
        ...

    async def flush(self) -> None:
        """Send what is queued."""
        ...

    def end(self) -> None:
        """Queue the end of the stream (an empty DATA frame)."""
        ...


async def send_response(
    sink: FrameSink,
    response: Response | StreamingResponse,
    *,
    head_only: bool,
    streaming: Callable[[], object] | None = None,
    wrote: Callable[[], object] | None = None,
) -> None:
    """Write ``response`` on a stream through ``sink``.

    Args:
        head_only: A ``HEAD`` request: the head, no body.
        streaming: Called once a streamed body begins (the engines time it).
        wrote: Called after each write of a streamed body.
    """
    headers = head_fields(response)
    if isinstance(response, Response):
        headers.append((b"content-length", str(len(response.body)).encode()))
        body = b"" if head_only else response.body
        sink.headers(headers, end_stream=not body)
        if body:
            # Queued with the head, so head and body usually leave in one send.
            await sink.data(body, end_stream=True)
        else:
            await sink.flush()
        return
    head_sent = not response.lazy_head or head_only
    if head_sent:
        sink.headers(headers, end_stream=head_only)
    if head_only:
        await sink.flush()
        return
    # The head waits in the sink and leaves with the first DATA batch.

    async def write(data: bytes, final: bool) -> None:
        # Everything queued since the last write: one DATA frame (split only
        # by flow control or the frame size limit) and one send; the end of
        # the stream rides on the last one (or on the trailers).
        nonlocal head_sent
        trailers = response.trailers if final else None
        if not head_sent:
            if not data and not final:
                return  # a lazy head waits for the first bytes
            head_sent = True
            head = head_fields(response)
            if not data and trailers is not None:
                # Nothing but trailers: one HEADERS frame ends the stream.
                sink.headers(head + to_fields(trailers), end_stream=True)
                await sink.flush()
                return
            sink.headers(head, end_stream=False)
        if trailers is not None:
            if data:
                await sink.data(data, end_stream=False)
            sink.headers(to_fields(trailers), end_stream=True)
            await sink.flush()
        elif data:
            await sink.data(data, end_stream=final)
        else:
            if final:
                sink.end()
            await sink.flush()
        if wrote is not None:
            wrote()

    if streaming is not None:
        streaming()
    async with batched_writer(write) as send:
        await response.producer(send)
