"""WebSocket endpoints: the hand-over from HTTP/1.1 and a small wsproto socket.

When an HTTP/1.1 request asks for ``Upgrade: websocket`` and the server's
dispatcher has a handler for its path
(:meth:`~uamp_trio.engines.server.Dispatcher.websocket_handler_for`), the
server stops speaking HTTP on that connection and calls the handler with a
:class:`WebSocketRequest`: the parsed request, the raw stream and any bytes
already read past the request head. The handler calls
:meth:`WebSocketRequest.accept` (wsproto writes the ``101`` handshake) and
talks over the returned :class:`WebSocket`, or :meth:`~WebSocketRequest.reject`
with an HTTP status. A handler that returns without doing either gets a 403.
The connection is closed when the handler returns.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio
from wsproto import WSConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from uamp_proto.errors import UampError

from .http import YIELD_BEFORE, Request
from .streams import FRAMES_READ_SIZE, receive_or_eof

__all__ = ["ConnectionClosed", "WebSocket", "WebSocketHandler", "WebSocketRequest"]


#: A WebSocket endpoint: receives the upgrade request, accepts or rejects it.
WebSocketHandler = Callable[["WebSocketRequest"], Awaitable[None]]


class ConnectionClosed(UampError):
    """The WebSocket is closed; ``code`` and ``reason`` from the close frame."""

    def __init__(self, code: int, reason: str | None = None) -> None:
        super().__init__(f"WebSocket closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class WebSocketRequest:
    """A pending WebSocket upgrade, handed over by the HTTP/1.1 server.

    Attributes:
        request: The upgrade request (path, headers, ``path_params``).
        stream: The raw (possibly TLS) stream of the connection.
        initial_data: Bytes the client sent after the request head.
        max_message_size: Largest message :class:`WebSocket` will assemble.
        send_timeout: Longest a write may wait for a peer that does not read
            before the connection is dropped.
        max_queued_events: Events a message-queueing handler (the UAMP
            WebSocket) may queue for this connection's writer.
        max_session_queued_events: Of those, the most for one session.
    """

    def __init__(
        self,
        request: Request,
        stream: trio.abc.Stream,
        initial_data: bytes,
        target: str,
        *,
        max_message_size: int,
        send_timeout: float = 30.0,
        max_queued_events: int = 64,
        max_session_queued_events: int = 32,
    ) -> None:
        self.request = request
        self.stream = stream
        self.initial_data = initial_data
        self.max_message_size = max_message_size
        self.send_timeout = send_timeout
        self.max_queued_events = max_queued_events
        self.max_session_queued_events = max_session_queued_events
        self.answered = False
        #: The status the upgrade was answered with: 101, a refusal's, or ``None`` yet.
        self.status: int | None = None
        self._ws = WSConnection(ConnectionType.SERVER)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()]
        self._ws.initiate_upgrade_connection(headers, target)
        # Consume the Request event wsproto produces for the upgrade.
        self._subprotocols: list[str] = []
        for event in self._ws.events():
            self._subprotocols = list(getattr(event, "subprotocols", []))

    @property
    def subprotocols(self) -> list[str]:
        """The subprotocols the client offered."""
        return list(self._subprotocols)

    async def accept(
        self, subprotocol: str | None = None, extra_headers: list[tuple[str, str]] | None = None
    ) -> WebSocket:
        """Complete the handshake (``101``) and return the open socket."""
        self.answered = True
        self.status = 101
        headers = [(k.encode(), v.encode()) for k, v in extra_headers or []]
        data = self._ws.send(AcceptConnection(subprotocol=subprotocol, extra_headers=headers))
        await self.stream.send_all(data)
        ws = WebSocket(
            self.stream,
            self._ws,
            self.request,
            subprotocol,
            self.max_message_size,
            send_timeout=self.send_timeout,
        )
        if self.initial_data:
            ws._feed(self.initial_data)
        return ws

    async def reject(
        self, status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None
    ) -> None:
        """Refuse the upgrade with an HTTP ``status`` and optional body."""
        self.answered = True
        self.status = status
        hdrs = [(k.encode(), v.encode()) for k, v in headers or []]
        if body:
            hdrs.append((b"content-length", str(len(body)).encode()))
        data = self._ws.send(
            RejectConnection(status_code=status, headers=hdrs, has_body=bool(body))
        )
        if body:
            data += self._ws.send(RejectData(data=body, body_finished=True))
        await self.stream.send_all(data)


class WebSocket:
    """An open server-side WebSocket on a trio stream (wsproto underneath).

    One task may :meth:`receive` while others :meth:`send`; pings are answered
    inside :meth:`receive`, only the latest of those read together (RFC 6455
    section 5.5.3). A write that waits longer than ``send_timeout`` for a peer
    that does not read drops the connection.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: WSConnection,
        request: Request,
        subprotocol: str | None,
        max_message_size: int,
        *,
        send_timeout: float = 30.0,
    ) -> None:
        self.stream = stream
        self._send_timeout = send_timeout
        self.request = request
        self.subprotocol = subprotocol
        self._ws = ws
        self._max = max_message_size
        self._events: deque[Event] = deque()
        self._parts: list[str | bytes] = []
        self._size = 0
        self._lock = trio.StrictFIFOLock()
        self._closed: ConnectionClosed | None = None
        #: What a message over the size limit is answered with before the
        #: close: ``(message, close code, reason)`` for the bytes read of it;
        #: ``None``: a bare close with 1009.
        self.too_big_reply: Callable[[int], tuple[str | bytes, int, str]] | None = None

    @property
    def closed(self) -> bool:
        """Whether the socket is closed (either side)."""
        return self._closed is not None

    def _feed(self, data: bytes | None) -> None:
        try:
            self._ws.receive_data(data)
        except RemoteProtocolError as exc:  # pragma: no cover - wsproto queues its own close
            self._closed = ConnectionClosed(1002, str(exc))
            return
        events = list(self._ws.events())
        last_ping = max((i for i, e in enumerate(events) if isinstance(e, Ping)), default=-1)
        self._events.extend(
            e for i, e in enumerate(events) if i >= last_ping or not isinstance(e, Ping)
        )

    async def _write(self, event: Event) -> None:
        async with self._lock:
            try:
                data = self._ws.send(event)
            except LocalProtocolError as exc:
                raise ConnectionClosed(1006, str(exc)) from None
            try:
                with trio.move_on_after(self._send_timeout) as scope:
                    await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._closed = self._closed or ConnectionClosed(1006, "connection lost")
                raise self._closed from None
            if scope.cancelled_caught:
                # The stream is unusable after a cancelled send_all: drop it.
                self._closed = self._closed or ConnectionClosed(1006, "peer not reading")
                await trio.aclose_forcefully(self.stream)
                raise self._closed

    async def receive(self) -> str | bytes:
        """The next whole message (``str`` for text, ``bytes`` for binary).

        Raises:
            ConnectionClosed: The peer closed, the connection broke, or a
                message exceeded the size limit (closed with 1009).
        """
        while True:
            if self._closed is not None:
                raise self._closed
            while self._events:
                event = self._events.popleft()
                if isinstance(event, Message):
                    self._parts.append(event.data)
                    self._size += len(event.data)
                    if self._size > self._max:
                        await self._refuse_too_big()
                    if event.message_finished:
                        size = self._size
                        parts, self._parts, self._size = self._parts, [], 0
                        message: str | bytes
                        if isinstance(event, TextMessage):
                            message = "".join(p for p in parts if isinstance(p, str))
                        else:
                            assert isinstance(event, BytesMessage)
                            message = b"".join(p for p in parts if isinstance(p, bytes))
                        if size > YIELD_BEFORE:
                            # Its parse may take milliseconds: others first.
                            await trio.lowlevel.checkpoint()
                        return message
                elif isinstance(event, Ping):
                    await self._write(event.response())
                elif isinstance(event, CloseConnection):
                    if self._ws.state is ConnectionState.REMOTE_CLOSING:
                        await self._write(event.response())
                    elif self._ws.state is ConnectionState.OPEN:
                        # wsproto could not accept a frame (bad UTF-8: 1007,
                        # bad framing: 1002) and leaves the close to us.
                        await self.close(event.code, event.reason or None)
                    self._closed = ConnectionClosed(event.code, event.reason or None)
                    raise self._closed
            data = await receive_or_eof(self.stream, FRAMES_READ_SIZE)
            if not data:
                self._closed = self._closed or ConnectionClosed(1006, "connection lost")
                raise self._closed
            self._feed(data)

    async def send(self, message: str | bytes) -> None:
        """Send one text (``str``) or binary (``bytes``) message."""
        if self._closed is not None:
            raise self._closed
        if isinstance(message, str):
            await self._write(TextMessage(data=message))
        else:
            await self._write(BytesMessage(data=message))

    async def _refuse_too_big(self) -> NoReturn:
        code, reason = 1009, "message too big"
        if self.too_big_reply is not None:
            message, code, reason = self.too_big_reply(self._size)
            with contextlib.suppress(ConnectionClosed):
                await self.send(message)
        await self.close(code, reason)
        raise ConnectionClosed(code, reason)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        """Send a close frame (if still open) and mark the socket closed."""
        if self._closed is not None:
            return
        self._closed = ConnectionClosed(code, reason)
        if self._ws.state is ConnectionState.OPEN:
            with contextlib.suppress(ConnectionClosed):
                await self._write(CloseConnection(code=code, reason=reason))
