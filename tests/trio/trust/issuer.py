"""A token issuer for tests: an RSA key, its JWKS file and every attack token shape.

The key is generated per process (cryptography); the JWKS holds only its
public half. :meth:`Issuer.attacks` returns one token per attack the server
must refuse, by name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from uamp_trio.trust import JWTAuthenticator

ISS = "https://issuer.test"
AUD = "uamp-test"
KID = "test-rsa-1"

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_OTHER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """Mints tokens signed by the test key; writes the matching JWKS."""

    key = _KEY

    def jwks(self) -> dict[str, Any]:
        """The public JWKS document."""
        public = json.loads(jwt.get_algorithm_by_name("RS256").to_jwk(_KEY.public_key()))
        public.update(kid=KID, alg="RS256", use="sig")
        return {"keys": [public]}

    def write_jwks(self, directory: Path) -> Path:
        """Write the JWKS to ``directory/jwks.json``; returns the path."""
        path = directory / "jwks.json"
        path.write_text(json.dumps(self.jwks()))
        return path

    def authenticator(self, directory: Path, **options: Any) -> JWTAuthenticator:
        """A verifier trusting this issuer (through a JWKS file in ``directory``)."""
        return JWTAuthenticator(self.write_jwks(directory), issuer=ISS, audience=AUD, **options)

    @staticmethod
    def claims(sub: str = "alice", **over: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {"sub": sub, "iss": ISS, "aud": AUD, "iat": now, "exp": now + 600}
        claims.update(over)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, sub: str = "alice", *, kid: str = KID, key: Any = None, **over: Any) -> str:
        """A valid RS256 token for ``sub`` (claims overridable)."""
        return jwt.encode(
            self.claims(sub, **over), key or _KEY, algorithm="RS256", headers={"kid": kid}
        )

    def attacks(self) -> dict[str, str]:
        """One token per attack, each of which must be refused."""
        now = int(time.time())
        header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": KID}).encode())
        alg_none = f"{header}.{_b64(json.dumps(self.claims()).encode())}."
        # HS256 keyed with the RSA public key's PEM: the classic key confusion.
        pem = _KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        hs_header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": KID}).encode())
        hs_payload = _b64(json.dumps(self.claims()).encode())
        mac = hmac.new(pem, f"{hs_header}.{hs_payload}".encode(), hashlib.sha256).digest()
        hs256 = f"{hs_header}.{hs_payload}.{_b64(mac)}"
        good = self.token()
        head, _payload, signature = good.split(".")
        forged = _b64(json.dumps(self.claims("mallory")).encode())
        return {
            "alg_none": alg_none,
            "hs256_with_public_key": hs256,
            "expired": self.token(iat=now - 7200, exp=now - 3600),
            "not_yet_valid": self.token(nbf=now + 3600),
            "wrong_audience": self.token(aud="someone-else"),
            "wrong_issuer": self.token(iss="https://evil.test"),
            "unknown_kid": self.token(kid="nobody", key=_OTHER),
            "tampered_payload": f"{head}.{forged}.{signature}",
            "garbage": "not-a-jwt",
        }
