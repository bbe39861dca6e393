"""Every agent is an MCP server: ``@modelcontextprotocol/sdk`` 1.x (TypeScript) as the client.

The client is installed from the npm registry with ``npm ci`` from the lock
file in ``tests/interop/mcpjs_client/`` (kept in the tests' cache folder) and
run with Node against a server in a thread: its ``Client`` over
``StreamableHTTPClientTransport`` lists the agent's tool, calls it with and
without progress, aborts a call, and reads the protected resource metadata
its OAuth discovery would follow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests._support.agents import Stalls
from tests._support.npm import install_client, run_node
from uamp_trio.app import create_app
from uamp_trio.cli import default_agent
from uamp_trio.trust.auth import AnyOf, APIKeyAuthenticator, JWTAuthenticator

CLIENT = Path(__file__).parent / "mcpjs_client"
TIMEOUT = 30


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "mcpjs-client")


def test_list_call_and_progress(client_dir: Path, thread_server: Callable[..., Any]) -> None:
    server = thread_server(create_app([default_agent()]))
    out = run_node(client_dir, f"http://127.0.0.1:{server.port}/agents/demo/mcp", "call")
    assert out["protocolVersion"] == "2025-11-25"
    assert out["sessionId"]
    assert out["tools"] == [{"name": "demo", "required": ["prompt"]}]
    assert (out["text"], out["isError"]) == ("2 + 3 = 5", False)
    assert "".join(p["message"] for p in out["progress"]) == "2 + 3 = 5"
    assert [p["progress"] for p in out["progress"]] == sorted(
        {p["progress"] for p in out["progress"]}
    )
    assert out["plain"] == "You said: hello"


def test_an_aborted_call_cancels_the_turn(
    client_dir: Path, thread_server: Callable[..., Any]
) -> None:
    agent = Stalls()
    server = thread_server(create_app([agent]))
    out = run_node(client_dir, f"http://127.0.0.1:{server.port}/agents/stalls/mcp", "cancel")
    assert "enough" in out["error"]
    assert out["toolsAfter"] == 1
    assert agent.cancelled.wait(TIMEOUT)


def test_401_leads_to_the_protected_resource_metadata(
    client_dir: Path, thread_server: Callable[..., Any]
) -> None:
    keys = APIKeyAuthenticator([("alice", "key-a")])
    jwt = JWTAuthenticator(
        "https://issuer.example/jwks.json", issuer="https://issuer.example", audience="uamp"
    )
    server = thread_server(create_app([default_agent()], authenticator=AnyOf([keys, jwt])))
    url = f"http://127.0.0.1:{server.port}/agents/demo/mcp"
    out = run_node(client_dir, url, "auth")
    assert out["status"] == 401
    metadata = (
        f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/agents/demo/mcp"
    )
    assert out["metadataUrl"] == metadata
    for found in (out["named"], out["found"]):
        assert found["resource"] == url
        assert found["authorization_servers"] == ["https://issuer.example"]
    assert "401" in out["connectError"] or "Unauthorized" in out["connectError"]
    allowed = run_node(client_dir, url, "call", "key-a")
    assert allowed["text"] == "2 + 3 = 5"
