"""``uamp serve --signing-key`` and ``uamp verify`` as real subprocesses.

A signing server, a raw Completions stream and a ``uamp chat --save`` file are
checked by ``uamp verify`` against the JWKS (file and URL): ok, exit 0; one
changed byte of the response or of the request: failed, exit 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests._support.cli import uamp, uamp_serve


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path_factory.mktemp("key") / "signing.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture(scope="module")
def base_url(key_file: Path) -> Iterator[str]:
    with uamp_serve("--signing-key", str(key_file)) as url:
        yield url


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


def test_a_bad_key_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    done = uamp("serve", "--port", "0", "--signing-key", str(bad))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uamp serve: --signing-key ")
    assert "not a usable PEM private key" in lines[0]


def test_verify_a_raw_completions_stream(base_url: str, tmp_path: Path) -> None:
    body = orjson.dumps(
        {"model": "demo", "stream": True, "messages": [{"role": "user", "content": "verify me"}]}
    )
    r = httpx.post(f"{base_url}/agents/demo/chat/completions", content=body, timeout=10)
    assert r.status_code == 200 and b"event: response_signature" in r.content
    stream, request, jwks = tmp_path / "stream.sse", tmp_path / "request.json", tmp_path / "k.json"
    stream.write_bytes(r.content)
    request.write_bytes(body)
    jwks.write_bytes(httpx.get(f"{base_url}/.well-known/jwks.json", timeout=10).content)

    for source in (str(jwks), f"{base_url}/.well-known/jwks.json"):
        ok = uamp("verify", "--jwks", source, str(stream), "--request", str(request))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.startswith("ok: completions response") and ok.stdout.count("\n") == 1

    # One byte of the answer's text ("You said" -> "Yob said").
    assert r.content.count(b'"You') == 1
    tampered = tmp_path / "tampered.sse"
    tampered.write_bytes(r.content.replace(b'"You', b'"Yob', 1))
    failed = uamp("verify", "--jwks", str(jwks), str(tampered), "--request", str(request))
    assert failed.returncode == 1 and failed.stdout.startswith("failed: tampered")
    # One byte of the request.
    changed = tmp_path / "changed.json"
    changed.write_bytes(flip(body, body.index(b"verify")))
    failed = uamp("verify", "--jwks", str(jwks), str(stream), "--request", str(changed))
    assert failed.returncode == 1 and failed.stdout.startswith("failed: tampered")
    # No request at all: said so, exit 1.
    failed = uamp("verify", "--jwks", str(jwks), str(stream))
    assert failed.returncode == 1 and "request bytes are needed" in failed.stdout


def test_chat_save_then_verify(base_url: str, tmp_path: Path) -> None:
    jwks_url = f"{base_url}/.well-known/jwks.json"
    saved = tmp_path / "saved.json"
    ws = base_url.replace("http://", "ws://") + "/agents/demo/uamp"
    chat = uamp("chat", ws, "--once", "keep this", "--verify", jwks_url, "--save", str(saved))
    assert chat.returncode == 0, chat.stderr
    assert orjson.loads(saved.read_bytes())["text"] == "You said: keep this"

    ok = uamp("verify", "--jwks", jwks_url, str(saved))
    assert ok.returncode == 0 and ok.stdout.startswith("ok: uamp response"), ok.stdout

    doc = orjson.loads(saved.read_bytes())
    doc["text"] = doc["text"].replace("keep", "kept")
    saved.write_bytes(orjson.dumps(doc))
    failed = uamp("verify", "--jwks", jwks_url, str(saved))
    assert failed.returncode == 1 and failed.stdout.startswith("failed: tampered")


def test_verify_refuses_another_servers_key(base_url: str, tmp_path: Path) -> None:
    body = orjson.dumps(
        {"model": "demo", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    r = httpx.post(f"{base_url}/chat/completions", content=body, timeout=10)
    (tmp_path / "s.sse").write_bytes(r.content)
    (tmp_path / "r.json").write_bytes(body)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    from uamp_proto.signing import JWKS

    (tmp_path / "other.json").write_bytes(JWKS.from_keys((other, "other")).to_json())
    failed = uamp(
        "verify",
        "--jwks",
        str(tmp_path / "other.json"),
        str(tmp_path / "s.sse"),
        "--request",
        str(tmp_path / "r.json"),
    )
    assert failed.returncode == 1 and failed.stdout.startswith("failed: unknown_kid")
