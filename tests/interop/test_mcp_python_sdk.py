"""Every agent is an MCP server: the ``mcp`` Python SDK 2.x as the client.

The server runs in a thread on 127.0.0.1 (its own ``trio.run``); the SDK's
``Client`` talks to it over Streamable HTTP in both of its connect modes
(``auto`` probes ``server/discover`` and falls back to ``initialize``;
``legacy`` goes straight to ``initialize``), and to ``uamp mcp`` over stdio.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
)
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests._support.agents import Stalls, TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.stores import Stores
from uamp_trio.stores.mcp_sessions import McpLimits, McpSessionStore
from uamp_trio.trust.auth import AnyOf, APIKeyAuthenticator, JWTAuthenticator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 30
MODES = ["auto", "legacy"]


class Echo(TestAgent):
    """Says ``echo: PROMPT`` in three deltas, then how many user turns it has seen."""

    name = "echo"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        users = sum(1 for m in request.messages if m.role == "user")
        for part in ("echo: ", request.messages[-1].text, f" ({users})"):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=part)))


class Structured(TestAgent):
    """Answers a JSON object."""

    name = "weather"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        text = '{"city": "Paris", "sky": "clear"}'
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))


class Broken(TestAgent):
    """Fails every turn."""

    name = "broken"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        raise ResponderError("model_unavailable", "the model is down")


def _serve(thread_server: Callable[..., Any], *agents: Any, **options: Any) -> str:
    return _serve_app(thread_server, create_app(list(agents), **options))


def _serve_app(thread_server: Callable[..., Any], app: Any) -> str:
    server = thread_server(app)
    return f"http://127.0.0.1:{server.port}"


def _run(main: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(TIMEOUT):
            return await main()

    return anyio.run(bounded)


@pytest.mark.parametrize("mode", MODES)
def test_list_and_call_in_both_connect_modes(thread_server: Callable[..., Any], mode: str) -> None:
    url = _serve(thread_server, Echo(), Structured())

    async def main() -> None:
        async with Client(f"{url}/agents/echo/mcp", mode=mode) as client:
            assert client.protocol_version == "2025-11-25"
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["echo"]
            assert tools[0].input_schema["required"] == ["prompt"]
            result = await client.call_tool("echo", {"prompt": "hi"})
            assert not result.is_error
            assert result.content[0].text == "echo: hi (1)"
            assert result.structured_content is None
        async with Client(f"{url}/agents/weather/mcp", mode=mode) as client:
            result = await client.call_tool("weather", {"prompt": "Paris?"})
            assert result.structured_content == {"city": "Paris", "sky": "clear"}

    _run(main)


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def echo_either(request: pytest.FixtureRequest, thread_server: Callable[..., Any]) -> Iterator[str]:
    """The echo agent under ``uamp serve`` or ``uamp_asgi`` (uvicorn)."""
    if request.param == "uamp serve":
        yield _serve(thread_server, Echo())
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    with uvicorn_server(uamp_asgi.app([Echo()])) as url:
        yield url


@pytest.mark.parametrize("mode", MODES)
def test_progress_carries_the_deltas(echo_either: str, mode: str) -> None:
    url = echo_either
    seen: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message))

    async def main() -> Any:
        async with Client(f"{url}/agents/echo/mcp", mode=mode) as client:
            return await client.call_tool("echo", {"prompt": "go"}, progress_callback=progress)

    result = _run(main)
    assert result.content[0].text == "echo: go (1)"
    assert [m for _, m in seen] == ["echo: ", "go", " (1)"]
    assert [p for p, _ in seen] == [6, 8, 12]


def test_a_session_name_continues_the_conversation(thread_server: Callable[..., Any]) -> None:
    url = _serve(thread_server, Echo())

    async def main() -> list[Any]:
        async with Client(f"{url}/agents/echo/mcp") as client:
            first = await client.call_tool("echo", {"prompt": "a", "session": "s1"})
            second = await client.call_tool("echo", {"prompt": "b", "session": "s1"})
            other = await client.call_tool("echo", {"prompt": "c", "session": "s2"})
            fresh = await client.call_tool("echo", {"prompt": "d"})
            return [first, second, other, fresh]

    first, second, other, fresh = _run(main)
    assert first.content[0].text == "echo: a (1)"
    assert second.content[0].text == "echo: b (2)"
    assert second.meta == {"session": "s1"}
    assert other.content[0].text == "echo: c (1)"
    assert fresh.content[0].text == "echo: d (1)"


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_the_call_cancels_the_turn(thread_server: Callable[..., Any], mode: str) -> None:
    agent = Stalls()
    url = _serve(thread_server, agent)

    async def main() -> None:
        async with Client(f"{url}/agents/stalls/mcp", mode=mode) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "stalls", {"prompt": "go"})
                assert await anyio.to_thread.run_sync(agent.started.wait, TIMEOUT)
                tg.cancel_scope.cancel()
            # The client sent notifications/cancelled; the agent's turn ends.
            assert await anyio.to_thread.run_sync(agent.cancelled.wait, TIMEOUT)
            # The session goes on.
            assert [t.name for t in (await client.list_tools()).tools] == ["stalls"]

    _run(main)


def test_agent_failures_are_tool_errors_and_protocol_faults_are_not(
    thread_server: Callable[..., Any],
) -> None:
    url = _serve(thread_server, Broken(), Echo())

    async def main() -> None:
        async with Client(f"{url}/agents/broken/mcp") as client:
            result = await client.call_tool("broken", {"prompt": "x"})
            assert result.is_error
            assert "the model is down" in result.content[0].text
            missing = await client.call_tool("broken", {})
            assert missing.is_error and "prompt" in missing.content[0].text
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"prompt": "x"})
            assert caught.value.code == -32602

    _run(main)


def test_unpaid_call_is_a_tool_error_naming_the_price(thread_server: Callable[..., Any]) -> None:
    url = _serve(thread_server, Echo(), payment_policy=TokenPolicy({"tok"}, amount="0.05"))

    async def main() -> None:
        async with Client(f"{url}/agents/echo/mcp") as client:
            refused = await client.call_tool("echo", {"prompt": "x"})
            assert refused.is_error
            assert "0.05 USD" in refused.content[0].text
            assert refused.meta["payment"]["accepts"][0]["amount"] == "0.05"
            paid = await client.call_tool("echo", {"prompt": "x"}, meta={"payment_token": "tok"})
            assert not paid.is_error and paid.content[0].text == "echo: x (1)"

    _run(main)


def _auth_options() -> dict[str, Any]:
    keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
    # A JWKS URL is fetched only when a JWT comes, and none does here.
    jwks = "https://issuer.example/jwks.json"
    jwt = JWTAuthenticator(jwks, issuer="https://issuer.example", audience="uamp")
    return {"authenticator": AnyOf([keys, jwt])}


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def guarded_echo(
    request: pytest.FixtureRequest, thread_server: Callable[..., Any]
) -> Iterator[str]:
    """Echo behind API keys and a JWT issuer, under ``uamp serve`` or ``uamp_asgi`` (uvicorn)."""
    if request.param == "uamp serve":
        yield _serve(thread_server, Echo(), **_auth_options())
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    with uvicorn_server(uamp_asgi.app([Echo()], config=uamp_asgi.Config(**_auth_options()))) as url:
        yield url


def test_401_names_the_protected_resource_metadata(guarded_echo: str) -> None:
    url = guarded_echo
    endpoint = f"{url}/agents/echo/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    refused = httpx2.post(endpoint, json=body)
    assert refused.status_code == 401
    metadata_url = extract_resource_metadata_from_www_auth(refused)
    assert metadata_url == f"{url}/.well-known/oauth-protected-resource/agents/echo/mcp"
    assert metadata_url in build_protected_resource_metadata_discovery_urls(metadata_url, endpoint)
    document = httpx.get(metadata_url).json()
    assert document["resource"] == endpoint
    assert document["authorization_servers"] == ["https://issuer.example"]
    assert httpx.get(f"{url}/.well-known/oauth-protected-resource").json()["resource"] == url

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"authorization": "Bearer key-a"})
        async with http, Client(streamable_http_client(endpoint, http_client=http)) as client:
            result = await client.call_tool("echo", {"prompt": "hi"})
            assert result.content[0].text == "echo: hi (1)"

    _run(main)


def test_a_session_is_its_principals_alone(thread_server: Callable[..., Any]) -> None:
    url = _serve(thread_server, Echo(), **_auth_options())
    endpoint = f"{url}/agents/echo/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }
    alice = {"authorization": "Bearer key-a", "accept": "application/json, text/event-stream"}
    bob = {**alice, "authorization": "Bearer key-b"}
    opened = httpx.post(endpoint, json=init, headers=alice)
    session = opened.headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert httpx.post(endpoint, json=ping, headers={**alice, "mcp-session-id": session}).json() == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {},
    }
    theirs = httpx.post(endpoint, json=ping, headers={**bob, "mcp-session-id": session})
    unknown = httpx.post(endpoint, json=ping, headers={**bob, "mcp-session-id": "nope"})
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == unknown.json()
    assert httpx.delete(endpoint, headers={**bob, "mcp-session-id": session}).status_code == 404
    assert httpx.delete(endpoint, headers={**alice, "mcp-session-id": session}).status_code == 200
    gone = httpx.post(endpoint, json=ping, headers={**alice, "mcp-session-id": session})
    assert gone.status_code == 404


def test_sessions_per_principal_are_bounded(thread_server: Callable[..., Any]) -> None:
    """A client that opens sessions and never ends them evicts its own oldest idle ones."""
    limits = McpLimits(max_peers_per_principal=3)
    stores = Stores(mcp_sessions=McpSessionStore(limits))
    url = _serve(thread_server, Echo(), stores=stores)
    endpoint = f"{url}/agents/echo/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}
    ids = [httpx.post(endpoint, json=init).headers["mcp-session-id"] for _ in range(50)]
    assert len(set(ids)) == 50
    assert len(stores.mcp_sessions.peers) == 3
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    statuses = [
        httpx.post(endpoint, json=ping, headers={"mcp-session-id": i}).status_code for i in ids
    ]
    assert statuses == [404] * 47 + [200] * 3


def test_get_stream_is_one_per_session_and_ends_with_it(
    thread_server: Callable[..., Any],
) -> None:
    url = _serve(thread_server, Echo())
    endpoint = f"{url}/agents/echo/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}
    opened = httpx.post(endpoint, json=init)
    assert opened.json()["result"]["protocolVersion"] == "2025-11-25"
    headers = {"mcp-session-id": opened.headers["mcp-session-id"], "accept": "text/event-stream"}
    with httpx.stream("GET", endpoint, headers=headers, timeout=TIMEOUT) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines).startswith(":")
        assert httpx.get(endpoint, headers=headers).status_code == 409
        assert httpx.delete(endpoint, headers=headers).status_code == 200
        assert [line for line in lines if line] == []  # the stream ends with the session


def test_discover_is_method_not_found(thread_server: Callable[..., Any]) -> None:
    url = _serve(thread_server, Echo())
    probe = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    answer = httpx.post(f"{url}/agents/echo/mcp", json=probe).json()
    assert answer["error"]["code"] == -32601


def test_uamp_mcp_over_stdio() -> None:
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ROOT)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "uamp_trio", "mcp"], cwd=ROOT, env=env
    )
    seen: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async def main() -> Any:
        async with Client(params) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["demo"]
            return await client.call_tool(
                "demo", {"prompt": "what is 2+3?"}, progress_callback=progress
            )

    result = _run(main)
    assert result.content[0].text == "2 + 3 = 5"
    assert "".join(m or "" for m in seen) == "2 + 3 = 5"


def test_pages_of_other_origins_are_refused(thread_server: Callable[..., Any]) -> None:
    """MCP's DNS rebinding rule: an ``Origin`` that is not ours nor allowed gets 403."""
    server = thread_server(create_app([Echo()]), allowed_origins=("http://app.example",))
    url = f"http://127.0.0.1:{server.port}"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}
    statuses = {
        origin: httpx.post(f"{url}/agents/echo/mcp", json=init, headers={"origin": origin})
        for origin in ("http://evil.example", url, "http://app.example")
    }
    assert statuses["http://evil.example"].status_code == 403
    assert statuses[url].status_code == 200
    assert statuses["http://app.example"].status_code == 200
    assert httpx.post(f"{url}/agents/echo/mcp", json=init).status_code == 200  # no Origin: no page


def test_a_signed_answer_covers_the_reply_and_the_request(
    thread_server: Callable[..., Any],
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from uamp_proto.signing import ResponseSigner, SignatureError, verify_response_signature

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    app = create_app([Echo()])
    app.response_signer = ResponseSigner(key, "mcp-key", clock=lambda: int(time.time()))
    url = f"{_serve_app(thread_server, app)}/agents/echo/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}
    session = httpx.post(url, json=init).headers["mcp-session-id"]
    body = (
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"prompt":"hi"}}}'
    )
    headers = {"mcp-session-id": session, "content-type": "application/json"}
    result = httpx.post(url, content=body, headers=headers).json()["result"]
    text = result["content"][0]["text"]
    assert text == "echo: hi (1)"
    signature = result["_meta"]["signature"]
    verify_response_signature(signature, text, body, key.public_key())
    with pytest.raises(SignatureError):
        verify_response_signature(signature, text + "!", body, key.public_key())
