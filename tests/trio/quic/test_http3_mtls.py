"""Mutual TLS over HTTP/3: only clients with a certificate from ``client_ca`` are served.

A throwaway CA made here signs the server's and a client's certificate; a
second CA ("stranger") signs another client's. aioquic's own client
connects with each over real UDP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aioquic import tls
from aioquic.quic.connection import QuicConnection

from tests._support.h3client import H3Closed, H3Request, h3_requests
from tests._support.tls import Issued, ThrowawayCA, make_ca
from uamp_trio.app import create_app
from uamp_trio.engines import quic_mtls
from uamp_trio.engines.http import Request, Response


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


@pytest.fixture
def server(thread_server: Callable[..., Any], ca: ThrowawayCA) -> Any:
    app = create_app([])

    async def whoami(request: Request) -> Response:
        cert = request.tls.peer_certificate if request.tls is not None else None
        return Response(headers=[("x-client-cert", "yes" if cert else "no")], body=b"ok")

    app.router.add("GET", "/whoami", whoami)
    return thread_server(
        app,
        certfile=ca.server.certfile,
        keyfile=ca.server.keyfile,
        client_ca=ca.cafile,
        http3=True,
    )


def _get(server: Any, ca: ThrowawayCA, cert: Issued | None) -> Any:
    pair = None if cert is None else (cert.certfile, cert.keyfile)
    return h3_requests(server.port, [H3Request("GET", "/whoami")], cafile=ca.cafile, cert=pair)[0]


def test_a_client_certificate_from_the_client_ca_is_served(server: Any, ca: ThrowawayCA) -> None:
    reply = _get(server, ca, ca.client)
    assert reply.status == 200 and reply.headers["x-client-cert"] == "yes"


def test_no_client_certificate_is_refused_with_certificate_required(
    server: Any, ca: ThrowawayCA
) -> None:
    with pytest.raises(H3Closed) as info:
        _get(server, ca, None)
    assert info.value.error_code == quic_mtls.CERTIFICATE_REQUIRED == 0x100 + 116


def test_a_certificate_from_another_ca_is_refused(
    server: Any, ca: ThrowawayCA, tmp_path: Path
) -> None:
    stranger = make_ca(tmp_path, "stranger CA")
    with pytest.raises(H3Closed) as info:
        _get(server, ca, stranger.client)
    assert info.value.error_code == quic_mtls.BAD_CERTIFICATE == 0x100 + 42


def test_a_server_certificate_is_not_a_client_certificate(server: Any, ca: ThrowawayCA) -> None:
    # Signed by the right CA, but its extended key usage is serverAuth only.
    with pytest.raises(H3Closed) as info:
        _get(server, ca, ca.server)
    assert info.value.error_code == quic_mtls.BAD_CERTIFICATE
    assert "client authentication" in info.value.reason


def test_the_private_aioquic_names_mutual_tls_relies_on_are_there() -> None:
    # If aioquic renames them, this fails (and the server refuses to start).
    context = tls.Context(is_client=False)
    for name in ("_request_client_certificate", "_peer_certificate", "_peer_certificate_chain"):
        assert hasattr(context, name), name
    assert context._request_client_certificate is False  # off unless uamp asks
    assert callable(getattr(QuicConnection, "_initialize", None))


def test_without_those_names_the_server_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, ca: ThrowawayCA
) -> None:
    from uamp_trio.engines.http3 import Http3Listener, quic_configuration
    from uamp_trio.engines.server import Server

    monkeypatch.delattr(QuicConnection, "_initialize")
    server = Server(create_app([]), certfile=ca.server.certfile, keyfile=ca.server.keyfile)
    configuration = quic_configuration(ca.server.certfile, ca.server.keyfile, idle_timeout=5)
    with pytest.raises(RuntimeError, match=r"aioquic lacks QuicConnection\._initialize"):
        Http3Listener(server, configuration, client_ca=ca.cafile)
