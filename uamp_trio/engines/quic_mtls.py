"""Mutual TLS on QUIC: ask every HTTP/3 client for a certificate and check it against ``client_ca``.

Theory of operation
-------------------
aioquic's TLS 1.3 server can send a CertificateRequest and checks the
client's CertificateVerify signature against the certificate the client
sent, but it has no public setting for that, it goes on when the client
sends no certificate at all (RFC 8446 allows the server to), and it never
checks the certificate's chain. uamp closes those three gaps:

1. **Ask.** :class:`ClientCertQuicConnection` turns on the TLS context's
   ``_request_client_certificate`` switch (aioquic keeps it "for test
   purposes"; private) right after aioquic creates the context, before the
   ClientHello is read.
2. **Require and verify.** When the handshake completes, before any
   request on the connection is looked at,
   :func:`client_certificate_problem` reads the certificate and chain the
   client sent (``_peer_certificate``, ``_peer_certificate_chain``;
   private) and verifies them with aioquic's own public
   :func:`aioquic.tls.verify_certificate` against ``client_ca`` only (dates,
   signature chain: OpenSSL's checks, as the TCP listener's ``ssl`` module
   makes), plus, as OpenSSL's client purpose does, an extended key usage
   that, when present, must allow client authentication. A missing or
   refused certificate closes the connection with the TLS alert as a QUIC
   CRYPTO_ERROR (``certificate_required`` 116, ``bad_certificate`` 42).
3. **Fail closed when aioquic changes.** The private names are checked
   once, at start (:func:`check_supported`): if one is gone the server
   refuses to start with ``--client-ca`` and ``--http3`` rather than serve
   QUIC clients unauthenticated. ``pyproject.toml`` pins aioquic to the
   versions these names were read in, and a test fails when they change.
"""

from __future__ import annotations

from typing import Any, Final

from aioquic import tls
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import QuicErrorCode
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

__all__ = [
    "BAD_CERTIFICATE",
    "CERTIFICATE_REQUIRED",
    "ClientCertQuicConnection",
    "check_supported",
    "client_certificate_problem",
]

#: The QUIC error code of a TLS alert is CRYPTO_ERROR (0x100) + the alert (RFC 9001 section 4.8).
CERTIFICATE_REQUIRED: Final = QuicErrorCode.CRYPTO_ERROR + 116
BAD_CERTIFICATE: Final = QuicErrorCode.CRYPTO_ERROR + 42

#: aioquic's private names this module relies on (see the module docstring).
_SWITCH: Final = "_request_client_certificate"
_PEER: Final = "_peer_certificate"
_CHAIN: Final = "_peer_certificate_chain"


def check_supported() -> None:
    """Refuse to go on unless aioquic still has the names mutual TLS relies on.

    Raises:
        RuntimeError: One of them is gone (an aioquic outside the pinned range).
    """
    context = tls.Context(is_client=False)
    missing = [name for name in (_SWITCH, _PEER, _CHAIN) if not hasattr(context, name)]
    if not callable(getattr(QuicConnection, "_initialize", None)):
        missing.append("QuicConnection._initialize")
    if missing:
        raise RuntimeError(
            "mutual TLS over HTTP/3 needs aioquic's client-certificate support, and this "
            f"aioquic lacks {', '.join(missing)}: install the version pyproject.toml pins, "
            "or serve mutual TLS without --http3"
        )


class ClientCertQuicConnection(QuicConnection):
    """A server QUIC connection whose TLS handshake asks the client for a certificate."""

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        setattr(self.tls, _SWITCH, True)


def client_certificate_problem(quic: QuicConnection, cafile: str) -> tuple[int, str] | None:
    """Why the client of a completed handshake is refused: ``(QUIC error, reason)``, or ``None``.

    ``None`` means it sent a certificate that chains to ``cafile``, is
    within its dates and may authenticate a client.
    """
    context: Any = quic.tls
    certificate: x509.Certificate | None = getattr(context, _PEER, None)
    if certificate is None:
        return CERTIFICATE_REQUIRED, "no client certificate"
    chain: list[x509.Certificate] = list(getattr(context, _CHAIN, []))
    try:
        tls.verify_certificate(certificate, chain, cafile=cafile)
    except tls.Alert as exc:
        return BAD_CERTIFICATE, f"client certificate refused: {exc}"
    try:
        usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return None
    except ValueError:
        return BAD_CERTIFICATE, "client certificate extensions could not be parsed"
    if (
        ExtendedKeyUsageOID.CLIENT_AUTH not in usage
        and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in usage
    ):
        return BAD_CERTIFICATE, "the certificate is not for client authentication"
    return None
