"""The server's envelope key (``--envelope-key PATH``): signs error envelopes and manifests.

EC P-256 (``ES256``) or Ed25519 (``EdDSA``), read from a PEM file. Without
one, the key of the user's data folder (:func:`stored_key`:
``$UAMP_DATA_DIR``, else ``$XDG_DATA_HOME/uamp``, else
``~/.local/share/uamp``; ``envelope-key.pem``) is used, made there at the
first start, so manifests keep their signer across restarts and every
``--workers`` process signs with the same key; only when that folder cannot
be written is a key made for the run alone (the caller warns). Its public
half is published in ``/.well-known/jwks.json``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import attrs
from cryptography.hazmat.primitives import serialization
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

__all__ = ["KEY_FILE", "EnvelopeKey", "data_dir", "read_jwks", "read_private_key", "stored_key"]

#: The key's file name in the data folder.
KEY_FILE = "envelope-key.pem"


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
        path: The file it lives in (``None`` for an ephemeral key).
    """

    key: PrivateKey
    kid: str
    ephemeral: bool = False
    #: The file the key was read from (or written to), when there is one.
    path: str | None = None

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
        return cls(key, jwk_thumbprint(key), path=str(path))

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


def data_dir() -> Path:
    """The user's uamp data folder.

    ``$UAMP_DATA_DIR``, else ``$XDG_DATA_HOME/uamp``, else ``~/.local/share/uamp``.
    """
    own = os.environ.get("UAMP_DATA_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "uamp"


def stored_key(folder: Path | None = None) -> tuple[EnvelopeKey, bool]:
    """The envelope key of the data folder, made on first use; and whether it was made now.

    Made as a temporary file (mode 0600) linked into place, so processes
    starting together (``--workers``) end up with one key, never half a file.

    Raises:
        OSError: The folder cannot be created or written.
        ValueError: The file there is not a usable key (one line).
    """
    folder = folder or data_dir()
    path = folder / KEY_FILE
    if path.exists():
        return EnvelopeKey.from_file(path), False
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".envelope-key-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(pem)
        try:
            os.link(temp, path)
        except FileExistsError:  # another process made it first: use theirs
            return EnvelopeKey.from_file(path), False
    finally:
        os.unlink(temp)
    return EnvelopeKey(key, jwk_thumbprint(key), path=str(path)), True
