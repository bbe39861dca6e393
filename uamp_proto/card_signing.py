"""A2A agent card signatures (A2A 1.0, ``AgentCard.signatures``).

A card is signed as a JWS (RFC 7515) whose payload is the card's canonical
form: the card without ``signatures``, with empty members (``""``, ``[]``,
``{}``, ``null``) left out at every depth, serialised by the JSON
Canonicalization Scheme (RFC 8785). That is how the A2A specification and
its reference SDK (a2a-sdk's ``create_signature_verifier``) rebuild it, so
any A2A client can check a card uamp signed. The payload is not carried:
each entry of ``signatures`` is the JWS's ``protected`` header and
``signature``, both base64url; the protected header names the algorithm
(``ES256`` or ``EdDSA``), the ``kid`` and, when given, the ``jku`` (the URL
of the JWKS holding the key).

A card member whose value equals its protobuf default (``required: false``
of an extension) is dropped by clients that read the card through the
A2A protobuf types, so the card builder leaves such members out rather than
sign what a verifier will not see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import rfc8785

from .jose import (
    JWKS,
    PrivateKey,
    PublicKey,
    Reason,
    SignatureError,
    private_algorithm,
    sign_detached,
    verify_detached,
)

__all__ = ["CARD_ALGORITHMS", "canonical_card", "sign_card", "verify_card", "without_empty"]

#: The algorithms uamp signs and accepts card signatures with.
CARD_ALGORITHMS: Final = frozenset({"ES256", "EdDSA"})
#: Nesting past this is refused (a card is a few levels deep).
_MAX_DEPTH: Final = 64


def without_empty(value: Any, depth: int = 0) -> Any:
    """``value`` without empty strings, lists, objects and nulls (``None`` when it is empty)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"the card nests deeper than {_MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        kept = ((k, without_empty(v, depth + 1)) for k, v in value.items())
        out = {k: v for k, v in kept if v is not None}
        return out or None
    if isinstance(value, list):
        items = [v for v in (without_empty(v, depth + 1) for v in value) if v is not None]
        return items or None
    if value == "" and isinstance(value, str):
        return None
    return value


def canonical_card(card: Mapping[str, Any]) -> bytes:
    """The signed form of ``card``: RFC 8785 JSON of it without ``signatures`` and empty members."""
    body = {k: v for k, v in card.items() if k != "signatures"}
    return rfc8785.dumps(without_empty(body) or {})


def sign_card(
    card: Mapping[str, Any],
    key: PrivateKey,
    kid: str,
    *,
    jku: str | None = None,
    payload: bytes | None = None,
) -> dict[str, Any]:
    """``card`` with one more entry in ``signatures``, made with ``key``.

    ``payload`` is what the signature covers, :func:`canonical_card` of
    ``card`` unless given (another reader's view of the same card: an A2A
    0.3 card carries a second signature over what a2a-sdk 0.3 reads of it,
    :func:`uamp_proto.adapters.a2a_card.sdk_0_3_payload`).

    Raises:
        ValueError: The key cannot sign cards (only P-256 and Ed25519 do).
    """
    alg = private_algorithm(key, CARD_ALGORITHMS, "agent cards")
    extra = {"typ": "JOSE", **({"jku": jku} if jku else {})}
    signed = canonical_card(card) if payload is None else payload
    protected, _, signature = sign_detached(signed, key, alg, kid, extra).split(".")
    entry = {"protected": protected, "signature": signature}
    return {**card, "signatures": [*card.get("signatures", ()), entry]}


def verify_card(card: Mapping[str, Any], keys: PublicKey | PrivateKey | JWKS) -> None:
    """Check that one of ``card``'s signatures verifies with ``keys``.

    Raises:
        SignatureError: No signature, or none that verifies (the reason of the last).
    """
    entries = card.get("signatures") or []
    if not entries:
        raise SignatureError(Reason.UNSIGNED, "the card has no signatures")
    payload = canonical_card(card)
    last: SignatureError | None = None
    for entry in entries:
        try:
            sig = f"{entry['protected']}..{entry['signature']}"
            verify_detached(sig, payload, keys, CARD_ALGORITHMS, SignatureError)
            return
        except SignatureError as exc:
            last = exc
        except (KeyError, TypeError):
            continue
    raise last or SignatureError(Reason.MALFORMED, "no signature entry is well formed")
