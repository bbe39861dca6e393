"""Authenticators: every attack shape refused, good tokens accepted, keys never kept."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from uamp_trio.trust import (
    AnyOf,
    APIKeyAuthenticator,
    AuthError,
    JWTAuthenticator,
    bearer_token,
    is_loopback,
)

NOW = 1_800_000_000.0
ISS = "https://issuer.test"
AUD = "uamp-test"

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(private: Any, kid: str, alg: str) -> dict[str, Any]:
    algo = jwt.get_algorithm_by_name(alg)
    data = json.loads(algo.to_jwk(private.public_key()))
    data.update(kid=kid, alg=alg, use="sig")
    return data


JWKS = {
    "keys": [
        _jwk(RSA_KEY, "rsa1", "RS256"),
        _jwk(EC_KEY, "ec1", "ES256"),
        _jwk(ED_KEY, "ed1", "EdDSA"),
    ]
}


def _claims(**over: Any) -> dict[str, Any]:
    claims = {"sub": "alice", "iss": ISS, "aud": AUD, "iat": NOW - 10, "exp": NOW + 600}
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _token(key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "rsa1", **claims: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(_claims(**claims), key, algorithm=alg, headers=headers)


@pytest.fixture
def jwks_file(tmp_path: Path) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(JWKS))
    return path


@pytest.fixture
def verifier(jwks_file: Path) -> JWTAuthenticator:
    return JWTAuthenticator(jwks_file, issuer=ISS, audience=AUD, clock=lambda: NOW)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _alg_none() -> str:
    header = _b64(json.dumps({"alg": "none", "kid": "rsa1"}).encode())
    return f"{header}.{_b64(json.dumps(_claims()).encode())}."


def _hs256_with_public_key() -> str:
    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa1"}).encode())
    payload = _b64(json.dumps(_claims()).encode())
    import hashlib
    import hmac

    sig = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(sig)}"


def _tampered() -> str:
    header, payload, sig = _token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["sub"] = "mallory"
    return f"{header}.{_b64(json.dumps(claims).encode())}.{sig}"


ATTACKS: list[tuple[str, Callable[[], str | None], str]] = [
    ("no token", lambda: None, "authentication required"),
    ("not a jwt", lambda: "hello", "not a JWT"),
    ("alg none", _alg_none, "algorithm not accepted"),
    ("hs256 with the public key", _hs256_with_public_key, "algorithm not accepted"),
    ("expired", lambda: _token(exp=NOW - 31), "expired"),
    ("not yet valid", lambda: _token(nbf=NOW + 31), "not yet valid"),
    ("issued in the future", lambda: _token(iat=NOW + 3600), "future"),
    ("wrong audience", lambda: _token(aud="someone-else"), "audience"),
    ("wrong issuer", lambda: _token(iss="https://evil.test"), "issuer"),
    ("unknown kid", lambda: _token(kid="nope"), "unknown signing key"),
    ("signed by another key", lambda: _token(key=OTHER_RSA), "bad signature"),
    ("tampered payload", _tampered, "bad signature"),
    ("no exp", lambda: _token(exp=None), "missing claim 'exp'"),
    ("no sub", lambda: _token(sub=None), "missing claim 'sub'"),
    ("alg of another key", lambda: _token(key=EC_KEY, alg="ES256", kid="rsa1"), "does not match"),
]


@pytest.mark.parametrize(("name", "make", "reason"), ATTACKS, ids=[a[0] for a in ATTACKS])
async def test_attacks_are_refused(
    verifier: JWTAuthenticator, name: str, make: Callable[[], str | None], reason: str
) -> None:
    token = make()
    with pytest.raises(AuthError) as info:
        await verifier.authenticate(token)
    assert reason in info.value.message
    assert info.value.code == "unauthorized"
    if token:
        assert token not in info.value.message
    assert info.value.www_authenticate == 'Bearer realm="uamp", error="invalid_token"'


@pytest.mark.parametrize(
    ("key", "alg", "kid"),
    [(RSA_KEY, "RS256", "rsa1"), (EC_KEY, "ES256", "ec1"), (ED_KEY, "EdDSA", "ed1")],
)
async def test_good_tokens_name_their_subject(
    verifier: JWTAuthenticator, key: Any, alg: str, kid: str
) -> None:
    principal = await verifier.authenticate(_token(key=key, alg=alg, kid=kid, sub="bob"))
    assert (principal.id, principal.scheme, principal.expires_at) == ("bob", "jwt", NOW + 600)
    assert principal.expired(NOW + 600) and not principal.expired(NOW)


async def test_leeway_accepts_small_skew(verifier: JWTAuthenticator) -> None:
    assert (await verifier.authenticate(_token(exp=NOW - 29))).id == "alice"
    assert (await verifier.authenticate(_token(nbf=NOW + 29))).id == "alice"


async def test_a_configured_algorithm_subset_refuses_the_others(jwks_file: Path) -> None:
    only_es = JWTAuthenticator(
        jwks_file, issuer=ISS, audience=AUD, algorithms=["ES256"], clock=lambda: NOW
    )
    assert (await only_es.authenticate(_token(key=EC_KEY, alg="ES256", kid="ec1"))).id == "alice"
    with pytest.raises(AuthError, match="algorithm not accepted"):
        await only_es.authenticate(_token())


@pytest.mark.parametrize("algorithms", [["HS256"], ["none"], []])
def test_symmetric_or_empty_algorithm_lists_are_configuration_errors(
    jwks_file: Path, algorithms: list[str]
) -> None:
    with pytest.raises(ValueError, match="algorithms"):
        JWTAuthenticator(jwks_file, issuer=ISS, audience=AUD, algorithms=algorithms)


def test_issuer_and_audience_are_required(jwks_file: Path) -> None:
    with pytest.raises(ValueError, match="issuer and an audience"):
        JWTAuthenticator(jwks_file, issuer="", audience=AUD)


async def test_jwks_url_is_fetched_lazily_and_refreshed_at_most_once_per_interval() -> None:
    clock = [NOW]
    served = {"keys": [_jwk(RSA_KEY, "rsa1", "RS256")]}
    urls: list[str] = []

    async def fetch(url: str) -> bytes:
        urls.append(url)
        return json.dumps(served).encode()

    verifier = JWTAuthenticator(
        "https://issuer.test/jwks.json",
        issuer=ISS,
        audience=AUD,
        refresh_interval=60,
        clock=lambda: clock[0],
        fetch=fetch,
    )
    assert verifier.fetches == 0
    assert (await verifier.authenticate(_token())).id == "alice"
    assert urls == ["https://issuer.test/jwks.json"]
    # A stream of random kids inside one interval costs no fetch at all.
    for n in range(50):
        with pytest.raises(AuthError, match="unknown signing key"):
            await verifier.authenticate(_token(kid=f"random-{n}"))
    assert verifier.fetches == 1
    # The issuer rotates in a new key; after the interval an unknown kid refetches.
    served["keys"].append(_jwk(EC_KEY, "ec2", "ES256"))
    clock[0] += 61
    token = _token(key=EC_KEY, alg="ES256", kid="ec2", iat=clock[0], exp=clock[0] + 60)
    assert (await verifier.authenticate(token)).id == "alice"
    assert verifier.fetches == 2


async def test_a_failing_jwks_fetch_keeps_the_old_keys() -> None:
    clock = [NOW]
    calls = [0]

    async def fetch(url: str) -> bytes:
        calls[0] += 1
        if calls[0] > 1:
            raise OSError("issuer down")
        return json.dumps({"keys": [_jwk(RSA_KEY, "rsa1", "RS256")]}).encode()

    verifier = JWTAuthenticator(
        "https://issuer.test/jwks.json",
        issuer=ISS,
        audience=AUD,
        clock=lambda: clock[0],
        fetch=fetch,
    )
    assert (await verifier.authenticate(_token())).id == "alice"
    clock[0] += 120
    with pytest.raises(AuthError):
        await verifier.authenticate(_token(kid="other", iat=clock[0], exp=clock[0] + 60))
    assert (await verifier.authenticate(_token(iat=clock[0], exp=clock[0] + 60))).id == "alice"


def test_a_jwks_file_without_usable_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}))
    with pytest.raises(ValueError, match="no usable signing key"):
        JWTAuthenticator(path, issuer=ISS, audience=AUD)


async def test_api_keys_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# operators\nalice:key-a-123\n\nbob : key-b-456\n")
    keys = APIKeyAuthenticator.from_file(path)
    assert len(keys) == 2
    assert (await keys.authenticate("key-a-123")).id == "alice"
    assert (await keys.authenticate("key-b-456")).id == "bob"
    with pytest.raises(AuthError, match="invalid API key"):
        await keys.authenticate("key-a-12")
    with pytest.raises(AuthError, match="authentication required"):
        await keys.authenticate(None)
    assert "key-a-123" not in repr(vars(keys))  # only digests are kept


def test_api_key_file_errors_name_the_line_not_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice:ok\nsecret-without-principal\n")
    with pytest.raises(ValueError) as info:
        APIKeyAuthenticator.from_file(path)
    assert ":2:" in str(info.value) and "secret-without-principal" not in str(info.value)


async def test_any_of_tries_each(verifier: JWTAuthenticator) -> None:
    both = AnyOf([verifier, APIKeyAuthenticator([("carol", "k-c")])])
    assert (await both.authenticate("k-c")).id == "carol"
    assert (await both.authenticate(_token())).id == "alice"
    with pytest.raises(AuthError):
        await both.authenticate("nothing")


@pytest.mark.parametrize(
    ("header", "query", "expected"),
    [
        ("Bearer abc", None, "abc"),
        ("bearer   abc  ", None, "abc"),
        ("Basic dXNlcg==", None, None),
        ("Bearer ", "q", None),
        (None, "q", "q"),
        (None, None, None),
        (None, "", None),
    ],
)
def test_bearer_token(header: str | None, query: str | None, expected: str | None) -> None:
    assert bearer_token(header, query) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
