"""A strict parser for the common HTTP/1.1 request head; h11 decides the rest.

Theory of operation
-------------------
Most requests a uamp server sees are HTTP/1.1 requests with a
``Content-Length`` (or no body), whose whole head arrives in one read: on a
kept-alive connection, or one a client (a health checker, a script) opens
for one request with ``Connection: close``. For
those, h11's general reader (line extraction, one regex per header, header
normalisation, a state machine) is most of the server's per-request cost.
:func:`parse_head` reads exactly that common shape line by line (a line
read before is looked up, not parsed again: clients repeat theirs on every
request; one that is never kept whole, such as ``Content-Length`` or
``Authorization``, is read by its name when that name was read before),
and returns ``None`` (*defer*) for everything else, so that the caller
hands the same bytes to h11, whose answer (the request, or its error) is
then the server's answer.

It never accepts what h11 would reject and, when it accepts, it returns what
h11 would: the method, the target, the headers with lowercase names and
values stripped of surrounding whitespace (RFC 9112 section 5), the body
length. It defers more than h11 rejects, whenever the request needs a
decision it leaves to h11:

* an incomplete head, or one longer than the server's limit (h11 waits, or
  answers 431);
* any version but ``HTTP/1.1`` (1.0 means no keep-alive by default), bare
  LF line ends, obs-fold (RFC 9112 section 5.2), a method or header name
  that is not a token (RFC 9110 section 5.6.2), a target or header value
  with control characters (HTAB aside in values) or DEL;
* framing other than one plain ``Content-Length`` (``Transfer-Encoding``,
  repeated, listed, signed or overlong lengths: RFC 9112 section 6.3 makes
  those errors or smuggling risks);
* ``Expect`` (h11 tracks ``100-continue``), ``Upgrade`` and any
  ``Connection`` other than one ``keep-alive`` or ``close`` (a list, an
  upgrade: h11 decides what the connection does next);
* no ``Host`` or several (RFC 9112 section 3.2: h11 answers 400).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["Head", "parse_head"]

#: ``(method, target, headers, content_length, end, close)``: ``headers`` are
#: ``(lowercase name, value)`` pairs in order; ``end`` is the offset just
#: past the blank line, where the body starts; ``close``: the client asked
#: for the connection to close after the response (``Connection: close``).
Head = tuple[str, str, list[tuple[str, str]], int, int, bool]

_TOKEN = r"[-!#$%&'*+.^_`|~0-9A-Za-z]+"  # RFC 9110 section 5.6.2
#: The request line and a header line, each without its CRLF. Targets are
#: visible ASCII; values are visible ASCII, obs-text, SP and HTAB (RFC 9110
#: section 5.5), so no line can hide a CR, LF, NUL or DEL.
_REQUEST_LINE_RE: Final = re.compile(rf"({_TOKEN}) ([\x21-\x7e]+) HTTP/1\.1")
_FIELD_LINE_RE: Final = re.compile(rf"({_TOKEN}):([\t\x20-\x7e\x80-\xff]*)")
_OWS = " \t"
#: More digits than any body the server takes; h11 allows up to 20.
_MAX_LENGTH_DIGITS = 18
#: Header names that make the head the fast path's business no more.
_DEFER_NAMES: Final = frozenset({"transfer-encoding", "expect", "upgrade"})
#: Header names the parser looks at; one set lookup per header line.
_WATCHED: Final = _DEFER_NAMES | {"content-length", "host", "connection"}

#: Lines seen before, as they were read: a request line's ``(method,
#: target)``, a header line's ``(lowercase name, stripped value)``. A client
#: sends the same lines on every request (``Host``, ``Accept``,
#: ``User-Agent``, ``Content-Type``...); a line found here was checked when
#: it was first read, and costs one lookup instead of a match, a split and
#: two new strings. Lines that carry credentials or change per request
#: (:data:`_UNREMEMBERED`) are never kept. Bounded: lines longer than
#: :data:`_LINE_LONGEST` are not kept, and a table that reaches
#: :data:`_LINES_MAX` lines is emptied, so what a client sends can neither
#: grow it nor make a line cost more than it would without it.
_request_lines: dict[str, tuple[str, str]] = {}
_field_lines: dict[str, tuple[str, str]] = {}
_LINES_MAX = 512
_LINE_LONGEST = 256
#: Header names read before, as sent, to their lowercase form: a line that is
#: not kept whole (its value changes per request: ``Content-Length``; or is
#: a credential: ``Authorization``) is read by its name and a check that its
#: value is printable, without the line's regex. Names only, so no
#: credential is kept; bounded as the lines are, names over
#: :data:`_NAME_LONGEST` characters not kept.
_field_names: dict[str, str] = {}
_NAME_LONGEST = 64
_UNREMEMBERED: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",  # Anthropic's key header
        "x-payment",  # a payment token
        "content-length",
    }
)


def _request_line(line: str) -> tuple[str, str] | None:
    """``(method, target)`` of a request line, or ``None`` outside the strict subset."""
    match = _REQUEST_LINE_RE.fullmatch(line)
    if match is None:
        return None
    read: tuple[str, str] = match.groups()  # type: ignore[assignment]
    if len(line) <= _LINE_LONGEST:
        if len(_request_lines) >= _LINES_MAX:
            _request_lines.clear()
        _request_lines[line] = read
    return read


def _field_line(line: str) -> tuple[str, str] | None:
    """``(lowercase name, value without OWS)`` of a header line, or ``None`` outside the subset."""
    name, colon, value = line.partition(":")
    lower = _field_names.get(name)
    if lower is not None and colon and line.isprintable():
        # A name read before (a token: no colon in it) and a printable value:
        # a latin-1 character is printable only if it is visible ASCII, SP or
        # obs-text other than NBSP and SHY, all of which the value's class
        # takes. Anything else (HTAB, a control) goes through the regex.
        read = (lower, value.strip(_OWS))
    else:
        match = _FIELD_LINE_RE.fullmatch(line)
        if match is None:
            return None
        name, value = match.groups()
        read = (name.lower(), value.strip(_OWS))
        if len(name) <= _NAME_LONGEST:
            if len(_field_names) >= _LINES_MAX:
                _field_names.clear()
            _field_names[name] = read[0]
    if len(line) <= _LINE_LONGEST and read[0] not in _UNREMEMBERED:
        if len(_field_lines) >= _LINES_MAX:
            _field_lines.clear()
        _field_lines[line] = read
    return read


def parse_head(buf: bytes | bytearray, start: int, max_size: int) -> Head | None:
    """The request head that begins at ``buf[start]``, or ``None`` to defer to h11.

    Args:
        buf: Received bytes; the head may be followed by its body and more.
        start: Where the head begins.
        max_size: The longest head accepted, blank line included.

    Returns:
        ``(method, target, headers, content_length, end, close)`` (see :data:`Head`),
        or ``None`` when the head is incomplete, over ``max_size`` or outside
        the strict subset described in the module docstring.
    """
    blank = buf.find(b"\r\n\r\n", start, start + max_size)
    if blank < 0:
        return None
    # latin-1 maps every byte to one character, as Headers does later. A
    # CR or LF left inside a line after the split fails that line's check.
    lines = buf[start:blank].decode("latin-1").split("\r\n")
    first = lines[0]
    request = _request_lines.get(first) or _request_line(first)
    if request is None:
        return None
    headers: list[tuple[str, str]] = []
    length = -1
    hosts = 0
    close = False
    for line in lines[1:]:
        field = _field_lines.get(line) or _field_line(line)
        if field is None:
            return None
        name = field[0]
        if name in _WATCHED:
            if name in _DEFER_NAMES:
                return None
            value = field[1]
            if name == "content-length":
                if (
                    length >= 0
                    or not value.isascii()
                    or not value.isdigit()
                    or len(value) > _MAX_LENGTH_DIGITS
                ):
                    return None
                length = int(value)
            elif name == "host":
                hosts += 1
            else:  # connection
                token = value.lower()
                if token == "close":
                    close = True
                elif token != "keep-alive":
                    return None
        headers.append(field)
    if hosts != 1:
        return None
    return request[0], request[1], headers, max(length, 0), blank + 4, close
