"""Tests of the server-sent events encoder and parser (uamp_proto.sse)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto.sse import (
    DEFAULT_MAX_BUFFER,
    SSEError,
    SSEEvent,
    SSEParser,
    encode_comment,
    encode_event,
)


def ev(
    data: str, event: str | None = None, id: str | None = None, retry: int | None = None
) -> SSEEvent:
    return SSEEvent(data=data, event=event, id=id, retry=retry)


def parse_whole(raw: bytes) -> list[SSEEvent]:
    return SSEParser().feed(raw)


def parse_bytewise(raw: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for i in range(len(raw)):
        out += parser.feed(raw[i : i + 1])
    return out


# --- parser rules, table-driven ---------------------------------------------

PARSE_CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("one data line", b"data: hello\n\n", [ev("hello")]),
    ("no event without blank line", b"data: hello\n", []),
    ("two data lines joined with LF", b"data: a\ndata: b\n\n", [ev("a\nb")]),
    ("empty data line", b"data:\n\n", [ev("")]),
    ("field without colon is an empty value", b"data\n\n", [ev("")]),
    ("two bare data fields", b"data\ndata\n\n", [ev("\n")]),
    ("one leading space removed", b"data:  two\n\n", [ev(" two")]),
    ("no space after colon", b"data:x\n\n", [ev("x")]),
    ("trailing space kept", b"data: x \n\n", [ev("x ")]),
    ("colon inside value kept", b"data: a: b\n\n", [ev("a: b")]),
    ("event type", b"event: add\ndata: 1\n\n", [ev("1", event="add")]),
    ("empty event type is none", b"event:\ndata: 1\n\n", [ev("1")]),
    ("last event type wins", b"event: a\nevent: b\ndata: 1\n\n", [ev("1", event="b")]),
    ("event type does not leak", b"event: a\ndata: 1\n\ndata: 2\n\n", [ev("1", "a"), ev("2")]),
    ("id", b"id: 7\ndata: 1\n\n", [ev("1", id="7")]),
    ("empty id", b"id\ndata: 1\n\n", [ev("1", id="")]),
    ("id with NUL ignored", b"id: a\x00b\ndata: 1\n\n", [ev("1")]),
    ("id with NUL keeps earlier id", b"id: 1\nid: \x00\ndata: x\n\n", [ev("x", id="1")]),
    ("retry", b"retry: 1500\ndata: 1\n\n", [ev("1", retry=1500)]),
    ("retry not digits ignored", b"retry: 15x\ndata: 1\n\n", [ev("1")]),
    ("retry negative ignored", b"retry: -5\ndata: 1\n\n", [ev("1")]),
    ("retry empty ignored", b"retry:\ndata: 1\n\n", [ev("1")]),
    ("retry non-ASCII digits ignored", "retry: ١٢\ndata: 1\n\n".encode(), [ev("1")]),
    ("retry with space ignored", b"retry: 1 2\ndata: 1\n\n", [ev("1")]),
    ("comment ignored", b": keep-alive\ndata: 1\n\n", [ev("1")]),
    ("bare colon comment", b":\n\n", []),
    ("comment between data lines", b"data: a\n: x\ndata: b\n\n", [ev("a\nb")]),
    ("unknown field ignored", b"foo: bar\ndata: 1\n\n", [ev("1")]),
    ("field names are case-sensitive", b"Data: x\ndata: 1\n\n", [ev("1")]),
    ("field name with space is unknown", b"data : x\ndata: 1\n\n", [ev("1")]),
    ("no data: not dispatched", b"event: a\nid: 3\n\n", []),
    ("blank lines alone", b"\n\n\n", []),
    ("CRLF", b"data: a\r\ndata: b\r\n\r\n", [ev("a\nb")]),
    ("CR", b"data: a\rdata: b\r\r", [ev("a\nb")]),
    ("mixed endings", b"data: a\rdata: b\r\ndata: c\n\r\n", [ev("a\nb\nc")]),
    ("LF CR is two endings", b"data: a\n\r", [ev("a")]),
    ("CR CR LF is blank line", b"data: a\r\r\n", [ev("a")]),
    ("BOM stripped", b"\xef\xbb\xbfdata: a\n\n", [ev("a")]),
    ("only the first BOM", b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n", [ev("b")]),
    ("BOM later is data", b"data: \xef\xbb\xbfa\n\n", [ev("\ufeffa")]),
    ("UTF-8", "data: héllo 😀\n\n".encode(), [ev("héllo 😀")]),
    ("invalid UTF-8 replaced", b"data: a\xffb\n\n", [ev("a\ufffdb")]),
    ("truncated UTF-8 at line end", b"data: a\xe2\x82\ndata: b\n\n", [ev("a\ufffd\nb")]),
    ("NUL in data kept", b"data: a\x00b\n\n", [ev("a\x00b")]),
    ("two events", b"data: 1\n\ndata: 2\n\n", [ev("1"), ev("2")]),
    ("all fields", b"event: e\nid: i\nretry: 5\ndata: d\n\n", [ev("d", "e", "i", 5)]),
    ("trailing incomplete event", b"data: 1\n\ndata: 2\n", [ev("1")]),
    ("trailing incomplete line", b"data: 1\n\ndata: 2", [ev("1")]),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_whole(raw: bytes, expected: list[SSEEvent]) -> None:
    assert parse_whole(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_byte_by_byte(raw: bytes, expected: list[SSEEvent]) -> None:
    assert parse_bytewise(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_every_two_way_split(raw: bytes, expected: list[SSEEvent]) -> None:
    for cut in range(len(raw) + 1):
        parser = SSEParser()
        assert parser.feed(raw[:cut]) + parser.feed(raw[cut:]) == expected, cut


# --- persistent state -------------------------------------------------------

LAST_ID_CASES: list[tuple[str, bytes, str]] = [
    ("initially empty", b"", ""),
    ("set by dispatched event", b"id: 1\ndata: x\n\n", "1"),
    ("set by event without data", b"id: 2\n\n", "2"),
    ("persists across events", b"id: 1\ndata: x\n\ndata: y\n\n", "1"),
    ("reset by empty id", b"id: 1\ndata: x\n\nid\ndata: y\n\n", ""),
    ("not set before the blank line", b"id: 1\ndata: x\n\nid: 2\ndata: y\n", "1"),
    ("NUL id leaves it", b"id: 1\n\nid: \x00\n\n", "1"),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in LAST_ID_CASES], ids=[c[0] for c in LAST_ID_CASES]
)
def test_last_event_id(raw: bytes, expected: str) -> None:
    parser = SSEParser()
    parser.feed(raw)
    assert parser.last_event_id == expected


def test_last_event_id_starts_from_constructor() -> None:
    parser = SSEParser(last_event_id="41")
    parser.feed(b"data: x\n\n")
    assert parser.last_event_id == "41"


def test_event_id_is_per_event() -> None:
    events = parse_whole(b"id: 1\ndata: x\n\ndata: y\n\n")
    assert [e.id for e in events] == ["1", None]


def test_retry_persists_on_parser() -> None:
    parser = SSEParser()
    assert parser.retry is None
    assert parser.feed(b"retry: 300\n\n") == []
    assert parser.retry == 300
    assert parser.feed(b"retry: nope\ndata: x\n\n") == [ev("x")]
    assert parser.retry == 300


def test_crlf_split_between_feeds() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    # The LF finishes the CRLF of the data line; only the second CRLF dispatches.
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\r") == [ev("a")]
    assert parser.feed(b"\ndata: b\r\n\r\n") == [ev("b")]


def test_cr_then_other_byte_is_not_skipped() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"data: b\r\r") == [ev("a\nb")]


def test_empty_feed_keeps_pending_cr() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\r")
    assert parser.feed(b"") == []
    assert parser.feed(b"\n\n") == [ev("a")]


def test_bom_split_across_feeds() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef") == []
    assert parser.feed(b"\xbb") == []
    assert parser.feed(b"\xbfdata: a\n\n") == [ev("a")]


def test_partial_bom_that_is_not_a_bom() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb") == []
    # Not a BOM after all: the bytes stay, forming an unknown field name.
    assert parser.feed(b"\ndata: a\n\n") == [ev("a")]
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\n") == []


def test_close_discards_incomplete_event() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 9\ndata: x\n") == []
    assert parser.close() is True
    assert parser.last_event_id == ""
    assert parser.feed(b"data: y\n\n") == [ev("y")]
    assert parser.close() is False


def test_close_discards_incomplete_line() -> None:
    parser = SSEParser()
    parser.feed(b"data: x")
    assert parser.close() is True
    assert parser.feed(b"\n\n") == []


def test_close_allows_new_bom() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\n\n")
    parser.close()
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\n") == [ev("b")]


# --- buffer cap ---------------------------------------------------------------


def test_default_cap() -> None:
    assert SSEParser().max_buffer == DEFAULT_MAX_BUFFER == 1 << 20


def test_cap_on_unfinished_line() -> None:
    parser = SSEParser(max_buffer=100)
    parser.feed(b"data: " + b"x" * 94)  # exactly 100 bytes held
    with pytest.raises(SSEError, match="100 bytes"):
        parser.feed(b"x")


def test_cap_on_event_without_blank_line() -> None:
    parser = SSEParser(max_buffer=100)
    for _ in range(9):
        parser.feed(b"data: abc\n")  # 10 bytes each
    parser.feed(b"data: abc\n")  # 100 held: at the cap, allowed
    with pytest.raises(SSEError):
        parser.feed(b"d")


def test_cap_released_by_dispatch() -> None:
    parser = SSEParser(max_buffer=100)
    for i in range(1000):
        assert parser.feed(b"data: %d\n\n" % i) == [ev(str(i))]


def test_comments_do_not_count_towards_cap() -> None:
    parser = SSEParser(max_buffer=50)
    for _ in range(100):
        parser.feed(b": keep-alive ping\n")
    assert parser.feed(b"data: x\n\n") == [ev("x")]


def test_big_chunk_of_complete_events_is_fine() -> None:
    parser = SSEParser(max_buffer=64)
    raw = b"".join(encode_event(str(i)) for i in range(500))
    assert len(raw) > 64
    assert [e.data for e in parser.feed(raw)] == [str(i) for i in range(500)]


def test_failed_parser_stays_failed() -> None:
    parser = SSEParser(max_buffer=10)
    with pytest.raises(SSEError):
        parser.feed(b"data: 0123456789")
    with pytest.raises(SSEError, match="already failed"):
        parser.feed(b"\n\n")


def test_sse_error_is_value_error() -> None:
    assert issubclass(SSEError, ValueError)


@pytest.mark.parametrize("cap", [0, -1])
def test_bad_cap_refused(cap: int) -> None:
    with pytest.raises(ValueError):
        SSEParser(max_buffer=cap)


# --- encoder ------------------------------------------------------------------

ENCODE_CASES: list[tuple[str, dict[str, object], bytes]] = [
    ("plain", {"data": "hi"}, b"data: hi\n\n"),
    ("empty", {"data": ""}, b"data: \n\n"),
    ("leading space kept", {"data": " x"}, b"data:  x\n\n"),
    ("LF", {"data": "a\nb"}, b"data: a\ndata: b\n\n"),
    ("CRLF", {"data": "a\r\nb"}, b"data: a\ndata: b\n\n"),
    ("CR", {"data": "a\rb"}, b"data: a\ndata: b\n\n"),
    ("trailing LF", {"data": "a\n"}, b"data: a\ndata: \n\n"),
    ("unicode", {"data": "é"}, "data: é\n\n".encode()),
    ("event", {"data": "1", "event": "e"}, b"event: e\ndata: 1\n\n"),
    ("empty event omitted", {"data": "1", "event": ""}, b"data: 1\n\n"),
    ("id", {"data": "1", "id": "5"}, b"id: 5\ndata: 1\n\n"),
    ("empty id", {"data": "1", "id": ""}, b"id: \ndata: 1\n\n"),
    ("retry", {"data": "1", "retry": 0}, b"retry: 0\ndata: 1\n\n"),
    (
        "all",
        {"data": "a\nb", "event": "e", "id": "i", "retry": 9},
        b"event: e\nid: i\nretry: 9\ndata: a\ndata: b\n\n",
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "expected"), [c[1:] for c in ENCODE_CASES], ids=[c[0] for c in ENCODE_CASES]
)
def test_encode(kwargs: dict[str, object], expected: bytes) -> None:
    assert encode_event(**kwargs) == expected  # type: ignore[arg-type]


BAD_ENCODE: list[tuple[str, dict[str, object]]] = [
    ("LF in event", {"event": "a\nb"}),
    ("CR in event", {"event": "a\rb"}),
    ("LF in id", {"id": "a\nb"}),
    ("CR in id", {"id": "a\r"}),
    ("NUL in id", {"id": "a\x00"}),
    ("negative retry", {"retry": -1}),
    ("bool retry", {"retry": True}),
    ("float retry", {"retry": 1.5}),
]


@pytest.mark.parametrize("kwargs", [c[1] for c in BAD_ENCODE], ids=[c[0] for c in BAD_ENCODE])
def test_encode_refuses(kwargs: dict[str, object]) -> None:
    with pytest.raises(SSEError):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", b":\n"), ("ping", b": ping\n"), ("a\nb", b": a\n: b\n"), ("a\r\nb", b": a\n: b\n")],
)
def test_encode_comment(text: str, expected: bytes) -> None:
    assert encode_comment(text) == expected
    assert parse_whole(expected + b"\n") == []


def test_comment_between_events_dispatches_nothing_extra() -> None:
    raw = encode_event("a") + encode_comment("x\ny") + encode_event("b")
    assert parse_whole(raw) == [ev("a"), ev("b")]


# --- properties ---------------------------------------------------------------

_line_free = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=12)
_events = st.builds(
    SSEEvent,
    data=st.text(st.characters(codec="utf-8"), max_size=40),
    event=st.none() | _line_free.filter(bool),
    id=st.none() | _line_free,
    retry=st.none() | st.integers(min_value=0, max_value=10**12),
)


def _normalised(event: SSEEvent) -> SSEEvent:
    data = event.data.replace("\r\n", "\n").replace("\r", "\n")
    return SSEEvent(data=data, event=event.event, id=event.id, retry=event.retry)


def _encode(event: SSEEvent) -> bytes:
    return encode_event(event.data, event=event.event, id=event.id, retry=event.retry)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(_events, max_size=8), data=st.data())
def test_roundtrip_split_anywhere(events: list[SSEEvent], data: st.DataObject) -> None:
    raw = b"".join(_encode(e) for e in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10), label="cuts"))
    parser = SSEParser()
    got: list[SSEEvent] = []
    prev = 0
    for cut in [*cuts, len(raw)]:
        got += parser.feed(raw[prev:cut])
        prev = cut
    assert got == [_normalised(e) for e in events]
    ids = [e.id for e in events if e.id is not None]
    if ids:
        assert parser.last_event_id == ids[-1]


@settings(max_examples=100, deadline=None)
@given(events=st.lists(_events, max_size=5))
def test_roundtrip_byte_by_byte(events: list[SSEEvent]) -> None:
    raw = b"".join(_encode(e) for e in events)
    assert parse_bytewise(raw) == [_normalised(e) for e in events]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from(["data: a", "data: b", "data", "id: 1", ": c", ""]), max_size=12
    ),
    endings=st.data(),
)
def test_line_endings_are_interchangeable(lines: list[str], endings: st.DataObject) -> None:
    """The same lines with CR, LF or CRLF endings in any mix parse the same."""
    reference = parse_whole("".join(line + "\n" for line in lines).encode())
    parts = []
    previous = ""
    for line in lines:
        choices = ["\n", "\r", "\r\n"]
        if previous == "\r" and not line:
            choices = ["\r", "\r\n"]  # CR + LF would be one CRLF ending
        previous = endings.draw(st.sampled_from(choices))
        parts.append(line + previous)
    mixed = "".join(parts).encode()
    assert parse_whole(mixed) == reference
    assert parse_bytewise(mixed) == reference


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200), cut=st.integers(0, 200))
def test_any_bytes_split_anywhere(raw: bytes, cut: int) -> None:
    """Arbitrary input gives events, and where it is split is invisible."""
    expected = SSEParser().feed(raw)
    split = SSEParser()
    got = split.feed(raw[:cut])
    got += split.feed(raw[cut:])
    assert got == expected
    assert all(isinstance(e, SSEEvent) for e in got)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40), max_size=10))
def test_any_bytes_give_events_or_sse_error(chunks: list[bytes]) -> None:
    """With a small cap, arbitrary input raises nothing but SSEError."""
    parser = SSEParser(max_buffer=32)
    try:
        for chunk in chunks:
            for event in parser.feed(chunk):
                assert isinstance(event, SSEEvent)
    except SSEError:
        pass


@pytest.mark.parametrize(
    ("payload", "event", "id"),
    [
        (b'{"a":1}', None, None),
        (b'{"a":"x\\ny"}', "task.message", None),
        (b'{"a":1}', None, "7"),
        (b'{"a":1}', "task.started", "8"),
    ],
)
def test_encode_json_frames_like_encode_event(
    payload: bytes, event: str | None, id: str | None
) -> None:
    from uamp_proto.sse import encode_json

    framed = encode_json(payload, event=event, id=id)
    assert framed == encode_event(payload.decode(), event=event, id=id)
    (parsed,) = SSEParser().feed(framed)
    assert parsed.data == payload.decode() and parsed.event == event and parsed.id == id


def test_encode_json_refuses_what_encode_event_refuses() -> None:
    from uamp_proto.sse import encode_json

    for bad in ({"event": "a\nb"}, {"id": "x\ny"}, {"id": "x\0y"}):
        with pytest.raises(SSEError):
            encode_json(b"{}", **bad)  # type: ignore[arg-type]


def test_encode_json_takes_an_integer_id() -> None:
    from uamp_proto.sse import encode_json

    assert encode_json(b'{"a":1}', id=42) == encode_event('{"a":1}', id="42")
    assert encode_json(b"{}", event="e", id=3) == encode_event("{}", event="e", id="3")
