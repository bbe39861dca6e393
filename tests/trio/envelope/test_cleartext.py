"""Spec 003 in cleartext only on loopback (section 6.1), and ``mtls`` in the manifest.

``uamp serve`` bound to a non-loopback address without ``--certfile`` does
not mount the envelope bindings (HTTP, WebSocket, gRPC) and says so at
start; ``--insecure-envelopes`` mounts them knowingly. With ``--client-ca``
(every TLS client presents a certificate) the manifest lists ``mtls``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
import pytest

from tests._support.cli import uamp_serve
from tests._support.envelopes import envelope
from tests._support.tls import make_ca
from uamp_proto import manifest as discovery
from uamp_proto.envelope import encode_envelope
from uamp_proto.jose import JWKS
from uamp_trio.grpc.protos.uamp.v1 import agent_pb2

HEADERS = {"content-type": "application/uamp+json;v=1"}
NOTICE = "spec 003 envelopes are not served"


@contextmanager
def serving(*args: str) -> Iterator[tuple[str, str]]:
    """``uamp serve *args``: its URL (on 127.0.0.1) and what it printed before it."""
    seen: list[str] = []
    with uamp_serve(*args, seen=seen) as url:
        yield url.replace("0.0.0.0", "127.0.0.1"), "".join(seen)


def _post(url: str) -> httpx.Response:
    return httpx.post(
        f"{url}/agents/demo/v1/messages", content=encode_envelope(envelope()), headers=HEADERS
    )


def _grpc_status(url: str) -> grpc.StatusCode:
    with grpc.insecure_channel(url.removeprefix("http://")) as channel:
        send = channel.unary_stream(
            "/uamp.v1.Agent/Send",
            request_serializer=agent_pb2.Envelope.SerializeToString,
            response_deserializer=agent_pb2.Delta.FromString,
        )
        try:
            list(send(agent_pb2.Envelope(json=encode_envelope(envelope())), timeout=10))
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined,no-any-return]
    return grpc.StatusCode.OK


def test_a_public_address_without_tls_serves_no_envelope_binding() -> None:
    with serving("--host", "0.0.0.0", "--allow-anonymous") as (url, said):
        posted = _post(url)
        upgrade = httpx.get(
            f"{url}/agents/demo/uamp/1/ws",
            headers={
                "connection": "upgrade",
                "upgrade": "websocket",
                "sec-websocket-version": "13",
                "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        manifest = httpx.get(f"{url}/agents/demo{discovery.MANIFEST_PATH}")
        status = _grpc_status(url)
        other = httpx.get(f"{url}/v1/models")  # the rest is served
    assert NOTICE in said and "--insecure-envelopes" in said
    assert posted.status_code == 404
    assert upgrade.status_code == 404
    assert manifest.status_code == 404
    assert status in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND)
    assert other.status_code == 200


def test_insecure_envelopes_serves_them_knowingly() -> None:
    with serving("--host", "0.0.0.0", "--allow-anonymous", "--insecure-envelopes") as (url, said):
        posted = _post(url)
    assert NOTICE not in said
    assert posted.status_code == 202


def test_loopback_serves_them_in_cleartext() -> None:
    with serving("--host", "127.0.0.1") as (url, said):
        posted = _post(url)
    assert NOTICE not in said
    assert posted.status_code == 202


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_the_manifest_lists_mtls_when_client_certificates_are_required(
    tmp_path: Path, mutual: bool
) -> None:
    ca = make_ca(tmp_path)
    args = ["--host", "0.0.0.0", "--allow-anonymous"]
    args += ["--certfile", ca.server.certfile, "--keyfile", ca.server.keyfile]
    if mutual:
        args += ["--client-ca", ca.cafile]
    context = ssl.create_default_context(cafile=ca.cafile)
    context.load_cert_chain(ca.client.certfile, ca.client.keyfile)
    with serving(*args) as (url, said):
        url = url.replace("0.0.0.0", "127.0.0.1")
        with httpx.Client(verify=context) as client:
            jws = client.get(f"{url}/agents/demo{discovery.MANIFEST_PATH}")
            keys = JWKS.parse(client.get(f"{url}/.well-known/jwks.json").content)
    assert NOTICE not in said
    assert jws.status_code == 200
    manifest = discovery.verify_manifest(jws.text, keys)
    assert ("mtls" in manifest["auth"]) is mutual
