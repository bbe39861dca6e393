"""Signatures: spec 003 envelopes and capability tokens, spec 000/004 responses.

Theory of operation
-------------------

Three things are signed, all as JSON Web Signatures (RFC 7515) made and
checked with pyjwt on keys from ``cryptography``:

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

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs
import jwt
import orjson
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.algorithms import ECAlgorithm

from .envelope import (
    UNAUTHENTICATED,
    UNAUTHORIZED,
    Envelope,
    EnvelopeError,
    ErrorCode,
    canonical_json,
    envelope_sha256,
)
from .errors import UampError
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

#: A private key this module signs with.
PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
#: A public key this module verifies with.
PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | rsa.RSAPublicKey

#: Envelope signature algorithms (spec 003 section 6.3).
ENVELOPE_ALGORITHMS: Final = frozenset({"ES256", "EdDSA"})
#: Capability token algorithms: section 6.2 names none, so the envelope ones
#: plus RS256 (the algorithm of response signatures).
CAP_TOKEN_ALGORITHMS: Final = frozenset({"ES256", "EdDSA", "RS256"})
#: The response signature algorithm (spec 000 section 6.7, spec 004).
RESPONSE_ALGORITHM: Final = "RS256"
#: Smallest RSA modulus accepted for signing or verifying (NIST SP 800-131A).
MIN_RSA_BITS: Final = 2048
#: The HTTP header carrying a non-streamed Chat Completion's signature.
SIGNATURE_HEADER: Final = "X-UAMP-Signature"
#: Where an agent publishes its JWKS, under ``/agents/{name}``.
JWKS_PATH: Final = "/.well-known/jwks.json"

_B64URL: Final = re.compile(r"^[A-Za-z0-9_-]*$")
# The signature segment may be empty here so that an unsecured ("alg":
# "none") token is reported as a bad algorithm rather than as malformed;
# an empty signature is refused right after the algorithm check.
_DETACHED: Final = re.compile(r"^([A-Za-z0-9_-]+)\.\.([A-Za-z0-9_-]*)$")
_COMPACT: Final = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)$")


# --- errors -------------------------------------------------------------------------


class Reason(enum.StrEnum):
    """Why a signature or token was refused."""

    UNSIGNED = "unsigned"
    """The envelope has no ``sig``."""
    MALFORMED = "malformed"
    """Not a JWS of the expected form (segments, base64url, JSON header)."""
    BAD_ALG = "bad_alg"
    """The header's ``alg`` is not one allowed here (``none``, ``HS256``...)."""
    UNKNOWN_KID = "unknown_kid"
    """The JWKS has no key for the header's ``kid`` (or none fits without one)."""
    WRONG_KEY = "wrong_key"
    """The key cannot verify this algorithm (an RSA key for ``ES256``...)."""
    BAD_SIGNATURE = "bad_signature"
    """The signature does not verify: the signed content changed after
    signing, or another key of the right type signed it. The two cannot be
    told apart from a detached signature."""
    TAMPERED = "tampered"
    """The signature verifies, but the response or request it covers is not
    the one given (its hash differs)."""
    MISSING_CLAIM = "missing_claim"
    """A required claim is absent or of the wrong type."""
    EXPIRED = "expired"
    """``now`` is at or past ``exp``."""
    NOT_YET_VALID = "not_yet_valid"
    """``now`` is before ``nbf``, or ``iat`` is in the future."""
    WRONG_AUDIENCE = "wrong_audience"
    """``aud`` does not name the expected audience."""
    MISSING_SCOPE = "missing_scope"
    """``scope`` lacks a required scope."""


_AUTHORIZATION_REASONS: Final = frozenset({Reason.WRONG_AUDIENCE, Reason.MISSING_SCOPE})


class SigningError(UampError):
    """Base of the verification errors.

    Attributes:
        reason: What went wrong.
        message: A sentence for a person.
        error_code: Spec 003 section 9 code to report: 4.03 (unauthorised)
            for a valid token that does not grant the request, else 4.01
            (unauthenticated).
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message
        self.error_code: ErrorCode = (
            UNAUTHORIZED if reason in _AUTHORIZATION_REASONS else UNAUTHENTICATED
        )


class SignatureError(SigningError):
    """An envelope signature or a response signature was refused."""


class CapTokenError(SigningError):
    """A capability token was refused."""


class JWKSError(UampError, ValueError):
    """A JWK or JWKS document that cannot be used (malformed, private, weak)."""


# --- keys ---------------------------------------------------------------------------


def _check_key(key: object, *, private: bool) -> None:
    if private:
        kinds: tuple[type, ...] = (
            ec.EllipticCurvePrivateKey,
            ed25519.Ed25519PrivateKey,
            rsa.RSAPrivateKey,
        )
    else:
        kinds = (ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey, rsa.RSAPublicKey)
    if not isinstance(key, kinds):
        what = "private" if private else "public"
        raise TypeError(
            f"expected an EC P-256, Ed25519 or RSA {what} key from cryptography, "
            f"not {type(key).__name__}"
        )


def algorithm_for(key: PrivateKey | PublicKey) -> str:
    """The JWS algorithm a key signs with: ``ES256``, ``EdDSA`` or ``RS256``.

    Raises:
        ValueError: An EC key on another curve than P-256, or an RSA key
            shorter than :data:`MIN_RSA_BITS`.
        TypeError: Not a key type this module knows.
    """
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"EC keys must be on P-256 for ES256, not {key.curve.name}")
        return "ES256"
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA keys must have at least {MIN_RSA_BITS} bits, not {key.key_size}")
        return "RS256"
    _check_key(key, private=False)
    raise AssertionError("unreachable")  # pragma: no cover


def _public(key: PrivateKey | PublicKey) -> PublicKey:
    if isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey):
        return key.public_key()
    return key


def load_private_key(pem: bytes, password: bytes | None = None) -> PrivateKey:
    """Read a PEM private key (PKCS #8 or traditional) of a supported type.

    Raises:
        ValueError: Not a PEM key, wrong password, or an unsupported type or
            size (see :func:`algorithm_for`).
    """
    try:
        key = serialization.load_pem_private_key(pem, password=password)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"cannot read the private key: {exc}") from None
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
    ):
        raise ValueError(f"unsupported private key type {type(key).__name__}")
    algorithm_for(key)
    return key


# --- base64url and JWK --------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url (RFC 7515 section 2); ValueError otherwise."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None
    if _b64url(data) != text:
        # Non-canonical trailing bits: the same bytes have one spelling.
        raise ValueError("not the canonical base64url spelling")
    return data


def _int_bytes(n: int, length: int | None = None) -> bytes:
    size = length if length is not None else max(1, (n.bit_length() + 7) // 8)
    return n.to_bytes(size, "big")


def public_jwk(key: PrivateKey | PublicKey, kid: str | None = None) -> dict[str, str]:
    """The public JWK (RFC 7517/7518/8037) of ``key``.

    A private key is reduced to its public half; private members never
    appear.

    Args:
        key: EC P-256, Ed25519 or RSA key.
        kid: Key id written as ``kid`` (and used by verifiers to pick it).

    Returns:
        ``{"kty", crv/x/y or n/e, "alg", "use": "sig", "kid"}``.
    """
    alg = algorithm_for(key)
    pub = _public(key)
    jwk: dict[str, str]
    if isinstance(pub, ec.EllipticCurvePublicKey):
        nums = pub.public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64url(_int_bytes(nums.x, 32)),
            "y": _b64url(_int_bytes(nums.y, 32)),
        }
    elif isinstance(pub, ed25519.Ed25519PublicKey):
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw)}
    else:
        rnums = pub.public_numbers()
        jwk = {"kty": "RSA", "n": _b64url(_int_bytes(rnums.n)), "e": _b64url(_int_bytes(rnums.e))}
    jwk["alg"] = alg
    jwk["use"] = "sig"
    if kid is not None:
        jwk["kid"] = kid
    return jwk


_PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


def _jwk_member(jwk: Mapping[str, Any], name: str) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise JWKSError(f"member {name!r} must be a base64url string")
    try:
        return _b64url_decode(value)
    except ValueError as exc:
        raise JWKSError(f"member {name!r}: {exc}") from None


def _key_from_jwk(jwk: Mapping[str, Any]) -> PublicKey | None:
    """The public key of one JWK, or ``None`` for a type this module does not use."""
    leaked = sorted(_PRIVATE_MEMBERS & set(jwk))
    if leaked:
        raise JWKSError(f"holds private key material ({', '.join(leaked)}); publish public keys")
    kty, crv = jwk.get("kty"), jwk.get("crv")
    key: PublicKey
    try:
        if kty == "EC" and crv == "P-256":
            x, y = _jwk_member(jwk, "x"), _jwk_member(jwk, "y")
            if len(x) != 32 or len(y) != 32:
                raise JWKSError("P-256 coordinates must be 32 bytes each")
            key = ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            ).public_key()
        elif kty == "OKP" and crv == "Ed25519":
            x = _jwk_member(jwk, "x")
            if len(x) != 32:
                raise JWKSError("an Ed25519 public key is 32 bytes")
            key = ed25519.Ed25519PublicKey.from_public_bytes(x)
        elif kty == "RSA":
            n = int.from_bytes(_jwk_member(jwk, "n"), "big")
            e = int.from_bytes(_jwk_member(jwk, "e"), "big")
            key = rsa.RSAPublicNumbers(e, n).public_key()
            if key.key_size < MIN_RSA_BITS:
                raise JWKSError(f"RSA key of {key.key_size} bits; at least {MIN_RSA_BITS} needed")
        elif isinstance(kty, str):
            return None
        else:
            raise JWKSError("member 'kty' must be a string")
    except (ValueError, UnsupportedAlgorithm) as exc:
        if isinstance(exc, JWKSError):
            raise
        raise JWKSError(f"not a valid {kty} public key: {exc}") from None
    return key


@attrs.frozen(kw_only=True)
class JWK:
    """One public key of a :class:`JWKS`.

    Attributes:
        key: The public key.
        kid: Its key id, if it has one.
        alg: The algorithm it verifies (``ES256``, ``EdDSA`` or ``RS256``).
    """

    key: PublicKey
    kid: str | None = None
    alg: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        _check_key(self.key, private=False)
        object.__setattr__(self, "alg", algorithm_for(self.key))

    def to_dict(self) -> dict[str, str]:
        """The JWK JSON object."""
        return public_jwk(self.key, self.kid)


def _jwk_tuple(keys: Iterable[JWK]) -> tuple[JWK, ...]:
    return tuple(keys)


@attrs.frozen
class JWKS:
    """A JSON Web Key Set (RFC 7517 section 5) of public signing keys.

    Build one from keys with :meth:`from_keys`, read one with :meth:`parse`,
    publish it with :meth:`to_dict` / :meth:`to_json`. Key ids are unique.

    Attributes:
        keys: The keys, in document order.
    """

    keys: tuple[JWK, ...] = attrs.field(converter=_jwk_tuple)

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for jwk in self.keys:
            if not isinstance(jwk, JWK):
                raise TypeError(f"JWKS keys must be JWK values, not {type(jwk).__name__}")
            if jwk.kid is not None:
                if jwk.kid in seen:
                    raise JWKSError(f"kid {jwk.kid!r} names two keys")
                seen.add(jwk.kid)

    @classmethod
    def from_keys(cls, *keys: tuple[PrivateKey | PublicKey, str | None]) -> JWKS:
        """A set from ``(key, kid)`` pairs; private keys contribute their public half."""
        return cls(tuple(JWK(key=_public(k), kid=kid) for k, kid in keys))

    @classmethod
    def parse(cls, data: bytes | str | Mapping[str, Any]) -> JWKS:
        """Read a JWKS document.

        Keys of other types (``oct``, other curves) and keys marked
        ``"use": "enc"`` are skipped, as RFC 7517 lets a set hold keys a
        reader does not use.

        Raises:
            JWKSError: Not a ``{"keys": [...]}`` object, a key of a supported
                type that is malformed, weak or private, a key whose ``alg``
                contradicts its type, or a repeated ``kid``.
        """
        if isinstance(data, Mapping):
            doc: Any = data
        else:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise JWKSError(f"the JWKS is not valid JSON: {exc}") from None
        if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
            raise JWKSError('a JWKS must be an object with a "keys" array')
        out: list[JWK] = []
        for i, item in enumerate(doc["keys"]):
            try:
                if not isinstance(item, Mapping):
                    raise JWKSError("must be an object")
                if item.get("use", "sig") != "sig":
                    continue
                key = _key_from_jwk(item)
                if key is None:
                    continue
                kid = item.get("kid")
                if kid is not None and not isinstance(kid, str):
                    raise JWKSError("member 'kid' must be a string")
                jwk = JWK(key=key, kid=kid)
                alg = item.get("alg")
                if alg is not None and alg != jwk.alg:
                    raise JWKSError(f"says alg {alg!r}, but the key is for {jwk.alg}")
            except JWKSError as exc:
                raise JWKSError(f"keys[{i}]: {exc}") from None
            out.append(jwk)
        return cls(tuple(out))

    def get(self, kid: str) -> JWK | None:
        """The key with id ``kid``, or ``None``."""
        for jwk in self.keys:
            if jwk.kid == kid:
                return jwk
        return None

    def to_dict(self) -> dict[str, list[dict[str, str]]]:
        """The JWKS JSON object, ``{"keys": [...]}``."""
        return {"keys": [jwk.to_dict() for jwk in self.keys]}

    def to_json(self) -> bytes:
        """The JWKS as JSON bytes."""
        return orjson.dumps(self.to_dict())


# --- the JWS layer ------------------------------------------------------------------


class _DeterministicES256(ECAlgorithm):
    """pyjwt's ES256 with RFC 6979 nonces: no randomness drawn when signing."""

    def sign(self, msg: bytes, key: ec.EllipticCurvePrivateKey) -> bytes:
        der = key.sign(msg, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
        r, s = decode_dss_signature(der)
        return _int_bytes(r, 32) + _int_bytes(s, 32)


def _make_jws() -> jwt.PyJWS:
    jws = jwt.PyJWS(
        algorithms=sorted(CAP_TOKEN_ALGORITHMS),
        options={"verify_signature": True, "enforce_minimum_key_length": True},
    )
    jws.unregister_algorithm("ES256")
    jws.register_algorithm("ES256", _DeterministicES256(ECAlgorithm.SHA256, ec.SECP256R1))
    return jws


#: One configured pyjwt JWS codec; it holds no per-call state.
_JWS: Final = _make_jws()


def _read_header(segment: str) -> dict[str, Any]:
    try:
        header = orjson.loads(_b64url_decode(segment))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"the JWS header is not base64url JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("the JWS header is not a JSON object")
    return header


def _select_key(
    header: Mapping[str, Any],
    keys: PrivateKey | PublicKey | JWKS,
    allowed: frozenset[str],
    error: type[SigningError],
) -> tuple[str, PublicKey]:
    """The algorithm and key to verify with, after checking the header's ``alg``."""
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in allowed:
        raise error(
            Reason.BAD_ALG,
            f"alg {alg!r} is not accepted here; accepted: {', '.join(sorted(allowed))}",
        )
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise error(Reason.MALFORMED, "the JWS header's kid is not a string")
    if isinstance(keys, JWKS):
        if kid is not None:
            found = keys.get(kid)
            if found is None:
                raise error(Reason.UNKNOWN_KID, f"the JWKS has no key with kid {kid!r}")
        else:
            fits = [k for k in keys.keys if k.alg == alg]
            if len(fits) != 1:
                raise error(
                    Reason.UNKNOWN_KID,
                    f"the JWS names no kid and the JWKS has {len(fits)} {alg} keys",
                )
            found = fits[0]
        key: PublicKey = found.key
    else:
        _check_key(_public(keys), private=False)
        key = _public(keys)
    try:
        key_alg = algorithm_for(key)
    except ValueError as exc:
        raise error(Reason.WRONG_KEY, str(exc)) from None
    if key_alg != alg:
        raise error(Reason.WRONG_KEY, f"the JWS is {alg} but the key is a {key_alg} key")
    return alg, key


def _verify_compact(token: str, alg: str, key: PublicKey, error: type[SigningError]) -> bytes:
    """Check a compact JWS's signature; return its payload bytes."""
    try:
        decoded = _JWS.decode_complete(token, key, algorithms=[alg])
    except jwt.InvalidSignatureError:
        raise error(Reason.BAD_SIGNATURE, "the signature does not verify") from None
    except jwt.InvalidAlgorithmError as exc:
        raise error(Reason.BAD_ALG, str(exc)) from None
    except jwt.InvalidKeyError as exc:
        raise error(Reason.WRONG_KEY, str(exc)) from None
    except jwt.PyJWTError as exc:
        raise error(Reason.MALFORMED, str(exc)) from None
    payload: bytes = decoded["payload"]
    return payload


def _sign_compact(
    payload: bytes, key: PrivateKey, alg: str, kid: str | None, typ: str | None
) -> str:
    headers: dict[str, Any] = {"typ": typ}
    if kid is not None:
        headers["kid"] = kid
    return _JWS.encode(payload, key, algorithm=alg, headers=headers)


def _private_alg(key: PrivateKey, allowed: frozenset[str], what: str) -> str:
    _check_key(key, private=True)
    alg = algorithm_for(key)
    if alg not in allowed:
        raise ValueError(
            f"{what} are signed with {', '.join(sorted(allowed))}; a {alg} key cannot sign them"
        )
    return alg


# --- envelopes (spec 003 section 6.3) -----------------------------------------------


def _envelope_payload(envelope: Envelope) -> bytes:
    return canonical_json({"sha256": envelope_sha256(envelope)})


def sign_envelope(envelope: Envelope, key: PrivateKey, kid: str | None = None) -> Envelope:
    """Sign an envelope: a copy whose ``sig`` is a detached compact JWS.

    Any ``sig`` already present is replaced (it is not part of what is
    signed).

    Args:
        envelope: The envelope to sign.
        key: An EC P-256 (``ES256``) or Ed25519 (``EdDSA``) private key.
        kid: Key id for the JWS header, so verifiers can find the key in a
            JWKS.

    Returns:
        The envelope with ``sig`` = ``"<header>..<signature>"``.

    Raises:
        ValueError: The key cannot make envelope signatures (RSA, P-384...).
        TypeError: ``key`` is not a private key.
    """
    alg = _private_alg(key, ENVELOPE_ALGORITHMS, "envelopes")
    token = _sign_compact(_envelope_payload(envelope), key, alg, kid, typ=None)
    header, _, signature = token.split(".")
    return attrs.evolve(envelope, sig=f"{header}..{signature}")


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
    m = _DETACHED.match(envelope.sig)
    if m is None:
        raise SignatureError(
            Reason.MALFORMED, "sig is not a detached compact JWS ('<header>..<signature>')"
        )
    header_b64, signature_b64 = m.groups()
    try:
        header = _read_header(header_b64)
    except ValueError as exc:
        raise SignatureError(Reason.MALFORMED, str(exc)) from None
    alg, public = _select_key(header, key, ENVELOPE_ALGORITHMS, SignatureError)
    if not signature_b64:
        raise SignatureError(Reason.MALFORMED, "sig has an empty signature segment")
    try:
        payload = _envelope_payload(envelope)
    except EnvelopeError as exc:  # pragma: no cover - constructors validate first
        raise SignatureError(Reason.MALFORMED, str(exc)) from None
    token = f"{header_b64}.{_b64url(payload)}.{signature_b64}"
    _verify_compact(token, alg, public, SignatureError)


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
    alg = _private_alg(key, CAP_TOKEN_ALGORITHMS, "capability tokens")
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
    return _sign_compact(payload, key, alg, kid, typ="JWT")


def _decode_jwt(
    token: str,
    key: PrivateKey | PublicKey | JWKS,
    allowed: frozenset[str],
    error: type[SigningError],
) -> dict[str, Any]:
    """Verify a compact JWT's signature and return its claims object."""
    if not isinstance(token, str):
        raise error(Reason.MALFORMED, f"the token must be a string, not {type(token).__name__}")
    m = _COMPACT.match(token)
    if m is None:
        raise error(Reason.MALFORMED, "not a compact JWS ('<header>.<payload>.<signature>')")
    try:
        header = _read_header(m.group(1))
    except ValueError as exc:
        raise error(Reason.MALFORMED, str(exc)) from None
    alg, public = _select_key(header, key, allowed, error)
    if not m.group(3):
        raise error(Reason.MALFORMED, "the token has an empty signature segment")
    payload = _verify_compact(token, alg, public, error)
    try:
        claims = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise error(Reason.MALFORMED, "the payload is not JSON") from None
    if not isinstance(claims, dict):
        raise error(Reason.MALFORMED, "the payload is not a JSON object")
    return claims


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
    audience: str,
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
        audience: Who is checking: must be ``aud`` or one of its entries.
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
    claims = _decode_jwt(token, key, CAP_TOKEN_ALGORITHMS, CapTokenError)
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
    if audience not in audiences:
        raise CapTokenError(
            Reason.WRONG_AUDIENCE, f"the token is for {audiences!r}, not {audience!r}"
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
    alg = _private_alg(key, frozenset({RESPONSE_ALGORITHM}), "responses")
    if isinstance(now, bool) or not isinstance(now, int):
        raise ValueError("now must be an integer number of seconds")
    payload = canonical_json(
        {
            "response_hash": response_hash(response_text),
            "request_hash": request_hash(request_bytes),
            "iat": now,
        }
    )
    return _sign_compact(payload, key, alg, kid, typ="JWT")


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
    claims = _decode_jwt(token, key, frozenset({RESPONSE_ALGORITHM}), SignatureError)
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
        _private_alg(self.key, frozenset({RESPONSE_ALGORITHM}), "responses")

    def __call__(self, response_text: str, request_bytes: bytes | str) -> str:
        """Sign one response (see :func:`sign_response`)."""
        return sign_response(response_text, request_bytes, self.key, self.kid, self.clock())

    def jwks(self) -> JWKS:
        """The public JWKS a caller verifies these signatures with."""
        return JWKS.from_keys((self.key, self.kid))
