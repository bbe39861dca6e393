"""The fast HTTP/1.1 head parser: every defer rule, and h11's answer whenever it answers."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.h1 import MAX, h11_head, mutate, replaced
from uamp_trio.engines import h1fast
from uamp_trio.engines.h1fast import Head, parse_head
from uamp_trio.engines.http import Headers

BASE = b"POST /x?y=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"


def test_base_head_is_read_as_h11_reads_it() -> None:
    head = parse_head(BASE, 0, MAX)
    assert head == (
        "POST",
        "/x?y=1",
        [("host", "a"), ("content-length", "3")],
        3,
        len(BASE) - 3,
        False,
    )
    assert head == h11_head(BASE)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Names lowercased, optional whitespace around values dropped.
        (
            b"GET / HTTP/1.1\r\nHOST: a\r\nX-Pad:  \t v  w \t \r\n\r\n",
            ("GET", "/", [("host", "a"), ("x-pad", "v  w")], 0),
        ),
        # Empty values, obs-text (kept as latin-1), keep-alive in any case.
        (
            b"get * HTTP/1.1\r\nHost:\r\nX-E:\r\nX-L: caf\xe9\r\nConnection: Keep-Alive\r\n\r\n",
            (
                "get",
                "*",
                [("host", ""), ("x-e", ""), ("x-l", "caf\xe9"), ("connection", "Keep-Alive")],
                0,
            ),
        ),
        # Leading zeros; an absolute-form target.
        (
            b"PUT http://a/b HTTP/1.1\r\nContent-Length: 007\r\nHost: a\r\n\r\n",
            ("PUT", "http://a/b", [("content-length", "007"), ("host", "a")], 7),
        ),
        # A connection for one request (a health checker's): the flag says so.
        (
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n",
            ("GET", "/healthz", [("host", "a"), ("connection", "CLOSE")], 0),
        ),
        (
            b"GET / HTTP/1.1\r\nConnection: keep-alive\r\nHost: a\r\nConnection: close\r\n\r\n",
            ("GET", "/", [("connection", "keep-alive"), ("host", "a"), ("connection", "close")], 0),
        ),
    ],
)
def test_accepted_heads(data: bytes, expected: tuple[object, ...]) -> None:
    head = parse_head(data, 0, MAX)
    assert head is not None
    close = b"close" in data.lower()
    assert head == (*expected, len(data), close)  # the head is all of data
    assert h11_head(data) == head


def test_head_after_a_previous_request_in_the_buffer() -> None:
    buf = BASE + BASE
    head = parse_head(buf, len(BASE), MAX)
    assert head is not None
    assert head[4] == 2 * len(BASE) - 3
    assert head[:4] == parse_head(BASE, 0, MAX)[:4]  # type: ignore[index]
    assert head[5] is False


REPLACE = [
    # (what to replace in BASE, by what): every one must be deferred.
    ("version 1.0", b"HTTP/1.1\r\n", b"HTTP/1.0\r\n"),
    ("version 2.0", b"HTTP/1.1\r\n", b"HTTP/2.0\r\n"),
    ("version lowercase", b"HTTP/1.1\r\n", b"http/1.1\r\n"),
    ("version 1.10", b"HTTP/1.1\r\n", b"HTTP/1.10\r\n"),
    ("transfer-encoding", b"Host: a\r\n", b"Host: a\r\nTransfer-Encoding: chunked\r\n"),
    ("transfer-encoding identity", b"Host: a\r\n", b"Host: a\r\ntransfer-encoding: identity\r\n"),
    ("two content-lengths", b"Host: a\r\n", b"Host: a\r\nContent-Length: 3\r\n"),
    ("content-length list", b"Length: 3", b"Length: 3, 3"),
    ("content-length sign", b"Length: 3", b"Length: +3"),
    ("content-length negative", b"Length: 3", b"Length: -3"),
    ("content-length hex", b"Length: 3", b"Length: 0x3"),
    ("content-length empty", b"Length: 3", b"Length: "),
    ("content-length letters", b"Length: 3", b"Length: 3a"),
    ("content-length superscript", b"Length: 3", b"Length: \xb2"),
    ("content-length overlong", b"Length: 3", b"Length: 0000000000000000003"),
    ("obs-fold space", b"Host: a\r\n", b"Host: a\r\nX-A: b\r\n c\r\n"),
    ("obs-fold tab", b"Host: a\r\n", b"Host: a\r\nX-A: b\r\n\tc\r\n"),
    ("name with space", b"Host: a\r\n", b"Host: a\r\nX A: b\r\n"),
    ("name then space", b"Host: a\r\n", b"Host: a\r\nX-A : b\r\n"),
    ("name with (", b"Host: a\r\n", b"Host: a\r\nX(A): b\r\n"),
    ("name with /", b"Host: a\r\n", b"Host: a\r\nX/A: b\r\n"),
    ("empty name", b"Host: a\r\n", b"Host: a\r\n: b\r\n"),
    ("no colon", b"Host: a\r\n", b"Host: a\r\nX-A b\r\n"),
    ("value NUL", b"Host: a", b"Host: a\x00b"),
    ("value control", b"Host: a", b"Host: a\x01b"),
    ("value DEL", b"Host: a", b"Host: a\x7fb"),
    ("value CR", b"Host: a", b"Host: a\rb"),
    ("value LF", b"Host: a", b"Host: a\nb"),
    ("value VT", b"Host: a", b"Host: a\x0bb"),
    ("target space", b"/x?y=1", b"/x y"),
    ("target tab", b"/x?y=1", b"/x\ty"),
    ("target NUL", b"/x?y=1", b"/x\x00"),
    ("target DEL", b"/x?y=1", b"/x\x7f"),
    ("target obs-text", b"/x?y=1", b"/x\xe9"),
    ("empty target", b"/x?y=1 ", b" "),
    ("empty method", b"POST ", b" "),
    ("method not a token", b"POST", b"PO(T"),
    ("method with tab", b"POST ", b"POST\t"),
    ("two spaces", b"POST ", b"POST  "),
    ("expect", b"Host: a\r\n", b"Host: a\r\nExpect: 100-continue\r\n"),
    ("upgrade", b"Host: a\r\n", b"Host: a\r\nUpgrade: websocket\r\n"),
    ("connection upgrade", b"Host: a\r\n", b"Host: a\r\nConnection: Upgrade\r\n"),
    ("connection close list", b"Host: a\r\n", b"Host: a\r\nConnection: close, x\r\n"),
    ("connection list", b"Host: a\r\n", b"Host: a\r\nConnection: keep-alive, x\r\n"),
    ("no host", b"Host: a\r\n", b""),
    ("two hosts", b"Host: a\r\n", b"Host: a\r\nHost: a\r\n"),
    ("bare LF ends", b"\r\n", b"\n"),
    ("bare LF end of head", b"3\r\n\r\n", b"3\r\n\n"),
    ("leading CRLF", b"POST", b"\r\nPOST"),
    ("leading space", b"POST", b" POST"),
    ("incomplete head", b"\r\n\r\nabc", b"\r\n"),
]


@pytest.mark.parametrize(("old", "new"), [r[1:] for r in REPLACE], ids=[r[0] for r in REPLACE])
def test_defers(old: bytes, new: bytes) -> None:
    assert parse_head(replaced(BASE, old, new), 0, MAX) is None


@pytest.mark.parametrize("size", [len(BASE) - 4, len(BASE) - 3 - 1])
def test_defers_heads_over_the_limit(size: int) -> None:
    # The head (blank line included) is len(BASE) - 3 bytes.
    assert parse_head(BASE, 0, size) is None
    assert parse_head(BASE, 0, len(BASE) - 3) is not None


def test_parsed_headers_equal_normalised_headers() -> None:
    head = parse_head(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Two: 1\r\nx-two: 2\r\nConnection: keep-alive\r\n\r\n",
        0,
        MAX,
    )
    assert head is not None
    fast, slow = Headers.from_normalized(head[2]), Headers(head[2])
    assert fast.items() == slow.items()
    assert fast.get_all("X-Two") == slow.get_all("x-two") == ["1", "2"]
    assert fast.has_token("connection", "Keep-Alive")
    assert "host" in fast and fast.get("HOST") == "a"


# --- generated heads -------------------------------------------------------------------

TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
tokens = st.text(TCHAR, min_size=1, max_size=12)
visible = "".join(chr(c) for c in range(0x21, 0x7F))
field_chars = visible + "".join(chr(c) for c in range(0x80, 0x100))
ows = st.text(" \t", max_size=2)
values = st.builds(
    lambda words, seps: "".join(w + s for w, s in zip(words, seps, strict=False)) + words[-1],
    st.lists(st.text(field_chars, min_size=1, max_size=8), min_size=1, max_size=3),
    st.lists(st.sampled_from([" ", "\t", "  "]), min_size=2, max_size=2),
) | st.just("")
plain_names = tokens.filter(
    lambda n: (
        n.lower()
        not in {"host", "content-length", "transfer-encoding", "expect", "upgrade", "connection"}
    )
)


def random_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if f else c.lower() for c, f in zip(word, flips, strict=True))


@st.composite
def valid_heads(draw: st.DrawFn) -> bytes:
    """Heads inside the fast path's subset (each must be accepted), then some body."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "patch"]) | tokens)
    target = "/" + draw(st.text(visible, max_size=20))
    lines = [(draw(plain_names), draw(values)) for _ in range(draw(st.integers(0, 6)))]
    lines.insert(draw(st.integers(0, len(lines))), (random_case(draw, "host"), draw(values)))
    if draw(st.booleans()):
        digits = draw(st.text("0123456789", min_size=1, max_size=18))
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, (random_case(draw, "content-length"), digits))
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(
            draw(st.integers(0, len(lines))),
            (
                random_case(draw, "connection"),
                random_case(draw, draw(st.sampled_from(["keep-alive", "close"]))),
            ),
        )
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(
        f"{name}:{draw(ows)}{value}{draw(ows)}\r\n" for name, value in lines
    )
    return head.encode("latin-1") + b"\r\n" + draw(st.binary(max_size=8))


@settings(max_examples=400, deadline=None)
@given(valid_heads())
def test_generated_valid_heads_are_read_as_h11_reads_them(data: bytes) -> None:
    head = parse_head(data, 0, MAX)
    assert head is not None
    assert head == h11_head(data)


SPLICES = [
    b"\x00", b"\r", b"\n", b"\r\n", b"\r\n ", b"\t", b" ", b"\x7f", b"\xff", b":", b",",
    b"\r\n\r\n", b"HTTP/1.0", b"\r\nTransfer-Encoding: chunked", b"\r\nContent-Length: 1",
    b"\r\nHost: b", b"\r\nExpect: 100-continue", b"\r\nConnection: close", b"\r\nUpgrade: x",
    b"\r\nContent-Length: 1, 1", b"\r\nX", b"\n\n",
]  # fmt: skip


@st.composite
def mutated_heads(draw: st.DrawFn) -> bytes:
    """Valid heads with bytes spliced in, dropped or replaced: mostly invalid."""
    return mutate(draw, draw(valid_heads()), SPLICES)


@settings(max_examples=600, deadline=None)
@given(mutated_heads())
def test_generated_heads_are_deferred_or_read_as_h11_reads_them(data: bytes) -> None:
    head = parse_head(data, 0, MAX)
    if head is not None:
        assert head == h11_head(data)


# --- the remembered lines against a whole-head reading ---------------------------------

_REF_TOKEN = r"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_REF_HEAD = re.compile(
    rf"({_REF_TOKEN}) ([\x21-\x7e]+) HTTP/1\.1\r\n"
    rf"((?:{_REF_TOKEN}:[\t\x20-\x7e\x80-\xff]*\r\n)*)"
)


def reference_head(buf: bytes, start: int, max_size: int) -> Head | None:
    """The parser as it was before it remembered lines: one regex over the whole head."""
    blank = buf.find(b"\r\n\r\n", start, start + max_size)
    if blank < 0:
        return None
    match = _REF_HEAD.fullmatch(buf[start : blank + 2].decode("latin-1"))
    if match is None:
        return None
    method, target, block = match.groups()
    headers: list[tuple[str, str]] = []
    length, hosts, close = -1, 0, False
    for line in block.split("\r\n")[:-1]:
        name, _, value = line.partition(":")
        name, value = name.lower(), value.strip(" \t")
        if name in {"transfer-encoding", "expect", "upgrade"}:
            return None
        if name == "content-length":
            if length >= 0 or not (value.isascii() and value.isdigit()) or len(value) > 18:
                return None
            length = int(value)
        elif name == "host":
            hosts += 1
        elif name == "connection":
            if value.lower() not in ("close", "keep-alive"):
                return None
            close = close or value.lower() == "close"
        headers.append((name, value))
    if hosts != 1:
        return None
    return method, target, headers, max(length, 0), blank + 4, close


@settings(max_examples=500, deadline=None)
@given(st.lists(valid_heads() | mutated_heads(), min_size=1, max_size=4), st.booleans())
def test_remembered_lines_read_as_the_whole_head_regex(heads: list[bytes], fresh: bool) -> None:
    """Each head read twice (its lines remembered the second time) as the regex reads it once."""
    if fresh:
        h1fast._request_lines.clear()
        h1fast._field_lines.clear()
        h1fast._field_names.clear()
    for data in heads:
        expected = reference_head(data, 0, MAX)
        assert parse_head(data, 0, MAX) == expected
        assert parse_head(data, 0, MAX) == expected


def test_a_line_seen_valid_does_not_make_a_longer_line_valid() -> None:
    """A remembered line is looked up whole: a CR, LF or control glued to it still defers."""
    assert parse_head(BASE, 0, MAX) is not None  # "Host: a" remembered
    for bad in (b"Host: a\rb", b"Host: a\nb", b"Host: a\x00", b"Host: a\x7f"):
        assert parse_head(replaced(BASE, b"Host: a", bad), 0, MAX) is None


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["Content-Length", "Authorization", "X-N"]),
    st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=12),
)
def test_a_known_name_reads_a_line_as_its_regex(name: str, value: str) -> None:
    """A line not kept whole, its name read before: the regex's reading, controls included."""
    line = f"{name}:{value}"
    h1fast._field_names.clear()
    cold = h1fast._field_line(line)
    h1fast._field_line(f"{name}: 1")  # the name read and kept
    assert name in h1fast._field_names
    assert h1fast._field_line(line) == cold
    match = h1fast._FIELD_LINE_RE.fullmatch(line)
    assert cold == (None if match is None else (name.lower(), value.strip(" \t")))


def test_a_known_name_without_its_colon_is_no_line() -> None:
    """``Host`` alone is no header line, even with the name ``Host`` read before."""
    assert h1fast._field_line("Host: a") is not None
    assert h1fast._field_line("Host") is None
    assert h1fast._field_line("Host\x00: a") is None


def test_remembered_lines_are_bounded_and_keep_no_credentials() -> None:
    """However many distinct lines clients send, the tables stay under their bound."""
    h1fast._field_lines.clear()
    for i in range(3 * h1fast._LINES_MAX):
        data = b"GET /%d HTTP/1.1\r\nHost: a\r\nX-N: %d\r\nAuthorization: Bearer s%d\r\n\r\n" % (
            i,
            i,
            i,
        )
        assert parse_head(data, 0, MAX) is not None
        assert len(h1fast._field_lines) <= h1fast._LINES_MAX
        assert len(h1fast._request_lines) <= h1fast._LINES_MAX
    assert not any("uthorization" in line for line in h1fast._field_lines)
    secret = b"GET / HTTP/1.1\r\nHost: a\r\nX-Api-Key: k1\r\nX-Payment: t1\r\n\r\n"
    assert parse_head(secret, 0, MAX) is not None
    assert not any(
        line.lower().startswith(("x-api-key", "x-payment")) for line in h1fast._field_lines
    )
    long = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"v" * 1000 + b"\r\n\r\n"
    assert parse_head(long, 0, MAX) is not None
    assert not any(len(line) > h1fast._LINE_LONGEST for line in h1fast._field_lines)
    for i in range(3 * h1fast._LINES_MAX):  # names, too, whatever clients make up
        assert parse_head(b"GET / HTTP/1.1\r\nHost: a\r\nX-%d: v\r\n\r\n" % i, 0, MAX)
        assert len(h1fast._field_names) <= h1fast._LINES_MAX
    assert parse_head(b"GET / HTTP/1.1\r\nHost: a\r\nX-" + b"n" * 100 + b": v\r\n\r\n", 0, MAX)
    assert not any(len(name) > h1fast._NAME_LONGEST for name in h1fast._field_names)
