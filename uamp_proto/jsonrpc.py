"""JSON-RPC 2.0 messages, sans-IO: parse, validate, build, frame.

Theory of operation
-------------------
JSON-RPC 2.0 (https://www.jsonrpc.org/specification) has four message shapes,
told apart by their keys:

* a **request** has ``method`` and ``id`` and wants exactly one response;
* a **notification** has ``method`` and no ``id`` and gets no response;
* a **response** has ``id`` and ``result``;
* an **error response** has ``id`` (``null`` when the request's id could not
  be read) and ``error: {code, message, data?}``.

:func:`decode` turns one text payload into a :class:`Batch`: the messages it
holds, in order, with every element that is not a valid message replaced by an
:class:`Invalid` carrying the error response it deserves (``-32600``) and the
id when one could be read. A payload that is not JSON at all raises
:class:`JSONRPCError` (``-32700``); so does an empty batch (``-32600``), both
answered with ``id: null``. :func:`encode` writes a message or a batch back.

Methods signal failures by raising :class:`JSONRPCError`; its
:meth:`~JSONRPCError.response` is the error response for a request id. The
standard codes are constants here, with spec 004's ``-32402`` (payment
required), which every JSON-RPC binding of UAMP answers with; other
application codes belong to the protocol that defines them.

Dialects differ in what they forgive: :func:`decode` takes ``null_id`` (a
call with ``"id": null`` is read as a notification, as A2A servers do) and
``params_code`` (the code for ``params`` that is neither object nor array:
``-32600`` by the letter of JSON-RPC, ``-32602`` for A2A).

:class:`LineBuffer` frames newline-delimited JSON (the stdio transport of
the Agent Client Protocol and of MCP): ``receive_data`` only buffers,
``next_line`` hands out one complete line at a time, EOF is an explicit
input, and a line longer than the cap is refused.

Nothing here does I/O or knows about any particular protocol; the ACP and
A2A adapters (:mod:`uamp_proto.adapters.acp`, :mod:`uamp_proto.adapters.a2a`)
and their servers parse and build every JSON-RPC message through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import attrs
import orjson

from . import jsonbounds
from .errors import UampError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PAYMENT_REQUIRED",
    "Batch",
    "ErrorResponse",
    "Id",
    "Invalid",
    "JSONRPCError",
    "LineBuffer",
    "LineTooLong",
    "Message",
    "Notification",
    "Request",
    "Response",
    "answer_payload",
    "decode",
    "decode_object",
    "encode",
    "error_response",
    "notification",
    "request",
    "response",
    "to_object",
]

#: Invalid JSON was received (JSON-RPC 2.0 section 5.1).
PARSE_ERROR = -32700
#: The JSON sent is not a valid request object.
INVALID_REQUEST = -32600
#: The method does not exist or is not available.
METHOD_NOT_FOUND = -32601
#: Invalid method parameters.
INVALID_PARAMS = -32602
#: Internal JSON-RPC error.
INTERNAL_ERROR = -32603
#: Spec 004: payment required (``data`` says what to pay); ACP and A2A both use it.
PAYMENT_REQUIRED = -32402

#: A request id: a string or an integer (``null`` only in error responses).
Id: TypeAlias = str | int

_VERSION = "2.0"


class JSONRPCError(UampError):
    """A JSON-RPC error: what a method raises, and what bad input raises.

    Args:
        code: The error code (the constants of this module, or an
            application code).
        message: A sentence a person can act on.
        data: Extra JSON-ready detail, sent as ``error.data``.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def error_object(self) -> dict[str, Any]:
        """The ``error`` member: ``{"code", "message", "data"?}``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    def response(self, id: Id | None) -> ErrorResponse:
        """The error response answering request ``id`` (``None``: unknown id)."""
        return ErrorResponse(id=id, error=self.error_object())


@attrs.frozen(kw_only=True)
class Request:
    """A call that wants a response."""

    id: Id
    method: str
    params: dict[str, Any] | list[Any] | None = None


@attrs.frozen(kw_only=True)
class Notification:
    """A call that wants no response."""

    method: str
    params: dict[str, Any] | list[Any] | None = None


@attrs.frozen(kw_only=True)
class Response:
    """A successful result; ``id`` is ``None`` answering a call read with ``null_id``."""

    id: Id | None
    result: Any


@attrs.frozen(kw_only=True)
class ErrorResponse:
    """A failed call; ``id`` is ``None`` when the request's id was unreadable."""

    id: Id | None
    error: dict[str, Any]

    @property
    def code(self) -> int | None:
        """The error code, when it is an integer."""
        code = self.error.get("code")
        return code if isinstance(code, int) and not isinstance(code, bool) else None


@attrs.frozen(kw_only=True)
class Invalid:
    """An element of the input that is not a valid JSON-RPC message.

    Attributes:
        error: Why (code ``-32600``, or ``params_code`` for bad ``params``);
            answer with ``error.response(id)``.
        id: The element's id, when it had a readable one.
        method: The method it called, when that much was valid (so a server
            can report an unknown method first).
    """

    error: JSONRPCError
    id: Id | None = None
    method: str | None = None


Message: TypeAlias = Request | Notification | Response | ErrorResponse


@attrs.frozen(kw_only=True)
class Batch:
    """What one payload held.

    Attributes:
        items: The messages (or :class:`Invalid` elements) in order.
        is_batch: Whether the payload was a JSON array; the answers to a
            batch go back as one array (JSON-RPC 2.0 section 6).
    """

    items: list[Message | Invalid]
    is_batch: bool


# --- parsing --------------------------------------------------------------------


def _is_id(value: object) -> bool:
    # Booleans are ints in Python but not ids in JSON-RPC.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def decode_object(
    obj: object, *, null_id: bool = False, params_code: int = INVALID_REQUEST
) -> Message | Invalid:
    """Validate one already-parsed JSON value as a JSON-RPC message.

    Args:
        obj: The value.
        null_id: Read a call with ``"id": null`` as a notification instead
            of refusing it.
        params_code: The error code for ``params`` that is neither an object
            nor an array.
    """
    if not isinstance(obj, dict):
        return Invalid(error=JSONRPCError(INVALID_REQUEST, "A JSON-RPC message must be an object."))
    raw_id = obj.get("id")
    msg_id: Id | None = raw_id if _is_id(raw_id) else None
    if obj.get("jsonrpc") != _VERSION:
        return Invalid(
            error=JSONRPCError(INVALID_REQUEST, 'The message must carry "jsonrpc": "2.0".'),
            id=msg_id,
        )
    if "id" in obj and raw_id is not None and not _is_id(raw_id):
        return Invalid(error=JSONRPCError(INVALID_REQUEST, '"id" must be a string or an integer.'))
    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str) or not method:
            return Invalid(
                error=JSONRPCError(INVALID_REQUEST, '"method" must be a non-empty string.'),
                id=msg_id,
            )
        params = obj.get("params")
        if params is not None and not isinstance(params, dict | list):
            return Invalid(
                error=JSONRPCError(params_code, '"params" must be an object or an array.'),
                id=msg_id,
                method=method,
            )
        if "id" not in obj or (null_id and raw_id is None):
            return Notification(method=method, params=params)
        if msg_id is None:
            return Invalid(
                error=JSONRPCError(INVALID_REQUEST, 'A request "id" must not be null.'),
                method=method,
            )
        return Request(id=msg_id, method=method, params=params)
    if "result" in obj and "error" not in obj:
        if msg_id is None:
            return Invalid(error=JSONRPCError(INVALID_REQUEST, 'A response needs an "id".'))
        return Response(id=msg_id, result=obj["result"])
    if "error" in obj and "result" not in obj:
        error = obj["error"]
        if not isinstance(error, dict) or not isinstance(error.get("message"), str):
            return Invalid(
                error=JSONRPCError(
                    INVALID_REQUEST, '"error" must be an object with "code" and "message".'
                ),
                id=msg_id,
            )
        return ErrorResponse(id=msg_id, error=error)
    return Invalid(
        error=JSONRPCError(
            INVALID_REQUEST, 'The message needs "method" (a call) or "result"/"error" (a reply).'
        ),
        id=msg_id,
    )


def decode(
    data: bytes | bytearray | memoryview | str,
    *,
    null_id: bool = False,
    params_code: int = INVALID_REQUEST,
) -> Batch:
    """Parse one payload (a message or a batch).

    ``null_id`` and ``params_code`` are as for :func:`decode_object`.

    Raises:
        JSONRPCError: ``-32700`` when the payload is not JSON or holds more
            values than :mod:`~uamp_proto.jsonbounds` lets be parsed,
            ``-32600`` when it is an empty array. Answer with
            ``exc.response(None)``.
    """
    try:
        jsonbounds.check(data)
    except jsonbounds.TooManyValues as exc:
        raise JSONRPCError(PARSE_ERROR, f"Parse error: {exc}.") from None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JSONRPCError(
            PARSE_ERROR, f"Parse error: the message is not valid JSON ({exc})."
        ) from None
    if isinstance(obj, list):
        if not obj:
            raise JSONRPCError(INVALID_REQUEST, "An empty batch is not a valid request.")
        items = [decode_object(o, null_id=null_id, params_code=params_code) for o in obj]
        return Batch(items=items, is_batch=True)
    return Batch(
        items=[decode_object(obj, null_id=null_id, params_code=params_code)], is_batch=False
    )


# --- building -------------------------------------------------------------------


def to_object(message: Message) -> dict[str, Any]:
    """The JSON-ready dict of a message."""
    if isinstance(message, Request):
        out: dict[str, Any] = {"jsonrpc": _VERSION, "id": message.id, "method": message.method}
        if message.params is not None:
            out["params"] = message.params
        return out
    if isinstance(message, Notification):
        out = {"jsonrpc": _VERSION, "method": message.method}
        if message.params is not None:
            out["params"] = message.params
        return out
    if isinstance(message, Response):
        return {"jsonrpc": _VERSION, "id": message.id, "result": message.result}
    return {"jsonrpc": _VERSION, "id": message.id, "error": message.error}


def encode(message: Message | list[Message]) -> bytes:
    """Serialise a message, or a list of them as a batch, to compact JSON."""
    if isinstance(message, list):
        return orjson.dumps([to_object(m) for m in message])
    return orjson.dumps(to_object(message))


def request(id: Id, method: str, params: dict[str, Any] | list[Any] | None = None) -> Request:
    """Build a request."""
    return Request(id=id, method=method, params=params)


def notification(method: str, params: dict[str, Any] | list[Any] | None = None) -> Notification:
    """Build a notification."""
    return Notification(method=method, params=params)


def response(id: Id | None, result: Any) -> Response:
    """Build a successful response."""
    return Response(id=id, result=result)


def error_response(id: Id | None, code: int, message: str, data: Any = None) -> ErrorResponse:
    """Build an error response."""
    return JSONRPCError(code, message, data).response(id)


# --- newline-delimited framing ----------------------------------------------------


class LineTooLong(UampError):
    """A line exceeded :attr:`LineBuffer.max_line`; the buffer discards it."""


class LineBuffer:
    """Splits a byte stream into newline-terminated lines (NDJSON framing).

    Args:
        max_line: Longest line accepted, in bytes (without the newline).

    ``receive_data(b"")`` marks EOF: a last unterminated line is then handed
    out too. Blank lines are skipped. A line over the cap raises
    :class:`LineTooLong` from :meth:`next_line` once and is dropped, so the
    stream can go on with the next line.
    """

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._eof = False
        self._skipping = False

    @property
    def eof(self) -> bool:
        """Whether EOF was received."""
        return self._eof

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes; empty ``data`` means EOF."""
        if not data:
            self._eof = True
        else:
            self._buf += data

    def next_line(self) -> bytes | None:
        """The next complete line (without line ending), or ``None`` if none yet.

        Raises:
            LineTooLong: The next line is longer than ``max_line``.
        """
        while True:
            idx = self._buf.find(b"\n")
            if idx < 0:
                if len(self._buf) > self.max_line:
                    # Drop what we have and everything up to the next newline.
                    self._buf.clear()
                    if not self._skipping:
                        self._skipping = True
                        raise LineTooLong(f"line longer than {self.max_line} bytes")
                    return None
                if self._eof and self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    if self._skipping:
                        self._skipping = False
                        continue
                    if line.strip():
                        return line.rstrip(b"\r")
                return None
            line = bytes(self._buf[:idx])
            del self._buf[: idx + 1]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > self.max_line:
                raise LineTooLong(f"line longer than {self.max_line} bytes")
            line = line.rstrip(b"\r")
            if line.strip():
                return line


async def answer_payload(
    data: bytes | str,
    handle_message: Callable[[Message | Invalid], Awaitable[Message | None]],
) -> bytes | None:
    """Decode one payload (a message or a batch), answer each message, encode the answers.

    ``None`` when nothing is owed (only notifications and replies); a batch
    is answered with an array (JSON-RPC 2.0 section 6).
    """
    try:
        batch = decode(data)
    except JSONRPCError as exc:
        return encode(exc.response(None))
    answers: list[Message] = []
    for item in batch.items:
        answer = await handle_message(item)
        if answer is not None:
            answers.append(answer)
    if not answers:
        return None
    return encode(answers if batch.is_batch else answers[0])
