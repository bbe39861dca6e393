"""uamp_proto.grpc: message framing, timeouts, status trailers (no I/O)."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.grpc import (
    GrpcError,
    MessageReader,
    StatusCode,
    decode_message_text,
    encode_message,
    encode_message_text,
    is_grpc_content_type,
    parse_timeout,
    status_for_http,
    status_trailers,
)


def read_all(reader: MessageReader, pieces: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    reader.end()
    return out


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_messages_survive_any_cut(messages: list[bytes], data: st.DataObject) -> None:
    wire = b"".join(encode_message(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    assert read_all(MessageReader(max_message=300), pieces) == messages


def test_byte_by_byte_and_trailing_partial() -> None:
    wire = encode_message(b"abc") + encode_message(b"")
    assert read_all(MessageReader(), [bytes([b]) for b in wire]) == [b"abc", b""]
    reader = MessageReader()
    assert list(reader.feed(encode_message(b"abc")[:6])) == []
    with pytest.raises(GrpcError) as info:
        reader.end()
    assert info.value.code == StatusCode.INTERNAL


def test_oversize_is_refused_from_the_prefix() -> None:
    reader = MessageReader(max_message=10)
    with pytest.raises(GrpcError) as info:
        list(reader.feed(b"\x00" + (11).to_bytes(4, "big")))  # no payload sent yet
    assert info.value.code == StatusCode.RESOURCE_EXHAUSTED


def gz(data: bytes) -> bytes:
    return b"\x01" + len(z := gzip.compress(data)).to_bytes(4, "big") + z


COMPRESSION_CASES = [
    ("gzip inflates", "gzip", gz(b"hello"), [b"hello"], None),
    ("identity refuses a compressed message", "identity", gz(b"hello"), None, 13),
    ("bomb over the limit", "gzip", gz(b"\x00" * 100_000), None, 8),
    ("not gzip", "gzip", b"\x01\x00\x00\x00\x03abc", None, 13),
    ("plain message on a gzip call", "gzip", encode_message(b"x"), [b"x"], None),
]


@pytest.mark.parametrize(
    ("encoding", "wire", "messages", "code"),
    [c[1:] for c in COMPRESSION_CASES],
    ids=[c[0] for c in COMPRESSION_CASES],
)
def test_compression(encoding: str, wire: bytes, messages: list[bytes] | None, code: int) -> None:
    reader = MessageReader(max_message=1000, encoding=encoding)
    if messages is not None:
        assert read_all(reader, [wire]) == messages
        return
    with pytest.raises(GrpcError) as info:
        read_all(reader, [wire])
    assert info.value.code == code


def test_unknown_encoding_is_unimplemented_and_names_ours() -> None:
    with pytest.raises(GrpcError) as info:
        MessageReader(encoding="snappy")
    assert info.value.code == StatusCode.UNIMPLEMENTED
    assert ("grpc-accept-encoding", "identity,gzip") in info.value.trailers


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1S", 1.0),
        ("250m", 0.25),
        ("3M", 180.0),
        ("2H", 7200.0),
        ("99999999u", 99.999999),
        ("5n", 5e-9),
    ],
)
def test_timeouts(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "1", "S", "123456789S", "1s", "1.5S", "-1S", "1 S"])
def test_bad_timeouts_are_invalid_argument(value: str) -> None:
    with pytest.raises(GrpcError) as info:
        parse_timeout(value)
    assert info.value.code == StatusCode.INVALID_ARGUMENT


@given(st.text())
def test_message_text_round_trips_and_is_printable_ascii(text: str) -> None:
    encoded = encode_message_text(text)
    assert all(0x20 <= ord(c) < 0x7F for c in encoded)
    assert decode_message_text(encoded) == text


def test_status_trailers() -> None:
    assert status_trailers(StatusCode.OK) == [("grpc-status", "0")]
    assert status_trailers(StatusCode.NOT_FOUND, "no 100%", [("x", "y")]) == [
        ("grpc-status", "5"),
        ("grpc-message", "no 100%25"),
        ("x", "y"),
    ]


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, 16), (403, 7), (404, 12), (413, 8), (429, 8), (503, 14), (418, 2)],
)
def test_refusal_statuses(status: int, code: int) -> None:
    assert status_for_http(status) == code


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("application/grpc", True),
        ("application/grpc+proto", True),
        ("Application/GRPC; charset=x", True),
        ("application/grpc-web", False),
        ("application/json", False),
        (None, False),
    ],
)
def test_content_types(value: str | None, ok: bool) -> None:
    assert is_grpc_content_type(value) is ok
