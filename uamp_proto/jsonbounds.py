"""How much work a JSON document may ask of the parser, checked before parsing it.

Theory of operation
-------------------
Parsing JSON costs time in proportion to the values it builds, not to its
bytes: orjson reads a 4 MiB string in a millisecond, but an object of
300,000 keys in 75 to 130 ms, all of it while the event loop of a server
waits (orjson keeps the GIL, so a worker thread would not help). A peer can
therefore stall every other connection with bodies well under the size
limit. :func:`check` bounds that cost first, at the speed of ``bytes.count``
(about a millisecond per MiB):

* Each element of an array or member of an object after the first follows
  a ``,``, and each container opens with ``[`` or ``{``: their count plus
  one (the *elements* here) grows with the parser's work.
* A container takes two bytes (its brackets), a separator one, and each
  separator is followed by an element of its own bytes, so a document of
  ``n`` bytes has fewer than ``2 n / 3`` of them: a document shorter than
  one and a half times the limit passes without being looked at, and the
  check costs one comparison for ordinary messages.
* Otherwise the separators and opening brackets are counted, an upper
  bound of the elements (some may be text). Under the limit, the document
  passes.
* Over it, the count may include text: a long string with commas in it (a
  pasted CSV file) is one value. Escaped backslashes and quotes are removed,
  and if the strings alone are more than twice the limit (each element holds
  at most two: a key and a value) the document is over it for certain.
  Else the parts outside the strings are counted again, exactly. So a
  valid document is refused exactly when it has more elements than the
  limit.

Nesting: orjson parses up to 1,024 levels but writes at most 254, so a
value a client nested 300 levels deep was accepted, then failed when the
server wrote it back (a traceback and an HTTP 500; on a UAMP WebSocket the
whole socket closed). :data:`MAX_DEPTH` is the one limit for both sides: a
document nested deeper is refused before it is parsed, and whatever is
accepted can be written again with room to spare (a reply wraps a client's
value in a few levels of its own). A document nested ``d`` deep has at
least ``d`` opening brackets and ``2 d`` bytes, so shorter ones, and ones
with fewer brackets (one count), pass unlooked-at; the others get their
depth measured outside strings at C speed (:func:`deeper_than`: a few
passes for an ordinary document, at most :data:`MAX_DEPTH` for an attack).

The limit is a context variable set with :func:`limit_values`: a server sets
it once for the tasks it starts (``ServerConfig.max_json_values``), so every
parser that calls :func:`check` (the UAMP event codec, JSON-RPC, the HTTP
routes' bodies) applies the same one. :data:`FLOOR` holds the length up to
which no limit ever set needs a look, so the event codec's hot path skips
even the call for ordinary messages.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Final

import attrs

from .errors import UampError

__all__ = [
    "DEFAULT_MAX_VALUES",
    "FLOOR",
    "MAX_DEPTH",
    "TooManyValues",
    "check",
    "count_elements",
    "deeper_than",
    "limit_values",
    "max_values",
    "reset_limit",
]

#: Elements a document may hold by default: parsed in 10 to 20 ms at most.
DEFAULT_MAX_VALUES = 100_000
#: The deepest nesting of arrays and objects a document may have, parsed or
#: written (orjson writes at most 254 levels; the rest is room for replies).
MAX_DEPTH: Final = 128
#: Documents up to this length cannot be nested deeper than MAX_DEPTH.
DEPTH_FLOOR: Final = 2 * MAX_DEPTH

#: The limit :func:`check` applies in the current context (set with :func:`limit_values`).
_MAX_VALUES: ContextVar[int] = ContextVar("uamp_max_json_values", default=DEFAULT_MAX_VALUES)


def _passes_unseen(limit: int) -> int:
    """The longest document that cannot hold more than ``limit`` values (see above)."""
    return max(0, 3 * (limit - 1) // 2)


#: ``FLOOR[0]``: documents up to this length pass every limit ever set in
#: this process (and :data:`MAX_DEPTH`) without being looked at. Only ever lowered.
FLOOR: list[int] = [min(_passes_unseen(DEFAULT_MAX_VALUES), DEPTH_FLOOR)]


def limit_values(limit: int) -> Token[int]:
    """Make ``limit`` the current context's limit; the token undoes it (:func:`reset_limit`)."""
    FLOOR[0] = min(FLOOR[0], _passes_unseen(limit))
    return _MAX_VALUES.set(limit)


def reset_limit(token: Token[int]) -> None:
    """Undo a :func:`limit_values`."""
    _MAX_VALUES.reset(token)


def max_values() -> int:
    """The current context's limit."""
    return _MAX_VALUES.get()


@attrs.define(auto_exc=True)
class TooManyValues(UampError, ValueError):
    """A JSON document holds more elements than the limit; it was not parsed.

    Attributes:
        message: What was refused, naming the limit.
        limit: The limit.
    """

    message: str
    limit: int = attrs.field(kw_only=True)

    @classmethod
    def too_deep(cls) -> TooManyValues:
        """The error for a document nested deeper than :data:`MAX_DEPTH`."""
        return cls(
            f"the document nests arrays and objects more than {MAX_DEPTH} levels deep, "
            "the most the server parses",
            limit=MAX_DEPTH,
        )

    @classmethod
    def over(cls, limit: int) -> TooManyValues:
        """The error for a document over ``limit``."""
        return cls(
            f"the document holds more than {limit} JSON values (array elements and object "
            "members), the most the server parses",
            limit=limit,
        )


def _structural(data: bytes) -> int:
    return data.count(b",") + data.count(b"[") + data.count(b"{") + 1


#: Brackets to parentheses: ``[`` and ``{`` open, ``]`` and ``}`` close.
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _outside_strings(data: bytes) -> bytes:
    if b"\\" in data:
        # Pairs first: in "\\\"" the backslash pair is one escape, the quote another.
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(data.split(b'"')[::2])


def deeper_than(data: bytes, levels: int) -> bool:
    """Whether ``data`` nests arrays and objects more than ``levels`` deep.

    Brackets in strings do not count. Each round takes out every innermost
    pair at C speed, so a document ``d`` levels deep is empty after ``d``
    rounds: a shallow one costs a few passes over its brackets. Not a
    validator: unbalanced brackets (JSON the parser refuses) are not deep.
    """
    brackets = _outside_strings(data).translate(_PARENS, _NOT_BRACKETS)
    for _ in range(levels):
        if not brackets:
            return False
        inner = brackets.replace(b"()", b"")
        if len(inner) == len(brackets):
            return False  # unbalanced
        brackets = inner
    return bool(brackets) and b"()" in brackets


def count_elements(data: bytes, limit: int) -> int:
    """The elements of ``data`` (separators and opening brackets, plus one), counted cheaply.

    Exact, or an upper bound that is at most ``limit`` (a document that
    passes may hold fewer), or a lower bound above ``limit`` (a document
    over it for certain). Not a validator: JSON that is not valid gets some
    count, and the parser refuses it afterwards.
    """
    bound = _structural(data)
    if bound <= limit:
        return bound
    if b"\\" in data:
        # Pairs first: in "\\\"" the backslash pair is one escape, the quote another.
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = data.count(b'"') // 2
    if strings > 2 * limit:
        return (strings + 1) // 2  # at least half as many elements as strings
    return _structural(_outside_strings(data))


def check(data: bytes | bytearray | memoryview | str, limit: int | None = None) -> None:
    """Refuse ``data`` before parsing when it holds more JSON values than ``limit``
    or nests deeper than :data:`MAX_DEPTH`.

    ``limit`` defaults to the current context's (:func:`limit_values`).

    Raises:
        TooManyValues: Over a limit.
    """
    if limit is None:
        limit = _MAX_VALUES.get()
    size, unseen = len(data), _passes_unseen(limit)
    if size <= DEPTH_FLOOR and size <= unseen:
        return
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if size > unseen and count_elements(raw, limit) > limit:
        raise TooManyValues.over(limit)
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and deeper_than(raw, MAX_DEPTH):
        raise TooManyValues.too_deep()
