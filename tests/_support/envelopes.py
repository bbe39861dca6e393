"""Signed spec 003 envelopes and capability tokens for the envelope tests."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from uamp_proto.envelope import Body, ContextRef, Envelope, Intent
from uamp_proto.jose import JWKS, PrivateKey, public_jwk
from uamp_proto.signing import issue_cap_token, sign_envelope
from uamp_trio.trust.auth import JWTAuthenticator

ISSUER = "https://issuer.test"


def ts(now: float | None = None) -> str:
    """RFC 3339 UTC of ``now`` (default: the clock)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def envelope(
    intent: str = "ask",
    text: str = "hello",
    *,
    key: PrivateKey | None = None,
    kid: str | None = None,
    to: str = "urn:uamp:agent:demo",
    window: int | None = None,
    reply_to: str | None = None,
    cap_token: str | None = None,
    embed_jwk: bool = True,
    at: float | None = None,
    sign: bool = True,
    context: list[ContextRef] | None = None,
    stream_id: str | None = None,
) -> Envelope:
    """An envelope signed with ``key`` (a new Ed25519 key when none)."""
    unsigned = Envelope(
        id=f"urn:uuid:{uuid.uuid4()}",
        ts=ts(at),
        from_="did:web:client.test",
        to=(to,),
        intent=Intent(intent),
        body=Body(type="text/plain", content=text),
        reply_to=reply_to,
        delta_window=window,
        cap_token=cap_token,
        context=context,
        stream_id=stream_id,
    )
    if not sign:
        return unsigned
    return sign_envelope(
        unsigned, key or ed25519.Ed25519PrivateKey.generate(), kid, embed_jwk=embed_jwk
    )


def p256() -> ec.EllipticCurvePrivateKey:
    """A new EC P-256 key."""
    return ec.generate_private_key(ec.SECP256R1())


def cap_token(
    issuer_key: PrivateKey,
    holder: PrivateKey,
    *,
    aud: str = "demo",
    scope: str = "ask subscribe confirm cancel deny",
    exp: int | None = None,
    sub: str = "alice",
    iss: str = ISSUER,
    kid: str = "issuer-1",
    **claims: Any,
) -> str:
    """A capability token binding ``holder``'s public key (``cnf.jwk``)."""
    return issue_cap_token(
        {"iss": iss, "sub": sub, "cnf": {"jwk": public_jwk(holder)}, **claims},
        issuer_key,
        aud,
        scope,
        int(time.time()) + 300 if exp is None else exp,
        kid=kid,
    )


def capability_issuer(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, JWTAuthenticator]:
    """A new issuer key (kid ``issuer-1``) and a server authenticator trusting it."""
    issuer = p256()
    jwks = directory / "jwks.json"
    jwks.write_bytes(JWKS.from_keys((issuer, "issuer-1")).to_json())
    return issuer, JWTAuthenticator(jwks, issuer=ISSUER, audience="uamp")
