"""HTTP/1.1 connections: a fast path for the common request, h11 for the rest.

One task serves one connection, one request at a time (h11's model). Between
requests the connection is *idle*: it waits ``idle_timeout`` for the next
request's first byte, and a graceful shutdown cancels that wait. From the
first byte the head must be complete within ``header_timeout`` and the body
within ``body_timeout``; a body above ``max_body_size`` gets 413 (at once when
``Content-Length`` says so) and the connection is closed, since the unread
rest of the body would otherwise be taken for the next request.

Theory of operation
-------------------
The connection keeps what it has read and not yet consumed in its own buffer.
When the buffer holds a whole head that :func:`~uamp_trio.engines.h1fast.parse_head`
accepts (an HTTP/1.1 request framed by one plain ``Content-Length`` or none,
kept alive or ``Connection: close``; see there), the body is taken from the buffer (read on, under
``body_timeout``, when it is not all there yet), the request is dispatched and
the response is written from a per-(status, headers) head template: a plain
body with its ``content-length``, a streaming one in the chunked coding framed
here. No h11 object is involved, which is most of what a small request costs.

Everything else goes to h11: a head split across reads, HTTP/1.0, chunked
request bodies, ``Expect``, upgrades, ``HEAD``, bad or over-limit requests.
A fresh ``h11.Connection`` is fed exactly the unconsumed bytes and serves that
request as before; if the connection stays open, the bytes h11 did not
consume go back to the buffer and the next request may take the fast path
again. A fast-path request whose response the templates do not cover
(bodiless statuses, framing headers, draining) is replayed into a fresh h11
connection, which then frames the response.

Timeouts: one cancel scope spans the connection. While the connection waits
for the next request it is marked idle (``ConnectionTracker.idle_since``) and
the server's idle sweeper cancels the scope once ``idle_timeout`` has passed;
while it reads the rest of a fast-path body it is marked so
(``ConnectionTracker.body_since``) and the sweeper cancels the scope past
``body_timeout``; otherwise nothing can. That is cheaper than entering a
scope (or moving a deadline) per wait. The h11 path keeps scopes of its own for its
head and body waits.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import re
import socket
import sys
from collections.abc import Callable
from contextvars import copy_context
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import h11
import trio

from uamp_proto._fastinit import maker
from uamp_proto.errors import UampError

from .contexts import in_context
from .h1fast import parse_head
from .http import (
    KNOWN_METHODS,
    Headers,
    Request,
    Response,
    SerialBodyWriter,
    StreamingResponse,
    error_response,
    reason_phrase,
    tls_info,
)
from .streams import receive_or_eof, receive_when_ready, send_now
from .websocket import WebSocketRequest

if TYPE_CHECKING:
    from .server import ConnectionTracker, Server

log = logging.getLogger("uamp_trio.server")

_READ_SIZE = 65536
#: Reads of the rest of a body: smaller, so that one scheduler round with
#: many uploads arriving at once (each connection reads once per round)
#: stays short for everyone else, health checks included.
_BODY_READ_SIZE = 16384
_SERVER_HEADER = (b"server", b"uamp")
#: Header names the fast head path leaves to h11 (it frames and closes itself).
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})
#: Statuses whose responses carry no body, and so no Content-Length: h11's path.
_BODYLESS = frozenset({204, 304})
#: How h11 ends a head whose body is chunked (it spells the name this way).
_CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
#: The ends of a head for a request that asked for ``Connection: close`` (h11's bytes).
_CHUNKED_CLOSE = b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
_CLOSE_END = b"\r\nConnection: close\r\n\r\n"
#: Response heads by (status, headers), without the Content-Length line; bounded.
_HEADS: dict[tuple[int, tuple[tuple[str, str], ...]], bytes] = {}
_HEADS_MAX = 256
#: The end of a request head as h11 finds it (a blank line; bare LF allowed).
_HEAD_END = re.compile(rb"\n\r?\n")
#: After an error answer, what is read and dropped before closing (so the
#: kernel does not reset the connection under the answer), at most.
_LINGER_BYTES = 1 << 20
_LINGER_READ = 16384
_LINGER_SECONDS = 1.0
#: Where :func:`linger` lets plain sockets drop bytes: anonymous memory that
#: stays unallocated (Linux discards with ``MSG_TRUNC`` and never writes it;
#: elsewhere the bytes land here, shared by all, and are never read).
_LINGER_SCRATCH = memoryview(mmap.mmap(-1, _LINGER_BYTES))
_DISCARD = getattr(socket, "MSG_TRUNC", 0) if sys.platform == "linux" else 0
#: ``Request(...)`` positionally, for the two paths that build every request
#: (a class call with keywords packs a dict that ``__init__`` unpacks again).
_REQUEST_FIELDS = (
    "method",
    "path",
    "query",
    "headers",
    "body",
    "http_version",
    "scheme",
    "client",
    "tls",
)
_new_request = maker(Request, _REQUEST_FIELDS)
_new_h11_request = maker(Request, tuple(n for n in _REQUEST_FIELDS if n != "body"))


def head_over_limit(seen: bytes, limit: int) -> bool:
    """Whether the request head at the start of ``seen`` is longer than ``limit``.

    ``seen`` needs to hold only the first ``limit + 1`` bytes received: a head
    whose blank line ends within ``limit`` bytes is within the limit, and
    anything else (a later blank line, none yet with more bytes than that) is
    over it.
    """
    end = _HEAD_END.search(seen, 0, limit)
    if end is not None:
        return end.end() > limit
    return len(seen) > limit


def _head_template(status: int, headers: list[tuple[str, str]]) -> bytes | None:
    """The HTTP/1.1 response head up to (not including) ``content-length``, or ``None``.

    The bytes are h11's for the same response (``HTTP/1.1 {status} {reason}\\r\\n``, the
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
    head = b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status)) + b"".join(
        k + b": " + v + b"\r\n" for k, v in raw
    )
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    _HEADS[key] = head
    return head


def _frame_chunk(data: bytes, final: bool) -> bytes:
    """``data`` as one chunk of the chunked coding, plus the last chunk when ``final``.

    RFC 9112 section 7.1, without extensions or trailers: the bytes h11 writes.
    """
    out = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
    return out + b"0\r\n\r\n" if final else out


def split_target(target: str) -> tuple[str, str]:
    """``(decoded path, raw query)`` of a request target (origin or absolute form)."""
    if not target.startswith("/"):
        parts = urlsplit(target)
        path, query = parts.path or "/", parts.query
    else:
        path, _, query = target.partition("?")
    return (unquote(path) if "%" in path else path), query


async def linger(stream: trio.abc.Stream) -> None:
    """Read and drop what the peer still sends (bounded), so it can read our last answer.

    Closing a socket with unread input makes the kernel reset it, and the
    reset can overtake the error response (or GOAWAY) the peer has not read.
    On a plain socket the bytes are dropped by the kernel (``MSG_TRUNC``
    discards TCP data on Linux instead of copying it), in reads as large as
    what is left: refusing a flood of large bodies costs a few system calls
    per connection, not a copy of every byte in 16 KiB pieces.
    """
    with trio.move_on_after(_LINGER_SECONDS):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
            dropped = 0
            if isinstance(stream, trio.SocketStream):
                sock = stream.socket
                while dropped < _LINGER_BYTES:
                    count = await sock.recv_into(_LINGER_SCRATCH, _LINGER_BYTES - dropped, _DISCARD)
                    if not count:
                        break
                    dropped += count
                return
            while dropped < _LINGER_BYTES:
                # Small reads: many refused connections linger at once.
                data = await stream.receive_some(_LINGER_READ)
                if not data:
                    break
                dropped += len(data)


class _Close(UampError):
    """End the connection (after whatever has been sent)."""


class _OverBudget(UampError):
    """The request's body would go over the server's ``max_buffered_body``."""


async def serve_http1(
    server: Server,
    stream: trio.abc.Stream,
    tracker: ConnectionTracker,
    initial: bytes,
    client: tuple[str, int] | None,
) -> None:
    """Serve HTTP/1.1 requests on ``stream`` (``initial``: bytes already read) until it closes."""
    failure: Exception | None = None
    # The nursery holds the connection's writer of streamed bodies.
    async with trio.open_nursery() as nursery:
        conn = _Http1Connection(server, stream, tracker, client, initial, nursery)
        del initial  # the connection's buffer holds it, and lets it go when consumed
        try:
            await conn.run()
        except _Close:
            pass
        except Exception as exc:
            failure = exc  # raised below, not inside the nursery's exception group
        finally:
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


class _Http1Connection:
    def __init__(
        self,
        server: Server,
        stream: trio.abc.Stream,
        tracker: ConnectionTracker,
        client: tuple[str, int] | None,
        initial: bytes,
        nursery: trio.Nursery,
    ) -> None:
        self.server = server
        self.cfg = server.config
        self.stream = stream
        self.tracker = tracker
        self.client = client
        self.scheme = server.scheme
        self.tls = tls_info(stream)
        #: ``trio.current_time`` without its two wrapper calls: the run's clock.
        self.now = trio.lowlevel.current_clock().current_time
        # Read and not consumed: buf[pos:]; eof once the peer closed after it.
        self.buf = initial
        self.pos = 0
        self.eof = False
        #: The h11 connection serving the current request, when h11 serves it.
        self.h11: h11.Connection | None = None
        #: The first ``max_header_size + 1`` bytes h11 was fed for its request.
        self.seen = b""
        #: Spans the connection: cancelled by the idle sweeper or a shutdown
        #: while idle, by the sweeper past body_timeout while reading the rest
        #: of a fast-path body.
        self.scope = trio.CancelScope()
        self.reading_body = False
        #: Writes the streamed bodies, one response at a time.
        self.bodies = SerialBodyWriter(nursery)
        #: Bytes of the current request's body counted in the server's
        #: ``body_budget`` (given back once it is handled).
        self.budgeted = 0
        self.over_budget = False
        #: The request whose handler runs, and where it ends in :attr:`buf`
        #: (``None``: h11 serves it), for the ``504`` of a late handler.
        self.handling: tuple[Request, int | None] | None = None
        #: The fast-path request being served asked for ``Connection: close``.
        self.closing = False

    async def run(self) -> None:
        """Serve requests until the connection should close."""
        try:
            await self._run()
        finally:
            self._release()

    def _release(self) -> None:
        """Give the current request's body bytes back to the server's budget."""
        if self.budgeted:
            self.server.body_budget.give(self.budgeted)
            self.budgeted = 0

    def _take(self, size: int) -> bool:
        """Count ``size`` more body bytes in the server's budget; ``False`` when over it."""
        if not self.server.body_budget.take(size):
            self.over_budget = True
            return False
        self.budgeted += size
        return True

    async def _run(self) -> None:
        while True:
            scope = self.scope
            with scope:
                await self._serve()
            if not scope.cancelled_caught:
                return
            if self.reading_body:
                conn = self._h11_from_buffer()
                with contextlib.suppress(h11.RemoteProtocolError):
                    conn.next_event()  # the head, which the fast path accepted
                await self._send_error(
                    408, "Timed out waiting for the request body.", "request_timeout"
                )
                return
            if not self.tracker.head_late or not await self._answer_late():
                return

    async def _dispatch(self, request: Request, end: int | None) -> Response | StreamingResponse:
        """The server's response to ``request``, its handler timed by the server's sweeper."""
        tracker = self.tracker
        self.handling = (request, end)
        tracker.handler_scope = self.scope
        tracker.handler_since = self.now()
        response = await self.server.dispatch(request)
        if tracker.head_late:  # the sweeper came as it returned: the 504 goes instead
            await self._late(response)
        tracker.handler_since = None
        self.handling = None
        return response

    @staticmethod
    async def _late(response: Response | StreamingResponse) -> None:
        """Drop the response of a handler the sweeper timed out; raises ``Cancelled``."""
        if type(response) is StreamingResponse:
            with trio.CancelScope(shield=True):
                await response.aclose()
        await trio.lowlevel.checkpoint()  # raises Cancelled: the scope is cancelled

    async def _answer_late(self) -> bool:
        """Answer the request whose handler the sweeper cancelled ``504``; whether to go on."""
        self.tracker.head_late = False
        assert self.handling is not None
        request, end = self.handling
        self.handling = None
        self._release()
        response = self.server.head_timed_out(request)
        conn = self.h11
        if end is not None:  # the fast path's request: buf[pos:end]
            if not await self._send_templated(response, self.closing):
                conn = self._h11_replay(self.buf[self.pos : end])
                await self._send_response(conn, response)
                if conn.our_state is not h11.DONE:
                    return False
                self.h11 = None
            if self.closing:
                return False
            if end == len(self.buf):
                self.buf, self.pos = b"", 0
            else:
                self.pos = end
        else:
            assert conn is not None
            await self._send_response(conn, response, head_only=request.method == "HEAD")
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return False
            self.buf, self.eof = conn.trailing_data
            self.pos = 0
            self.h11 = None
        self.scope = trio.CancelScope()  # a scope is entered once; the next one serves on
        return not self.tracker.draining

    async def _serve(self) -> None:
        max_head, max_body = self.cfg.max_header_size, self.server.body_floor
        while True:
            buf, pos = self.buf, self.pos
            if pos == len(buf):
                if self.eof or not await self._wait_idle():
                    return
                buf, pos = self.buf, 0
            head = parse_head(buf, pos, max_head)
            method = head[0] if head is not None else ""
            if (
                head is None
                or method == "HEAD"
                or method not in KNOWN_METHODS
                or head[3] > max_body
            ):
                if await self._serve_h11():
                    continue
                return
            _, target, items, length, start, close = head
            self.closing = close
            end = start + length
            if end > len(buf):
                if not await self._read_rest(end - pos, start - pos):
                    if self.over_budget:
                        await self._refuse_over_budget(method, target)
                    else:
                        await self._serve_h11()  # closed mid-body: h11's answer
                    return
                buf, start, end, pos = self.buf, start - pos, end - pos, 0
            if target[0] == "/":  # split_target's origin form, in place
                path, _, query = target.partition("?")
                if "%" in path:
                    path = unquote(path)
            else:
                path, query = split_target(target)
            request = _new_request(
                method,
                path,
                query,
                # parse_head gives Headers' own form: no second pass (~7 us).
                Headers.from_normalized(items),
                buf[start:end],
                "1.1",
                self.scheme,
                self.client,
                self.tls,
            )
            # Each request in a context of its own (engines/contexts.py).
            if not await in_context(self._answer(request, buf, pos, end, close), copy_context()):
                return
            if close or self.tracker.draining:
                return
            if end == len(buf):
                self.buf, self.pos = b"", 0
            else:
                self.pos = end

    async def _answer(self, request: Request, buf: bytes, pos: int, end: int, close: bool) -> bool:
        """Answer the fast path's ``request`` (``buf[pos:end]``); whether the connection goes on."""
        # _dispatch's work in place (a coroutine less per request).
        tracker = self.tracker
        self.handling = (request, end)
        tracker.handler_scope = self.scope
        tracker.handler_since = self.now()
        response = await self.server.dispatch(request)
        if tracker.head_late:  # the sweeper came as it returned: the 504 goes instead
            await self._late(response)
        tracker.handler_since = None
        self.handling = None
        if self.budgeted:
            self._release()
        try:
            if not await self._send_templated(response, close):
                conn = self._h11_replay(buf[pos:end])
                await self._send_response(conn, response)
                if conn.our_state is not h11.DONE:  # MUST_CLOSE
                    return False
                self.h11 = None
        finally:
            if type(response) is StreamingResponse:
                await response.aclose()
        return True

    async def _receive(self) -> bytes:
        """The next bytes from the peer; ``b""`` once it closed."""
        return await receive_or_eof(self.stream, _READ_SIZE)

    async def _wait_idle(self) -> bool:
        """Wait up to ``idle_timeout`` for the next request's first bytes; False to close.

        The server's idle sweeper (``Server._sweep_idle``) or a shutdown
        cancels :attr:`scope` meanwhile; no deadline is moved per request.
        """
        tracker, scope = self.tracker, self.scope
        if tracker.draining:
            return False
        tracker.idle_scope = scope
        tracker.idle_since = self.now()
        data = await receive_when_ready(self.stream, _READ_SIZE)
        tracker.idle_since = None
        tracker.idle_scope = None
        if scope.cancel_called:
            # The sweeper or the shutdown came with the bytes: the scope is
            # spent (a cancelled scope stays cancelled), so close as if first.
            await trio.lowlevel.checkpoint()
        if not data:
            self.eof = True
            return False
        self.buf, self.pos = data, 0
        return True

    async def _read_rest(self, need: int, head: int) -> bool:
        """Read on until ``buf[pos:]`` holds ``need`` bytes, under ``body_timeout``.

        ``head``: how many of them are the request's head (all a refusal keeps).

        Leaves the buffer rebased (``pos == 0``). Returns False when the peer
        closed first or the server's ``body_budget`` refused the bytes
        (:attr:`over_budget`); a timeout cancels :attr:`scope` (:meth:`run`
        answers 408). The bytes read here count in the budget: the part of a
        body that came with its head (one read, at most 64 KiB) does not.
        """
        scope = self.scope
        # The reads as they came (one copy, by the final join, for a body
        # that completes); started at the first read the budget takes, so a
        # body refused at once (a flood over the budget) allocates nothing.
        # Reads of the rest are 16 KiB: a round of the scheduler in which
        # many uploads arrive reads that much from each, and each read's
        # memory is touched once (a growing buffer touched fresh pages two
        # and three times over: 200 uploads at once cost an 18 ms round).
        chunks: list[bytes] | None = None
        first = have = len(self.buf) - self.pos
        self.reading_body = True
        # The server's sweeper cancels the scope past body_timeout (no
        # deadline moved here and back: ~7,000 instructions per body).
        tracker = self.tracker
        tracker.body_scope = scope
        tracker.body_since = self.now()
        # The first read waits for the socket before reading: the rest of a
        # body that did not come with its head is rarely in yet (clients such
        # as httpx write the two apart; in bench/peers.py's plain completions
        # 81% of bodies came after their heads, and trio's read-first failed
        # for every one of them: a system call and an exception lost).
        receive = receive_when_ready
        try:
            while have < need:
                data = await receive(self.stream, _BODY_READ_SIZE)
                receive = receive_or_eof  # more of a long body is usually in by now
                if not data:
                    self.eof = True
                    break
                if not self._take(len(data)):
                    break
                if chunks is None:
                    chunks = [self.buf[self.pos :] if self.pos else self.buf]
                    self.buf, self.pos = b"", 0  # held once, in ``chunks``
                chunks.append(data)
                have += len(data)
        finally:
            if have >= need:
                assert chunks is not None  # a read was needed, and taken
                self.buf = b"".join(chunks)
            else:
                # Refused, closed or timed out: only the head is answered, so
                # the partial body goes now (a refusal keeps the head alone).
                keep = head if self.over_budget else first
                held = chunks[0] if chunks is not None else self.buf[self.pos :]
                self.buf = held[:keep]
            chunks = None
            self.pos = 0
        tracker.body_since = None
        tracker.body_scope = None
        if scope.cancel_called:
            await trio.lowlevel.checkpoint()  # timed out as the bytes came: 408
        self.reading_body = False
        return have >= need

    def _fresh_h11(self) -> h11.Connection:
        """A new h11 server connection, now :attr:`h11`."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.cfg.max_header_size)
        self.h11 = conn
        return conn

    def _h11_from_buffer(self) -> h11.Connection:
        """A fresh h11 connection (now :attr:`h11`) fed the unconsumed bytes (and EOF)."""
        conn = self._fresh_h11()
        self.seen = self.buf[self.pos : self.pos + self.cfg.max_header_size + 1]
        if self.pos < len(self.buf):
            conn.receive_data(self.buf[self.pos :])
        if self.eof:
            conn.receive_data(b"")  # h11's EOF
        self.buf, self.pos = b"", 0
        return conn

    def _h11_replay(self, data: bytes) -> h11.Connection:
        """A fresh h11 connection (now :attr:`h11`) that has read the request ``data``."""
        conn = self._fresh_h11()
        conn.receive_data(data)
        while conn.their_state is not h11.DONE:
            if conn.next_event() is h11.NEED_DATA:  # not a whole request: cannot be
                raise _Close
        return conn

    async def _serve_h11(self) -> bool:
        """Serve one request with h11, from the unconsumed bytes; whether to go on."""
        conn = self._h11_from_buffer()
        try:
            event = await self._next_request(conn)
        except h11.RemoteProtocolError as exc:
            await self._send_error(exc.error_status_hint, f"Bad HTTP request: {exc}", "bad_request")
            return False
        if event is None:
            return False
        method = event.method.decode("ascii", "replace")
        target = event.target.decode("latin-1")
        path, query = split_target(target)
        headers = Headers(event.headers)
        if not event.http_version.startswith(b"1."):
            # RFC 9110 section 15.6.6: this server speaks HTTP/1.x here.
            await self._send_error(
                505, "Only HTTP/1.0 and HTTP/1.1 are served here.", "http_version_not_supported"
            )
            return False
        if method not in KNOWN_METHODS:
            await self._send_error(
                501, f"The method {method!r} is not implemented.", "not_implemented"
            )
            return False
        if "transfer-encoding" in headers and "content-length" in headers:
            # RFC 9112 section 6.3: both framings is how requests are smuggled.
            await self._send_error(
                400,
                "The request has both Content-Length and Transfer-Encoding.",
                "bad_request",
            )
            return False
        request = _new_h11_request(
            method,
            path,
            query,
            headers,
            event.http_version.decode("ascii", "replace"),
            self.scheme,
            self.client,
            self.tls,
        )
        if headers.has_token("connection", "upgrade") and (
            (headers.get("upgrade") or "").lower() == "websocket"
        ):
            await self._upgrade(request, target)
            return False
        limit = self.server.body_limit(request)
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            # Refused from the head: the body is never read (and no 100 sent).
            await self._send_refusal(self.server.too_large(request, limit))
            return False
        try:
            request.body = await self._read_body(conn, headers)
        except _OverBudget:
            await self._send_refusal(self.server.over_budget(request))
            return False
        except h11.RemoteProtocolError as exc:
            await self._send_error(exc.error_status_hint, f"Bad HTTP request: {exc}", "bad_request")
            return False
        # Each request in a context of its own (engines/contexts.py).
        if not await in_context(self._answer_h11(conn, request, headers), copy_context()):
            return False
        if self.tracker.draining:
            return False
        self.buf, self.eof = conn.trailing_data
        self.pos = 0
        self.h11 = None
        return True

    async def _answer_h11(self, conn: h11.Connection, request: Request, headers: Headers) -> bool:
        """Answer ``request``, read by h11 on ``conn``; whether the connection goes on."""
        method = request.method
        response = await self._dispatch(request, None)
        self._release()
        try:
            # A keep-alive HTTP/1.1 request read to its end may get the fast
            # response path; h11 is not told, as it is dropped after this request.
            if not (
                method != "HEAD"
                and conn.their_http_version == b"1.1"
                and conn.their_state is h11.DONE
                and conn.our_state is h11.SEND_RESPONSE
                and not headers.has_token("connection", "close")
                and await self._send_templated(response)
            ):
                await self._send_response(conn, response, head_only=method == "HEAD")
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return False  # MUST_CLOSE, or the request was not read to its end
        finally:
            if type(response) is StreamingResponse:
                await response.aclose()
        return True

    async def _next_request(self, conn: h11.Connection) -> h11.Request | None:
        """The request head, or ``None`` when the connection should close."""
        deadline: float | None = None
        limit = self.cfg.max_header_size
        while True:
            if head_over_limit(self.seen, limit):
                await self._send_error(
                    431,
                    f"The request head exceeds the limit of {limit} bytes.",
                    "request_header_fields_too_large",
                )
                return None
            event = conn.next_event()
            if isinstance(event, h11.Request):
                return event
            if event is not h11.NEED_DATA:
                return None  # ConnectionClosed, or PAUSED after a protocol switch
            if deadline is None:
                deadline = trio.current_time() + self.cfg.header_timeout
            with trio.move_on_at(deadline) as scope:
                data = await self._receive()
                conn.receive_data(data)
                if len(self.seen) <= limit:
                    self.seen = (self.seen + data)[: limit + 1]
            if scope.cancelled_caught:
                await self._send_error(
                    408, "Timed out waiting for the request head.", "request_timeout"
                )
                return None

    async def _read_body(self, conn: h11.Connection, headers: Headers) -> bytes:
        limit = self.cfg.max_body_size
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            await self._too_large()
        if conn.client_is_waiting_for_100_continue:
            await self.stream.send_all(
                conn.send(h11.InformationalResponse(status_code=100, headers=[]))
            )
        chunks: list[bytes] = []
        size = 0
        # Usually the body came with the head: take it without a timeout
        # scope. Waiting for the rest runs under one deadline for all of it.
        deadline: float | None = None
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    await self._too_large()
                if not self._take(len(event.data)):
                    raise _OverBudget
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            elif event is h11.NEED_DATA:
                if deadline is None:
                    deadline = trio.current_time() + self.cfg.body_timeout
                with trio.move_on_at(deadline):
                    conn.receive_data(await self._receive())
                    continue
                await self._send_error(
                    408, "Timed out waiting for the request body.", "request_timeout"
                )
                raise _Close
            else:  # ConnectionClosed mid-body
                raise _Close

    async def _send_templated(
        self, response: Response | StreamingResponse, close: bool = False
    ) -> bool:
        """Write ``response`` without h11, from a head template; whether it could.

        Only for a fast-path HTTP/1.1 request, not ``HEAD``, read to its end;
        ``close``: it asked for ``Connection: close``, which the head then says.
        h11 builds, validates and re-frames the head of every response (a good
        part of a small request's cost); here it comes from a template
        (:func:`_head_template`) plus ``content-length`` and the body in one
        write, or plus ``Transfer-Encoding: chunked`` and the chunks framed by
        :func:`_frame_chunk`. Bodiless statuses, framing headers in the
        response and draining (which adds ``Connection: close``) return
        ``False``: h11's path.
        """
        status = response.status
        if status < 200 or status in _BODYLESS or self.tracker.draining:
            return False
        if type(response) is Response:
            head = _head_template(status, response.headers)
            if head is None:
                return False
            body = response.body
            end = _CLOSE_END if close else b"\r\n\r\n"
            await send_now(self.stream, b"%scontent-length: %d%s%s" % (head, len(body), end, body))
            return True
        if type(response) is StreamingResponse:
            head = _head_template(status, response.headers)
            if head is None:
                return False
            await self._stream_body(
                response, head + (_CHUNKED_CLOSE if close else _CHUNKED), _frame_chunk
            )
            return True
        return False

    async def _too_large(self) -> None:
        await self._send_error(
            413,
            f"The request body exceeds the limit of {self.cfg.max_body_size} bytes.",
            "request_too_large",
        )
        raise _Close

    async def _send_error(self, status: int, message: str, code: str) -> None:
        await self._send_refusal(error_response(status, message, code=code))

    async def _send_refusal(self, response: Response) -> None:
        """Answer ``response`` on h11's connection, then close (after lingering)."""
        self._release()  # nothing more of this body will be kept
        conn = self.h11
        if conn is None or conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(
            trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError
        ):
            await self._send_response(conn, response, close=True)
            await linger(self.stream)

    async def _refuse_over_budget(self, method: str, target: str) -> None:
        """The fast path's body went over the server's ``body_budget``: 503 and close."""
        conn = self._h11_from_buffer()
        with contextlib.suppress(h11.RemoteProtocolError):
            conn.next_event()  # the head, which the fast path accepted
        path, query = split_target(target)
        request = Request(method=method, path=path, query=query, scheme=self.scheme)
        await self._send_refusal(self.server.over_budget(request))

    def _head(
        self, status: int, headers: list[tuple[str, str]], close: bool, length: int | None
    ) -> h11.Response:
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        raw.append(_SERVER_HEADER)
        if length is not None:
            raw.append((b"content-length", str(length).encode()))
        if close or self.tracker.draining:
            raw.append((b"connection", b"close"))
        return h11.Response(status_code=status, headers=raw, reason=reason_phrase(status))

    async def _send_response(
        self,
        conn: h11.Connection,
        response: Response | StreamingResponse,
        *,
        head_only: bool = False,
        close: bool = False,
    ) -> None:
        try:
            if isinstance(response, Response):
                status = response.status
                body = b"" if head_only else response.body
                # RFC 9110 section 8.6: no Content-Length on 1xx and 204, and
                # on 304 only the length a 200 would have had (unknown here).
                length = None if status < 200 or status in _BODYLESS else len(response.body)
                data = conn.send(self._head(status, response.headers, close, length))
                if body:
                    data += conn.send(h11.Data(data=body))
                data += conn.send(h11.EndOfMessage())
                await send_now(self.stream, data)  # head and body in one write
                return
            head = conn.send(self._head(response.status, response.headers, close, None))
            if head_only:
                await send_now(self.stream, head + conn.send(h11.EndOfMessage()))
                return

            def frame(data: bytes, final: bool) -> bytes:
                out = conn.send(h11.Data(data=data)) if data else b""
                return out + conn.send(h11.EndOfMessage()) if final else out

            await self._stream_body(response, head, frame)
        except BaseException:
            conn.send_failed()
            raise

    async def _stream_body(
        self, response: StreamingResponse, head: bytes, frame: Callable[[bytes, bool], bytes]
    ) -> None:
        """Send ``head`` and the body ``response`` produces, batches framed by ``frame``."""
        stream, tracker = self.stream, self.tracker
        pending = [head]  # the head goes out with the first batch

        async def write(data: bytes, final: bool) -> None:
            # Everything the producer queued since the last write becomes one
            # chunk of the chunked encoding and one send_all.
            out = frame(data, final)
            if pending:
                out = pending.pop() + out
            if out:
                await send_now(stream, out)
                tracker.response_active = trio.current_time()

        # The server's sweeper cancels this scope when the response is over
        # response_timeout, or response_idle_timeout since its last write.
        scope = trio.CancelScope()
        tracker.response_since = tracker.response_active = trio.current_time()
        tracker.response_scope = scope
        try:
            with scope:
                async with self.bodies.body(write) as send:
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
        finally:
            tracker.response_scope = None
        if scope.cancelled_caught:
            # Not ended cleanly: closing is how the client learns of it.
            log.info("HTTP/1.1 response to %s timed out; closing", self.client)
            raise _Close

    async def _upgrade(self, request: Request, target: str) -> None:
        handler = self.server.app.websocket_handler_for(request)
        if handler is None:
            await self._send_error(404, f"No WebSocket endpoint at {request.path}.", "not_found")
            return
        pending = WebSocketRequest(
            request,
            self.stream,
            self._ws_initial(),
            target,
            max_message_size=self.cfg.websocket_max_message_size,
            send_timeout=self.cfg.websocket_send_timeout,
            max_queued_events=self.cfg.max_queued_events,
            max_session_queued_events=self.cfg.max_session_queued_events,
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

    def _ws_initial(self) -> bytes:
        """Bytes read past the upgrade request's head."""
        assert self.h11 is not None
        return bytes(self.h11.trailing_data[0])
