"""Routes that share a method and path, told apart by a predicate on the request head."""

from __future__ import annotations

import pytest

from uamp_trio.engines.http import Headers, HTTPError, Request, Response
from uamp_trio.hosting.router import Router


async def _endpoint(request: Request) -> Response:
    return Response()


def _claude(headers: Headers) -> bool:
    return headers.get("anthropic-version") is not None


def _router(guarded_first: bool) -> Router:
    router = Router()
    adds = [
        lambda: router.add("POST", "/v1/messages", _endpoint, label="guarded", when=_claude),
        lambda: router.add("POST", "/v1/messages", _endpoint, label="plain"),
    ]
    for add in adds if guarded_first else adds[::-1]:
        add()
    router.add("GET", "/v1/models", _endpoint, label="models")
    return router


@pytest.mark.parametrize("guarded_first", [True, False])
@pytest.mark.parametrize(
    ("method", "headers", "label"),
    [
        ("POST", {"anthropic-version": "2023-06-01"}, "guarded"),
        ("POST", {}, "plain"),
        ("POST", None, "plain"),  # no head to ask: the predicate cannot hold
        ("GET", {"anthropic-version": "2023-06-01"}, None),  # 405 from the plain route
    ],
)
def test_the_predicate_picks_the_route_whatever_the_order_of_adding(
    guarded_first: bool, method: str, headers: dict[str, str] | None, label: str | None
) -> None:
    router = _router(guarded_first)
    head = None if headers is None else Headers(headers.items())
    if label is None:
        with pytest.raises(HTTPError) as caught:
            router.match(method, "/v1/messages", head)
        assert caught.value.status == 405
        return
    route, params = router.match(method, "/v1/messages", head)
    assert (route.label, params) == (label, {})


def test_a_guarded_route_alone_is_a_404_when_it_does_not_hold() -> None:
    router = Router()
    router.add("GET", "/only", _endpoint, when=_claude)
    with pytest.raises(HTTPError) as caught:
        router.match("GET", "/only", Headers())
    assert caught.value.status == 404
    assert router.match("GET", "/only", Headers([("anthropic-version", "1")]))[0].pattern == "/only"
