"""``uamp serve`` authentication flags, as a real subprocess where it matters.

Secure by default: no authentication and a non-loopback address refuses to
start with one line naming the flags (no traceback); loopback stays
zero-config; with ``--auth-jwks`` a served endpoint refuses a request without
a token and admits one with a valid token; ``--auth-api-keys`` likewise.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests._support.cli import STARTUP
from uamp_trio.cli import OPEN_BIND_REFUSED, build_authenticator, build_parser
from uamp_trio.trust import AnyOf, APIKeyAuthenticator, JWTAuthenticator

from .issuer import AUD, ISS, Issuer

ROOT = Path(__file__).resolve().parents[3]
ISSUER = Issuer()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::"])
def test_a_non_loopback_bind_without_auth_refuses_to_start_in_one_line(host: str) -> None:
    proc = run("--host", host)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == OPEN_BIND_REFUSED.format(host=host)
    assert len(proc.stderr.strip().splitlines()) == 1
    for flag in ("--auth-jwks", "--auth-issuer", "--auth-audience", "--auth-api-keys"):
        assert flag in proc.stderr
    assert "--allow-anonymous" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--auth-jwks", "x.json"], "--auth-jwks needs --auth-issuer and --auth-audience"),
        (["--auth-issuer", "i"], "--auth-issuer and --auth-audience go with --auth-jwks"),
        (
            ["--auth-jwks", "/nonexistent/jwks.json", "--auth-issuer", "i", "--auth-audience", "a"],
            "--auth-jwks: cannot read /nonexistent/jwks.json",
        ),
        (["--auth-api-keys", "/nonexistent/keys"], "--auth-api-keys: cannot read"),
    ],
)
def test_incomplete_auth_flags_are_one_clear_line(args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_flags_build_the_authenticators(tmp_path: Path) -> None:
    jwks = ISSUER.write_jwks(tmp_path)
    keys = tmp_path / "keys"
    keys.write_text("ops:s3cret-key\n")
    parse = build_parser().parse_args
    jwt_only = build_authenticator(
        parse(["serve", "--auth-jwks", str(jwks), "--auth-issuer", ISS, "--auth-audience", AUD])
    )
    assert isinstance(jwt_only, JWTAuthenticator)
    assert jwt_only.issuer == ISS and jwt_only.audience == AUD
    jwt_args = ["--auth-jwks", str(jwks), "--auth-issuer", ISS, "--auth-audience", AUD]
    both = build_authenticator(
        parse(["serve", *jwt_args, "--auth-api-keys", str(keys), "--auth-leeway", "5"])
    )
    assert isinstance(both, AnyOf)
    assert isinstance(both.authenticators[1], APIKeyAuthenticator)
    assert build_authenticator(parse(["serve"])) is None


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        found = re.search(r"uamp serving on (http://\S+)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    raise AssertionError(f"server did not start: {proc.stderr.read() if proc.stderr else ''}")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_with_jwks_and_api_keys_gates_every_request(tmp_path: Path) -> None:
    jwks = ISSUER.write_jwks(tmp_path)
    keys = tmp_path / "keys"
    keys.write_text("ops:s3cret-key-123\n")
    proc, url = _start(
        "--host",
        "0.0.0.0",
        "--auth-jwks",
        str(jwks),
        "--auth-issuer",
        ISS,
        "--auth-audience",
        AUD,
        "--auth-api-keys",
        str(keys),
    )
    url = url.replace("0.0.0.0", "127.0.0.1")
    try:
        body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=url, timeout=10) as client:
            refused = client.post("/v1/chat/completions", json=body)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
            for token in (ISSUER.token("alice"), "s3cret-key-123"):
                ok = client.post(
                    "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}
                )
                assert ok.status_code == 200, ok.text
            assert client.get("/.well-known/agent-card.json").status_code == 200
    finally:
        _stop(proc)


def test_loopback_stays_zero_config() -> None:
    proc, url = _start("--host", "127.0.0.1")
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.get("/v1/models").status_code == 200
    finally:
        _stop(proc)


def test_allow_anonymous_serves_a_public_address_knowingly() -> None:
    proc, url = _start("--host", "0.0.0.0", "--allow-anonymous")
    try:
        with httpx.Client(base_url=url.replace("0.0.0.0", "127.0.0.1"), timeout=10) as client:
            assert client.get("/v1/models").status_code == 200
    finally:
        _stop(proc)
