"""The HTTP+JSON binding's request pieces both A2A servers share (``a2a_params``)."""

from __future__ import annotations

from typing import Any

import pytest

from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a_params import check_rest_version, rest_body, rest_query

# Deeper than jsonbounds lets through, shallow enough for orjson to parse.
DEEP = b"[" * 200 + b"]" * 200


@pytest.mark.parametrize(
    ("content_type", "raw", "code"),
    [
        ("text/plain", b"{}", a2a.CONTENT_TYPE_NOT_SUPPORTED),
        ("application/json", b"{nope", a2a.PARSE_ERROR),
        ("application/json", DEEP, a2a.PARSE_ERROR),
        (None, b"[1, 2]", a2a.INVALID_REQUEST),
    ],
)
def test_a_bad_body_is_the_bindings_error(content_type: str | None, raw: bytes, code: int) -> None:
    with pytest.raises(a2a.A2AError) as caught:
        rest_body(content_type, raw)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("content_type", "raw", "params"),
    [
        ("application/json", b"", {}),
        ("application/a2a+json; charset=utf-8", b'{"history_length": 2}', {"historyLength": 2}),
        (None, b'{"message": {"message_id": "m"}}', {"message": {"messageId": "m"}}),
    ],
)
def test_a_good_body_is_camel_case_params(
    content_type: str | None, raw: bytes, params: dict[str, Any]
) -> None:
    assert rest_body(content_type, raw) == params


def test_a_query_is_camel_case_and_a_repeated_key_a_list() -> None:
    assert rest_query("page_size=2&status=a&status=b&x=") == {
        "pageSize": "2",
        "status": ["a", "b"],
        "x": "",
    }


def test_only_a_0_3_version_header_is_refused() -> None:
    check_rest_version(None)
    check_rest_version("1.0")
    with pytest.raises(a2a.A2AError) as caught:
        check_rest_version("0.3")
    assert caught.value.code == a2a.VERSION_NOT_SUPPORTED
