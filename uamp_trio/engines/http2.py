"""HTTP/2 connections with h2: one reader task, one task per request stream.

The reader feeds bytes to the h2 state machine and reacts to its events:
headers open a stream, DATA is buffered (and its flow-control credit given
back at once, bounded by ``max_body_size`` per stream), END_STREAM starts the
stream's task, RST_STREAM cancels it, WINDOW_UPDATE/SETTINGS wake senders.
Writers share one lock around ``data_to_send()`` + ``send_all`` so frames
leave in the order h2 produced them.

Sending respects h2 flow control: a DATA frame is at most
``min(stream window, connection window, max frame size)``; with no window a
sender waits for the peer's WINDOW_UPDATE (h2 docs, "Working With Flow
Control").

Draining (graceful shutdown): new streams are refused with REFUSED_STREAM;
when the last active stream ends the server sends GOAWAY and closes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from .http import (
    Headers,
    Request,
    Response,
    StreamingResponse,
    batched_writer,
    error_response,
)
from .http1 import split_target

if TYPE_CHECKING:
    from .server import ConnectionTracker, Server

log = logging.getLogger("uamp_trio.server")

_READ_SIZE = 65536


async def serve_http2(
    server: Server,
    stream: trio.abc.Stream,
    tracker: ConnectionTracker,
    initial: bytes,
    client: tuple[str, int] | None,
) -> None:
    """Serve HTTP/2 on ``stream``; ``initial`` holds bytes already read."""
    await _Http2Connection(server, stream, tracker, client).run(initial)


class _Stream:
    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.id = stream_id
        self.headers = headers
        self.body: list[bytes] = []
        self.size = 0
        self.rejected = False
        self.scope: trio.CancelScope | None = None


class _Http2Connection:
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
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.streams: dict[int, _Stream] = {}
        self.write_lock = trio.StrictFIFOLock()
        self.window_changed = trio.Event()
        self.read_scope: trio.CancelScope | None = None
        self.closed = False
        self.nursery: trio.Nursery | None = None
        tracker.on_shutdown = self._on_shutdown

    # --- plumbing ------------------------------------------------------------

    async def flush(self) -> None:
        async with self.write_lock:
            data = self.h2.data_to_send()
            if data:
                await self.stream.send_all(data)

    def _wake_senders(self) -> None:
        self.window_changed.set()
        self.window_changed = trio.Event()

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
                if initial:
                    await self._receive(initial)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._wake_senders()
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
                try:
                    data = bytes(await self.stream.receive_some(_READ_SIZE))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    self.closed = True
                    return
            self.read_scope = None
            if scope.cancelled_caught:
                if not self.streams:
                    return  # idle timeout, or drained
                continue
            await self._receive(data)

    async def _receive(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.debug("HTTP/2 protocol error: %s", exc)
            await self.flush()  # h2 queued a GOAWAY
            self.closed = True
            return
        for event in events:
            self._handle(event)
        await self.flush()

    def _handle(self, event: h2.events.Event) -> None:
        assert self.nursery is not None
        if isinstance(event, h2.events.RequestReceived):
            sid = event.stream_id
            if self.tracker.draining:
                self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                return
            st = self.streams[sid] = _Stream(sid, list(event.headers or []))
            length = Headers(st.headers).get("content-length")
            if length is not None and length.isdigit() and int(length) > self.cfg.max_body_size:
                self._reject_too_large(st)
        elif isinstance(event, h2.events.DataReceived):
            sid = event.stream_id
            self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            data_st = self.streams.get(sid)
            if data_st is None:
                return
            if data_st.rejected:
                data_st.size += len(event.data or b"")
                if data_st.size > 2 * self.cfg.max_body_size:
                    self.h2.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                    self._stream_finished(data_st)
                return
            data_st.size += len(event.data or b"")
            if data_st.size > self.cfg.max_body_size:
                self._reject_too_large(data_st)
            else:
                data_st.body.append(bytes(event.data or b""))
        elif isinstance(event, h2.events.StreamEnded):
            ended = self.streams.get(event.stream_id)
            if ended is not None and ended.rejected:
                self._stream_finished(ended)
            elif ended is not None:
                self.nursery.start_soon(self._run_stream, ended)
        elif isinstance(event, h2.events.StreamReset):
            reset = self.streams.pop(event.stream_id, None)
            if reset is not None and reset.scope is not None:
                reset.scope.cancel()
            self._wake_senders()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._wake_senders()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True
            self._wake_senders()

    def _reject_too_large(self, st: _Stream) -> None:
        assert self.nursery is not None
        st.rejected = True
        st.body.clear()
        response = error_response(
            413,
            f"The request body exceeds the limit of {self.cfg.max_body_size} bytes.",
            code="request_too_large",
        )
        self.nursery.start_soon(self._respond_rejected, st, response)

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
        self.streams.pop(st.id, None)
        if self.tracker.draining and not self.streams and self.read_scope is not None:
            self.read_scope.cancel()

    # --- stream tasks ----------------------------------------------------------

    def _request(self, st: _Stream) -> Request:
        pseudo: dict[bytes, bytes] = {}
        regular: list[tuple[bytes, bytes]] = []
        for name, value in st.headers:
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                regular.append((name, value))
        authority = pseudo.get(b":authority")
        if authority is not None and not any(n == b"host" for n, _ in regular):
            regular.append((b"host", authority))
        path, query = split_target(pseudo.get(b":path", b"/").decode("latin-1"))
        return Request(
            method=pseudo.get(b":method", b"GET").decode("ascii", "replace"),
            path=path,
            query=query,
            headers=Headers(regular),
            body=b"".join(st.body),
            http_version="2",
            scheme=self.server.scheme,
            client=self.client,
        )

    async def _run_stream(self, st: _Stream) -> None:
        try:
            with trio.CancelScope() as scope:
                st.scope = scope
                request = self._request(st)
                response = await self.server.dispatch(request)
                await self._send_response(st.id, response, head_only=request.method == "HEAD")
        except (
            h2.exceptions.StreamClosedError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ):
            pass
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
        headers = [(b":status", str(response.status).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        headers.append((b"server", b"uamp"))
        if isinstance(response, Response):
            headers.append((b"content-length", str(len(response.body)).encode()))
            body = b"" if head_only else response.body
            self.h2.send_headers(sid, headers, end_stream=not body)
            if body:
                # Queue as much body as the window allows before the first
                # write, so head and body usually leave in one send.
                await self._send_data(sid, body, end_stream=True)
            else:
                await self.flush()
            return
        self.h2.send_headers(sid, headers, end_stream=head_only)
        if head_only:
            await self.flush()
            return
        # The headers wait in h2's buffer and leave with the first DATA batch.

        async def write(data: bytes, final: bool) -> None:
            # Everything queued since the last write: one DATA frame (split
            # only by the window or the frame size limit) and one send_all;
            # END_STREAM rides on the last one.
            if data:
                await self._send_data(sid, data, end_stream=final)
            else:
                if final:
                    self.h2.end_stream(sid)
                await self.flush()

        async with batched_writer(write) as send:
            await response.producer(send)

    async def _send_data(self, sid: int, data: bytes, *, end_stream: bool) -> None:
        view = memoryview(data)
        while view:
            if self.closed:
                raise trio.ClosedResourceError("HTTP/2 connection closed")
            waiter = self.window_changed
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                await self.flush()
                await waiter.wait()
                continue
            size = min(window, len(view))
            last = size == len(view)
            self.h2.send_data(sid, view[:size].tobytes(), end_stream=end_stream and last)
            view = view[size:]
            if not last:
                await self.flush()
        await self.flush()
