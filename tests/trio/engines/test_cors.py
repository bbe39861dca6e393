"""CORS over a real server: preflights on every route, headers for allowed origins only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.engines.cors import EXPOSED, CorsPolicy
from uamp_trio.engines.server import ServerConfig

PAGE = "http://127.0.0.1:5173"
OTHER = "http://127.0.0.1:6006"
TIMEOUT = 10


def preflight(origin: str, method: str = "POST", headers: str = "content-type") -> dict[str, str]:
    out = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        out["Access-Control-Request-Headers"] = headers
    return out


async def serve(serve_app: Any, **config: Any) -> Any:
    return await serve_app(create_app([DemoAgent()]), **config)


#: Routes of several transports and of the server itself, and paths no route serves.
PATHS = [
    "/agents/demo/ai-sdk",
    "/agents/demo/agui",
    "/agents/demo/chat/completions",
    "/agents/demo/a2a",
    "/agents/demo/events",
    "/healthz",
    "/nowhere",
]


@pytest.mark.parametrize("path", PATHS)
async def test_a_preflight_from_an_allowed_origin_is_answered_on_every_route(
    serve_app: Any, path: str
) -> None:
    server = await serve(serve_app, allowed_origins=(PAGE,))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.options(
                path, headers=preflight(PAGE, headers="content-type, authorization")
            )
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == "content-type, authorization"
    assert "Origin" in r.headers["vary"]
    assert int(r.headers["access-control-max-age"]) > 0


async def test_a_refused_origin_gets_no_cors_headers(serve_app: Any) -> None:
    server = await serve(serve_app, allowed_origins=(PAGE,))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            pre = await http.options("/agents/demo/ai-sdk", headers=preflight(OTHER))
            real = await http.get("/agents/demo/models", headers={"Origin": OTHER})
            allowed = await http.get("/agents/demo/models", headers={"Origin": PAGE})
            missing = await http.get("/agents/nobody/models", headers={"Origin": PAGE})
    assert pre.status_code == 403
    assert not [k for k in pre.headers if k.startswith("access-control-")]
    # Served (CORS is the browser's rule; auth is the server's), but unreadable to the page.
    assert real.status_code == 200
    assert "access-control-allow-origin" not in real.headers and real.headers["vary"] == "Origin"
    assert allowed.headers["access-control-allow-origin"] == PAGE
    assert allowed.headers["vary"] == "Origin"
    exposed = allowed.headers["access-control-expose-headers"]
    for name in ("Location", "X-UAMP-Payment-Balance", "Mcp-Session-Id", "X-UAMP-Signature"):
        assert name in exposed
    # Errors reach the page readable too.
    assert missing.status_code == 404
    assert missing.headers["access-control-allow-origin"] == PAGE


async def test_a_streamed_answer_carries_the_headers(serve_app: Any) -> None:
    server = await serve(serve_app, allowed_origins=("*",))
    body = {
        "id": "c",
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/agents/demo/ai-sdk", json=body, headers={"Origin": OTHER})
    assert r.status_code == 200 and r.content.endswith(b"data: [DONE]\n\n")
    assert r.headers["access-control-allow-origin"] == "*"


async def test_credentials_name_the_origin_never_the_wildcard(serve_app: Any) -> None:
    server = await serve(serve_app, allowed_origins=("*",), allow_credentials=True)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            pre = await http.options("/agents/demo/agui", headers=preflight(OTHER))
            real = await http.get("/healthz", headers={"Origin": OTHER})
    for r in (pre, real):
        assert r.headers["access-control-allow-origin"] == OTHER
        assert r.headers["access-control-allow-credentials"] == "true"


async def test_configured_methods_and_headers_bound_a_preflight(serve_app: Any) -> None:
    server = await serve(
        serve_app,
        allowed_origins=(PAGE,),
        allowed_methods=("GET", "POST"),
        allowed_headers=("Content-Type",),
    )
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            ok = await http.options("/agents/demo/ai-sdk", headers=preflight(PAGE))
            method = await http.options("/agents/demo/ai-sdk", headers=preflight(PAGE, "DELETE"))
            header = await http.options(
                "/agents/demo/ai-sdk", headers=preflight(PAGE, headers="x-secret")
            )
    assert ok.status_code == 204 and ok.headers["access-control-allow-methods"] == "GET, POST"
    assert method.status_code == header.status_code == 403


async def test_off_by_default_and_websockets_are_exempt(serve_app: Any) -> None:
    server = await serve(serve_app)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.options("/agents/demo/agui", headers=preflight(PAGE))
            real = await http.get("/healthz", headers={"Origin": PAGE})
    assert r.status_code == 405
    assert not [k for k in real.headers if k.startswith("access-control-")]
    on = await serve(serve_app, allowed_origins=(PAGE,))
    ws_url = on.url.replace("http://", "ws://") + "/agents/demo/uamp"
    with trio.fail_after(TIMEOUT):
        async with open_websocket_url(ws_url, extra_headers=[("Origin", OTHER)]) as ws:
            assert not ws.closed


@pytest.mark.parametrize(
    ("origins", "origin", "allowed"),
    [
        ((PAGE,), PAGE, True),
        ((PAGE,), PAGE + "/", False),
        ((PAGE,), "http://127.0.0.1:51730", False),
        ((PAGE, OTHER), OTHER, True),
        (("*",), "https://anything.example", True),
        ((PAGE,), "null", False),
    ],
)
def test_which_origins_are_allowed(origins: tuple[str, ...], origin: str, allowed: bool) -> None:
    policy = CorsPolicy.of(origins)
    assert policy is not None and policy.allows(origin) is allowed


@pytest.mark.parametrize("bad", ["127.0.0.1:5173", "http://x/", "http://x/path/"])
def test_a_malformed_origin_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ValueError, match="scheme://host"):
        ServerConfig(allowed_origins=(bad,))


def test_nothing_configured_is_off() -> None:
    assert CorsPolicy.of([]) is None
    assert "Location" in EXPOSED
