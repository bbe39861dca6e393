"""The server's own routes over a real socket: health, readiness, OpenAPI, the playground."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio
from openapi_spec_validator import validate

from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.engines.http import Request, Response, json_response
from uamp_trio.engines.server import Server
from uamp_trio.server_routes import openapi, playground
from uamp_trio.transports import completions
from uamp_trio.trust.auth import APIKeyAuthenticator

KEY = "k-alice-0123456789"


def locked_app() -> Any:
    """Two agents behind an API key: nothing but public routes open without it."""
    return create_app(
        [DemoAgent(), DemoAgent("other")],
        authenticator=APIKeyAuthenticator([("alice", KEY)]),
    )


async def get(server: Server, path: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        return await client.get(path, **kw)


# --- health --------------------------------------------------------------------


async def test_healthz_and_readyz_answer_without_a_token_when_auth_is_on(serve_app: Any) -> None:
    server = await serve_app(locked_app())
    live = await get(server, "/healthz")
    ready = await get(server, "/readyz")
    locked = await get(server, "/agents/demo/capabilities")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (
        200,
        {"status": "ready", "agents": ["demo", "other"]},
    )
    assert locked.status_code == 401  # the gate is on: only the public routes passed


async def test_readyz_is_503_without_agents(serve_app: Any) -> None:
    server = await serve_app(create_app([]))
    ready = await get(server, "/readyz")
    assert ready.status_code == 503
    assert ready.json() == {"status": "not_ready", "reason": "no agent is hosted"}
    assert (await get(server, "/healthz")).status_code == 200


async def test_a_relay_is_ready_before_any_daemon_connects(serve_app: Any) -> None:
    # A load balancer asks /readyz before it lets the first daemon through.
    server = await serve_app(create_app([], relay=True))
    ready = await get(server, "/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "agents": []})


async def test_readyz_is_503_while_the_app_is_not_served() -> None:
    app = create_app([DemoAgent()])
    endpoint = app.endpoint_for(Request(method="GET", path="/readyz"))
    before = await endpoint(Request(method="GET", path="/readyz"))
    assert isinstance(before, Response) and before.status == 503
    assert orjson.loads(before.body)["reason"].startswith("the server is not serving")
    async with trio.open_nursery() as nursery:
        server = Server(app, port=0)
        await nursery.start(server.serve)
        during = await endpoint(Request(method="GET", path="/readyz"))
        nursery.cancel_scope.cancel()
    after = await endpoint(Request(method="GET", path="/readyz"))
    assert isinstance(during, Response) and during.status == 200
    assert isinstance(after, Response) and after.status == 503


async def test_readyz_is_503_on_an_open_connection_once_shutdown_began() -> None:
    app = create_app([DemoAgent()])
    async with trio.open_nursery() as nursery:
        server = Server(app, port=0, shutdown_grace=5)
        await nursery.start(server.serve)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            # The head first, the body after the shutdown began: the request
            # is served during the grace period, on a connection already open.
            await stream.send_all(b"GET /readyz HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n")
            while server.connection_count < 1:
                await trio.sleep(0.01)
            await trio.sleep(0.1)
            server.shutdown()
            await trio.sleep(0.1)
            await stream.send_all(b"{}")
            raw = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some(65536):
                    raw += chunk
        assert raw.startswith(b"HTTP/1.1 503 "), raw[:100]
        body = orjson.loads(raw.split(b"\r\n\r\n", 1)[1])
        assert body == {"status": "not_ready", "reason": "the server is shutting down"}
        nursery.cancel_scope.cancel()


# --- OpenAPI ---------------------------------------------------------------------


async def test_openapi_is_valid_and_lists_every_mounted_route(serve_app: Any) -> None:
    app = locked_app()
    server = await serve_app(app)
    reply = await get(server, "/openapi.json")  # public, like the health routes
    assert reply.status_code == 200
    doc = reply.json()
    validate(doc)  # raises on anything OpenAPI 3.1 does not allow
    listed = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    mounted = {(r.pattern, m) for r in app.router.routes for m in r.methods}
    assert listed == mounted
    undocumented = [
        (path, method)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if op.get("x-uamp-undocumented")
    ]
    # A new route needs its line in uamp_trio/server_routes/openapi.py OPERATIONS.
    assert undocumented == []
    websockets = {w["path"] for w in doc["x-uamp-websockets"]}
    assert {"/agents/{agent}/uamp", "/agents/{agent}/realtime", "/uamp"} <= websockets


@pytest.mark.parametrize(
    ("path", "method", "tag", "param"),
    [
        ("/agents/{agent}/chat/completions", "post", "Chat Completions", "agent"),
        ("/agents/{agent}/v1/models/{model_id}", "get", "Models", "model_id"),
        ("/agents/{agent}/models", "get", "Models", "agent"),
        ("/agents/{agent}/a2a", "post", "A2A", "agent"),
        ("/agents/{agent}/agui", "post", "AG-UI", "agent"),
        ("/agents/{agent}/events/stream", "get", "UAMP HTTP+SSE", "agent"),
        ("/agents/{agent}/capabilities", "get", "Capabilities", "agent"),
        ("/tasks/{task_id}", "delete", "A2A", "task_id"),
        ("/healthz", "get", "Health", None),
        ("/", "get", "Playground", None),
    ],
)
def test_openapi_describes_each_family(path: str, method: str, tag: str, param: str | None) -> None:
    op = openapi.document(create_app([DemoAgent()]))["paths"][path][method]
    assert op["tags"] == [tag]
    names = [p["name"] for p in op.get("parameters", [])]
    assert (param in names) if param else names == []


def test_a_route_nobody_described_is_listed_and_flagged() -> None:
    app = create_app([DemoAgent()])

    async def custom(request: Request) -> Response:
        return json_response({})

    app.agent_route("GET", "/custom", custom)
    doc = openapi.document(app)
    assert doc["paths"]["/agents/{agent}/custom"]["get"]["x-uamp-undocumented"] is True
    validate(doc)


# --- the playground's files --------------------------------------------------------


async def test_playground_pages_and_files(serve_app: Any) -> None:
    server = await serve_app(locked_app())
    root = await get(server, "/")
    page = await get(server, "/agents/other/")
    redirect = await get(server, "/agents/other")
    script = await get(server, "/playground/playground.js")
    missing = await get(server, "/playground/../app.py")
    unknown = await get(server, "/agents/nobody/")
    assert root.status_code == 200 and root.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in root.headers["content-security-policy"]
    assert '{"agents":["demo","other"],"agent":null,"socket":"/uamp"}' in root.text
    assert '{"agents":["demo","other"],"agent":"other","socket":"/uamp"}' in page.text
    assert (redirect.status_code, redirect.headers["location"]) == (308, "/agents/other/")
    assert script.status_code == 200 and "WebSocket" in script.text
    assert script.headers["content-type"].startswith("text/javascript")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "agent_not_found"


async def test_without_the_uamp_websocket_the_page_says_so(serve_app: Any) -> None:
    server = await serve_app(create_app([DemoAgent()], transports=[completions.mount]))
    root = await get(server, "/")
    assert '{"agents":["demo"],"agent":null,"socket":null}' in root.text


def test_the_page_config_cannot_close_its_script_element() -> None:
    html = playground.page(["a"], "</script><script>alert(1)</script>").decode()
    config = html.split('<script id="uamp-config" type="application/json">', 1)[1]
    assert config.index("</script>") > config.index("alert(1)")  # the first close is the real one
    assert orjson.loads(config.split("</script>", 1)[0])["agent"].startswith("</script>")


def test_the_server_routes_are_matched_after_every_transport_route() -> None:
    """The transports' routes are the hot path: no request is tried against /healthz first."""
    app = create_app([DemoAgent()])
    kinds = [route.meta.transport == "server" for route in app.router.routes]
    first_server = kinds.index(True)
    assert first_server > 0 and all(kinds[first_server:])
    assert app.router.routes[0].pattern == "/agents/{agent}/chat/completions"
