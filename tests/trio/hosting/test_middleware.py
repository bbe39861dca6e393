"""The composition root's middleware chain over a real server on 127.0.0.1.

Every route of every built-in transport, HTTP and WebSocket, is walked from
the app's own route table (so a route added later is covered without editing
this file): a gate middleware sees each call with its route's metadata and
refuses it, and each refusal arrives in that route's own error style; public
routes pass. A second middleware outside the gate sees every reply.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio_websocket

from tests._support.refusals import JSONRPC_UNAUTHORIZED, assert_unauthorized
from uamp_trio import DemoAgent, create_app
from uamp_trio.app import App
from uamp_trio.engines.http import Request
from uamp_trio.hosting.middleware import JSONRPC_REFUSED, Call, Next, Refusal, Reply

TRANSPORTS = {
    "server",
    "envelope-grpc",
    "completions",
    "responses",
    "uamp_ws",
    "sse_events",
    "a2a",
    "acp",
    "agui",
    "realtime",
    "envelope",
    "anthropic",
    "mcp",
    "ai_sdk",
}
CHALLENGE = [("www-authenticate", 'Bearer error="invalid_token"')]


class Gate:
    """Lets a call through only with ``x-let-in: yes`` or on a public route."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool]] = []  # (transport, path, websocket)

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        self.seen.append((call.route.transport, call.request.path, call.websocket is not None))
        if call.route.public or call.request.headers.get("x-let-in") == "yes":
            return await call_next(call)
        raise Refusal(401, "No credentials.", code="unauthorized", headers=CHALLENGE)


class Replies:
    """Outermost: records the status of every HTTP reply that comes back."""

    def __init__(self) -> None:
        self.statuses: list[int] = []

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        reply = await call_next(call)
        if reply is not None:
            self.statuses.append(reply.status)
        return reply


def concrete(pattern: str) -> str:
    return re.sub(r"\{[a-z_]+\}", lambda m: "demo" if m.group() == "{agent}" else "t1", pattern)


def assert_refused_in_style(style: str, status: int, headers: Any, body: bytes) -> None:
    assert_unauthorized(
        style,
        status,
        headers,
        body,
        challenge='Bearer error="invalid_token"',
        message="No credentials.",
    )
    assert JSONRPC_REFUSED == JSONRPC_UNAUTHORIZED


@pytest.fixture
def gated() -> tuple[App, Gate, Replies]:
    gate, replies = Gate(), Replies()
    return create_app([DemoAgent()], middleware=[replies, gate]), gate, replies


def test_every_route_declares_its_transport_and_style(gated: tuple[App, Gate, Replies]) -> None:
    app, _, _ = gated
    routes = [*app.router.routes, *app.router.websocket_routes]
    assert {route.meta.transport for route in routes} == TRANSPORTS
    assert {route.meta.error_style for route in routes} == {
        "openai",
        "jsonrpc",
        "uamp",
        "envelope",
        "grpc",
        "a2a_rest",
        "anthropic",
    }
    public = {route.pattern for route in routes if route.meta.public}
    assert public == {
        "/agents/{agent}/.well-known/agent-card.json",
        "/.well-known/agent-card.json",
        "/agents/{agent}/.well-known/agent.json",
        "/.well-known/agent.json",
        "/agents/{agent}/.well-known/jwks.json",
        "/.well-known/jwks.json",
        # spec 003 discovery
        "/agents/{agent}/.well-known/agent-manifest.json",
        "/.well-known/agent-manifest.json",
        "/.well-known/agent-hub.json",
        # MCP's authorization: protected resource metadata (RFC 9728)
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/agents/{agent}/mcp",
        # the server's own: health, the OpenAPI document, the playground's page and files
        "/healthz",
        "/readyz",
        "/version",
        "/openapi.json",
        "/docs",
        "/docs/{file}",
        "/",
        "/agents/{agent}/",
        "/agents/{agent}",
        "/playground/{file}",
    }


async def test_every_http_route_is_gated_in_its_own_style(
    gated: tuple[App, Gate, Replies], serve_app: Any
) -> None:
    app, gate, replies = gated
    server = await serve_app(app)
    refused, passed = set(), set()
    with trio.fail_after(20):
        async with httpx.AsyncClient(base_url=server.url) as client:
            for route in app.router.routes:
                path = concrete(route.pattern)
                # A route that shares its path answers only the requests it accepts.
                headers = {"anthropic-version": "2023-06-01"} if route.when else {}
                for method in sorted(route.methods):
                    response = await client.request(method, path, content=b"{}", headers=headers)
                    if route.meta.public:
                        assert response.status_code != 401, path
                        passed.add(route.meta.transport)
                        continue
                    assert_refused_in_style(
                        route.meta.error_style,
                        response.status_code,
                        response.headers,
                        response.content,
                    )
                    refused.add(route.meta.transport)
                    assert gate.seen[-1] == (route.meta.transport, path, False)
            # Let in, the same gate passes the call on to its endpoint.
            response = await client.get("/v1/models", headers={"x-let-in": "yes"})
            assert response.status_code == 200
            assert response.json()["data"][0]["id"] == "demo"
    assert refused == {
        "server",  # the ledger operator's top-up route (POST /api/payments/tokens/{id}/topup)
        "completions",
        "responses",
        "sse_events",
        "a2a",
        "acp",
        "agui",
        "envelope",
        "envelope-grpc",
        "anthropic",
        "mcp",
        "ai_sdk",
    }
    assert passed == {"server", "a2a", "envelope", "mcp"}
    # The outer middleware saw every reply, refusals included.
    # (gRPC refusals are HTTP 200 with the status in the head: trailers-only.)
    assert replies.statuses.count(401) == sum(
        len(r.methods)
        for r in app.router.routes
        if not r.meta.public and r.meta.error_style != "grpc"
    )
    assert replies.statuses[-1] == 200


async def test_every_websocket_route_is_gated_in_its_own_style(
    gated: tuple[App, Gate, Replies], serve_app: Any
) -> None:
    app, gate, _ = gated
    server = await serve_app(app)
    base = f"ws://127.0.0.1:{server.port}"
    refused = set()
    with trio.fail_after(20):
        for route in app.router.websocket_routes:
            path = concrete(route.pattern)
            with pytest.raises(trio_websocket.ConnectionRejected) as info:
                async with trio_websocket.open_websocket_url(base + path):
                    pass
            rejected = info.value
            headers = [(k.decode(), v.decode()) for k, v in rejected.headers]
            assert rejected.body is not None
            assert_refused_in_style(
                route.meta.error_style, rejected.status_code, headers, rejected.body
            )
            assert gate.seen[-1] == (route.meta.transport, path, True)
            refused.add(route.meta.transport)
        # Let in, the handler runs and accepts the upgrade.
        async with trio_websocket.open_websocket_url(
            base + "/agents/demo/realtime", extra_headers=[(b"x-let-in", b"yes")]
        ) as ws:
            first = orjson.loads(await ws.get_message())
            assert first["type"] == "session.created"
    assert refused == {"uamp_ws", "acp", "realtime", "envelope"}


def test_without_middleware_the_route_endpoint_is_served_directly() -> None:
    app = create_app([DemoAgent()])
    request = Request(method="GET", path="/agents/demo/v1/models")
    route, _ = app.router.match("GET", "/agents/demo/v1/models")
    assert app.endpoint_for(request) is route.endpoint
    assert request.path_params == {"agent": "demo"}


async def test_the_lone_observer_answers_a_refusal_in_the_routes_style() -> None:
    """With the observer alone (``uamp serve``'s default) the app calls it without a chain.

    An endpoint's :class:`Refusal` is then reported with its status and
    answered in the route's error style, as the chain answers it.
    """
    seen: list[tuple[int, str]] = []

    class Listener:
        def finished(self, exchange: Any) -> None:
            seen.append((exchange.status, exchange.error))

        def stream_opened(self, exchange: Any) -> None: ...

        def stream_closed(self, exchange: Any) -> None: ...

    app = create_app([DemoAgent()], metrics=True)
    assert app.observe is not None and app.middleware == [app.observe]
    app.observe.listeners.append(Listener())
    models, _ = app.router.match("GET", "/agents/demo/v1/models")

    async def refuse(request: Request) -> Reply:
        raise Refusal(403, "Not you.", code="forbidden")

    app.router.add("GET", "/refused", refuse, meta=models.meta)
    route, _ = app.router.match("GET", "/refused")
    request = Request(method="GET", path="/refused")
    reply = await app.endpoint_for(request)(request)
    assert reply is not None and reply.status == 403
    expected = app.render_error(route.meta.error_style, Refusal(403, "Not you.", code="forbidden"))
    assert reply.body == expected.body
    assert seen == [(403, "forbidden")]
