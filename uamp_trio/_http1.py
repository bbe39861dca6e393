"""HTTP/1.1 connections with h11: keep-alive, limits, streaming, WebSocket hand-over.

One task serves one connection, one request at a time (h11's model). Between
requests the connection is *idle*: it waits ``idle_timeout`` for the next
request's first byte, and a graceful shutdown cancels that wait. From the
first byte the head must be complete within ``header_timeout`` and the body
within ``body_timeout``; a body above ``max_body_size`` gets 413 (at once when
``Content-Length`` says so) and the connection is closed, since the unread
rest of the body would otherwise be taken for the next request.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import h11
import trio

from .http import (
    Headers,
    Request,
    Response,
    StreamingResponse,
    batched_writer,
    error_response,
)
from .websocket import WebSocketRequest

if TYPE_CHECKING:
    from .server import ConnectionTracker, Server

log = logging.getLogger("uamp_trio.server")

_READ_SIZE = 65536
_SERVER_HEADER = (b"server", b"uamp")
#: Header names the fast head path leaves to h11 (it frames and closes itself).
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})
#: Statuses whose responses carry no body, and so no Content-Length: h11's path.
_BODYLESS = frozenset({204, 304})
#: Response heads by (status, headers), without the Content-Length line; bounded.
_HEADS: dict[tuple[int, tuple[tuple[str, str], ...]], bytes] = {}
_HEADS_MAX = 256


def _head_template(status: int, headers: list[tuple[str, str]]) -> bytes | None:
    """The HTTP/1.1 response head up to (not including) ``content-length``, or ``None``.

    The bytes are h11's for the same response (``HTTP/1.1 {status} \\r\\n``, the
    headers as given, then ``server``); h11 validates the headers once, when a
    template is first built. ``None`` when a header is about framing or the
    connection (h11 must see those) or a header is invalid.
    """
    key = (status, tuple(headers))
    head = _HEADS.get(key)
    if head is not None:
        return head
    if any(k.lower() in _FRAMING for k, _ in headers):
        return None
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append(_SERVER_HEADER)
    try:
        h11.Response(status_code=status, headers=raw)  # validation only
    except (h11.LocalProtocolError, UnicodeEncodeError):
        return None
    head = b"HTTP/1.1 %d \r\n" % status + b"".join(k + b": " + v + b"\r\n" for k, v in raw)
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    _HEADS[key] = head
    return head


def split_target(target: str) -> tuple[str, str]:
    """``(decoded path, raw query)`` of a request target (origin or absolute form)."""
    if not target.startswith("/"):
        parts = urlsplit(target)
        path, query = parts.path or "/", parts.query
    else:
        path, _, query = target.partition("?")
    return unquote(path), query


class _Close(Exception):
    """End the connection (after whatever has been sent)."""


async def serve_http1(
    server: Server,
    stream: trio.abc.Stream,
    tracker: ConnectionTracker,
    initial: bytes,
    client: tuple[str, int] | None,
) -> None:
    """Serve HTTP/1.1 requests on ``stream`` until it closes."""
    conn = _Http1Connection(server, stream, tracker, client)
    conn.h11.receive_data(initial)
    with contextlib.suppress(_Close):
        await conn.run()


class _Http1Connection:
    def __init__(
        self,
        server: Server,
        stream: trio.abc.Stream,
        tracker: ConnectionTracker,
        client: tuple[str, int] | None,
    ) -> None:
        self.server = server
        self.cfg = server.config
        self.stream = stream
        self.tracker = tracker
        self.client = client
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.cfg.max_header_size)

    async def run(self) -> None:
        while True:
            try:
                event = await self._next_request()
            except h11.RemoteProtocolError as exc:
                await self._send_error(
                    exc.error_status_hint, f"Bad HTTP request: {exc}", "bad_request"
                )
                return
            if event is None:
                return
            method = event.method.decode("ascii", "replace").upper()
            target = event.target.decode("latin-1")
            path, query = split_target(target)
            headers = Headers(event.headers)
            request = Request(
                method=method,
                path=path,
                query=query,
                headers=headers,
                http_version=event.http_version.decode("ascii", "replace"),
                scheme=self.server.scheme,
                client=self.client,
            )
            if headers.has_token("connection", "upgrade") and (
                (headers.get("upgrade") or "").lower() == "websocket"
            ):
                await self._upgrade(request, target)
                return
            try:
                request.body = await self._read_body(headers)
            except h11.RemoteProtocolError as exc:
                await self._send_error(
                    exc.error_status_hint, f"Bad HTTP request: {exc}", "bad_request"
                )
                return
            response = await self.server.dispatch(request)
            if await self._send_fast(response, request, headers):
                if self.tracker.draining:
                    return
                continue
            await self._send_response(response, head_only=method == "HEAD")
            if self.h11.our_state is h11.MUST_CLOSE or self.tracker.draining:
                return
            if self.h11.their_state is not h11.DONE or self.h11.our_state is not h11.DONE:
                return
            self.h11.start_next_cycle()

    async def _receive(self) -> None:
        try:
            data = bytes(await self.stream.receive_some(_READ_SIZE))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        self.h11.receive_data(data)

    async def _next_request(self) -> h11.Request | None:
        """The next request head, or ``None`` when the connection should close."""
        deadline: float | None = None
        while True:
            event = self.h11.next_event()
            if isinstance(event, h11.Request):
                return event
            if event is not h11.NEED_DATA:
                return None  # ConnectionClosed, or PAUSED after a protocol switch
            if deadline is None and not self.h11.trailing_data[0]:
                # Idle: no byte of the next request yet.
                with trio.CancelScope() as scope:
                    scope.deadline = trio.current_time() + self.cfg.idle_timeout
                    self.tracker.idle_scope = scope
                    if self.tracker.draining:
                        return None
                    await self._receive()
                self.tracker.idle_scope = None
                if scope.cancelled_caught:
                    return None
                deadline = trio.current_time() + self.cfg.header_timeout
                continue
            if deadline is None:
                deadline = trio.current_time() + self.cfg.header_timeout
            with trio.move_on_at(deadline) as scope:
                await self._receive()
            if scope.cancelled_caught:
                await self._send_error(
                    408, "Timed out waiting for the request head.", "request_timeout"
                )
                return None

    async def _read_body(self, headers: Headers) -> bytes:
        limit = self.cfg.max_body_size
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            await self._too_large()
        if self.h11.client_is_waiting_for_100_continue:
            await self.stream.send_all(
                self.h11.send(h11.InformationalResponse(status_code=100, headers=[]))
            )
        chunks: list[bytes] = []
        size = 0
        # Usually the body came with the head: take it without a timeout scope.
        conn = self.h11
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    await self._too_large()
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            elif event is h11.NEED_DATA:
                break
            else:  # ConnectionClosed mid-body
                raise _Close
        with trio.move_on_after(self.cfg.body_timeout) as scope:
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA:
                    await self._receive()
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > limit:
                        await self._too_large()
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return b"".join(chunks)
                else:  # ConnectionClosed mid-body
                    raise _Close
        assert scope.cancelled_caught
        await self._send_error(408, "Timed out waiting for the request body.", "request_timeout")
        raise _Close

    async def _send_fast(
        self, response: Response | StreamingResponse, request: Request, headers: Headers
    ) -> bool:
        """Write a plain response to a keep-alive HTTP/1.1 request without h11's send path.

        h11 builds, validates and re-frames the head of every response (a good
        part of a small request's cost); here the head comes from a template
        (:func:`_head_template`) plus ``content-length``, in one write with the
        body. The request was read to its end, so h11's reading side is done:
        the next request is parsed by a fresh h11 connection fed the bytes
        that came after this one, which is what ``start_next_cycle`` gives.
        Anything unusual (HTTP/1.0, ``Connection: close``, HEAD, bodiless
        statuses, framing headers, draining) returns ``False``: h11's path.
        """
        conn = self.h11
        if (
            type(response) is not Response
            or request.method == "HEAD"
            or response.status < 200
            or response.status in _BODYLESS
            or conn.their_state is not h11.DONE
            or conn.our_state is not h11.SEND_RESPONSE
            or conn.their_http_version != b"1.1"
            or self.tracker.draining
            or headers.has_token("connection", "close")
        ):
            return False
        head = _head_template(response.status, response.headers)
        if head is None:
            return False
        body = response.body
        trailing, closed = conn.trailing_data
        try:
            await self.stream.send_all(
                b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body)
            )
        except BaseException:
            conn.send_failed()
            raise
        fresh = h11.Connection(h11.SERVER, max_incomplete_event_size=self.cfg.max_header_size)
        if trailing:
            fresh.receive_data(trailing)
        if closed:
            fresh.receive_data(b"")
        self.h11 = fresh
        return True

    async def _too_large(self) -> None:
        await self._send_error(
            413,
            f"The request body exceeds the limit of {self.cfg.max_body_size} bytes.",
            "request_too_large",
        )
        raise _Close

    async def _send_error(self, status: int, message: str, code: str) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(
            trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError
        ):
            await self._send_response(error_response(status, message, code=code), close=True)

    def _head(
        self, status: int, headers: list[tuple[str, str]], close: bool, length: int | None
    ) -> h11.Response:
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        raw.append(_SERVER_HEADER)
        if length is not None:
            raw.append((b"content-length", str(length).encode()))
        if close or self.tracker.draining:
            raw.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=raw)

    async def _send_response(
        self,
        response: Response | StreamingResponse,
        *,
        head_only: bool = False,
        close: bool = False,
    ) -> None:
        try:
            if isinstance(response, Response):
                body = b"" if head_only else response.body
                data = self.h11.send(
                    self._head(response.status, response.headers, close, len(response.body))
                )
                if body:
                    data += self.h11.send(h11.Data(data=body))
                data += self.h11.send(h11.EndOfMessage())
                await self.stream.send_all(data)  # head and body in one write
                return
            await self._send_streaming(response, head_only, close)
        except BaseException:
            self.h11.send_failed()
            raise

    async def _send_streaming(
        self, response: StreamingResponse, head_only: bool, close: bool
    ) -> None:
        conn, stream = self.h11, self.stream
        head = conn.send(self._head(response.status, response.headers, close, None))
        if head_only:
            await stream.send_all(head + conn.send(h11.EndOfMessage()))
            return
        pending = [head]  # the head goes out with the first batch

        async def write(data: bytes, final: bool) -> None:
            # Everything the producer queued since the last write becomes one
            # chunk of the chunked encoding and one send_all.
            out = conn.send(h11.Data(data=data)) if data else b""
            if final:
                out += conn.send(h11.EndOfMessage())
            if pending:
                out = pending.pop() + out
            if out:
                await stream.send_all(out)

        try:
            async with batched_writer(write) as send:
                await response.producer(send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise
        except Exception:
            # The status is already on the wire (or about to be): the only way
            # to tell the client is to end the connection without a clean end.
            log.exception("streaming response failed")
            if pending:
                await stream.send_all(pending.pop())
            raise _Close from None

    async def _upgrade(self, request: Request, target: str) -> None:
        resolved = self.server.router.resolve_websocket(request.path)
        if resolved is None:
            await self._send_error(404, f"No WebSocket endpoint at {request.path}.", "not_found")
            return
        handler, params = resolved
        request.path_params = params
        pending = WebSocketRequest(
            request,
            self.stream,
            bytes(self.h11.trailing_data[0]),
            target,
            max_message_size=self.cfg.websocket_max_message_size,
        )
        try:
            await handler(pending)
        except Exception:
            log.exception("WebSocket handler failed: %s", request.path)
            if not pending.answered:
                await pending.reject(500)
            return
        if not pending.answered:
            await pending.reject(403)
