"""The key and JWS layer: keys, JWK/JWKS, compact and detached JWS, canonical JSON.

Theory of operation
-------------------
Everything uamp signs is a JSON Web Signature (RFC 7515) over bytes this
layer is handed; what those bytes are is the caller's business
(:mod:`uamp_proto.signing`: spec 003 envelopes and capability tokens, spec
000/004 response signatures). This module is the one home of

* **keys**: EC P-256 (``ES256``), Ed25519 (``EdDSA``) and RSA of at least
  :data:`MIN_RSA_BITS` bits (``RS256``) from ``cryptography``;
  :func:`algorithm_for` names a key's algorithm, :func:`load_private_key`
  reads PEM;
* **JWK and JWKS** (RFC 7517): :func:`public_jwk`, :class:`JWK`,
  :class:`JWKS` (parse, publish, look up by ``kid``);
* **JWS**: :func:`sign_compact` / :func:`verify_compact` through one
  configured pyjwt codec, :func:`sign_detached` / :func:`verify_detached`
  for RFC 7515 Appendix F signatures (``header..signature``: the verifier
  supplies the payload), :func:`verify_jwt` for a compact JWT's claims;
  :func:`select_key` checks the header's ``alg`` against what the caller
  allows and picks the key (a JWKS by ``kid``);
* **canonical JSON** (spec 003 section 4.2): :func:`canonical_json`, kept
  with the envelope format in :mod:`uamp_proto.envelope` (which needs no
  cryptography) and re-exported here.

Signing draws no randomness: ``ES256`` uses RFC 6979 nonces, ``EdDSA`` and
``RS256`` are deterministic. Keys are always passed in; none is generated.
Every refusal is a :class:`SigningError` subclass (the caller picks which)
with a :class:`Reason` and the spec 003 error code to answer with.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import attrs
import jwt
import orjson
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.algorithms import ECAlgorithm

from .envelope import UNAUTHENTICATED, UNAUTHORIZED, ErrorCode, canonical_json
from .errors import UampError

__all__ = [
    "ALGORITHMS",
    "JWK",
    "JWKS",
    "MIN_RSA_BITS",
    "JWKSError",
    "PrivateKey",
    "PublicKey",
    "Reason",
    "SignatureError",
    "SigningError",
    "algorithm_for",
    "b64url",
    "b64url_decode",
    "canonical_json",
    "check_key",
    "jwk_thumbprint",
    "load_private_key",
    "private_algorithm",
    "public_jwk",
    "public_key_of",
    "read_header",
    "select_key",
    "sign_compact",
    "sign_detached",
    "verify_compact",
    "verify_detached",
    "verify_jwt",
]

#: A private key this module signs with.
PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
#: A public key this module verifies with.
PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | rsa.RSAPublicKey

#: Every JWS algorithm this layer signs and verifies with.
ALGORITHMS: Final = frozenset({"ES256", "EdDSA", "RS256"})
#: Smallest RSA modulus accepted for signing or verifying (NIST SP 800-131A).
MIN_RSA_BITS: Final = 2048

_B64URL: Final = re.compile(r"^[A-Za-z0-9_-]*$")
# The signature segment may be empty here so that an unsecured ("alg":
# "none") token is reported as a bad algorithm rather than as malformed;
# an empty signature is refused right after the algorithm check.
_DETACHED: Final = re.compile(r"^([A-Za-z0-9_-]+)\.\.([A-Za-z0-9_-]*)$")
_COMPACT: Final = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)$")


# --- errors ---------------------------------------------------------------------------


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


class JWKSError(UampError, ValueError):
    """A JWK or JWKS document that cannot be used (malformed, private, weak)."""


# --- keys ---------------------------------------------------------------------------


def check_key(key: object, *, private: bool) -> None:
    """Refuse (``TypeError``) anything but an EC, Ed25519 or RSA key of the wanted half."""
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
    check_key(key, private=False)
    raise AssertionError("unreachable")  # pragma: no cover


def public_key_of(key: PrivateKey | PublicKey) -> PublicKey:
    """The public half of ``key`` (a public key is returned as it is)."""
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


def b64url(data: bytes) -> str:
    """Unpadded base64url (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url (RFC 7515 section 2); ValueError otherwise."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None
    if b64url(data) != text:
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
    pub = public_key_of(key)
    jwk: dict[str, str]
    if isinstance(pub, ec.EllipticCurvePublicKey):
        nums = pub.public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(_int_bytes(nums.x, 32)),
            "y": b64url(_int_bytes(nums.y, 32)),
        }
    elif isinstance(pub, ed25519.Ed25519PublicKey):
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
    else:
        rnums = pub.public_numbers()
        jwk = {"kty": "RSA", "n": b64url(_int_bytes(rnums.n)), "e": b64url(_int_bytes(rnums.e))}
    jwk["alg"] = alg
    jwk["use"] = "sig"
    if kid is not None:
        jwk["kid"] = kid
    return jwk


_THUMBPRINT_MEMBERS: Final = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x")}


def jwk_thumbprint(key: PrivateKey | PublicKey) -> str:
    """The RFC 7638 thumbprint of ``key``'s public JWK, base64url (a stable ``kid``)."""
    jwk = public_jwk(key)
    members = _THUMBPRINT_MEMBERS.get(jwk["kty"], ("e", "kty", "n"))
    return b64url(hashlib.sha256(canonical_json({k: jwk[k] for k in members})).digest())


_PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


def _jwk_member(jwk: Mapping[str, Any], name: str) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise JWKSError(f"member {name!r} must be a base64url string")
    try:
        return b64url_decode(value)
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
        check_key(self.key, private=False)
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
        return cls(tuple(JWK(key=public_key_of(k), kid=kid) for k, kid in keys))

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
        algorithms=sorted(ALGORITHMS),
        options={"verify_signature": True, "enforce_minimum_key_length": True},
    )
    jws.unregister_algorithm("ES256")
    jws.register_algorithm("ES256", _DeterministicES256(ECAlgorithm.SHA256, ec.SECP256R1))
    return jws


#: One configured pyjwt JWS codec; it holds no per-call state.
_JWS: Final = _make_jws()


def read_header(segment: str) -> dict[str, Any]:
    """The JSON object of a JWS header segment (``ValueError`` otherwise)."""
    try:
        header = orjson.loads(b64url_decode(segment))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"the JWS header is not base64url JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("the JWS header is not a JSON object")
    return header


def select_key(
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
        check_key(public_key_of(keys), private=False)
        key = public_key_of(keys)
    try:
        key_alg = algorithm_for(key)
    except ValueError as exc:
        raise error(Reason.WRONG_KEY, str(exc)) from None
    if key_alg != alg:
        raise error(Reason.WRONG_KEY, f"the JWS is {alg} but the key is a {key_alg} key")
    return alg, key


def verify_compact(token: str, alg: str, key: PublicKey, error: type[SigningError]) -> bytes:
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


def sign_compact(
    payload: bytes,
    key: PrivateKey,
    alg: str,
    kid: str | None,
    typ: str | None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A compact JWS ``header.payload.signature`` of ``payload``.

    ``extra`` adds protected header members (``jwk``, ``cty``...).
    """
    headers: dict[str, Any] = {"typ": typ, **(extra or {})}
    if kid is not None:
        headers["kid"] = kid
    return _JWS.encode(payload, key, algorithm=alg, headers=headers)


def private_algorithm(key: PrivateKey, allowed: frozenset[str], what: str) -> str:
    """The algorithm ``key`` signs with, refused (``ValueError``) unless in ``allowed``."""
    check_key(key, private=True)
    alg = algorithm_for(key)
    if alg not in allowed:
        raise ValueError(
            f"{what} are signed with {', '.join(sorted(allowed))}; a {alg} key cannot sign them"
        )
    return alg


def sign_detached(
    payload: bytes,
    key: PrivateKey,
    alg: str,
    kid: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """A detached compact JWS of ``payload`` (RFC 7515 Appendix F): ``header..signature``."""
    header, _, signature = sign_compact(payload, key, alg, kid, typ=None, extra=extra).split(".")
    return f"{header}..{signature}"


def verify_detached(
    sig: str,
    payload: bytes,
    keys: PrivateKey | PublicKey | JWKS,
    allowed: frozenset[str],
    error: type[SigningError],
) -> None:
    """Check a detached JWS ``sig`` over the ``payload`` the verifier rebuilt.

    Raises:
        SigningError: (as ``error``) :attr:`Reason.MALFORMED`,
            :attr:`~Reason.BAD_ALG`, :attr:`~Reason.UNKNOWN_KID`,
            :attr:`~Reason.WRONG_KEY` or :attr:`~Reason.BAD_SIGNATURE`.
    """
    m = _DETACHED.match(sig)
    if m is None:
        raise error(Reason.MALFORMED, "sig is not a detached compact JWS ('<header>..<signature>')")
    header_b64, signature_b64 = m.groups()
    try:
        header = read_header(header_b64)
    except ValueError as exc:
        raise error(Reason.MALFORMED, str(exc)) from None
    alg, public = select_key(header, keys, allowed, error)
    if not signature_b64:
        raise error(Reason.MALFORMED, "sig has an empty signature segment")
    verify_compact(f"{header_b64}.{b64url(payload)}.{signature_b64}", alg, public, error)


def verify_jwt(
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
        header = read_header(m.group(1))
    except ValueError as exc:
        raise error(Reason.MALFORMED, str(exc)) from None
    alg, public = select_key(header, key, allowed, error)
    if not m.group(3):
        raise error(Reason.MALFORMED, "the token has an empty signature segment")
    payload = verify_compact(token, alg, public, error)
    try:
        claims = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise error(Reason.MALFORMED, "the payload is not JSON") from None
    if not isinstance(claims, dict):
        raise error(Reason.MALFORMED, "the payload is not a JSON object")
    return claims
