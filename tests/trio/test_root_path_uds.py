"""``uamp serve --root-path`` and ``--uds``, as uvicorn users expect them.

One ``uamp serve --uds SOCKET --root-path /api`` runs behind a real haproxy
that publishes it at ``/api`` and strips the prefix before forwarding over
the Unix socket. Everything a client is handed -- the playground's links
and WebSocket, a redirect's ``Location``, the A2A card, the spec 003
``Location`` and hub, the OpenAPI server -- must lead back through the
proxy, and the real clients (a2a-sdk, uamp's envelope and WebSocket
clients) must work from there. The same server is also called over its
socket directly with httpx's UDS transport and the openai SDK, with and
without the prefix (a proxy that does not strip it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

from tests._support.cli import ENV, ROOT, Served, uamp
from tests._support.haproxy import running_haproxy
from uamp_trio.client import connect
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner
from uamp_trio.engines.http import Headers, Request
from uamp_trio.hosting.root_path import check_root_path, enter
from uamp_trio.trust.resource import metadata_url

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: haproxy publishing the server at /api, prefix stripped, over the Unix socket.
PROXY = """
defaults
    mode http
    timeout connect 3s
    timeout client 30s
    timeout server 30s
    timeout tunnel 30s

frontend public
    bind "${UAMP_LISTEN}"
    http-request deny deny_status 404 unless { path_beg /api }
    http-request replace-path ^/api/?(.*)$ /\\1
    default_backend node

backend node
    server node "unix@${UAMP_NODE1}"
"""


def _serve(*args: str) -> Served:
    return Served([sys.executable, "-m", "uamp_trio", "serve", *args], cwd=ROOT, env=ENV)


@pytest.fixture(scope="module")
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # A short path: a Unix socket's path is limited to about 100 bytes.
    path = str(tmp_path_factory.mktemp("uds") / "uamp.sock")
    with _serve("--uds", path, "--root-path", "/api/") as server:
        server.wait_for("Ctrl-C to stop")
        yield path
    assert not os.path.exists(path), "the socket file outlived the server"


@pytest.fixture(scope="module")
def proxy(socket_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("haproxy") / "haproxy.cfg"
    config.write_text(PROXY)
    with running_haproxy([socket_path], config=config, ready="/api/readyz") as url:
        yield url + "/api"


def _uds(path: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url="http://uamp", timeout=10)


# --- behind the proxy ---------------------------------------------------------------


def test_the_playground_links_and_socket_go_through_the_prefix(proxy: str) -> None:
    page = httpx.get(f"{proxy}/agents/demo/", timeout=10)
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="(/[^"]+)"', page.text)
    assert sorted(assets) == ["/api/playground/playground.css", "/api/playground/playground.js"]
    config = re.search(
        r'<script id="uamp-config" type="application/json">(.*?)</script>', page.text
    )
    assert config is not None
    assert json.loads(config.group(1))["socket"] == "/api/uamp"
    origin = proxy.removesuffix("/api")
    for asset in assets:
        assert httpx.get(origin + asset, timeout=10).status_code == 200, asset
    # the playground's own socket, through the proxy, with the uamp client
    result = trio.run(_ask, f"ws://{origin.removeprefix('http://')}/api/uamp", "demo")
    assert result == "2 + 3 = 5"


async def _ask(url: str, agent: str | None) -> str:
    async with connect(url) as client:
        session = await client.create_session(agent)
        return (await session.ask("what is 2+3?")).text


def test_a_redirect_names_the_prefixed_page(proxy: str) -> None:
    reply = httpx.get(f"{proxy}/agents/demo", timeout=10)
    assert reply.status_code == 308
    assert reply.headers["location"] == "/api/agents/demo/"


def test_the_a2a_card_points_through_the_proxy_and_a2a_sdk_follows_it(proxy: str) -> None:
    async def main() -> str:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, f"{proxy}/agents/demo").get_agent_card()
            urls = {i.url for i in card.supported_interfaces if i.protocol_binding != "GRPC"}
            assert urls == {f"{proxy}/agents/demo/a2a"}
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            request = SendMessageRequest(
                message=Message(role=Role.ROLE_USER, parts=[Part(text="hi")], message_id="m-1")
            )
            texts = []
            async for event in client.send_message(request):
                message = event.message if event.HasField("message") else event.task.status.message
                texts += [part.text for part in message.parts]
            return " ".join(texts)

    assert "You said: hi" in asyncio.run(main())


def test_spec_003_location_and_hub_go_through_the_prefix(proxy: str) -> None:
    hub = httpx.get(f"{proxy}/.well-known/agent-hub.json", timeout=10).json()
    [entry] = hub["agents"]
    assert entry["manifest"] == "/api/agents/demo/.well-known/agent-manifest.json"
    origin = proxy.removesuffix("/api")
    assert httpx.get(origin + entry["manifest"], timeout=10).status_code == 200

    async def main() -> tuple[str, str]:
        signer = EnvelopeSigner.ephemeral()
        async with EnvelopeHTTPClient(
            f"{proxy}/agents/demo", signer, to="urn:uamp:agent:demo"
        ) as client:
            location = (
                await client.post(signer.make("ask", "hi", to="urn:uamp:agent:demo"))
            ).headers["location"]
            reply = await client.ask("what is 2+3?", window=8)
            return location, reply.text

    location, text = trio.run(main)
    assert location.startswith("/api/agents/demo/v1/stream/")
    assert text == "2 + 3 = 5"  # the client followed the Location through the proxy


def test_the_openapi_document_names_the_prefix_as_its_server(proxy: str) -> None:
    document = httpx.get(f"{proxy}/openapi.json", timeout=10).json()
    assert document["servers"] == [{"url": "/api"}]
    assert "/agents/{agent}/chat/completions" in document["paths"]


def test_outside_the_prefix_the_proxy_serves_nothing(proxy: str) -> None:
    origin = proxy.removesuffix("/api")
    assert httpx.get(f"{origin}/healthz", timeout=10).status_code == 404


def test_protected_resource_metadata_follows_the_prefix() -> None:
    request = Request(
        method="GET", path="/api/agents/demo/mcp", headers=Headers([("host", "ex.org")])
    )
    enter(request, "/api")
    assert request.path == "/agents/demo/mcp"
    assert metadata_url(request) == (
        "http://ex.org/api/.well-known/oauth-protected-resource/agents/demo/mcp"
    )


@pytest.mark.parametrize(
    ("given", "root", "path", "seen"),
    [
        ("/api", "/api", "/api/agents/demo/uamp", "/agents/demo/uamp"),
        ("/api/", "/api", "/api", "/"),
        ("/a/b", "/a/b", "/a/b/healthz", "/healthz"),
        ("/api", "/api", "/healthz", "/healthz"),  # a proxy that strips: left as it is
        ("/api", "/api", "/apis/x", "/apis/x"),  # not the prefix, only its letters
        ("", "", "/api/x", "/api/x"),
    ],
)
def test_the_prefix_is_stripped_only_where_it_stands(
    given: str, root: str, path: str, seen: str
) -> None:
    assert check_root_path(given) == root
    request = Request(method="GET", path=path)
    if root:
        enter(request, root)
        enter(request, root)  # once only
    assert request.path == seen


@pytest.mark.parametrize("bad", ["api", "/a b", '/a"b', "/a?b", "/a#b", "/<x>", "/a&b"])
def test_a_root_path_that_is_not_a_plain_path_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="--root-path"):
        check_root_path(bad)


# --- over the Unix socket, directly -------------------------------------------------


def test_the_socket_file_is_open_to_the_machine(socket_path: str) -> None:
    mode = os.stat(socket_path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o666


def test_httpx_over_the_socket_with_and_without_the_prefix(socket_path: str) -> None:
    with _uds(socket_path) as http:
        for path in ("/healthz", "/api/healthz"):  # a proxy that does not strip, too
            assert http.get(path).json()["status"] == "ok", path
        with http.stream(
            "POST",
            "/api/agents/demo/chat/completions",
            json={"messages": [{"role": "user", "content": "hello"}], "stream": True},
        ) as reply:
            body = "".join(reply.iter_text())
        assert reply.status_code == 200
        assert '"content":"You "' in body and body.rstrip().endswith("data: [DONE]")


def test_the_openai_sdk_over_the_socket(socket_path: str) -> None:
    http = httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), timeout=10)
    client = openai.OpenAI(
        base_url="http://uamp/agents/demo/v1", api_key="unused", http_client=http
    )
    with client:
        answer = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "what is 2+3?"}]
        )
    assert answer.choices[0].message.content == "2 + 3 = 5"


def test_the_banner_names_the_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with _serve("--uds", path) as server:
        line = server.wait_for(r"uamp serving on (\S+)")
        assert line.group(1) == "http+unix://" + path.replace("/", "%2F")
    assert not os.path.exists(path)


def test_a_stale_socket_file_is_replaced_and_a_live_one_refused(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "s.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # bound and closed: nobody listens on it
    stale.close()
    with _serve("--uds", path) as server:
        server.wait_for("Ctrl-C to stop")
        with _uds(path) as http:
            assert http.get("/healthz").status_code == 200
        second = uamp("serve", "--uds", path)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"uamp serve: cannot listen on {path}: Address already in use"
        ]
        with _uds(path) as http:  # the first server kept its socket
            assert http.get("/healthz").status_code == 200


def test_workers_share_the_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sock")
    with _serve("--uds", path, "--workers", "2") as server:
        server.wait_for("Ctrl-C to stop")
        with _uds(path) as http:
            assert http.get("/healthz").status_code == 200
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--root-path", "api"], "uamp serve: --root-path: 'api' is not a path"),
        (["--uds", "/tmp/x.sock", "--http3"], "uamp serve: --uds goes without --http3"),
    ],
)
def test_mistakes_are_one_line(args: list[str], message: str) -> None:
    done = uamp("serve", *args)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(message)
