"""Who sent a spec 003 envelope: signature, capability token, replay, clock.

Theory of operation
-------------------
:class:`EnvelopeTrust` turns a received envelope into the
:class:`~uamp_proto.principal.Principal` it acts for, or refuses it with an
:class:`~uamp_proto.adapters.envelope.EnvelopeRefused` carrying the section 9
code. The rules (docs/envelope.md, "Who is trusted"):

1. **Trusted peers.** A ``sig`` whose ``kid`` names a key of ``--trust-jwks``
   is verified against that key; the peer is ``Principal(id="key:KID",
   scheme="envelope_key")`` and needs no capability token.
2. **With authentication configured** (an issuer: the server's JWT
   authenticator, ``--auth-jwks/--auth-issuer``): the envelope needs a
   ``cap_token`` signed by that issuer, with the issuer's ``iss``, an
   ``aud`` naming the agent (its name or URL), a ``scope`` holding the
   intent and an ``exp`` in the future; its ``cnf.jwk`` (RFC 7800) is the
   key the ``sig`` must verify against. The principal is the token's
   ``sub`` (scheme ``jwt``, as for a bearer token of the same issuer).
   Authentication configured without an issuer (API keys only) accepts
   trusted peers only: fail closed.
3. **Without authentication** the ``cap_token`` is optional and ignored; the
   ``sig`` must still verify, against the ``jwk`` of its own protected
   header (integrity only). The principal is ``anonymous``.

Codes: no or unverifiable credential, bad or missing ``sig``, an expired or
malformed token, a ``ts`` outside the validity window -> 4.01; a valid
token without the ``aud`` or ``scope`` -> 4.03. :class:`ReplayGuard`
remembers accepted ids for the validity window, so a replayed ``id`` is
refused (4.03) until it could no longer pass the ``ts`` check anyway; it
decides in one step (no copy of an envelope arriving at the same time slips
through) and gives each principal a bounded share.
Messages never contain a token.
"""

from __future__ import annotations

import calendar
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from uamp_proto.adapters.envelope import EnvelopeRefused
from uamp_proto.envelope import BACKEND_BUSY, UNAUTHENTICATED, UNAUTHORIZED, Envelope
from uamp_proto.jose import JWKS, JWKSError, read_header
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.signing import (
    CapTokenError,
    PublicKey,
    SignatureError,
    verify_cap_token,
    verify_envelope,
)

from .auth import AnyOf, Authenticator, AuthError, JWTAuthenticator

__all__ = [
    "DEFAULT_MAX_REMEMBERED",
    "DEFAULT_PER_PRINCIPAL",
    "DEFAULT_VALIDITY",
    "EnvelopeTrust",
    "ReplayGuard",
    "issuers_of",
    "parse_ts",
]

#: Seconds an envelope's ``ts`` may lie from the server's clock, either way;
#: also how long an accepted ``id`` is remembered.
DEFAULT_VALIDITY: Final = 300.0
#: Most ids remembered at once; past it new envelopes get 5.04 until old
#: ones age out (memory stays bounded under a flood of valid envelopes).
DEFAULT_MAX_REMEMBERED: Final = 100_000
#: Most of those one principal may hold (its envelopes per validity window);
#: past it that principal alone gets 5.04.
DEFAULT_PER_PRINCIPAL: Final = 10_000


def parse_ts(ts: str) -> float:
    """Seconds since the epoch of an RFC 3339 ``ts`` (already format-checked)."""
    date, _, rest = ts.upper().partition("T")
    year, month, day = (int(p) for p in date.split("-"))
    offset = 0
    if rest.endswith("Z"):
        clock = rest[:-1]
    else:
        sign = 1 if "+" in rest else -1
        clock, _, zone = rest.replace("-", "+").partition("+")
        hours, minutes = (int(p) for p in zone.split(":"))
        offset = sign * (hours * 3600 + minutes * 60)
    hms, _, fraction = clock.partition(".")
    hour, minute, second = (int(p) for p in hms.split(":"))
    whole = calendar.timegm((year, month, day, hour, minute, min(second, 59), 0, 0, 0))
    return whole + (float("0." + fraction) if fraction else 0.0) - offset


def issuers_of(authenticator: Authenticator | None) -> list[JWTAuthenticator]:
    """The JWT issuers among ``authenticator`` (itself, or inside an :class:`AnyOf`)."""
    if isinstance(authenticator, JWTAuthenticator):
        return [authenticator]
    if isinstance(authenticator, AnyOf):
        return [a for inner in authenticator.authenticators for a in issuers_of(inner)]
    return []


class ReplayGuard:
    """Envelope ids accepted within the validity window, bounded in all and per principal.

    :meth:`claim` checks and remembers in one synchronous step, so of N
    copies of one envelope arriving together exactly one is taken, however
    the rest of their handling interleaves; :meth:`release` gives an id back
    when the envelope is refused after all (it may then be sent again). Ids
    are remembered per principal (who the envelope authenticated as): a
    replay can only come from the same principal, since the signature binds
    the envelope to its sender, and one principal filling its share
    (``per_principal``) is refused 5.04 for itself alone. ``max_remembered``
    is the last resort for everyone (5.04) when many principals fill theirs.
    """

    def __init__(
        self,
        window: float,
        max_remembered: int = DEFAULT_MAX_REMEMBERED,
        per_principal: int = DEFAULT_PER_PRINCIPAL,
    ) -> None:
        if max_remembered < 1 or per_principal < 1:
            raise ValueError("the replay memory and each principal's share must be at least 1")
        self.window = window
        self.max_remembered = max_remembered
        self.per_principal = per_principal
        # (owner, id) -> when, oldest first; and each owner's times, oldest first.
        self._seen: OrderedDict[tuple[tuple[str, str], str], float] = OrderedDict()
        self._owners: dict[tuple[str, str], deque[float]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def held(self, owner: tuple[str, str]) -> int:
        """Ids of ``owner`` remembered now."""
        times = self._owners.get(owner)
        return 0 if times is None else len(times)

    def _prune(self, now: float) -> None:
        seen = self._seen
        while seen:
            (owner, _), at = next(iter(seen.items()))
            if now - at <= self.window:
                break
            seen.popitem(last=False)
            self._drop(owner, at)

    def _drop(self, owner: tuple[str, str], at: float) -> None:
        times = self._owners[owner]
        if times and times[0] == at:
            times.popleft()
        elif times and times[-1] == at:
            times.pop()
        else:
            times.remove(at)
        if not times:
            del self._owners[owner]

    def claim(self, owner: tuple[str, str], envelope_id: str, now: float) -> None:
        """Take ``envelope_id`` for ``owner`` (``Principal.key``), or refuse it.

        Raises:
            EnvelopeRefused: 4.03 an id ``owner`` already sent in the window;
                5.04 ``owner``'s share is full (``retry_after``: until its
                oldest id ages out), or the whole memory is.
        """
        self._prune(now)
        key = (owner, envelope_id)
        if key in self._seen:
            raise EnvelopeRefused(UNAUTHORIZED, "this envelope id was already received (replay)")
        times = self._owners.get(owner)
        if times is not None and len(times) >= self.per_principal:
            wait = max(1, math.ceil(times[0] + self.window - now))
            raise EnvelopeRefused(
                BACKEND_BUSY,
                f"you sent {self.per_principal} envelopes within {self.window:.0f} s, "
                "the most one sender may; retry later",
                retry_after=wait,
            )
        if len(self._seen) >= self.max_remembered:
            raise EnvelopeRefused(
                BACKEND_BUSY, "too many envelopes in the replay window", retry_after=1
            )
        self._seen[key] = now
        if times is None:
            times = self._owners[owner] = deque()
        times.append(now)

    def release(self, owner: tuple[str, str], envelope_id: str) -> None:
        """Forget a claimed id (its envelope was refused): it may be sent again."""
        at = self._seen.pop((owner, envelope_id), None)
        if at is not None:
            self._drop(owner, at)


def _refused(exc: CapTokenError | SignatureError | AuthError, what: str) -> EnvelopeRefused:
    if isinstance(exc, AuthError):
        return EnvelopeRefused(UNAUTHENTICATED, f"{what}: {exc.message}")
    return EnvelopeRefused(exc.error_code, f"{what}: {exc.message}")


def _jwk_key(jwk: object, what: str) -> PublicKey:
    if not isinstance(jwk, dict):
        raise EnvelopeRefused(UNAUTHENTICATED, f"{what} is not a JWK object")
    try:
        keys = JWKS.parse({"keys": [jwk]})
    except JWKSError as exc:
        raise EnvelopeRefused(
            UNAUTHENTICATED, f"{what} is not a usable public key: {exc}"
        ) from None
    return keys.keys[0].key


def _sig_header(envelope: Envelope) -> dict[str, Any]:
    if envelope.sig is None:
        raise EnvelopeRefused(UNAUTHENTICATED, "the envelope is unsigned (no sig)")
    head, sep, _ = envelope.sig.partition("..")
    try:
        if not sep:
            raise ValueError("sig is not '<header>..<signature>'")
        return read_header(head)
    except ValueError as exc:
        raise EnvelopeRefused(UNAUTHENTICATED, f"sig: {exc}") from None


class EnvelopeTrust:
    """Authenticates envelopes (see the module docstring).

    Args:
        authenticator: The server's authenticator; ``None``: no
            authentication (integrity-only mode).
        trusted: ``--trust-jwks``: peers whose envelope keys are trusted.
        validity: Seconds ``ts`` may be off, and ids are remembered.
        clock: Seconds since the epoch.
        leeway: Clock skew allowed on the capability token's times.
    """

    def __init__(
        self,
        authenticator: Authenticator | None = None,
        *,
        trusted: JWKS | None = None,
        validity: float = DEFAULT_VALIDITY,
        clock: Callable[[], float] = time.time,
        leeway: float = 30.0,
        max_remembered: int = DEFAULT_MAX_REMEMBERED,
        per_principal: int = DEFAULT_PER_PRINCIPAL,
    ) -> None:
        self.authenticator = authenticator
        self.issuers = issuers_of(authenticator)
        self.trusted = trusted
        self.validity = validity
        self.clock = clock
        self.leeway = leeway
        self.replays = ReplayGuard(validity, max_remembered, per_principal)

    @property
    def required(self) -> bool:
        """Whether envelopes need a credential (authentication is configured)."""
        return self.authenticator is not None

    def check_time(self, envelope: Envelope, now: float) -> None:
        """Refuse (4.01) a ``ts`` further than the validity window from ``now``."""
        skew = parse_ts(envelope.ts) - now
        if abs(skew) > self.validity:
            raise EnvelopeRefused(
                UNAUTHENTICATED,
                f"ts is {abs(skew):.0f} s in the {'future' if skew > 0 else 'past'}; "
                f"accepted: within {self.validity:.0f} s of the server's clock",
            )

    async def authenticate(self, envelope: Envelope, audiences: Sequence[str]) -> Principal:
        """The principal ``envelope`` acts for; raises :class:`EnvelopeRefused`.

        Does not record the id: :meth:`claim` does, in one step with the
        replay check.
        """
        now = self.clock()
        header = _sig_header(envelope)
        kid = header.get("kid")
        if self.trusted is not None and isinstance(kid, str) and self.trusted.get(kid):
            self._verify(envelope, self.trusted)
            principal = Principal(id=f"key:{kid}", scheme="envelope_key")
        elif self.required:
            principal = await self._with_cap_token(envelope, audiences, now)
        else:
            self._verify(envelope, _jwk_key(header.get("jwk"), "the sig header's jwk"))
            principal = ANONYMOUS
        self.check_time(envelope, now)
        return principal

    def claim(self, envelope: Envelope, principal: Principal) -> None:
        """Take ``envelope``'s id for ``principal``: a copy of it is refused from now on.

        Raises:
            EnvelopeRefused: 4.03 a replay; 5.04 the principal's share of
                the replay memory (or the whole memory) is full.
        """
        self.replays.claim(principal.key, envelope.id, self.clock())

    def release(self, envelope: Envelope, principal: Principal) -> None:
        """Give back a claimed id (the envelope was refused after all)."""
        self.replays.release(principal.key, envelope.id)

    async def bearer(self, token: str | None, audiences: Sequence[str]) -> Principal:
        """The principal of a capability token presented without an envelope.

        ``GET``/``POST /v1/stream/{id}`` carry no envelope; with
        authentication they present the cap token as ``Authorization:
        Bearer``. Without authentication everyone is ``anonymous``.
        """
        if not self.required:
            return ANONYMOUS
        if not token:
            raise EnvelopeRefused(UNAUTHENTICATED, "send the capability token as a bearer token")
        claims = await self._claims(token, audiences, (), self.clock())
        return self._principal(claims)

    # --- internals ------------------------------------------------------------

    @staticmethod
    def _verify(envelope: Envelope, key: PublicKey | JWKS) -> None:
        try:
            verify_envelope(envelope, key)
        except SignatureError as exc:
            raise _refused(exc, "sig") from None

    async def _claims(
        self, token: str, audiences: Sequence[str], scope: Iterable[str], now: float
    ) -> dict[str, Any]:
        if not self.issuers:
            raise EnvelopeRefused(
                UNAUTHENTICATED,
                "this server trusts no capability token issuer; only --trust-jwks peers",
            )
        head = token.split(".", 1)[0]
        try:
            kid = read_header(head).get("kid")
        except ValueError:
            raise EnvelopeRefused(UNAUTHENTICATED, "cap_token is not a JWT") from None
        last: EnvelopeRefused | None = None
        for issuer in self.issuers:
            try:
                key = await issuer.signing_key(kid if isinstance(kid, str) else None)
                claims = verify_cap_token(
                    token,
                    key.key,
                    audience=audiences,
                    required_scope=list(scope),
                    now=now,
                    leeway=self.leeway,
                )
            except (CapTokenError, AuthError) as exc:
                last = _refused(exc, "cap_token")
                continue
            if claims.get("iss") != issuer.issuer:
                last = EnvelopeRefused(UNAUTHENTICATED, "cap_token: not from a trusted issuer")
                continue
            return claims
        assert last is not None
        raise last

    @staticmethod
    def _principal(claims: dict[str, Any]) -> Principal:
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise EnvelopeRefused(UNAUTHENTICATED, "cap_token: 'sub' must be a non-empty string")
        exp = claims.get("exp")
        return Principal(
            id=sub,
            scheme="jwt",
            expires_at=float(exp) if isinstance(exp, int | float) else None,
            claims=claims,
        )

    async def _with_cap_token(
        self, envelope: Envelope, audiences: Sequence[str], now: float
    ) -> Principal:
        if envelope.cap_token is None:
            raise EnvelopeRefused(
                UNAUTHENTICATED,
                "no credential: the envelope needs a cap_token from a trusted issuer",
            )
        claims = await self._claims(envelope.cap_token, audiences, (envelope.intent.value,), now)
        principal = self._principal(claims)
        cnf = claims.get("cnf")
        if not isinstance(cnf, dict) or "jwk" not in cnf:
            raise EnvelopeRefused(
                UNAUTHENTICATED, "cap_token binds no key (cnf.jwk) to verify the sig with"
            )
        self._verify(envelope, _jwk_key(cnf["jwk"], "cap_token cnf.jwk"))
        return principal
