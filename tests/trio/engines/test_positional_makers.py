"""The engine's positional builders of requests and responses build what the classes build."""

from __future__ import annotations

import attrs

from uamp_trio.engines import http1
from uamp_trio.engines.http import Headers, Request, Response, json_response, new_response


def _fields(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}


def test_the_request_makers_are_the_keyword_calls() -> None:
    values = ["POST", "/x", "q=1", Headers([("host", "a")]), b"{}", "1.1", "https", ("h", 1), None]
    assert "_new" in http1._new_request.__code__.co_names  # built in place
    made = http1._new_request(*values)
    assert type(made) is Request
    assert _fields(made) == _fields(
        Request(**dict(zip(http1._REQUEST_FIELDS, values, strict=True)))
    )
    without_body = [v for v, n in zip(values, http1._REQUEST_FIELDS, strict=True) if n != "body"]
    made = http1._new_h11_request(*without_body)
    assert made.body == b"" and made.path_params == {}
    assert made.path_params is not http1._new_h11_request(*without_body).path_params
    made.path_params = {"a": "b"}  # still a mutable request
    assert made.path_params == {"a": "b"}


def test_the_response_maker_and_json_response() -> None:
    headers = [("x", "1")]
    assert _fields(new_response(201, headers, b"a")) == _fields(
        Response(status=201, headers=headers, body=b"a")
    )
    plain = json_response({"a": 1})
    assert _fields(plain) == _fields(
        Response(status=200, headers=[("content-type", "application/json")], body=b'{"a":1}')
    )
    plain.headers.append(("y", "2"))  # a response's own list, not the shared one
    assert json_response({}).headers == [("content-type", "application/json")]
    extra = json_response([], 404, headers=[("z", "3")])
    assert (extra.status, extra.headers) == (
        404,
        [("content-type", "application/json"), ("z", "3")],
    )
