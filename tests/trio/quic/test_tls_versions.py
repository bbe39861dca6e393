"""TLS on every TCP transport: TLS 1.3 only by default, ``tls_min="1.2"``, mutual TLS.

Real clients (httpx over the standard library's TLS, and ``openssl s_client``
where a client certificate or a version must be forced) against a server whose
certificate comes from a CA made in the test.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._support.tls import ThrowawayCA, make_ca
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.engines.http import Request, Response
from uamp_trio.engines.server import ServerConfig
from uamp_trio.hosting.router import RouteMeta


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


def app() -> Any:
    built = create_app([DemoAgent()])

    async def whoami(request: Request) -> Response:
        tls = request.tls
        assert tls is not None
        return Response(
            headers=[
                ("x-tls", tls.version or ""),
                ("x-alpn", tls.alpn or ""),
                ("x-client-cert", "yes" if tls.peer_certificate else "no"),
            ]
        )

    built.router.add("GET", "/whoami", whoami)
    built.router.add("GET", "/strict", whoami, meta=RouteMeta(transport="t", tls13=True))
    return built


def client_context(
    ca: ThrowawayCA, *, max_version: ssl.TLSVersion | None = None, cert: Any = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca.cafile)
    if max_version is not None:
        ctx.maximum_version = max_version
    if cert is not None:
        ctx.load_cert_chain(cert.certfile, cert.keyfile)
    return ctx


def get(
    port: int, ctx: ssl.SSLContext, *, http2: bool = False, path: str = "/whoami"
) -> httpx.Response:
    with httpx.Client(verify=ctx, http2=http2, timeout=5) as client:
        return client.get(f"https://127.0.0.1:{port}{path}")


def test_tls13_only_by_default(thread_server: Callable[..., Any], ca: ThrowawayCA) -> None:
    server = thread_server(app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile)
    for http2 in (False, True):
        reply = get(server.port, client_context(ca), http2=http2)
        assert reply.headers["x-tls"] == "TLSv1.3"
        assert reply.headers["x-alpn"] == ("h2" if http2 else "http/1.1")
        assert reply.headers["x-client-cert"] == "no"
    with pytest.raises(httpx.ConnectError, match=r"(?i)eof|version|alert|handshake"):
        get(server.port, client_context(ca, max_version=ssl.TLSVersion.TLSv1_2))


def test_tls_min_12_lets_older_clients_in(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    server = thread_server(
        app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile, tls_min="1.2"
    )
    tls12 = client_context(ca, max_version=ssl.TLSVersion.TLSv1_2)
    old = get(server.port, tls12, http2=True)
    assert old.status_code == 200 and old.headers["x-tls"] == "TLSv1.2"
    assert get(server.port, client_context(ca)).headers["x-tls"] == "TLSv1.3"
    # A route of the spec 003 bindings still refuses the TLS 1.2 connection.
    for http2 in (False, True):
        refused = get(server.port, tls12, http2=http2, path="/strict")
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "tls13_required"
    assert get(server.port, client_context(ca), path="/strict").status_code == 200


def test_mutual_tls_requires_a_certificate_from_the_client_ca(
    thread_server: Callable[..., Any], ca: ThrowawayCA, tmp_path: Path
) -> None:
    server = thread_server(
        app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile, client_ca=ca.cafile
    )
    reply = get(server.port, client_context(ca, cert=ca.client), http2=True)
    assert reply.status_code == 200 and reply.headers["x-client-cert"] == "yes"
    # No certificate, or one from a CA the server does not trust: no request served.
    stranger = make_ca(tmp_path, "stranger CA").client
    for cert in (None, stranger):
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            get(server.port, client_context(ca, cert=cert))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tls_min": "1.1"}, "tls_min"),
        ({"client_ca": "ca.pem"}, "needs a certificate"),
    ],
)
def test_bad_tls_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerConfig(**options)


async def test_spec_003_bindings_refuse_tls12_when_others_accept_it(
    serve_app: Callable[..., Any], ca: ThrowawayCA
) -> None:
    import trio_websocket

    from tests._support.envelopes import envelope
    from uamp_proto.adapters.envelope import read_error
    from uamp_proto.envelope import decode_envelope, encode_envelope
    from uamp_trio.grpc import StatusCode
    from uamp_trio.grpc.client import open_channel
    from uamp_trio.grpc.protos.uamp.v1 import agent_pb2

    server = await serve_app(
        app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile, tls_min="1.2"
    )
    tls12 = client_context(ca, max_version=ssl.TLSVersion.TLSv1_2)
    body = encode_envelope(envelope())
    headers = {"content-type": "application/uamp+json;v=1"}
    async with (
        httpx.AsyncClient(verify=tls12) as old,
        httpx.AsyncClient(verify=client_context(ca)) as new,
    ):
        refused = await old.post(f"{server.url}/v1/messages", content=body, headers=headers)
        assert (await old.get(f"{server.url}/healthz")).status_code == 200
        accepted = await new.post(f"{server.url}/v1/messages", content=body, headers=headers)
    assert refused.status_code == 403
    assert read_error(decode_envelope(refused.content))[0] == "4.03"
    assert accepted.status_code == 202
    # The length-prefixed WebSocket: the upgrade is refused.
    url = server.url.replace("https://", "wss://") + "/uamp/1/ws"
    with pytest.raises(trio_websocket.HandshakeError):
        async with trio_websocket.open_websocket_url(url, ssl_context=tls12):
            pass
    # gRPC: PERMISSION_DENIED, trailers-only.
    async with (
        open_channel(server.url, verify=tls12) as channel,
        channel.call("/uamp.v1.Agent/Send", agent_pb2.Delta) as call,
    ):
        await call.send(agent_pb2.Envelope(json=encode_envelope(envelope())))
        await call.done_sending()
        await call.ended.wait()
    assert call.status is not None and call.status[0] is StatusCode.PERMISSION_DENIED
