"""The request of HTTP/2 and HTTP/3 header fields (``uamp_trio.engines.framed``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_trio.engines.framed import content_length, request_from_fields

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).map(str.encode)
values = st.binary(max_size=20).filter(lambda v: b"\r" not in v and b"\n" not in v)
regular = st.lists(st.tuples(names, values), max_size=8)


@given(regular, st.sampled_from([None, b"example.org:8443"]))
def test_regular_fields_become_the_headers_in_order(
    fields: list[tuple[bytes, bytes]], authority: bytes | None
) -> None:
    pseudo = [(b":method", b"POST"), (b":path", b"/a%20b?x=1"), (b":scheme", b"http")]
    if authority is not None:
        pseudo.append((b":authority", authority))
    request = request_from_fields(
        pseudo + fields, body=b"{}", http_version="2", scheme="http", client=None
    )
    expected = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in fields]
    if authority is not None and not any(k == b"host" for k, _ in fields):
        expected.append(("host", authority.decode()))
    assert request.headers.items() == expected
    assert (request.method, request.path, request.query) == ("POST", "/a b", "x=1")
    assert request.body == b"{}" and request.http_version == "2"


def test_an_upper_case_name_a_peer_let_by_is_stored_lower_case() -> None:
    request = request_from_fields(
        [(b":path", b"/"), (b"X-Key", b"v"), (b"Host", b"h")],
        body=b"",
        http_version="3",
        scheme="https",
        client=("127.0.0.1", 1),
    )
    assert request.headers.items() == [("x-key", "v"), ("host", "h")]
    assert request.headers.get("X-KEY") == "v"


@pytest.mark.parametrize(
    ("fields", "declared"),
    [
        ([], None),
        ([(b"content-type", b"text/plain")], None),
        ([(b"content-length", b"42")], 42),
        ([(b"content-length", b"0"), (b"content-length", b"9")], 0),
        ([(b"content-length", b"-1")], None),
        ([(b"content-length", b"4x")], None),
    ],
)
def test_content_length(fields: list[tuple[bytes, bytes]], declared: int | None) -> None:
    assert content_length(fields) == declared
