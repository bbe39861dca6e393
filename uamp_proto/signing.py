"""Signatures: spec 003 envelopes and capability tokens, spec 000/004 responses.

Theory of operation
-------------------

Three things are signed, all as JSON Web Signatures (RFC 7515) made and
checked by the key and JWS layer :mod:`uamp_proto.jose` (keys, JWK/JWKS,
compact and detached JWS, canonical JSON), which this module only feeds:

* **Envelopes** (spec 003 section 6.3). The payload is the JSON object
  ``{"sha256":"<hex>"}``, where the hex digest is that of the envelope's
  canonical JSON without ``sig`` (:func:`uamp_proto.envelope.envelope_sha256`).
  The payload is written canonically too (no whitespace) and then *detached*
  as in RFC 7515 Appendix F: the compact JWS ``header.payload.signature``
  loses its middle part and ``sig`` holds ``header..signature``. A verifier
  recomputes the payload from the envelope it holds, so any change to a
  signed member breaks the signature. Algorithms: ``ES256`` (P-256) and
  ``EdDSA`` (Ed25519).
* **Capability tokens** (spec 003 section 6.2): JWTs with ``aud``, ``scope``
  and ``exp``, signed with ``ES256``, ``EdDSA`` or ``RS256``.
  :func:`verify_cap_token` checks times against the ``now`` it is given; it
  never reads a clock (pyjwt's own claim checks, which do, are not used: the
  signature is checked with pyjwt's JWS layer and the claims here).
* **Responses** (spec 000 section 6.7, spec 004 "Response Signing"): an
  ``RS256`` JWT with ``response_hash`` (SHA-256 hex of the full response
  text, UTF-8), ``request_hash`` (SHA-256 hex of the request as received)
  and ``iat``. On UAMP it is ``response.done``'s ``signature``; on Chat
  Completions it follows ``data: [DONE]`` as a ``response_signature`` SSE
  event (:func:`response_signature_event`).

Public keys travel as a JWKS (RFC 7517): :func:`public_jwk` and
:class:`JWKS` write and read RSA, EC P-256 and OKP Ed25519 keys; a verifier
given a :class:`JWKS` picks the key named by the JWS header's ``kid``.

Keys are always passed in; this module generates none. ``ES256`` signatures
are made deterministically (RFC 6979 nonces), and ``EdDSA`` and ``RS256``
(PKCS #1 v1.5) are deterministic by construction, so signing draws no
randomness at all: the same key and input always give the same signature.

Every verification failure is a :class:`SignatureError` or
:class:`CapTokenError` whose ``reason`` (a :class:`Reason`) says what went
wrong and whose ``error_code`` is the spec 003 section 9 code to answer with.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import orjson
from cryptography.hazmat.primitives.asymmetric import rsa

from .envelope import Envelope, EnvelopeError, canonical_json, envelope_sha256
from .jose import (
    JWK,
    JWKS,
    MIN_RSA_BITS,
    JWKSError,
    PrivateKey,
    PublicKey,
    Reason,
    SignatureError,
    SigningError,
    algorithm_for,
    load_private_key,
    private_algorithm,
    public_jwk,
    sign_compact,
    sign_detached,
    verify_detached,
    verify_jwt,
)
from .sse import encode_json

__all__ = [
    "CAP_TOKEN_ALGORITHMS",
    "ENVELOPE_ALGORITHMS",
    "JWK",
    "JWKS",
    "JWKS_PATH",
    "MIN_RSA_BITS",
    "RESPONSE_ALGORITHM",
    "SIGNATURE_HEADER",
    "CapTokenError",
    "JWKSError",
    "PrivateKey",
    "PublicKey",
    "Reason",
    "ResponseSigner",
    "SignatureError",
    "SigningError",
    "algorithm_for",
    "issue_cap_token",
    "load_private_key",
    "public_jwk",
    "request_hash",
    "response_hash",
    "response_signature_event",
    "sign_envelope",
    "sign_response",
    "verify_cap_token",
    "verify_envelope",
    "verify_response_signature",
]

#: Envelope signature algorithms (spec 003 section 6.3).
ENVELOPE_ALGORITHMS: Final = frozenset({"ES256", "EdDSA"})
#: Capability token algorithms: section 6.2 names none, so the envelope ones
#: plus RS256 (the algorithm of response signatures).
CAP_TOKEN_ALGORITHMS: Final = frozenset({"ES256", "EdDSA", "RS256"})
#: The response signature algorithm (spec 000 section 6.7, spec 004).
RESPONSE_ALGORITHM: Final = "RS256"
#: The HTTP header carrying a non-streamed Chat Completion's signature.
SIGNATURE_HEADER: Final = "X-UAMP-Signature"
#: Where an agent publishes its JWKS, under ``/agents/{name}``.
JWKS_PATH: Final = "/.well-known/jwks.json"


# --- errors (the key layer's SigningError, SignatureError, JWKSError, Reason) ---


class CapTokenError(SigningError):
    """A capability token was refused."""


# --- envelopes (spec 003 section 6.3) -----------------------------------------------


def _envelope_payload(envelope: Envelope) -> bytes:
    return canonical_json({"sha256": envelope_sha256(envelope)})


def sign_envelope(
    envelope: Envelope, key: PrivateKey, kid: str | None = None, *, embed_jwk: bool = False
) -> Envelope:
    """Sign an envelope: a copy whose ``sig`` is a detached compact JWS.

    Any ``sig`` already present is replaced (it is not part of what is
    signed).

    Args:
        envelope: The envelope to sign.
        key: An EC P-256 (``ES256``) or Ed25519 (``EdDSA``) private key.
        kid: Key id for the JWS header, so verifiers can find the key in a
            JWKS.
        embed_jwk: Put the public key in the protected header as ``jwk``
            (RFC 7515 section 4.1.3), for a receiver that checks integrity
            only (no trusted key for this sender).

    Returns:
        The envelope with ``sig`` = ``"<header>..<signature>"``.

    Raises:
        ValueError: The key cannot make envelope signatures (RSA, P-384...).
        TypeError: ``key`` is not a private key.
    """
    alg = private_algorithm(key, ENVELOPE_ALGORITHMS, "envelopes")
    extra = {"jwk": public_jwk(key)} if embed_jwk else None
    sig = sign_detached(_envelope_payload(envelope), key, alg, kid, extra)
    return attrs.evolve(envelope, sig=sig)


def verify_envelope(envelope: Envelope, key: PrivateKey | PublicKey | JWKS) -> None:
    """Check an envelope's ``sig`` against its current content.

    Args:
        envelope: A signed envelope.
        key: The signer's public key (a private key is accepted and reduced
            to its public half), or a :class:`JWKS` searched by ``kid``.

    Raises:
        SignatureError: ``reason`` is :attr:`Reason.UNSIGNED`,
            :attr:`~Reason.MALFORMED` (not ``header..signature``),
            :attr:`~Reason.BAD_ALG` (not ES256/EdDSA, including ``none``),
            :attr:`~Reason.UNKNOWN_KID`, :attr:`~Reason.WRONG_KEY` (the key
            is of another type than the algorithm), or
            :attr:`~Reason.BAD_SIGNATURE` (the envelope changed since it was
            signed, or another key signed it).
    """
    if envelope.sig is None:
        raise SignatureError(Reason.UNSIGNED, "the envelope has no sig")
    try:
        payload = _envelope_payload(envelope)
    except EnvelopeError as exc:  # pragma: no cover - constructors validate first
        raise SignatureError(Reason.MALFORMED, str(exc)) from None
    verify_detached(envelope.sig, payload, key, ENVELOPE_ALGORITHMS, SignatureError)


# --- capability tokens (spec 003 section 6.2) ---------------------------------------

_RESERVED_CAP_CLAIMS: Final = frozenset({"aud", "scope", "exp"})


def _scope_list(scope: object) -> list[str] | None:
    if isinstance(scope, str):
        return scope.split()
    if isinstance(scope, list) and all(isinstance(s, str) for s in scope):
        return list(scope)
    return None


def issue_cap_token(
    claims: Mapping[str, Any],
    key: PrivateKey,
    aud: str | Sequence[str],
    scope: str | Iterable[str],
    exp: int,
    *,
    kid: str | None = None,
) -> str:
    """Issue a capability token: a JWT with ``aud``, ``scope`` and ``exp``.

    Args:
        claims: Other claims (``iss``, ``sub``, ``iat``, ``nbf``...); they may
            not set ``aud``, ``scope`` or ``exp``, which have arguments.
        key: EC P-256, Ed25519 or RSA private key.
        aud: The audience (the agent that will accept it), or several.
        scope: Granted scopes, as a space-separated string or strings; written
            space-separated as OAuth does (RFC 8693 section 4.2).
        exp: Expiry, seconds since the Unix epoch.
        kid: Key id for the JWS header.

    Returns:
        The compact JWT.

    Raises:
        ValueError: A reserved claim in ``claims``, an empty audience or
            scope, scopes with spaces, or a key that cannot sign.
    """
    clash = sorted(_RESERVED_CAP_CLAIMS & set(claims))
    if clash:
        raise ValueError(f"pass {', '.join(clash)} as arguments, not in claims")
    alg = private_algorithm(key, CAP_TOKEN_ALGORITHMS, "capability tokens")
    audiences = [aud] if isinstance(aud, str) else list(aud)
    if not audiences or not all(isinstance(a, str) and a for a in audiences):
        raise ValueError("aud must be a non-empty string or strings")
    scopes = scope.split() if isinstance(scope, str) else list(scope)
    if not scopes or any(not s or " " in s for s in scopes):
        raise ValueError("scope must hold at least one scope, none empty or with spaces")
    if isinstance(exp, bool) or not isinstance(exp, int):
        raise ValueError("exp must be an integer NumericDate")
    body = {
        **claims,
        "aud": audiences[0] if len(audiences) == 1 else audiences,
        "scope": " ".join(scopes),
        "exp": exp,
    }
    try:
        payload = canonical_json(body)
    except EnvelopeError as exc:
        raise ValueError(f"claims are not plain JSON: {exc}") from None
    return sign_compact(payload, key, alg, kid, typ="JWT")


def _numeric(claims: Mapping[str, Any], name: str, error: type[SigningError]) -> float | None:
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(Reason.MISSING_CLAIM, f"claim {name!r} must be a number of seconds")
    return float(value)


def verify_cap_token(
    token: str,
    key: PrivateKey | PublicKey | JWKS,
    *,
    audience: str | Iterable[str],
    required_scope: str | Iterable[str],
    now: float,
    leeway: float = 0,
) -> dict[str, Any]:
    """Verify a capability token for one request.

    Times are compared with the ``now`` given (no clock is read): the token
    is expired once ``now >= exp + leeway`` and not yet valid while
    ``now < nbf - leeway`` or ``now < iat - leeway``.

    Args:
        token: The compact JWT (an envelope's ``cap_token``).
        key: The issuer's public key, or a :class:`JWKS`.
        audience: Who is checking: ``aud`` (or one of its entries) must be
            it, or one of them when several names are given (an agent known
            by its name and by its URL).
        required_scope: Scopes the request needs (space-separated string or
            strings); every one must be granted.
        now: The current time, seconds since the Unix epoch.
        leeway: Allowed clock skew, seconds.

    Returns:
        The token's claims.

    Raises:
        CapTokenError: ``reason`` is :attr:`Reason.MALFORMED`,
            :attr:`~Reason.BAD_ALG`, :attr:`~Reason.UNKNOWN_KID`,
            :attr:`~Reason.WRONG_KEY`, :attr:`~Reason.BAD_SIGNATURE`,
            :attr:`~Reason.MISSING_CLAIM` (no ``exp``/``aud``), or
            :attr:`~Reason.EXPIRED`, :attr:`~Reason.NOT_YET_VALID`
            (``error_code`` 4.01), or :attr:`~Reason.WRONG_AUDIENCE`,
            :attr:`~Reason.MISSING_SCOPE` (``error_code`` 4.03).
    """
    claims = verify_jwt(token, key, CAP_TOKEN_ALGORITHMS, CapTokenError)
    exp = _numeric(claims, "exp", CapTokenError)
    if exp is None:
        raise CapTokenError(Reason.MISSING_CLAIM, "the token has no exp claim")
    if now >= exp + leeway:
        raise CapTokenError(Reason.EXPIRED, f"the token expired at {exp:g} (now {now:g})")
    nbf = _numeric(claims, "nbf", CapTokenError)
    if nbf is not None and now < nbf - leeway:
        raise CapTokenError(Reason.NOT_YET_VALID, f"the token is valid from {nbf:g} (now {now:g})")
    iat = _numeric(claims, "iat", CapTokenError)
    if iat is not None and now < iat - leeway:
        raise CapTokenError(
            Reason.NOT_YET_VALID, f"the token was issued in the future ({iat:g}, now {now:g})"
        )
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise CapTokenError(Reason.MISSING_CLAIM, "the token has no aud claim (string or strings)")
    accepted = [audience] if isinstance(audience, str) else list(audience)
    if not any(a in audiences for a in accepted):
        raise CapTokenError(
            Reason.WRONG_AUDIENCE, f"the token is for {audiences!r}, not {accepted!r}"
        )
    granted = _scope_list(claims.get("scope", ""))
    if granted is None:
        raise CapTokenError(Reason.MISSING_CLAIM, "the scope claim is not a string or strings")
    needed = required_scope.split() if isinstance(required_scope, str) else list(required_scope)
    missing = [s for s in needed if s not in granted]
    if missing:
        raise CapTokenError(
            Reason.MISSING_SCOPE,
            f"the token does not grant {' '.join(missing)!r} (granted: {' '.join(granted)!r})",
        )
    return claims


# --- response signatures (spec 000 section 6.7, spec 004) ---------------------------


def response_hash(response_text: str) -> str:
    """SHA-256 hex of the full response text, UTF-8 encoded."""
    return hashlib.sha256(response_text.encode("utf-8")).hexdigest()


def request_hash(request: bytes | str) -> str:
    """SHA-256 hex of the original request: its bytes as received (text as UTF-8)."""
    data = request.encode("utf-8") if isinstance(request, str) else bytes(request)
    return hashlib.sha256(data).hexdigest()


def sign_response(
    response_text: str,
    request_bytes: bytes | str,
    key: rsa.RSAPrivateKey,
    kid: str | None,
    now: int,
) -> str:
    """Sign a response: an RS256 JWT with ``response_hash``, ``request_hash``, ``iat``.

    Args:
        response_text: The full response text (all text deltas joined).
        request_bytes: The request as received (e.g. the HTTP body).
        key: RSA private key of at least :data:`MIN_RSA_BITS` bits.
        kid: Key id for the JWS header (the agent's JWKS entry).
        now: Issue time, seconds since the Unix epoch (``iat``).

    Returns:
        The compact JWT, for ``response.done``'s ``signature`` or the
        ``response_signature`` SSE event.

    Raises:
        ValueError: The key is not an RSA key of sufficient size.
    """
    alg = private_algorithm(key, frozenset({RESPONSE_ALGORITHM}), "responses")
    if isinstance(now, bool) or not isinstance(now, int):
        raise ValueError("now must be an integer number of seconds")
    payload = canonical_json(
        {
            "response_hash": response_hash(response_text),
            "request_hash": request_hash(request_bytes),
            "iat": now,
        }
    )
    return sign_compact(payload, key, alg, kid, typ="JWT")


def verify_response_signature(
    token: str,
    response_text: str,
    request_bytes: bytes | str,
    key: PrivateKey | PublicKey | JWKS,
) -> dict[str, Any]:
    """Check a response signature against the response and request it covers.

    Args:
        token: The RS256 JWT.
        response_text: The full response text as received.
        request_bytes: The request as sent.
        key: The agent's RSA public key, or its :class:`JWKS`.

    Returns:
        The claims (``response_hash``, ``request_hash``, ``iat``).

    Raises:
        SignatureError: As :func:`verify_envelope` (only ``RS256`` is
            accepted), plus :attr:`Reason.MISSING_CLAIM` when a hash claim
            is absent and :attr:`Reason.TAMPERED` when the response or the
            request differs from what was signed.
    """
    claims = verify_jwt(token, key, frozenset({RESPONSE_ALGORITHM}), SignatureError)
    for name, expected, what in (
        ("response_hash", response_hash(response_text), "response text"),
        ("request_hash", request_hash(request_bytes), "request"),
    ):
        value = claims.get(name)
        if not isinstance(value, str):
            raise SignatureError(Reason.MISSING_CLAIM, f"the token has no {name} claim")
        if not hmac.compare_digest(value, expected):
            raise SignatureError(Reason.TAMPERED, f"the {what} is not the one that was signed")
    return claims


def response_signature_event(signature: str) -> bytes:
    """The SSE event that follows ``data: [DONE]`` on a signed stream (spec 004)."""
    return encode_json(orjson.dumps({"signature": signature}), event="response_signature")


@attrs.frozen
class ResponseSigner:
    """Signs responses with one RSA key: a ``sign(response_text, request_bytes)`` callable.

    The clock is injected (the binding passes ``lambda: int(time.time())``),
    so the signer itself reads none.

    Attributes:
        key: RSA private key (at least :data:`MIN_RSA_BITS` bits).
        kid: Key id, written in every signature's header and in :meth:`jwks`.
        clock: Returns the current time in whole seconds since the epoch.
    """

    key: rsa.RSAPrivateKey
    kid: str
    clock: Callable[[], int]

    def __attrs_post_init__(self) -> None:
        private_algorithm(self.key, frozenset({RESPONSE_ALGORITHM}), "responses")

    def __call__(self, response_text: str, request_bytes: bytes | str) -> str:
        """Sign one response (see :func:`sign_response`)."""
        return sign_response(response_text, request_bytes, self.key, self.kid, self.clock())

    def jwks(self) -> JWKS:
        """The public JWKS a caller verifies these signatures with."""
        return JWKS.from_keys((self.key, self.kid))
