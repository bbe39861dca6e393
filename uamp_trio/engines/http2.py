"""HTTP/2 connections with h2: one reader task, one task per request stream.

The reader feeds bytes to the h2 state machine and reacts to its events:
headers open a stream, DATA is buffered (and its flow-control credit given
back at once, bounded by ``max_body_size`` per stream), END_STREAM starts the
stream's task, RST_STREAM cancels it, WINDOW_UPDATE/SETTINGS wake senders (a stream's
WINDOW_UPDATE wakes only that stream's sender).
Writers share one lock around ``data_to_send()`` + ``send_all`` so frames
leave in the order h2 produced them.

Sending respects h2 flow control: a DATA frame is at most
``min(stream window, connection window, max frame size)``; with no window a
sender waits for the peer's WINDOW_UPDATE (h2 docs, "Working With Flow
Control").

Draining (graceful shutdown): new streams are refused with REFUSED_STREAM;
when the last active stream ends the server sends GOAWAY and closes.

Hostile peers
-------------
Before h2 parses a read, :class:`FrameWatch` walks its frame headers and
counts, per connection and per ``h2_flood_window`` seconds, RST_STREAM frames
(rapid reset, CVE-2023-44487) and SETTINGS and PING frames (each of which h2
answers), and the size of a header block across its CONTINUATION frames
(CVE-2024-27316; at most ``max_header_size``). A peer over a limit is sent
GOAWAY ``ENHANCE_YOUR_CALM`` and dropped, logged once at warning with its
address; the read that broke the limit is not parsed at all.

A stream's task starts only once its request has ended and the whole read
that ended it has been handled, so a stream reset in the same read never
reaches its endpoint; a reset that comes later cancels the task at once.
``SETTINGS_MAX_CONCURRENT_STREAMS`` is enforced here too (REFUSED_STREAM),
also before the peer has acknowledged it. A request that does not end within
``body_timeout``, or receives nothing for ``header_timeout``, is reset.

Streamed bodies and trailers
----------------------------
A request whose route streams its body (:meth:`Server.streams_body`, the
gRPC routes) starts its task as soon as its head is in, with a
:class:`~uamp_trio.engines.http.BodyStream` the reader feeds. Its DATA gives
the connection window back at once but the stream window only as the
endpoint reads (``increment_flow_control_window`` per piece read), so a peer
is at most one stream window ahead of a slow endpoint and other streams are
not starved; no ``max_body_size``, body budget or body timeout applies (the
route bounds its own messages). A streamed response with ``trailers`` ends
with a HEADERS frame carrying them instead of an empty DATA frame.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from .framed import content_length, request_from_fields, send_response
from .http import (
    BodyStream,
    Request,
    Response,
    StreamingResponse,
    error_response,
    tls_info,
)
from .http1 import linger
from .streams import receive_or_eof, send_now

if TYPE_CHECKING:
    from .server import ConnectionTracker, Server

log = logging.getLogger("uamp_trio.server")

_READ_SIZE = 65536
#: Frame types FrameWatch looks at (RFC 9113 section 6).
_HEADERS, _RST_STREAM, _SETTINGS, _PING, _CONTINUATION = 0x1, 0x3, 0x4, 0x6, 0x9
_END_HEADERS = 0x4


class FrameWatch:
    """Per-connection flood limits, read from the frame headers of the raw bytes.

    Sans-IO: :meth:`feed` takes the bytes a read returned (after any preface
    bytes, given as ``skip``) and the time, and says whether the peer broke
    a limit. It keeps only a partial frame header between reads.

    Args:
        max_resets: RST_STREAM frames (plus streams refused) per window.
        max_control: SETTINGS and PING frames per window.
        max_header_block: Bytes of one header block (HEADERS + CONTINUATION).
        window: The window, in seconds.
        skip: Bytes to pass over first (the client preface).
    """

    def __init__(
        self, *, max_resets: int, max_control: int, max_header_block: int, window: float, skip: int
    ) -> None:
        self.max_resets = max_resets
        self.max_control = max_control
        self.max_header_block = max_header_block
        self.window = window
        self._skip = skip
        self._head = b""
        self._left = 0
        self._block = 0
        self._since = -math.inf
        self.resets = 0
        self.control = 0

    def _tick(self, now: float) -> None:
        if now - self._since >= self.window:
            self._since, self.resets, self.control = now, 0, 0

    def count_reset(self, now: float) -> str | None:
        """Count one stream the server refused; why the peer is over the limit, if it is."""
        self._tick(now)
        self.resets += 1
        return "too many stream resets" if self.resets > self.max_resets else None

    def feed(self, data: bytes, now: float) -> str | None:
        """Walk the frame headers in ``data``; why the peer is refused, or ``None``."""
        self._tick(now)
        pos, end = 0, len(data)
        if self._skip:
            pos = min(self._skip, end)
            self._skip -= pos
        while pos < end:
            if self._left:
                step = min(self._left, end - pos)
                self._left -= step
                pos += step
                continue
            need = 9 - len(self._head)
            self._head += data[pos : pos + need]
            pos += need
            if len(self._head) < 9:
                break
            head, self._head = self._head, b""
            self._left = length = int.from_bytes(head[:3], "big")
            kind, flags = head[3], head[4]
            if kind in (_HEADERS, _CONTINUATION):
                self._block += length
                if self._block > self.max_header_block:
                    return "header block over the limit"
                if flags & _END_HEADERS:
                    self._block = 0
            elif kind == _RST_STREAM:
                self.resets += 1
                if self.resets > self.max_resets:
                    return "too many stream resets"
            elif kind in (_SETTINGS, _PING):
                self.control += 1
                if self.control > self.max_control:
                    return "too many SETTINGS/PING frames"
        return None


def busy_goaway() -> bytes:
    """Our SETTINGS and a GOAWAY (last stream 0, REFUSED_STREAM): a connection we do not serve.

    The peer may retry every request of it (RFC 9113 section 6.8) on a new
    connection; the answer to a connection over ``max_connections``.
    """
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    conn.close_connection(error_code=h2.errors.ErrorCodes.REFUSED_STREAM, last_stream_id=0)
    return conn.data_to_send()


async def serve_http2(
    server: Server,
    stream: trio.abc.Stream,
    tracker: ConnectionTracker,
    initial: bytes,
    client: tuple[str, int] | None,
) -> None:
    """Serve HTTP/2 on ``stream``; ``initial`` holds bytes already read."""
    preface = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    await _Http2Connection(server, stream, tracker, client, preface).run(initial)


class _Stream:
    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.id = stream_id
        self.headers = headers
        #: The request, built from the head once (its body is set when it has ended).
        self.request: Request | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.rejected = False
        #: The peer reset the stream: its task must not run the endpoint.
        self.reset = False
        #: The request ended (END_STREAM): the stream's task runs or ran.
        self.started = False
        self.scope: trio.CancelScope | None = None
        self.opened = trio.current_time()
        self.active = self.opened
        #: Body bytes counted in the server's ``body_budget``.
        self.budgeted = 0
        #: trio time the response body began streaming (``None``: not streaming).
        self.streaming: float | None = None
        #: The body as it arrives, for a route that streams it.
        self.body_stream: BodyStream | None = None
        #: trio time the handler was called (``None``: not running), and
        #: whether the sweeper cancelled it past ``response_head_timeout``.
        self.handling: float | None = None
        self.head_late = False


class _StreamSink:
    """:class:`~uamp_trio.engines.framed.FrameSink` of one HTTP/2 stream."""

    __slots__ = ("conn", "sid")

    def __init__(self, conn: _Http2Connection, sid: int) -> None:
        self.conn = conn
        self.sid = sid

    def headers(self, fields: list[tuple[bytes, bytes]], *, end_stream: bool) -> None:
        self.conn.h2.send_headers(self.sid, fields, end_stream=end_stream)

    async def data(self, data: bytes, *, end_stream: bool) -> None:
        await self.conn._send_data(self.sid, data, end_stream=end_stream)

    async def flush(self) -> None:
        await self.conn.flush()

    def end(self) -> None:
        self.conn.h2.end_stream(self.sid)


class _Http2Connection:
    def __init__(
        self,
        server: Server,
        stream: trio.abc.Stream,
        tracker: ConnectionTracker,
        client: tuple[str, int] | None,
        preface: int,
    ) -> None:
        self.server = server
        self.cfg = cfg = server.config
        self.watch = FrameWatch(
            max_resets=cfg.h2_max_resets,
            max_control=cfg.h2_max_control_frames,
            max_header_block=cfg.max_header_size,
            window=cfg.h2_flood_window,
            skip=preface,
        )
        #: Streams whose request ended in the read being handled.
        self.ready: list[_Stream] = []
        self.refused = False
        self.stream = stream
        self.tracker = tracker
        self.client = client
        self.tls = tls_info(stream)
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.streams: dict[int, _Stream] = {}
        self.write_lock = trio.StrictFIFOLock()
        #: Streams whose sender waits for flow-control credit, and its wake-up.
        self.blocked: dict[int, trio.Event] = {}
        self.read_scope: trio.CancelScope | None = None
        self.closed = False
        self.nursery: trio.Nursery | None = None
        tracker.on_shutdown = self._on_shutdown

    # --- plumbing ------------------------------------------------------------

    async def flush(self) -> None:
        lock = self.write_lock
        # A free lock has no waiters: taken without trio's scheduler round,
        # and the bytes go out at once when the socket takes them whole
        # (send_now): a response's flushes cost no round of their own.
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            data = self.h2.data_to_send()
            if data:
                await send_now(self.stream, data)
        finally:
            lock.release()

    def _wake_senders(self, sid: int | None = None) -> None:
        """Wake the sender of stream ``sid`` waiting for credit, or every waiting sender."""
        if sid is None:
            blocked, self.blocked = self.blocked, {}
            for event in blocked.values():
                event.set()
        else:
            waiter = self.blocked.pop(sid, None)
            if waiter is not None:
                waiter.set()

    def _on_shutdown(self) -> None:
        if not self.streams and self.read_scope is not None:
            self.read_scope.cancel()

    # --- reader --------------------------------------------------------------

    async def run(self, initial: bytes) -> None:
        self.h2.initiate_connection()
        self.h2.update_settings(
            {
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.cfg.h2_max_concurrent_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.cfg.max_header_size,
            }
        )
        await self.flush()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._sweep_streams)
                if initial:
                    await self._receive(initial)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            for st in self.streams.values():
                self._release(st)
            self._wake_senders()
        if self.refused:
            await linger(self.stream)
            return
        if self.h2.state_machine.state != h2.connection.ConnectionState.CLOSED:
            with trio.move_on_after(1):
                try:
                    self.h2.close_connection()
                    await self.flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                except h2.exceptions.ProtocolError:
                    pass

    async def _read_loop(self) -> None:
        while not self.closed:
            with trio.CancelScope() as scope:
                self.read_scope = scope
                if not self.streams:
                    if self.tracker.draining:
                        return
                    scope.deadline = trio.current_time() + self.cfg.idle_timeout
                data = await receive_or_eof(self.stream, _READ_SIZE)
                if not data:
                    self.closed = True
                    return
            self.read_scope = None
            if scope.cancelled_caught:
                if not self.streams:
                    return  # idle timeout, or drained
                continue
            await self._receive(data)

    async def _refuse(self, reason: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM and close: the peer broke a flood limit."""
        log.warning("refusing HTTP/2 peer %s: %s", self.client, reason)
        self.refused = self.closed = True
        for st in self.streams.values():
            st.reset = True
        try:
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            with trio.move_on_after(1):
                await self.flush()
        except (h2.exceptions.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _sweep_streams(self) -> None:
        """Reset requests that do not end within ``body_timeout`` or idle ``header_timeout``.

        And streamed responses over ``response_timeout`` in total or
        ``response_idle_timeout`` since their last write; handlers running
        past ``response_head_timeout`` are cancelled (their task answers 504).
        """
        cfg = self.cfg
        total, idle = cfg.body_timeout, cfg.header_timeout
        head = cfg.response_head_timeout
        interval = max(
            0.05, min(total, idle, cfg.response_timeout, cfg.response_idle_timeout, head) / 4
        )
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            late = [
                st
                for st in self.streams.values()
                if not st.started
                and not st.rejected
                and (now - st.opened > total or now - st.active > idle)
            ]
            for st in self.streams.values():
                called = st.handling
                if called is not None and now - called > head and st.scope is not None:
                    st.head_late = True  # answered 504 by its task
                    st.handling = None
                    st.scope.cancel()
                since = st.streaming
                if since is not None and (
                    now - since > cfg.response_timeout
                    or now - st.active > cfg.response_idle_timeout
                ):
                    late.append(st)
                    if st.scope is not None:
                        st.scope.cancel()
            for st in late:
                st.reset = True
                self._release(st)
                self.streams.pop(st.id, None)
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self.h2.reset_stream(st.id, h2.errors.ErrorCodes.CANCEL)
            if late:
                log.debug("HTTP/2 peer %s: %d unfinished request(s) reset", self.client, len(late))
                try:
                    await self.flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

    async def _receive(self, data: bytes) -> None:
        refusal = self.watch.feed(data, trio.current_time())
        if refusal is not None:
            await self._refuse(refusal)
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.debug("HTTP/2 protocol error: %s", exc)
            await self.flush()  # h2 queued a GOAWAY
            self.closed = True
            return
        for event in events:
            self._handle(event)
        # Streams start only now: a reset in the same read has been seen.
        ready, self.ready = self.ready, []
        for st in ready:
            if not st.reset:
                self.nursery.start_soon(self._run_stream, st)  # type: ignore[union-attr]
        if self.refused:
            await self._refuse("too many stream resets")
            return
        await self.flush()

    def _handle(self, event: h2.events.Event) -> None:
        assert self.nursery is not None
        if isinstance(event, h2.events.RequestReceived):
            sid = event.stream_id
            if self.tracker.draining:
                self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                return
            if len(self.streams) >= self.cfg.h2_max_concurrent_streams:
                # Also before the peer has acknowledged our SETTINGS.
                self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                if self.watch.count_reset(trio.current_time()) is not None:
                    self.refused = True
                return
            st = self.streams[sid] = _Stream(sid, list(event.headers or []))
            streamer = self.server.body_streamer
            if (
                event.stream_ended is None
                and streamer is not None
                and streamer.streams_body(self._request(st))
            ):
                st.body_stream = BodyStream(functools.partial(self._consumed, sid))
                st.started = True
                self.ready.append(st)
                return
            declared = content_length(st.headers)
            if declared is not None and declared > self.server.body_floor:
                # Refused from the head, in the route's error style.
                request = self._request(st)
                limit = self.server.body_limit(request)
                if declared > limit:
                    self._reject(st, self.server.too_large(request, limit))
        elif isinstance(event, h2.events.DataReceived):
            sid = event.stream_id
            data_st = self.streams.get(sid)
            if data_st is not None and data_st.body_stream is not None:
                self._feed_stream(data_st, event)
                return
            self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            if data_st is None:
                return
            data_st.active = trio.current_time()
            if data_st.rejected:
                data_st.size += len(event.data or b"")
                if data_st.size > 2 * self.cfg.max_body_size:
                    self.h2.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                    self._stream_finished(data_st)
                return
            chunk = bytes(event.data or b"")
            data_st.size += len(chunk)
            if data_st.size > self.cfg.max_body_size:
                self._reject_too_large(data_st)
            elif not self.server.body_budget.take(len(chunk)):
                data_st.body.clear()  # the route's style needs the head only
                self._reject(data_st, self.server.over_budget(self._request(data_st)))
            else:
                data_st.budgeted += len(chunk)
                data_st.body.append(chunk)
        elif isinstance(event, h2.events.StreamEnded):
            ended = self.streams.get(event.stream_id)
            if ended is not None and ended.body_stream is not None:
                ended.body_stream.end()
            elif ended is not None and ended.rejected:
                self._stream_finished(ended)
            elif ended is not None:
                ended.started = True
                self.ready.append(ended)
        elif isinstance(event, h2.events.StreamReset):
            reset = self.streams.pop(event.stream_id, None)
            if reset is not None:
                self._release(reset)
                reset.reset = True
                if reset.body_stream is not None:
                    reset.body_stream.fail(ConnectionResetError("the peer reset the stream"))
                if reset.scope is not None:
                    reset.scope.cancel()
            self._wake_senders(event.stream_id)
        elif isinstance(event, h2.events.WindowUpdated):
            # Credit for one stream wakes its sender only; the connection's
            # credit (stream 0) may unblock any of them.
            self._wake_senders(event.stream_id or None)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._wake_senders()  # the initial window or the frame size changed
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True
            self._wake_senders()

    def _feed_stream(self, st: _Stream, event: h2.events.DataReceived) -> None:
        """DATA of a streamed body: the connection's credit back now, the stream's once read."""
        assert st.body_stream is not None
        data = bytes(event.data or b"")
        flow = event.flow_controlled_length or 0
        if flow:
            self.h2.increment_flow_control_window(flow)
        padding = flow - len(data)
        if padding > 0:
            self._give_stream_credit(st.id, padding)
        st.active = trio.current_time()
        st.body_stream.feed(data)

    def _give_stream_credit(self, sid: int, size: int) -> None:
        if size <= 0 or self.closed:
            return
        with contextlib.suppress(h2.exceptions.ProtocolError, KeyError, ValueError):
            self.h2.increment_flow_control_window(size, stream_id=sid)

    async def _consumed(self, sid: int, size: int) -> None:
        """The endpoint read ``size`` bytes of stream ``sid``'s body: the peer may send more."""
        if sid in self.streams:
            self._give_stream_credit(sid, size)
            await self.flush()

    def _reject_too_large(self, st: _Stream) -> None:
        response = error_response(
            413,
            f"The request body exceeds the limit of {self.cfg.max_body_size} bytes.",
            code="request_too_large",
        )
        self._reject(st, response)

    def _reject(self, st: _Stream, response: Response) -> None:
        """Answer ``response`` before the request's body has ended, and drop the body."""
        assert self.nursery is not None
        st.rejected = True
        st.body.clear()
        self._release(st)
        self.nursery.start_soon(self._respond_rejected, st, response)

    def _release(self, st: _Stream) -> None:
        """Give ``st``'s body bytes back to the server's budget."""
        if st.budgeted:
            self.server.body_budget.give(st.budgeted)
            st.budgeted = 0

    async def _respond_rejected(self, st: _Stream, response: Response) -> None:
        # The answer goes out at once; the rest of the upload is acknowledged
        # and dropped until the client ends the stream (clients such as
        # httpcore fail if the stream is reset while they are still sending;
        # a client that goes on past another ``max_body_size`` is reset).
        try:
            await self._send_response(st.id, response, head_only=False)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self._stream_finished(st)

    def _stream_finished(self, st: _Stream) -> None:
        self._release(st)
        self.streams.pop(st.id, None)
        self.blocked.pop(st.id, None)  # a sender cancelled while it waited for credit
        if self.tracker.draining and not self.streams and self.read_scope is not None:
            self.read_scope.cancel()

    # --- stream tasks ----------------------------------------------------------

    def _request(self, st: _Stream) -> Request:
        """``st``'s request: its head, and its body once the request has ended."""
        request = st.request
        if request is None:
            scheme = self.server.scheme
            request = st.request = request_from_fields(
                st.headers, body=b"", http_version="2", scheme=scheme, client=self.client
            )
            request.tls = self.tls
        request.body_stream = st.body_stream
        return request

    async def _run_stream(self, st: _Stream) -> None:
        request: Request | None = None
        try:
            with trio.CancelScope() as scope:
                st.scope = scope
                # The reader may be handling the read with this stream's reset.
                await trio.lowlevel.checkpoint()
                if st.reset:
                    return
                request = self._request(st)
                if st.body:
                    request.body = st.body[0] if len(st.body) == 1 else b"".join(st.body)
                    st.body.clear()
                st.handling = trio.current_time()
                response = await self.server.dispatch(request)
                st.handling = None
                if st.head_late:  # the sweeper came as it returned: the 504 goes instead
                    with trio.CancelScope(shield=True):
                        if type(response) is StreamingResponse:
                            await response.aclose()
                    await trio.lowlevel.checkpoint()  # raises Cancelled
                self._release(st)
                try:
                    await self._send_response(st.id, response, head_only=request.method == "HEAD")
                finally:
                    if type(response) is StreamingResponse:
                        await response.aclose()
            if st.head_late and request is not None:
                self._release(st)
                late = self.server.head_timed_out(request)
                await self._send_response(st.id, late, head_only=request.method == "HEAD")
        except (
            h2.exceptions.ProtocolError,  # the stream was reset or closed meanwhile
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ) as exc:
            log.debug("HTTP/2 stream %d ended early: %r", st.id, exc)
        except Exception:
            log.exception("HTTP/2 stream %d failed", st.id)
            try:
                self.h2.reset_stream(st.id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                await self.flush()
            except (
                h2.exceptions.ProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ):
                pass
        finally:
            self._stream_finished(st)

    async def _send_response(
        self, sid: int, response: Response | StreamingResponse, *, head_only: bool
    ) -> None:
        st = self.streams.get(sid)

        def streaming() -> None:  # the sweeper times the response from here
            if st is not None:
                st.streaming = st.active = trio.current_time()

        def wrote() -> None:
            if st is not None:
                st.active = trio.current_time()

        sink = _StreamSink(self, sid)
        await send_response(sink, response, head_only=head_only, streaming=streaming, wrote=wrote)

    async def _send_data(self, sid: int, data: bytes, *, end_stream: bool) -> None:
        # As many frames as the windows allow go out in one send; a sender
        # with no credit left sends what is queued and waits for the peer's
        # WINDOW_UPDATE of its stream or of the connection.
        conn = self.h2
        view = memoryview(data)
        while view:
            if self.closed:
                raise trio.ClosedResourceError("HTTP/2 connection closed")
            window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if window <= 0:
                waiter = self.blocked.get(sid)
                if waiter is None:
                    waiter = self.blocked[sid] = trio.Event()
                await self.flush()
                await waiter.wait()
                continue
            size = min(window, len(view))
            last = size == len(view)
            self.h2.send_data(sid, view[:size].tobytes(), end_stream=end_stream and last)
            view = view[size:]
        await self.flush()
