"""Server-sent events: an encoder and an incremental parser.

Theory of operation
-------------------
The framing follows the WHATWG HTML standard, section 9.2 "Server-sent
events" (the ``text/event-stream`` format UAMP 1.0 section 13.2 uses).

*Encoding* writes one ``field: value`` line per field and ends the event with
a blank line. A value holding line breaks becomes several ``data:`` lines,
which a parser joins with ``\\n``; a CR or CRLF inside the data therefore
comes back as LF. The common case (one line of data, no other field) is one
``bytes`` formatting operation, because every streamed chunk goes through it.

*Parsing* is sans-IO: :meth:`SSEParser.feed` takes whatever bytes arrived and
returns the events they completed. Lines end in CRLF, LF or a lone CR; a CR
that ends one chunk and an LF that starts the next count as one line ending.
A line is decoded only once it is complete, and CR and LF never occur inside
a multi-byte UTF-8 sequence, so a chunk may end anywhere, even mid-character.
Invalid UTF-8 is replaced by U+FFFD, as the standard's decoder does.
"""

from __future__ import annotations

import re

import attrs

from .errors import UampError

__all__ = [
    "DEFAULT_MAX_BUFFER",
    "SSEError",
    "SSEEvent",
    "SSEParser",
    "encode_comment",
    "encode_event",
    "encode_json",
]

#: Default cap on the bytes an :class:`SSEParser` holds between calls (1 MiB).
DEFAULT_MAX_BUFFER = 1 << 20

_BOM = b"\xef\xbb\xbf"
# A line ending: CRLF, a lone CR or a lone LF (WHATWG "end-of-line"); also
# the line breaks inside a value that the encoder writes as separate lines.
_BREAK = re.compile(r"\r\n?|\n")


class SSEError(UampError, ValueError):
    """Bad input to the encoder, or a stream the parser refuses.

    The parser raises it when the bytes it would have to hold (an unfinished
    line plus the fields of the event being assembled) exceed ``max_buffer``;
    the parser is then unusable and every later :meth:`SSEParser.feed` raises
    again. The encoder raises it for a field that cannot be framed (an event
    name or id with a line break, an id with NUL, a negative retry).
    """


@attrs.frozen(kw_only=True)
class SSEEvent:
    """One dispatched server-sent event.

    Attributes:
        data: The ``data`` lines of the event joined with ``\\n``.
        event: The event type, or ``None`` when the event named none (a
            browser would report ``"message"``).
        id: The ``id`` field this event carried, or ``None`` if it carried
            none. The id that persists across events is
            :attr:`SSEParser.last_event_id`.
        retry: The ``retry`` field (milliseconds) this event carried, or
            ``None``.
    """

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


def _check_line(name: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise SSEError(f"SSE {name} must not contain a line break: {value!r}")


def _check_id(id: str) -> None:
    _check_line("id", id)
    if "\0" in id:
        raise SSEError(f"SSE id must not contain NUL: {id!r}")


def encode_event(
    data: str,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Frame one event for a ``text/event-stream`` body.

    Args:
        data: The payload; each line of it becomes one ``data:`` line.
        event: The event type; ``None`` or ``""`` writes no ``event`` field.
        id: The event id (may be ``""``, which resets the peer's last id).
        retry: The reconnection time in milliseconds.

    Returns:
        The UTF-8 bytes of the event, ending with a blank line.

    Raises:
        SSEError: If ``event`` or ``id`` contains a line break, ``id``
            contains NUL (a parser would ignore it) or ``retry`` is negative.
    """
    if "\n" in data or "\r" in data:
        data = _BREAK.sub("\ndata: ", data)
    elif event is None and id is None and retry is None:
        # The hot path: one string and one bytes object.
        return ("data: " + data + "\n\n").encode()
    head: list[str] = []
    if event:
        _check_line("event name", event)
        head.append(f"event: {event}\n")
    if id is not None:
        _check_id(id)
        head.append(f"id: {id}\n")
    if retry is not None:
        if type(retry) is not int or retry < 0:
            raise SSEError(f"SSE retry must be a non-negative integer: {retry!r}")
        head.append(f"retry: {retry}\n")
    head.append(f"data: {data}\n\n")
    return "".join(head).encode()


def encode_json(payload: bytes, *, event: str | None = None, id: str | int | None = None) -> bytes:
    """Frame already-serialised JSON as one event, without decoding it.

    ``payload`` must be compact JSON as ``orjson.dumps`` writes it (no
    indentation): it holds no raw line break, so it is one ``data:`` line.
    This is the hot path of every JSON-over-SSE transport, so it does not
    scan the payload to check; use :func:`encode_event` for arbitrary text.

    Args:
        payload: Compact UTF-8 JSON bytes.
        event: The event type, if any.
        id: The event id, if any; an integer id (a sequence number) needs no
            checking.

    Raises:
        SSEError: As :func:`encode_event` for a bad ``event`` or ``id``.
    """
    if event is None:
        if id is None:
            return b"data: " + payload + b"\n\n"
        if type(id) is int:
            return b"id: %d\ndata: %b\n\n" % (id, payload)
    head = b""
    if event:
        _check_line("event name", event)
        head = b"event: " + event.encode() + b"\n"
    if type(id) is int:
        head += b"id: %d\n" % id
    elif id is not None:
        assert isinstance(id, str)
        _check_id(id)
        head += b"id: " + id.encode() + b"\n"
    return head + b"data: " + payload + b"\n\n"


def encode_comment(text: str = "") -> bytes:
    """Frame a comment, e.g. a keep-alive that proxies will not time out on.

    Args:
        text: The comment; each line of it becomes one ``:`` line.

    Returns:
        The UTF-8 bytes of the comment lines. A comment dispatches nothing.
    """
    if not text:
        return b":\n"
    return b": " + _BREAK.sub("\n: ", text).encode() + b"\n"


class SSEParser:
    """Incremental ``text/event-stream`` parser (WHATWG HTML 9.2.6).

    Attributes:
        last_event_id: The last event ID string: the value of the most recent
            ``id`` field of a completed event block (dispatched or not),
            ``""`` until one arrives. A client sends it back in
            ``Last-Event-ID`` when it reconnects.
        retry: The most recent valid ``retry`` value in milliseconds, or
            ``None``.
    """

    def __init__(self, *, max_buffer: int = DEFAULT_MAX_BUFFER, last_event_id: str = "") -> None:
        """Create a parser.

        Args:
            max_buffer: The most held between calls: the bytes of the
                unfinished line plus the characters of the field lines of
                the event being assembled (comments are not held).
            last_event_id: The starting last event ID (for a resumed stream).

        Raises:
            ValueError: If ``max_buffer`` is smaller than 1.
        """
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be at least 1, got {max_buffer}")
        self.max_buffer = max_buffer
        self.last_event_id = last_event_id
        self.retry: int | None = None
        self._buf = bytearray()
        self._at_start = True  # a BOM may still be stripped
        self._skip_lf = False  # the previous chunk ended in CR
        self._failed = False
        # The event being assembled.
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._id_buffer = last_event_id
        self._retry: int | None = None
        self._held = 0  # characters of the field lines of this event

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream.

        Args:
            data: Any number of bytes, split anywhere.

        Returns:
            The events these bytes completed, in order (often none).

        Raises:
            SSEError: If more than ``max_buffer`` bytes would have to be
                held, or the parser already failed that way.
        """
        if self._failed:
            raise SSEError("the SSE parser already failed; the stream cannot be resumed")
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        buf = self._buf
        # What is already held holds no line ending, so only the new bytes
        # are scanned: feeding a long line in small pieces stays linear.
        scan_from = len(buf)
        buf += data
        if self._at_start:
            # The BOM is stripped once, and only at the very start; it may
            # itself arrive split across chunks.
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return []
            self._at_start = False
            scan_from = 0
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
        out: list[SSEEvent] = []
        last = max(buf.rfind(b"\n", scan_from), buf.rfind(b"\r", scan_from))
        if last >= 0:
            # Decode every complete line in one go: the region ends at a line
            # ending, so no UTF-8 sequence is cut, and the decoder ends an
            # invalid sequence at a CR or LF exactly as it would per line.
            lines = _BREAK.split(buf[: last + 1].decode("utf-8", "replace"))
            lines.pop()  # the empty rest after the final line ending
            # A lone CR at the very end may be the first half of a CRLF.
            self._skip_lf = buf[last] == 0x0D and last == len(buf) - 1
            del buf[: last + 1]
            line_ = self._line
            for line in lines:
                line_(line, out)
        if len(buf) + self._held > self.max_buffer:
            self._failed = True
            raise SSEError(
                f"SSE event exceeds {self.max_buffer} bytes without a blank line "
                f"({len(buf) + self._held} bytes held)"
            )
        return out

    def close(self) -> bool:
        """Signal the end of the stream and reset the parser.

        An unfinished event is discarded, never dispatched (WHATWG 9.2.6).

        Returns:
            Whether anything (an unfinished line or event) was discarded.
        """
        discarded = bool(self._buf) or self._held > 0
        self._buf.clear()
        self._reset_event()
        self._id_buffer = self.last_event_id
        self._at_start = True
        self._skip_lf = False
        return discarded

    def _reset_event(self) -> None:
        self._data = []
        self._event = None
        self._id = None
        self._retry = None
        self._held = 0

    def _line(self, line: str, out: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(out)
            return
        if line[0] == ":":  # a comment
            return
        self._held += len(line) + 1
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
            self._id_buffer = value
        elif name == "retry" and value and value.isascii() and value.isdigit():
            self._retry = int(value)
            self.retry = self._retry
        # Any other field, an id with NUL and a retry that is not all ASCII
        # digits are ignored.

    def _dispatch(self, out: list[SSEEvent]) -> None:
        self.last_event_id = self._id_buffer
        if self._data:
            out.append(
                SSEEvent(
                    data="\n".join(self._data),
                    event=self._event or None,
                    id=self._id,
                    retry=self._retry,
                )
            )
        self._reset_event()
