"""Signed discovery: manifests, the hub, ``uamp serve --envelope-key`` and ``uamp discover``."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests._support.cli import uamp, uamp_serve
from tests._support.envelopes import p256
from tests.trio.transports.test_signing_everywhere import write_pem
from uamp_proto.envelope import Intent
from uamp_proto.jose import JWKS, b64url, b64url_decode, jwk_thumbprint, load_private_key
from uamp_proto.manifest import ManifestError, verify_hub, verify_manifest


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(write_pem(tmp_path_factory.mktemp("envkey") / "envelope.pem", p256()))


@pytest.fixture(scope="module")
def base_url(key_file: Path) -> Iterator[str]:
    with uamp_serve("--envelope-key", str(key_file), "--max-concurrent", "2") as url:
        yield url


def test_the_manifest_is_signed_with_the_envelope_key(base_url: str, key_file: Path) -> None:
    r = httpx.get(f"{base_url}/agents/demo/.well-known/agent-manifest.json")
    assert r.headers["content-type"] == "application/manifest+jws"
    jwks = JWKS.parse(httpx.get(f"{base_url}/.well-known/jwks.json").content)
    manifest = verify_manifest(r.text, jwks)
    assert manifest["agent"] == "uamp/1.0"
    assert manifest["intents"] == [i.value for i in Intent]  # every intent of section 4.1
    assert "text/plain" in manifest["body_types"]
    assert manifest["auth"] == []  # the loopback quick start: no authentication
    root = httpx.get(f"{base_url}/.well-known/agent-manifest.json").text
    assert verify_manifest(root, jwks) == manifest  # the root is the default agent's
    kid = jwk_thumbprint(load_private_key(key_file.read_bytes()))
    assert kid in {k.kid for k in jwks.keys}


def test_the_hub_lists_every_agent_and_verifies(base_url: str) -> None:
    hub = httpx.get(f"{base_url}/.well-known/agent-hub.json").json()
    assert [a["name"] for a in hub["agents"]] == ["demo"]
    assert hub["agents"][0]["manifest"] == "/agents/demo/.well-known/agent-manifest.json"
    assert set(verify_hub(hub)) == {"demo"}


def test_uamp_discover_prints_the_verified_manifests(base_url: str) -> None:
    done = uamp("discover", base_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert orjson.loads(done.stdout)["demo"]["agent"] == "uamp/1.0"
    one = uamp("discover", f"{base_url}/agents/demo")
    assert one.returncode == 0 and "uamp/1.0" in one.stdout


def _tamper(jws: str) -> str:
    head, payload, sig = jws.split(".")
    manifest = orjson.loads(b64url_decode(payload))
    manifest["intents"] = [*manifest["intents"], "x-forged"]
    return ".".join([head, b64url(orjson.dumps(manifest)), sig])


@pytest.fixture
def tampered_server(base_url: str) -> Iterator[str]:
    """A server that serves the real JWKS and a hub whose manifest was changed."""
    hub = httpx.get(f"{base_url}/.well-known/agent-hub.json").json()
    hub["agents"][0]["manifest_jws"] = _tamper(hub["agents"][0]["manifest_jws"])
    pages = {
        "/.well-known/jwks.json": httpx.get(f"{base_url}/.well-known/jwks.json").content,
        "/.well-known/agent-hub.json": orjson.dumps(hub),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(5)


def test_uamp_discover_fails_on_a_tampered_manifest(tampered_server: str) -> None:
    done = uamp("discover", tampered_server)
    assert done.returncode == 1
    assert done.stdout.startswith("failed: bad_signature: demo:")


def test_a_tampered_or_foreign_manifest_does_not_verify(base_url: str) -> None:
    signed = httpx.get(f"{base_url}/.well-known/agent-manifest.json").text
    jwks = JWKS.parse(httpx.get(f"{base_url}/.well-known/jwks.json").content)
    with pytest.raises(ManifestError) as tampered:
        verify_manifest(_tamper(signed), jwks)
    with pytest.raises(ManifestError) as foreign:
        verify_manifest(signed, JWKS.from_keys((p256(), None)))
    assert tampered.value.reason.value == "bad_signature"
    assert foreign.value.reason.value in ("unknown_kid", "bad_signature")


def test_a_bad_envelope_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "k.pem"
    bad.write_text("not a key")
    done = uamp("serve", "--port", "0", "--envelope-key", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("uamp serve:") and "\n" not in done.stderr.strip()


def test_uamp_chat_over_the_envelope_websocket(base_url: str) -> None:
    once = uamp("chat", "--binding", "envelope-ws", base_url, "--agent", "demo", "--once", "hi")
    assert once.returncode == 0, once.stderr
    assert once.stdout.strip()
    # Interactive, lines from stdin: two asks, the second continuing the first.
    lines = uamp("chat", "--binding", "envelope-ws", base_url, "--plain", stdin="one\ntwo\n")
    assert lines.returncode == 0, lines.stderr
    assert len([line for line in lines.stdout.splitlines() if line.strip()]) >= 2
    gone = uamp("chat", "--binding", "envelope-ws", base_url, "--agent", "nobody", "--once", "x")
    assert gone.returncode == 1 and gone.stderr.startswith("uamp chat:")
