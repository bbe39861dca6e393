"""WebSocket framing engines behind one small interface.

Theory of operation
-------------------
The UAMP WebSocket server and client do their own I/O; what they need from a
WebSocket library is framing only, after the opening handshake: turn received
bytes into whole messages (answering pings and close frames on the way) and
turn outgoing messages into bytes. :class:`FrameEngine` is that interface:

* :meth:`FrameEngine.feed` takes bytes read from the socket (``b""`` for end
  of stream) and returns the complete messages they finished, as ``bytes``
  (UTF-8 for text frames; the UAMP core decodes JSON from bytes directly).
  Control frames are handled inside: a ping makes a pong owed (only the
  latest ping is answered, RFC 6455 section 5.5.3, so a ping flood queues
  one pong, not one per ping), a close frame
  queues the closing reply and raises :class:`WebSocketClosed`. A message
  above ``max_message_size`` queues a close with code 1009, a text message
  that is not UTF-8 one with 1007, and raises.
* :meth:`FrameEngine.text`, :meth:`~FrameEngine.ping`,
  :meth:`~FrameEngine.close` queue frames; :meth:`FrameEngine.take` returns
  everything queued as one ``bytes`` so the caller writes it with one
  ``send_all`` (coalescing: trio's cost per ``send_all`` dominates small
  messages).

Two implementations, chosen by benchmark (``bench/transports.py``):

* ``"websockets"`` -- the sans-IO protocol core of the ``websockets`` library
  (about 2 us to frame and 5 us to parse a small message on the reference
  machine); the default. In front of its parser sits a fast path for the
  frames nearly every peer sends: whole (FIN) text, binary, ping and pong
  frames, masked as the side requires, without reserved bits, within the
  size limit. It reads their header with a few byte lookups and unmasks the
  payload in C; the first frame that is anything else (a fragment, a close,
  a protocol error, an over-limit or non-UTF-8 message) and everything after
  it goes to the library's parser, for good, so every error is still the
  library's (a ping flood costs a fifth as much; the differential test in
  ``tests/trio/engines/test_ws_fast_path.py`` holds both to the same output).
  A server's text frames are written likewise (a header and the payload,
  no mask, no extension), the rest by the library.
* ``"wsproto"`` -- wsproto's post-handshake connection (about 4 us to frame
  and 10 us to parse).

Neither engine reads a clock or does I/O.
"""

from __future__ import annotations

import abc
import os
from typing import Final, Literal

from uamp_proto.errors import UampError

__all__ = [
    "DEFAULT_ENGINE",
    "EngineName",
    "FrameEngine",
    "WebSocketClosed",
    "make_engine",
]

#: Which engine to use.
EngineName = Literal["websockets", "wsproto"]

#: RFC 6455 close codes used here.
CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_INVALID_DATA: Final = 1007
CLOSE_POLICY_VIOLATION: Final = 1008
CLOSE_TOO_BIG: Final = 1009
CLOSE_INTERNAL_ERROR: Final = 1011
#: The server is restarting or draining: reconnect (to another server) and resume.
CLOSE_SERVICE_RESTART: Final = 1012
#: Not sent on the wire: the connection ended without a close frame.
CLOSE_ABNORMAL: Final = 1006


class WebSocketClosed(UampError):
    """The WebSocket is closed (by the peer, by a limit, or the stream ended).

    Attributes:
        code: The close code (1006 when no close frame was exchanged).
        reason: The close reason, or ``""``.
    """

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"WebSocket closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class FrameEngine(abc.ABC):
    """Framing of one open WebSocket (see the module docstring)."""

    #: Set once a close frame was sent or received, or the stream ended.
    closed: WebSocketClosed | None

    @abc.abstractmethod
    def feed(self, data: bytes) -> list[bytes]:
        """Parse received bytes (``b""`` = end of stream) into whole messages.

        Raises:
            WebSocketClosed: The peer closed, the stream ended, or a message
                broke a limit or the protocol; a close frame owed to the
                peer is queued for :meth:`take`.
        """

    @abc.abstractmethod
    def text(self, payload: bytes) -> None:
        """Queue one text message (``payload`` is UTF-8)."""

    @abc.abstractmethod
    def ping(self, payload: bytes = b"") -> None:
        """Queue a ping frame."""

    @abc.abstractmethod
    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Queue a close frame (once; later calls do nothing)."""

    @abc.abstractmethod
    def take(self) -> bytes:
        """Everything queued for the network, joined; drains the queue."""

    @property
    @abc.abstractmethod
    def owes(self) -> bool:
        """Whether :meth:`take` has bytes (pongs, close replies) to write."""

    @property
    def pongs(self) -> int:
        """How many pong frames were received so far."""
        return self._pongs

    _pongs = 0


def _latest_ping_protocol() -> type:
    """websockets' protocol core, owing a pong to the latest ping only.

    The library queues a pong for every ping it parses; a peer that floods
    pings and does not read would grow that queue without bound. RFC 6455
    section 5.5.3 lets an endpoint answer only the most recent ping, so this
    subclass keeps the latest ping's payload instead and the engine frames
    its pong when the queue is taken.

    The engine reads its state as the library's own methods do, from
    ``_state`` (websockets 13 and later): ``state`` is a property, a Python
    call on each frame read or written; the engine checks at its start that
    the attribute is there.
    """
    from websockets.frames import Opcode
    from websockets.protocol import Protocol

    class LatestPingProtocol(Protocol):
        ping_owed: bytes | None = None

        def recv_frame(self, frame: object) -> None:
            if getattr(frame, "opcode", None) is Opcode.PING:
                self.ping_owed = bytes(frame.data)  # type: ignore[attr-defined]
                self.events.append(frame)  # type: ignore[arg-type]
                return
            super().recv_frame(frame)  # type: ignore[arg-type]

    return LatestPingProtocol


_LATEST_PING_PROTOCOL: type | None = None


def _apply_mask(payload: bytearray, key: bytearray) -> bytes:
    """``payload`` unmasked with the 4-byte ``key`` (RFC 6455 section 5.3), in C."""
    try:
        from websockets.speedups import apply_mask
    except ImportError:  # pragma: no cover - a build without the C extension
        from websockets.utils import apply_mask

    global _apply_mask
    _apply_mask = apply_mask  # type: ignore[assignment]
    return apply_mask(payload, key)


def _valid_text(data: bytes) -> bool:
    """Whether a text message's payload is UTF-8 (RFC 6455 section 8.1)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: The header of a server's whole text frame of each length below 126 bytes.
_TEXT_HEADS: Final = tuple(bytes([0x81, size]) for size in range(126))


class _WebsocketsEngine(FrameEngine):
    """Framing with the sans-IO core of the ``websockets`` library."""

    def __init__(self, client: bool, max_message_size: int | None) -> None:
        global _LATEST_PING_PROTOCOL
        from websockets.frames import Frame, Opcode
        from websockets.protocol import Side, State

        if _LATEST_PING_PROTOCOL is None:
            _LATEST_PING_PROTOCOL = _latest_ping_protocol()
        self._frame_type = Frame
        self._op_text = Opcode.TEXT
        self._op_binary = Opcode.BINARY
        self._op_cont = Opcode.CONT
        self._op_pong = Opcode.PONG
        self._open = State.OPEN
        self._p = _LATEST_PING_PROTOCOL(
            Side.CLIENT if client else Side.SERVER, state=State.OPEN, max_size=max_message_size
        )
        if getattr(self._p, "_state", None) is not State.OPEN:  # pragma: no cover
            raise RuntimeError("websockets' protocol keeps no _state; uamp reads it")
        self._parts: list[bytes] = []
        self._is_text = False
        self.closed = None
        #: The fast path's unparsed bytes (a frame cut by a read); ``None``
        #: once the library's parser has taken over.
        self._pending: bytearray | None = bytearray()
        self._masked = not client  # a server receives masked frames only
        self._max = max_message_size
        #: Whether text frames are written by :meth:`text` itself: a server's
        #: (a client masks each frame with random bytes) with no extension.
        self._plain_sends = not client and not self._p.extensions

    def feed(self, data: bytes) -> list[bytes]:
        if self._pending is not None and data and self._p._state is self._open:
            out, rest = self._fast(data)
            if not rest:
                return out
            try:
                out.extend(self._slow(rest))
            except WebSocketClosed:
                if not out:
                    raise
                # Deliver what was complete first; the next feed raises.
            return out
        pending, self._pending = self._pending, None
        if pending:
            self._p.receive_data(bytes(pending))  # its events are taken below
        return self._slow(data)

    def _fast(self, data: bytes) -> tuple[list[bytes], bytes]:
        """Whole frames of the common kinds in ``data``; the rest for the library, if any.

        Returns the messages and ``b""`` when every byte was taken (a cut
        frame waits in :attr:`_pending`), or the bytes from the first frame
        the library must parse (the fast path then ends for good).
        """
        buf = self._pending
        assert buf is not None
        buf += data
        end = len(buf)
        pos = 0
        out: list[bytes] = []
        masked = self._masked
        limit = self._max
        p = self._p
        while end - pos >= 2:
            b0 = buf[pos]
            b1 = buf[pos + 1]
            op = b0 & 0x0F
            size = b1 & 0x7F
            if b0 & 0xF0 != 0x80 or bool(b1 & 0x80) is not masked:
                break  # a fragment, reserved bits or the wrong masking: the library's
            head = pos + 2
            if size >= 126:  # a 16-bit (126) or 64-bit (127) length follows
                head += 2 if size == 126 else 8
                if end < head:
                    self._keep(buf, pos)
                    return out, b""
                size = int.from_bytes(buf[pos + 2 : head], "big")
            if op == 1 or op == 2:
                if limit is not None and size > limit:
                    break
            elif (op != 9 and op != 10) or size > 125:
                break  # close, continuation, unknown opcodes, long control frames
            key = head
            if masked:
                head += 4
            stop = head + size
            if end < stop:
                self._keep(buf, pos)
                return out, b""
            payload = buf[head:stop]
            body = _apply_mask(payload, buf[key:head]) if masked else bytes(payload)
            if op == 1:
                if not (body.isascii() or _valid_text(body)):  # ASCII: no call
                    break
                out.append(body)
            elif op == 2:
                out.append(body)
            elif op == 9:
                p.ping_owed = body
            else:
                self._pongs += 1
            pos = stop
        if end - pos < 2:
            if pos:  # _keep, inline (every read ends here)
                del buf[:pos]
            return out, b""
        rest = bytes(buf[pos:])
        self._pending = None
        return out, rest

    def _keep(self, buf: bytearray, pos: int) -> None:
        """Drop the parsed ``buf[:pos]``; the rest waits for more bytes."""
        if pos:
            del buf[:pos]

    def _slow(self, data: bytes) -> list[bytes]:
        """``data`` through the library's parser (the fast path has ended)."""
        p = self._p
        if data:
            p.receive_data(data)
        else:
            p.receive_eof()
        out: list[bytes] = []
        for frame in p.events_received():
            if not isinstance(frame, self._frame_type):  # pragma: no cover - handshake events
                continue
            op = frame.opcode
            if op is self._op_text or op is self._op_binary or op is self._op_cont:
                if op is not self._op_cont:
                    self._is_text = op is self._op_text
                if frame.fin and not self._parts:
                    message = bytes(frame.data)
                else:
                    self._parts.append(bytes(frame.data))
                    if not frame.fin:
                        continue
                    message = b"".join(self._parts)
                    self._parts = []
                if self._is_text and not _valid_text(message):
                    p.fail(CLOSE_INVALID_DATA, "invalid UTF-8 in a text message")
                    break
                out.append(message)
            elif op is self._op_pong:
                self._pongs += 1
        if p._state is not self._open:
            if self.closed is None:
                if p.close_rcvd is not None:
                    self.closed = WebSocketClosed(p.close_rcvd.code, p.close_rcvd.reason)
                elif p.close_sent is not None:
                    self.closed = WebSocketClosed(p.close_sent.code, p.close_sent.reason)
                else:
                    self.closed = WebSocketClosed(CLOSE_ABNORMAL, "connection lost")
            if out:
                return out  # deliver what was complete; the next feed raises
            raise self.closed
        return out

    def text(self, payload: bytes) -> None:
        p = self._p
        if (
            self._plain_sends
            and type(payload) is bytes
            and p._state is self._open
            and not p.expect_continuation_frame
            and not p.debug
        ):
            # What the library writes for a server's whole text frame with no
            # extension (RFC 6455 section 5.2: FIN and the opcode, the length,
            # no mask), without its Frame object and buffer: the header is
            # queued, then the payload, and take() joins them.
            size = len(payload)
            if size < 126:
                head = _TEXT_HEADS[size]
            elif size < 65536:
                head = b"\x81\x7e" + size.to_bytes(2, "big")
            else:
                head = b"\x81\x7f" + size.to_bytes(8, "big")
            p.writes.append(head)
            p.writes.append(payload)
            return
        p.send_text(payload)

    def ping(self, payload: bytes = b"") -> None:
        if self._p._state is self._open:
            self._p.send_ping(payload)

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if self._p._state is self._open:
            self._p.send_close(code, reason)
            if self.closed is None:
                self.closed = WebSocketClosed(code, reason)

    def take(self) -> bytes:
        p = self._p
        owed = p.ping_owed
        if owed is not None:
            p.ping_owed = None
            if p._state is self._open:
                p.send_pong(owed)
        return b"".join(p.data_to_send())

    @property
    def owes(self) -> bool:
        return bool(self._p.writes) or self._p.ping_owed is not None


class _WsprotoEngine(FrameEngine):
    """Framing with wsproto's post-handshake connection."""

    def __init__(self, client: bool, max_message_size: int | None) -> None:
        from wsproto import connection as wc
        from wsproto import events as we

        self._we = we
        self._state_open = wc.ConnectionState.OPEN
        self._state_remote_closing = wc.ConnectionState.REMOTE_CLOSING
        self._c = wc.Connection(wc.ConnectionType.CLIENT if client else wc.ConnectionType.SERVER)
        self._max = max_message_size
        self._parts: list[bytes] = []
        self._size = 0
        self._out: list[bytes] = []
        self._ping_owed: bytes | None = None
        self.closed = None

    def feed(self, data: bytes) -> list[bytes]:
        we = self._we
        if self.closed is not None:
            raise self.closed
        self._c.receive_data(data or None)
        out: list[bytes] = []
        for event in self._c.events():
            if isinstance(event, we.Message):
                chunk = event.data.encode() if isinstance(event.data, str) else bytes(event.data)
                self._size += len(chunk)
                if self._max is not None and self._size > self._max:
                    self.close(CLOSE_TOO_BIG, "message too big")
                    assert self.closed is not None
                    raise self.closed
                if event.message_finished and not self._parts:
                    self._size = 0
                    out.append(chunk)
                else:
                    self._parts.append(chunk)
                    if event.message_finished:
                        out.append(b"".join(self._parts))
                        self._parts, self._size = [], 0
            elif isinstance(event, we.Ping):
                self._ping_owed = bytes(event.payload)  # only the latest is answered
            elif isinstance(event, we.Pong):
                self._pongs += 1
            elif isinstance(event, we.CloseConnection):
                if self._c.state is self._state_remote_closing:
                    self._out.append(self._c.send(event.response()))
                elif self._c.state is self._state_open:
                    # wsproto reports a frame it could not accept (bad UTF-8:
                    # 1007, bad framing: 1002) as a close it leaves to us.
                    self.close(event.code, event.reason or "")
                self.closed = WebSocketClosed(event.code, event.reason or "")
                break
        if not data and self.closed is None:
            self.closed = WebSocketClosed(CLOSE_ABNORMAL, "connection lost")
        if self.closed is not None and not out:
            raise self.closed
        return out

    def text(self, payload: bytes) -> None:
        self._out.append(self._c.send(self._we.TextMessage(data=payload.decode())))

    def ping(self, payload: bytes = b"") -> None:
        if self._c.state is self._state_open:
            self._out.append(self._c.send(self._we.Ping(payload=payload)))

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if self._c.state is self._state_open:
            self._out.append(self._c.send(self._we.CloseConnection(code=code, reason=reason)))
            if self.closed is None:
                self.closed = WebSocketClosed(code, reason)

    def take(self) -> bytes:
        owed = self._ping_owed
        if owed is not None:
            self._ping_owed = None
            if self._c.state is self._state_open:
                self._out.append(self._c.send(self._we.Pong(payload=owed)))
        out, self._out = self._out, []
        return b"".join(out)

    @property
    def owes(self) -> bool:
        return bool(self._out) or self._ping_owed is not None


def _default_engine() -> EngineName:
    forced = os.environ.get("UAMP_WS_ENGINE")
    if forced in ("websockets", "wsproto"):
        return forced  # type: ignore[return-value]
    try:
        import websockets.protocol  # noqa: F401
    except ImportError:  # pragma: no cover - websockets is a dependency
        return "wsproto"
    return "websockets"


#: The engine used when none is named: ``websockets`` (measured faster), or
#: ``wsproto`` if the ``websockets`` package is missing; the environment
#: variable ``UAMP_WS_ENGINE`` overrides it.
DEFAULT_ENGINE: EngineName = _default_engine()


def make_engine(
    *, client: bool, max_message_size: int | None, engine: EngineName | None = None
) -> FrameEngine:
    """A framing engine for one open WebSocket.

    Args:
        client: True on the client side (frames are masked).
        max_message_size: Largest message accepted, in bytes (``None``: no
            limit); larger closes with 1009.
        engine: ``"websockets"`` or ``"wsproto"``; default :data:`DEFAULT_ENGINE`.

    Raises:
        ValueError: Unknown engine name.
    """
    name = engine or DEFAULT_ENGINE
    if name == "websockets":
        return _WebsocketsEngine(client, max_message_size)
    if name == "wsproto":
        return _WsprotoEngine(client, max_message_size)
    raise ValueError(f"unknown WebSocket engine {name!r}; use 'websockets' or 'wsproto'")
