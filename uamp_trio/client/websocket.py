"""The native UAMP WebSocket client (:func:`connect`, :class:`UampClient`).

One connection carries every session (UAMP section 10); a reader task frames
the socket, feeds the sans-IO core and routes events to their sessions. With
``auto_resume`` a lost connection is dialled again (:class:`Redial`) and each
session resumed (docs/resume.md). The theory of operation is
:mod:`uamp_trio.client.uamp`'s.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Final
from urllib.parse import urlsplit

import attrs
import h11
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto.connection import ClientConnection, ConnectionConfig
from uamp_proto.response import MAX_OUTPUT_BYTES
from uamp_proto.resume import LAST_REQUEST, RESUMED
from uamp_proto.signing import JWKS

from ..engines.streams import receive_or_eof
from ..engines.ws_frames import EngineName, FrameEngine, WebSocketClosed, make_engine
from .session import (
    _UNAVAILABLE,
    DEFAULT_SESSION_BUFFER,
    ClientError,
    ClientSession,
    _encode,
    _Link,
    _Opening,
    _received,
    _running,
    _Sent,
    _transient,
    _Unavailable,
)
from .verify import JWKSSource, load_jwks

log = logging.getLogger("uamp_trio.client")

_READ_SIZE: Final = 65536
_WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def _open_stream(
    url: str, ssl_context: ssl.SSLContext | None
) -> tuple[trio.abc.Stream, str, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"not a WebSocket URL: {url!r}")
    secure = parts.scheme in ("wss", "https")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream: trio.abc.Stream
    if secure:
        stream = await trio.open_ssl_over_tcp_stream(
            host, port, ssl_context=ssl_context or ssl.create_default_context()
        )
    else:
        stream = await trio.open_tcp_stream(host, port)
    authority = parts.netloc.rsplit("@", 1)[-1]
    return stream, authority, target


async def _handshake(
    stream: trio.abc.Stream,
    authority: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
) -> bytes:
    """Do the RFC 6455 opening handshake with h11; returns bytes read past it."""
    key = base64.b64encode(os.urandom(16))
    expect = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
    conn = h11.Connection(h11.CLIENT)
    head = [
        ("Host", authority),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", key.decode()),
        ("Sec-WebSocket-Version", "13"),
        *headers,
    ]
    if subprotocols:
        head.append(("Sec-WebSocket-Protocol", ", ".join(subprotocols)))
    await stream.send_all(conn.send(h11.Request(method="GET", target=target, headers=head)))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = bytes(await stream.receive_some(_READ_SIZE))
            conn.receive_data(data)
            if not data and conn.their_state is h11.SEND_RESPONSE:
                raise _Unavailable("handshake_failed", "the server closed during the handshake")
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            got = dict((k.lower(), v) for k, v in event.headers)
            if got.get(b"sec-websocket-accept") != expect:
                raise ClientError("handshake_failed", "bad Sec-WebSocket-Accept from the server")
            return bytes(conn.trailing_data[0])
        if isinstance(event, h11.Response):
            body = b""
            while True:
                nxt = conn.next_event()
                if isinstance(nxt, h11.Data):
                    body += bytes(nxt.data)
                elif nxt is h11.NEED_DATA:
                    more = bytes(await stream.receive_some(_READ_SIZE))
                    conn.receive_data(more)
                    if not more:
                        break
                else:
                    break
            code = "handshake_failed"
            message = f"the server answered {event.status_code}"
            try:
                err = orjson.loads(body).get("error", {})
                code = err.get("code") or code
                message = f"{message}: {err.get('message')}"
            except (orjson.JSONDecodeError, AttributeError):
                pass
            raise (_Unavailable if event.status_code in _UNAVAILABLE else ClientError)(
                code, message
            )
        if isinstance(event, h11.ConnectionClosed):
            raise _Unavailable("handshake_failed", "the server closed during the handshake")


async def open_websocket(
    url: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    ssl_context: ssl.SSLContext | None = None,
    timeout: float = 10.0,
    subprotocols: Sequence[str] = ("uamp",),
) -> tuple[trio.abc.Stream, bytes]:
    """Dial ``url`` and do the WebSocket handshake (offering ``subprotocols``).

    Returns the stream and the bytes read past the handshake.

    Raises:
        ClientError: The server refused the upgrade (its error code, e.g.
            ``unauthorized``), closed or reset the connection during it, or
            did not answer in HTTP.
        OSError: The server is unreachable.
        trio.TooSlowError: No handshake within ``timeout``.
    """
    with trio.fail_after(timeout):
        stream, authority, target = await _open_stream(url, ssl_context)
        try:
            initial = await _handshake(stream, authority, target, headers, subprotocols)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.BrokenResourceError):
                # Reset mid-handshake: a stopping server's listener drops
                # its backlog so; as unavailable as a refused connection.
                raise _Unavailable("handshake_failed", f"the connection broke: {exc}") from None
            if isinstance(exc, h11.RemoteProtocolError):
                raise ClientError("handshake_failed", f"not an HTTP answer: {exc}") from None
            raise
    return stream, initial


@attrs.frozen
class Redial:
    """How :class:`UampClient` dials again after losing its connection (``auto_resume``).

    Attributes:
        url, headers, ssl_context, timeout: As given to :func:`connect`.
        engine, max_message_size: The framing engine of each new connection.
        give_up_after: Seconds of failed attempts before the sessions are
            closed with the last error.
        first_delay, max_delay: The backoff between attempts (doubling).
    """

    url: str
    headers: Sequence[tuple[str, str]] = ()
    ssl_context: ssl.SSLContext | None = None
    timeout: float = 10.0
    engine: EngineName | None = None
    max_message_size: int | None = None
    give_up_after: float = 60.0
    first_delay: float = 0.1
    max_delay: float = 5.0

    async def dial(
        self, retry: Callable[[BaseException], bool], give_up_after: float | None = None
    ) -> tuple[trio.abc.Stream, bytes]:
        """Dial and shake hands, again with backoff after a failure ``retry`` accepts.

        Raises the last failure once ``give_up_after`` seconds (default: the
        redial's) are spent, or one ``retry`` refuses.
        """
        window = self.give_up_after if give_up_after is None else give_up_after
        delay, give_up = self.first_delay, trio.current_time() + window
        while True:
            try:
                return await open_websocket(
                    self.url,
                    headers=self.headers,
                    ssl_context=self.ssl_context,
                    timeout=self.timeout,
                )
            except (OSError, ClientError, trio.TooSlowError) as exc:
                if not retry(exc) or trio.current_time() + delay > give_up:
                    raise
                log.info("dialling %s again: %s", self.url, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, self.max_delay)


class UampClient(_Link):
    """A native UAMP WebSocket client; make one with :func:`connect`.

    With ``redial`` (``connect(..., auto_resume=True)``) a lost connection is
    dialled again with backoff and every open session resumed where it broke
    (docs/resume.md): a response being iterated goes on, and calls made
    meanwhile wait for the new connection. A session the server cannot
    resume is closed with its ``session.error`` code. A turn whose
    ``response.created`` never came is sent again when the resumed
    session's ``last_request`` names an earlier turn (the server never acted
    on it; :class:`_Sent`).

    Attributes:
        sessions: The open sessions, by id.
        reconnects: How many times the connection was dialled again.
        resent: How many turns were sent again after a reconnect, the server
            having not acted on them (``last_request``, docs/resume.md).
        bytes_received: Bytes read from the socket(s) so far, WebSocket
            framing included (``uamp bench`` counts a turn's bytes with it).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: FrameEngine,
        nursery: trio.Nursery,
        *,
        delta_window: int | None,
        buffer: int,
        jwks: JWKS | None = None,
        redial: Redial | None = None,
        max_response_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> None:
        self._jwks = jwks
        self._stream = stream
        self._engine = engine
        self._nursery = nursery
        self._conn = ClientConnection(
            ConnectionConfig(
                delta_window=delta_window, max_response_output_bytes=max_response_output_bytes
            )
        )
        self._lock = trio.StrictFIFOLock()
        self._buffer = buffer
        self.sessions: dict[str, ClientSession] = {}
        self._closed: ClientError | None = None
        self._pongs: deque[trio.Event] = deque()
        self._errors: deque[ev.Event] = deque(maxlen=64)
        self._redial = redial
        self._closing = False
        #: Set while a connection is up; replaced by an unset one while redialling.
        self._online = trio.Event()
        self._online.set()
        #: Sessions whose resuming ``session.create`` is not answered yet.
        self._resuming: set[str] = set()
        self._settled = trio.lowlevel.ParkingLot()
        #: Turns a resumed session sends again (written by the reader).
        self._again: deque[_Sent] = deque()
        self.reconnects = 0
        self.resent = 0
        self.bytes_received = 0

    @property
    def closed(self) -> bool:
        """Whether the connection has closed."""
        return self._closed is not None

    async def _open(self, opening: _Opening) -> ClientSession:
        if self._closed is not None:
            raise self._closed
        sid = opening.session_id
        session = self._session(self._conn, opening)
        self.sessions[sid] = session
        try:
            create = opening.encode(self._conn, agent=opening.agent)
            session._create_event_id = self._conn.last_event_id
            await self._write([create], session._opened)
            await session._wait_created()
        except BaseException:
            self.sessions.pop(sid, None)
            raise
        return session

    async def ping(self) -> None:
        """Send a UAMP ``ping`` and wait for the ``pong``."""
        done = trio.Event()
        self._pongs.append(done)
        await self._write([self._conn.send(ev.Ping())])
        await done.wait()
        if self._closed is not None:
            raise self._closed

    async def send_raw(self, message: str | bytes) -> None:
        """Send one text message as is (bypassing the core: for tests and tools)."""
        await self._write([message.encode() if isinstance(message, str) else message])

    async def _send_events(self, session: ClientSession, events: list[ev.Event]) -> bytes | None:
        if self._closed is not None:
            raise self._closed
        while not self._online.is_set() or session.id in self._resuming:
            # Nothing goes out for a session until the server has resumed it.
            await self._online.wait()
            if session.id in self._resuming:
                await self._settled.park()
            if self._closed is not None:
                raise self._closed
            if session._ended is not None:
                raise session._ended
        encoded, refused = _encode(self._conn, events)
        turn = None
        if self._redial is not None and any(isinstance(e, ev.ResponseCreate) for e in events):
            # A turn: sent again after a reconnect unless the server acted on it.
            last = max(i for i, e in enumerate(events) if isinstance(e, ev.ResponseCreate))
            if last < len(encoded):
                request = orjson.loads(encoded[last]).get("event_id")
                turn = session._turn = _Sent(session.id, encoded, request)
        if encoded:
            await self._write(encoded, turn)
        if refused is not None:
            raise refused
        return encoded[-1] if encoded else None

    async def _forget(self, session: ClientSession) -> None:
        self.sessions.pop(session.id, None)

    async def _write(self, messages: list[bytes], sent: _Sent | None = None) -> None:
        """Write ``messages``; with ``auto_resume`` a broken connection waits for the next.

        ``sent``: they are a session's opening or turn, which the reconnect
        sends again if the server did not act on it (:class:`_Sent`): written
        once, never after a reconnect wrote them, and a lost connection ends
        the call (the reconnect takes over).
        """
        while True:
            await self._online.wait()  # redialling: wait for the new connection
            if sent is not None and sent.sid in self._resuming:
                await self._settled.park()  # the server resumes the session first
                continue
            async with self._lock:
                if self._closed is not None:
                    raise self._closed
                if not self._online.is_set() or (sent is not None and sent.sid in self._resuming):
                    continue
                if sent is not None and sent.on is not None:
                    return  # a reconnect sent it
                engine = self._engine
                if engine.closed is not None:
                    # The server's close came in (a drain's "go away"): the
                    # reader dials again when it sees it; send once it has.
                    if self._redial is not None and not self._closing:
                        if self._online.is_set():
                            self._online = trio.Event()
                        if sent is not None:
                            sent.on = self.reconnects  # the reconnect decides
                            return
                        continue
                    self._shutdown(ClientError("closed", f"the connection closed: {engine.closed}"))
                    raise self._closed  # type: ignore[misc]
                for m in messages:
                    engine.text(m)
                data = engine.take()
                if sent is not None:
                    sent.on = self.reconnects
                try:
                    await self._stream.send_all(data)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if self._redial is not None and not self._closing:
                        # The reader notices too and dials again; send once it has
                        # (what ``sent`` holds: the reconnect decides).
                        if self._online.is_set():
                            self._online = trio.Event()
                        if sent is not None:
                            return
                        continue
                    self._shutdown(ClientError("closed", f"the connection broke: {exc}"))
                    raise self._closed from None  # type: ignore[misc]

    async def _flush_owed(self) -> None:
        owed = self._conn.data_to_send()
        async with self._lock:
            engine = self._engine
            if engine.closed is None:
                for m in owed:
                    engine.text(m)
            data = engine.take()
            if data:
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self._stream.send_all(data)

    async def _reader(self, initial: bytes | None) -> None:
        while initial is not None:
            error = await self._read(initial)
            if self._redial is None or self._closing or self._closed is not None:
                self._shutdown(error)
                return
            initial = await self._dial_again(self._redial, error)

    async def _read(self, initial: bytes) -> ClientError:
        """Read one connection until it closes; returns why it did."""
        conn, engine = self._conn, self._engine
        data = initial
        try:
            while True:
                if data:
                    self.bytes_received += len(data)
                    for message in engine.feed(data):
                        if self._resuming and self._resumed(message):
                            continue
                        conn.receive(message)
                        await self._drain()
                    await self._flush_owed()
                    while self._again:
                        turn = self._again.popleft()
                        if self._online.is_set():
                            await self._write(turn.messages, turn)
                        else:  # this connection is closing already: the next one
                            turn.on = self.reconnects
                data = await receive_or_eof(self._stream, _READ_SIZE)
                if not data:
                    engine.feed(b"")
        except WebSocketClosed as closed:
            await self._flush_owed()  # the close reply
            return ClientError("closed", f"the connection closed ({closed.code})")

    async def _dial_again(self, redial: Redial, error: ClientError) -> bytes | None:
        """Dial until connected (backoff), then resume every session; ``None``: gave up."""
        if self._online.is_set():
            self._online = trio.Event()
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.aclose_forcefully(self._stream)
        try:
            stream, initial = await redial.dial(lambda exc: True)
        except (OSError, ClientError, trio.TooSlowError):
            self._shutdown(error)
            return None
        self.reconnects += 1
        async with self._lock:
            self._stream = stream
            self._engine = make_engine(
                client=True, max_message_size=redial.max_message_size, engine=redial.engine
            )
            resumes = []
            for sid, session in self.sessions.items():
                if session.opening is None:
                    continue
                if session.last_event_id is not None:
                    resumes.append(session.opening.resume(self._conn, session.last_event_id))
                    self._resuming.add(sid)
                elif not session._ready.is_set() and session._opened.on is not None:
                    # Lost before its session.created: ask for it again (not
                    # yet written at all: its writer writes it now).
                    resumes.append(session.opening.again(self._conn))
                    session._opened.on = self.reconnects
            for message in resumes:
                self._engine.text(message)
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(self._engine.take())
            self._online.set()
        return initial

    def _resumed(self, message: bytes | str) -> bool:
        """Take the answer to a resuming ``session.create`` (the core knows the session)."""
        if b"session." not in (message if isinstance(message, bytes) else message.encode()):
            return False
        try:
            raw = orjson.loads(message)
        except orjson.JSONDecodeError:
            return False
        sid = raw.get("session_id") if isinstance(raw, dict) else None
        if sid not in self._resuming:
            return False
        session = self.sessions.get(sid)
        extensions = raw.get("extensions") or {}
        if raw.get("type") == "session.created" and extensions.get(RESUMED):
            self._resuming.discard(sid)
            self._settled.unpark_all()
            turn = session._turn if session is not None else None
            if (
                turn is not None
                and turn.on is not None
                and turn.on < self.reconnects
                and turn.request != extensions.get(LAST_REQUEST)
            ):
                # Its turn went out on a lost connection and the server never
                # acted on it (no response began): send it again here.
                turn.on = None
                self._again.append(turn)
                self.resent += 1
            return True
        if raw.get("type") == "session.error":
            self._resuming.discard(sid)
            self._settled.unpark_all()
            error = raw.get("error") or {}
            if session is not None:
                self.sessions.pop(sid, None)
                session._close(
                    ClientError(
                        str(error.get("code", "resume_failed")),
                        f"session {sid} could not be resumed: {error.get('message', '')}",
                    )
                )
            return True
        return False

    async def _drain(self) -> None:
        for event in _received(self._conn):
            sid = event.session_id
            session = self.sessions.get(sid) if sid is not None else None
            if session is None and sid is None:
                session = self._addressee(event)
            if session is not None and event.event_id is not None:
                session.last_event_id = event.event_id
            if session is not None and event.type == "response.created":
                session._turn = None  # the server acted on it
            if event.type == "pong" and session is None and self._pongs:
                self._pongs.popleft().set()
            elif session is not None:
                if event.type == "pong" and self._pongs:
                    self._pongs.popleft().set()
                await session._deliver(event, self._nursery)
            else:
                self._errors.append(event)

    def _addressee(self, event: ev.Event) -> ClientSession | None:
        """The session an event without ``session_id`` is for (``None``: the connection).

        The only session; or the opening whose ``session.create`` a
        ``session.error`` refuses (named by ``details.event_id``, else the
        only session still opening), so that opening fails at once instead
        of waiting for a ``session.created`` that will never come.
        """
        if len(self.sessions) == 1:
            return next(iter(self.sessions.values()))
        if not isinstance(event, ev.SessionErrorEvent):
            return None
        details = event.error.details or {}
        if details.get("event_type") != "session.create":
            return None
        opening = [s for s in self.sessions.values() if not s._ready.is_set()]
        named = details.get("event_id")
        for session in opening:
            if named is not None and session._create_event_id == named:
                return session
        return opening[0] if len(opening) == 1 else None

    def _shutdown(self, error: ClientError) -> None:
        self._resuming.clear()
        self._settled.unpark_all()
        self._online.set()  # writers waiting for a redial see the close
        if self._closed is None:
            self._closed = error
        for session in list(self.sessions.values()):
            session._close(error)
        for waiter in self._pongs:
            waiter.set()

    async def aclose(self) -> None:
        """Close the WebSocket (code 1000) and the connection."""
        self._closing = True
        if self._closed is None:
            async with self._lock:
                self._engine.close(1000, "")
                data = self._engine.take()
                if data:
                    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self._stream.send_all(data)
            self._shutdown(ClientError("closed", "the client closed the connection"))


@asynccontextmanager
async def connect(
    url: str,
    *,
    delta_window: int | None = None,
    headers: Sequence[tuple[str, str]] = (),
    engine: EngineName | None = None,
    max_message_size: int | None = 16 * 1024 * 1024,
    session_buffer: int = DEFAULT_SESSION_BUFFER,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = 10.0,
    verify: JWKSSource | None = None,
    auto_resume: bool = False,
    resume_for: float = 60.0,
    first_dial_for: float | None = None,
    max_response_output_bytes: int = MAX_OUTPUT_BYTES,
) -> AsyncIterator[UampClient]:
    """Connect to a UAMP WebSocket endpoint (``ws://host:port/ws`` or ``.../agents/NAME/uamp``).

    Args:
        url: ``ws://`` or ``wss://`` URL.
        delta_window: Opt every session into delta windows of this size.
        headers: Extra headers of the upgrade request (``Authorization`` ...).
        engine: WebSocket framing engine.
        max_message_size: Largest message accepted from the server.
        session_buffer: Events buffered per session for its consumer.
        ssl_context: For ``wss://``.
        connect_timeout: Limit on connecting and the handshake.
        verify: Check every response's signature against this JWKS (a
            :class:`~uamp_proto.signing.JWKS`, its JSON object, a path or a
            URL; fetched once, now).
        auto_resume: When the connection drops, dial again with backoff and
            resume every open session (docs/resume.md). The first dial is
            also tried again while no server answers (refused, 502, 503,
            504, closed during the handshake), for up to ``resume_for``.
        resume_for: With ``auto_resume``, how long to keep trying before the
            sessions are closed.
        first_dial_for: With ``auto_resume``, how long the first dial is
            tried (default: ``resume_for``; 0: once, so that a server that is
            not there is an error at once, as a terminal wants).
        max_response_output_bytes: Most output of one response this client
            keeps (:class:`~uamp_proto.response.ResponseTracker`). A server
            that sends more is cancelled there: the response ends as
            ``failed`` with the error ``output_too_large``.

    Raises:
        ClientError: The handshake failed (``agent_not_found`` for an unknown
            agent's endpoint ...).
        JWKSError: ``verify`` names no usable JWKS.
    """
    jwks = await load_jwks(verify) if verify is not None else None
    redial = None
    if auto_resume:
        redial = Redial(
            url,
            headers,
            ssl_context,
            connect_timeout,
            engine,
            max_message_size,
            give_up_after=resume_for,
        )
        # A node lost while we dial (a load balancer's 503, a refused or
        # dropped connection) is ridden out like one lost later.
        stream, initial = await redial.dial(_transient, first_dial_for)
    else:
        stream, initial = await open_websocket(
            url, headers=headers, ssl_context=ssl_context, timeout=connect_timeout
        )
    frames = make_engine(client=True, max_message_size=max_message_size, engine=engine)

    def start(nursery: trio.Nursery) -> UampClient:
        client = UampClient(
            stream,
            frames,
            nursery,
            delta_window=delta_window,
            buffer=session_buffer,
            jwks=jwks,
            redial=redial,
            max_response_output_bytes=max_response_output_bytes,
        )
        nursery.start_soon(client._reader, initial)
        return client

    async def close(client: UampClient) -> None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await client.aclose()
        if client._stream is not stream:  # a redialled connection
            await trio.aclose_forcefully(client._stream)

    try:
        async with _running(start, close) as client:
            yield client
    finally:
        await trio.aclose_forcefully(stream)
