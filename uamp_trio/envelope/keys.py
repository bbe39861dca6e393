"""The server's envelope key (``--envelope-key PATH``): signs error envelopes and manifests.

EC P-256 (``ES256``) or Ed25519 (``EdDSA``), read from a PEM file; without
one an ephemeral Ed25519 key is made at start (the caller warns). Its public
half is published in ``/.well-known/jwks.json``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto.envelope import Envelope
from uamp_proto.jose import (
    JWKS,
    PrivateKey,
    jwk_thumbprint,
    load_private_key,
    private_algorithm,
)
from uamp_proto.signing import ENVELOPE_ALGORITHMS, sign_envelope

__all__ = ["EnvelopeKey", "read_jwks", "read_private_key"]


def _read(path: str | Path, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot read it ({exc.strerror})") from None


def read_private_key(path: str | Path, flag: str) -> PrivateKey:
    """The PEM private key at ``path``; ``ValueError`` is one line naming ``flag``."""
    try:
        return load_private_key(_read(path, flag))
    except ValueError as exc:
        if str(exc).startswith(flag):
            raise
        raise ValueError(f"{flag} {path}: not a usable PEM private key ({exc})") from None


def read_jwks(path: str | Path, flag: str) -> JWKS:
    """The JWKS file at ``path``; ``ValueError`` is one line naming ``flag``."""
    try:
        return JWKS.parse(_read(path, flag))
    except ValueError as exc:
        if str(exc).startswith(flag):
            raise
        raise ValueError(f"{flag} {path}: {exc}") from None


@attrs.frozen
class EnvelopeKey:
    """A private envelope key and its key id.

    Attributes:
        key: EC P-256 or Ed25519 private key.
        kid: Its key id (JWS header ``kid``, JWKS ``kid``): the RFC 7638 thumbprint.
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
        key = read_private_key(path, "--envelope-key")
        try:
            private_algorithm(key, ENVELOPE_ALGORITHMS, "envelopes")
        except ValueError as exc:
            raise ValueError(f"--envelope-key {path}: {exc}") from None
        return cls(key, jwk_thumbprint(key))

    @classmethod
    def ephemeral_key(cls) -> EnvelopeKey:
        """A new Ed25519 key, for this run only."""
        key = ed25519.Ed25519PrivateKey.generate()
        return cls(key, jwk_thumbprint(key), ephemeral=True)

    def jwks(self) -> JWKS:
        """The public key set clients verify this server's signatures with."""
        return JWKS.from_keys((self.key, self.kid))

    def sign(self, envelope: Envelope) -> Envelope:
        """``envelope`` signed with this key (``kid`` in the header)."""
        return sign_envelope(envelope, self.key, self.kid)
