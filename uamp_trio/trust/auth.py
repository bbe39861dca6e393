"""Authentication: credentials in, a :class:`Principal` out, or a refusal.

Theory of operation. The server's composition root owns one
:class:`Authenticator` and asks it, once per HTTP request, WebSocket upgrade or
multiplexed ``session.create``/``session.update``, to turn the bearer token the
caller presented into a principal (Starlette's authentication backends are the
model). Handlers read the principal and never see the raw token again.

Three authenticators cover what operators configure:

* :class:`JWTAuthenticator` verifies JWT bearer tokens against a JWKS (a file
  or a URL). The algorithms are configuration, never read from the token
  (``alg: none`` and HS256-with-a-public-key are refused by construction);
  ``exp``/``nbf``/``iat`` are checked against an injectable clock with a small
  leeway; issuer and audience are required. A URL's JWKS is fetched lazily and
  refetched when a token names an unknown ``kid``, at most once per
  ``refresh_interval`` so random ``kid``s cannot make us hammer the issuer.
* :class:`APIKeyAuthenticator` accepts static keys from a file of
  ``principal:key`` lines. Only SHA-256 digests are kept; the lookup compares
  digests with :func:`hmac.compare_digest`.
* :class:`AnonymousAuthenticator` lets everyone in as ``anonymous`` (loopback
  quick start, or ``--allow-anonymous``).

:class:`AnyOf` tries several in order. Every refusal is one
:class:`AuthError` with code ``unauthorized``; its message never contains the
token, and nothing here logs.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

import attrs
import jwt
import orjson

from uamp_proto.errors import UampError
from uamp_proto.principal import ANONYMOUS, Principal

__all__ = [
    "ALLOWED_ALGORITHMS",
    "ANONYMOUS",
    "SESSION_AUTH",
    "APIKeyAuthenticator",
    "AnonymousAuthenticator",
    "AnyOf",
    "AuthError",
    "Authenticator",
    "JWTAuthenticator",
    "Principal",
    "bearer_token",
    "is_loopback",
]

#: The principal of a UAMP WebSocket connection whose upgrade presented no
#: token: the connection grants nothing, and each multiplexed session
#: authenticates with its own ``session.create.token`` (spec 000 section 10.3).
#: It never reaches an agent.
SESSION_AUTH = Principal(id="", scheme="per-session")

#: The asymmetric algorithms a JWKS key may be used with; HMAC never.
ALLOWED_ALGORITHMS = ("RS256", "ES256", "EdDSA")


@attrs.define(auto_exc=True)
class AuthError(UampError):
    """A caller was refused.

    Attributes:
        code: Always ``unauthorized`` (spec 000's session error code).
        error: The RFC 6750 ``error`` for ``WWW-Authenticate``: always
            ``invalid_token`` (a missing token included: clients key their
            token refresh on it, and issue 13 asks for one answer).
        message: A sentence for the caller; never contains the token.
    """

    code: ClassVar[str] = "unauthorized"

    message: str
    error: str = attrs.field(default="invalid_token", kw_only=True)

    @property
    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` header value for a 401."""
        return f'Bearer realm="uamp", error="{self.error}"'


class Authenticator(Protocol):
    """Turns a bearer token (or its absence) into a principal."""

    async def authenticate(self, token: str | None) -> Principal:
        """Return the caller's principal.

        Raises:
            AuthError: the token is missing, malformed, expired or unknown.
        """
        ...


def _missing() -> AuthError:
    return AuthError("authentication required: send a bearer token")


class AnonymousAuthenticator:
    """Everyone is :data:`ANONYMOUS`; a presented token is ignored."""

    async def authenticate(self, token: str | None) -> Principal:
        """Return :data:`ANONYMOUS`."""
        return ANONYMOUS


#: The principal prefix of an API key bound to one agent (``agent:NAME``).
AGENT_PREFIX = "agent"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class APIKeyAuthenticator:
    """Static API keys, kept as SHA-256 digests.

    Args:
        keys: ``(principal, key)`` pairs.
    """

    def __init__(self, keys: Iterable[tuple[str, str]]) -> None:
        self._by_digest: dict[bytes, str] = {}
        for principal, key in keys:
            if not principal or not key:
                raise ValueError("an API key needs a principal and a non-empty key")
            self._by_digest[_digest(key)] = principal

    @classmethod
    def from_file(cls, path: str | Path) -> APIKeyAuthenticator:
        """Read ``principal:key`` lines; blank lines and ``#`` comments are skipped.

        ``agent:NAME:key`` binds the key to agent ``NAME`` (principal
        ``agent:NAME``): the credential a relay's daemon registers NAME with.

        Raises:
            ValueError: a line is not ``principal:key`` (named by number, not content).
        """
        pairs: list[tuple[str, str]] = []
        for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            principal, sep, key = line.partition(":")
            if principal.strip() == AGENT_PREFIX:
                # ``agent:NAME:key``: a key bound to agent NAME (docs/relay.md).
                name, sep, key = key.partition(":")
                principal = f"{AGENT_PREFIX}:{name.strip()}" if name.strip() else ""
            if not sep or not principal.strip() or not key.strip():
                raise ValueError(f"{path}:{number}: expected 'principal:key'")
            pairs.append((principal.strip(), key.strip()))
        return cls(pairs)

    def __len__(self) -> int:
        return len(self._by_digest)

    async def authenticate(self, token: str | None) -> Principal:
        """Return the key's principal."""
        if not token:
            raise _missing()
        digest = _digest(token)
        found: str | None = None
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                found = principal
        if found is None:
            raise AuthError("invalid API key")
        return Principal(id=found, scheme="api_key")


#: Fetches a JWKS document: ``await fetch(url) -> bytes``.
FetchJWKS = Callable[[str], Any]


async def _fetch_with_httpx(url: str) -> bytes:
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        response = await client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        return response.content


def _parse_jwks(document: bytes, algorithms: Sequence[str]) -> dict[str | None, jwt.PyJWK]:
    try:
        data = orjson.loads(document)
        keys = data["keys"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError("JWKS: expected a JSON object with a 'keys' array") from exc
    found: dict[str | None, jwt.PyJWK] = {}
    for entry in keys:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in ("RSA", "EC", "OKP"):
            continue  # symmetric keys never verify a bearer token
        alg = entry.get("alg")
        if alg is not None and alg not in algorithms:
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError):
            continue  # a key type we do not verify with; others may still serve
        if key.algorithm_name in algorithms:
            found[entry.get("kid")] = key
    return found


class JWTAuthenticator:
    """JWT bearer tokens verified against a JWKS.

    Args:
        jwks: A path to a JWKS file, or an ``http(s)://`` URL.
        issuer: The required ``iss``.
        audience: The required ``aud``.
        algorithms: Accepted algorithms (a subset of :data:`ALLOWED_ALGORITHMS`).
        leeway: Seconds of clock skew allowed on ``exp``/``nbf``/``iat``.
        refresh_interval: Least seconds between two fetches of a JWKS URL.
        clock: Seconds since the epoch (injectable for tests).
        fetch: How a JWKS URL is fetched (default: httpx).
    """

    def __init__(
        self,
        jwks: str | Path,
        *,
        issuer: str,
        audience: str,
        algorithms: Sequence[str] = ALLOWED_ALGORITHMS,
        leeway: float = 30.0,
        refresh_interval: float = 60.0,
        clock: Callable[[], float] = time.time,
        fetch: FetchJWKS = _fetch_with_httpx,
    ) -> None:
        bad = [a for a in algorithms if a not in ALLOWED_ALGORITHMS]
        if bad or not algorithms:
            raise ValueError(
                f"JWT algorithms must be among {', '.join(ALLOWED_ALGORITHMS)}; got {bad or 'none'}"
            )
        if not issuer or not audience:
            raise ValueError("JWT authentication needs both an issuer and an audience")
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.leeway = leeway
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._fetch = fetch
        self._url: str | None = None
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self.fetches = 0
        source = str(jwks)
        if source.startswith(("http://", "https://")):
            self._url = source
        else:
            self._keys = _parse_jwks(Path(source).read_bytes(), self.algorithms)
            if not self._keys:
                raise ValueError(f"{source}: the JWKS has no usable signing key")

    async def _refresh(self) -> None:
        now = self._clock()
        if self._url is None:
            return
        if self._fetched_at is not None and now - self._fetched_at < self.refresh_interval:
            return
        self._fetched_at = now
        self.fetches += 1
        try:
            document = await self._fetch(self._url)
            keys = _parse_jwks(document, self.algorithms)
        except Exception:
            return  # keep the keys we had; the token is judged against them
        if keys:
            self._keys = keys

    async def signing_key(self, kid: str | None) -> jwt.PyJWK:
        """The issuer's key named ``kid`` (the only one when ``kid`` is ``None``).

        Also verifies spec 003 capability tokens of the same issuer
        (:mod:`uamp_trio.trust.envelopes`).

        Raises:
            AuthError: No such key, after one refetch of a JWKS URL.
        """
        return await self._key_for(kid)

    async def _key_for(self, kid: str | None) -> jwt.PyJWK:
        if self._url is not None and self._fetched_at is None:
            await self._refresh()
        key = self._keys.get(kid)
        if key is None and kid is None and len(self._keys) == 1:
            key = next(iter(self._keys.values()))
        if key is None:
            await self._refresh()
            key = self._keys.get(kid)
        if key is None:
            raise AuthError("invalid token: unknown signing key")
        return key

    async def authenticate(self, token: str | None) -> Principal:
        """Verify the token; return a principal named by its ``sub``."""
        if not token:
            raise _missing()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError("invalid token: not a JWT") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise AuthError("invalid token: algorithm not accepted")
        kid = header.get("kid")
        key = await self._key_for(kid if isinstance(kid, str) else None)
        if key.algorithm_name != alg:
            raise AuthError("invalid token: algorithm does not match the key")
        try:
            # The clock checks are ours (below), against the injectable clock.
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                options={
                    "require": ["exp", "iss", "aud", "sub"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.InvalidAudienceError:
            raise AuthError("invalid token: wrong audience") from None
        except jwt.InvalidIssuerError:
            raise AuthError("invalid token: wrong issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"invalid token: missing claim {exc.claim!r}") from None
        except jwt.PyJWTError:
            raise AuthError("invalid token: bad signature or format") from None
        now = self._clock()
        exp = _number(claims.get("exp"), "exp")
        if now > exp + self.leeway:
            raise AuthError("invalid token: expired")
        nbf = claims.get("nbf")
        if nbf is not None and now + self.leeway < _number(nbf, "nbf"):
            raise AuthError("invalid token: not yet valid")
        iat = claims.get("iat")
        if iat is not None and now + self.leeway < _number(iat, "iat"):
            raise AuthError("invalid token: issued in the future")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise AuthError("invalid token: 'sub' must be a non-empty string")
        return Principal(id=sub, scheme="jwt", expires_at=exp, claims=claims)


def _number(value: object, claim: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthError(f"invalid token: {claim!r} must be a number")
    return float(value)


class AnyOf:
    """Tries authenticators in order; the first that accepts wins."""

    def __init__(self, authenticators: Sequence[Authenticator]) -> None:
        if not authenticators:
            raise ValueError("AnyOf needs at least one authenticator")
        self.authenticators = tuple(authenticators)

    async def authenticate(self, token: str | None) -> Principal:
        """Return the first principal any authenticator grants."""
        if not token:
            raise _missing()
        for authenticator in self.authenticators:
            try:
                return await authenticator.authenticate(token)
            except AuthError:
                continue
        raise AuthError("invalid token")


def bearer_token(authorization: str | None, query_token: str | None = None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, else ``?token=``, else ``None``."""
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None
    return query_token or None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
