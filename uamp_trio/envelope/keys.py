"""The server's envelope key (``--envelope-key PATH``): signs error envelopes and manifests.

EC P-256 (``ES256``) or Ed25519 (``EdDSA``), read from a PEM file; without
one an ephemeral Ed25519 key is made at start (the caller warns). Its public
half is published in ``/.well-known/jwks.json``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto.envelope import Envelope
from uamp_proto.jose import JWKS, PrivateKey, load_private_key, private_algorithm, public_jwk
from uamp_proto.signing import ENVELOPE_ALGORITHMS, sign_envelope

__all__ = ["EnvelopeKey", "thumbprint_kid"]


def thumbprint_kid(key: PrivateKey) -> str:
    """A stable key id: the first 16 hex digits of SHA-256 over the public JWK's members."""
    jwk = public_jwk(key)
    members = ",".join(f"{k}={jwk[k]}" for k in sorted(jwk) if k not in ("alg", "use"))
    return "env-" + hashlib.sha256(members.encode()).hexdigest()[:16]


@attrs.frozen
class EnvelopeKey:
    """A private envelope key and its key id.

    Attributes:
        key: EC P-256 or Ed25519 private key.
        kid: Its key id (JWS header ``kid``, JWKS ``kid``).
        ephemeral: Made at start rather than read from a file.
    """

    key: PrivateKey
    kid: str
    ephemeral: bool = False

    def __attrs_post_init__(self) -> None:
        private_algorithm(self.key, ENVELOPE_ALGORITHMS, "envelopes")

    @classmethod
    def from_file(cls, path: str | Path) -> EnvelopeKey:
        """Read a PEM private key (EC P-256 or Ed25519).

        Raises:
            ValueError: Unreadable, or a key type that cannot sign envelopes.
        """
        try:
            pem = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"--envelope-key: cannot read {path}: {exc.strerror}") from None
        key = load_private_key(pem)
        try:
            private_algorithm(key, ENVELOPE_ALGORITHMS, "envelopes")
        except ValueError as exc:
            raise ValueError(f"--envelope-key {path}: {exc}") from None
        return cls(key, thumbprint_kid(key))

    @classmethod
    def ephemeral_key(cls) -> EnvelopeKey:
        """A new Ed25519 key, for this run only."""
        key = ed25519.Ed25519PrivateKey.generate()
        return cls(key, thumbprint_kid(key), ephemeral=True)

    def jwks(self) -> JWKS:
        """The public key set clients verify this server's signatures with."""
        return JWKS.from_keys((self.key, self.kid))

    def sign(self, envelope: Envelope) -> Envelope:
        """``envelope`` signed with this key (``kid`` in the header)."""
        return sign_envelope(envelope, self.key, self.kid)
