"""gRPC's wire format over HTTP/2, without I/O: messages, status codes, timeouts, trailers.

Theory of operation
-------------------
A gRPC call is one HTTP/2 request (``POST /package.Service/Method``,
``content-type: application/grpc`` or ``application/grpc+proto``) whose
body, both ways, is a sequence of length-prefixed messages: one byte of
flags (bit 0: the message is compressed with the call's ``grpc-encoding``),
a 4-byte big-endian length, then that many bytes. The response ends with
trailers: ``grpc-status`` (a :class:`StatusCode`) and, when there is one,
``grpc-message`` (percent-encoded UTF-8). An answer with no message at all
may put them in the response head ("trailers-only").

:class:`MessageReader` takes body bytes in any pieces and gives back whole
messages; it refuses a message over its size limit from the prefix alone
(before its bytes arrive: ``RESOURCE_EXHAUSTED``), and decompresses ``gzip``
messages without letting one expand past that limit. :func:`parse_timeout`
reads ``grpc-timeout``; :func:`status_trailers` builds the trailers;
:func:`status_for_http` is the status uamp answers for an HTTP refusal made
before a call reaches its handler (authentication, payment, limits): gRPC's
own HTTP-to-status table where it has a row, the nearest status elsewhere.
All problems are :class:`GrpcError` carrying the status to answer with.
"""

from __future__ import annotations

import enum
import re
import zlib
from collections.abc import Iterator
from urllib.parse import quote, unquote

from .errors import UampError

__all__ = [
    "ACCEPT_ENCODINGS",
    "CONTENT_TYPE",
    "DEFAULT_MAX_MESSAGE",
    "GrpcError",
    "MessageReader",
    "StatusCode",
    "decode_message_text",
    "encode_message",
    "encode_message_text",
    "is_grpc_content_type",
    "parse_timeout",
    "status_for_http",
    "status_trailers",
]

#: The content type uamp answers with (the protobuf subtype is implied).
CONTENT_TYPE = "application/grpc"
#: The message encodings a reader understands, for ``grpc-accept-encoding``.
ACCEPT_ENCODINGS = "identity,gzip"
#: gRPC's customary default for the largest message received: 4 MiB.
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024

_PREFIX = 5
_COMPRESSED = 0x01


class StatusCode(enum.IntEnum):
    """gRPC status codes (``grpc-status``), as the gRPC status code table numbers them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcError(UampError):
    """A call ends with ``code`` and ``message`` (sent as the status trailers).

    Args:
        code: The status.
        message: A sentence for a person (sent percent-encoded).
        trailers: More trailers to send with the status (``(name, value)``).
    """

    def __init__(
        self, code: StatusCode, message: str = "", *, trailers: list[tuple[str, str]] | None = None
    ) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        self.trailers = trailers or []


def is_grpc_content_type(value: str | None) -> bool:
    """Whether ``value`` is ``application/grpc`` or one of its ``+subtype`` forms."""
    if value is None:
        return False
    base = value.split(";", 1)[0].strip().lower()
    return base == CONTENT_TYPE or base.startswith(CONTENT_TYPE + "+")


def encode_message(payload: bytes) -> bytes:
    """``payload`` as one uncompressed length-prefixed message."""
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


class MessageReader:
    """Length-prefixed messages out of body bytes fed in any pieces.

    Args:
        max_message: The largest message accepted (after decompression).
        encoding: The call's ``grpc-encoding`` (``identity`` or ``gzip``);
            any other is refused here with ``UNIMPLEMENTED``.

    Raises:
        GrpcError: From :meth:`feed` and :meth:`end` (see there).
    """

    def __init__(self, *, max_message: int = DEFAULT_MAX_MESSAGE, encoding: str = "identity"):
        encoding = encoding.strip().lower() or "identity"
        if encoding not in ("identity", "gzip"):
            raise GrpcError(
                StatusCode.UNIMPLEMENTED,
                f"The message encoding {encoding!r} is not supported; use identity or gzip.",
                trailers=[("grpc-accept-encoding", ACCEPT_ENCODINGS)],
            )
        self.max_message = max_message
        self.encoding = encoding
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Add ``data``; yield each message it completes.

        Raises:
            GrpcError: ``RESOURCE_EXHAUSTED`` for a message over the limit
                (known from its prefix), ``INTERNAL`` for a compressed
                message on an ``identity`` call or one that does not inflate.
        """
        buffer = self._buffer
        buffer += data
        while len(buffer) >= _PREFIX:
            flags = buffer[0]
            length = int.from_bytes(buffer[1:_PREFIX], "big")
            if length > self.max_message:
                raise _too_large(length, self.max_message)
            if len(buffer) < _PREFIX + length:
                return
            payload = bytes(buffer[_PREFIX : _PREFIX + length])
            del buffer[: _PREFIX + length]
            if flags & _COMPRESSED:
                payload = self._inflate(payload)
            yield payload

    def end(self) -> None:
        """The body is complete.

        Raises:
            GrpcError: ``INTERNAL`` when it stops inside a message.
        """
        if self._buffer:
            raise GrpcError(StatusCode.INTERNAL, "The request body ends inside a message.")

    def _inflate(self, payload: bytes) -> bytes:
        if self.encoding == "identity":
            raise GrpcError(
                StatusCode.INTERNAL, "A compressed message arrived on a call with no grpc-encoding."
            )
        inflater = zlib.decompressobj(wbits=31)  # gzip framing
        try:
            out = inflater.decompress(payload, self.max_message + 1)
        except zlib.error as exc:
            raise GrpcError(StatusCode.INTERNAL, f"A gzip message is corrupt: {exc}") from None
        if len(out) > self.max_message:
            raise _too_large(len(out), self.max_message)
        if not inflater.eof:
            raise GrpcError(StatusCode.INTERNAL, "A gzip message is truncated.")
        return out


def _too_large(size: int, limit: int) -> GrpcError:
    return GrpcError(
        StatusCode.RESOURCE_EXHAUSTED,
        f"A message of {size} bytes is over the limit of {limit} bytes.",
    )


_TIMEOUT = re.compile(r"^([0-9]{1,8})([HMSmun])$")
_UNIT_SECONDS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float:
    """``grpc-timeout`` (at most 8 digits and a unit of ``HMSmun``) in seconds.

    Raises:
        GrpcError: ``INVALID_ARGUMENT`` for anything else.
    """
    match = _TIMEOUT.match(value.strip())
    if match is None:
        raise GrpcError(StatusCode.INVALID_ARGUMENT, f"Malformed grpc-timeout {value!r}.")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


# grpc-message: printable ASCII except '%' goes as is, everything else as %XX of its UTF-8.
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def encode_message_text(text: str) -> str:
    """``text`` percent-encoded for ``grpc-message``."""
    return quote(text, safe=_SAFE, encoding="utf-8")


def decode_message_text(value: str) -> str:
    """A ``grpc-message`` value decoded (a bad escape stays as it was sent)."""
    return unquote(value, encoding="utf-8", errors="replace")


def status_trailers(
    code: StatusCode, message: str = "", extra: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """The trailers that end a call with ``code`` (and ``message`` when not empty)."""
    trailers = [("grpc-status", str(int(code)))]
    if message:
        trailers.append(("grpc-message", encode_message_text(message)))
    if extra:
        trailers.extend(extra)
    return trailers


_FROM_HTTP = {
    400: StatusCode.INVALID_ARGUMENT,
    401: StatusCode.UNAUTHENTICATED,
    402: StatusCode.FAILED_PRECONDITION,
    403: StatusCode.PERMISSION_DENIED,
    404: StatusCode.UNIMPLEMENTED,
    405: StatusCode.UNIMPLEMENTED,
    408: StatusCode.DEADLINE_EXCEEDED,
    409: StatusCode.ABORTED,
    413: StatusCode.RESOURCE_EXHAUSTED,
    415: StatusCode.INTERNAL,
    429: StatusCode.RESOURCE_EXHAUSTED,
    431: StatusCode.RESOURCE_EXHAUSTED,
    502: StatusCode.UNAVAILABLE,
    503: StatusCode.UNAVAILABLE,
    504: StatusCode.UNAVAILABLE,
}


def status_for_http(status: int) -> StatusCode:
    """The gRPC status a refusal with HTTP ``status`` is answered with (``UNKNOWN`` if unlisted)."""
    return _FROM_HTTP.get(status, StatusCode.UNKNOWN)
