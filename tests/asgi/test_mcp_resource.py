"""MCP's OAuth protected-resource metadata (RFC 9728) when uamp_asgi is mounted in FastAPI.

The 401 of the MCP endpoint names a metadata URL below the mount point, and
that URL answers the document naming the endpoint and the token issuers, as
the MCP Python SDK's discovery reads them (its functions are used here). The
standalone app is checked against ``uamp serve`` in
tests/interop/test_mcp_python_sdk.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto.responder import TurnRequest
from uamp_trio.trust.auth import AnyOf, APIKeyAuthenticator, JWTAuthenticator

pytest.importorskip("mcp")


async def echo(turn: TurnRequest) -> AsyncIterator[str]:
    """Says back what it was told."""
    yield turn.messages[-1].text or ""


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    import fastapi

    keys = APIKeyAuthenticator([("alice", "key-a")])
    jwt = JWTAuthenticator(
        "https://issuer.example/jwks.json", issuer="https://issuer.example", audience="uamp"
    )
    config = uamp_asgi.Config(authenticator=AnyOf([keys, jwt]))
    api = fastapi.FastAPI()
    api.mount("/agents", uamp_asgi.app([function_agent(echo)], config=config))
    with uvicorn_server(api) as url:
        yield url


def test_a_mounted_mcp_endpoint_names_its_metadata_below_the_mount(base: str) -> None:
    from mcp.client.auth.utils import (
        build_protected_resource_metadata_discovery_urls,
        extract_resource_metadata_from_www_auth,
    )

    endpoint = f"{base}/agents/echo/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    refused = httpx.post(endpoint, json=body)
    assert refused.status_code == 401
    url = extract_resource_metadata_from_www_auth(refused)
    assert url == f"{base}/agents/.well-known/oauth-protected-resource/echo/mcp"
    assert url in build_protected_resource_metadata_discovery_urls(url, endpoint)
    document = httpx.get(url).json()
    assert document == {
        "resource": endpoint,
        "bearer_methods_supported": ["header"],
        "authorization_servers": ["https://issuer.example"],
    }
    missing = httpx.get(f"{base}/agents/.well-known/oauth-protected-resource/nobody/mcp")
    assert missing.status_code == 404
    allowed = httpx.post(endpoint, json=body, headers={"authorization": "Bearer key-a"})
    assert allowed.status_code != 401
