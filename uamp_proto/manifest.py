"""Signed discovery manifests and hubs (spec 003 section 8, Appendix A.3).

Theory of operation
-------------------
An agent describes itself in a **manifest**: the protocol version
(``agent``: ``uamp/1.0``), a description, the intents and body types it
serves, the authentication methods it accepts (``oauth2``, ``mtls``) and its
limits (``max_body_kb``, ``rate_lph``). Appendix A.3 allows no other member.
The manifest travels as a compact JWS (``application/manifest+jws``) whose
payload is the manifest's canonical JSON (section 4.2), signed with the
server's envelope key (``ES256`` or ``EdDSA``; header ``typ``
``manifest+jws`` and the key's ``kid``).

A **hub** (``/.well-known/agent-hub.json``) lists every hosted agent with
its manifest URL and signed manifest, and the trust anchors: the JWKS the
manifests verify against. :func:`verify_hub` checks every manifest it lists
against the keys the caller trusts (the hub's own anchors only when the
caller pins none: then it proves integrity, not identity).

Pure functions: keys are passed in, nothing is fetched or timed here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from .envelope import canonical_json
from .jose import (
    JWKS,
    PrivateKey,
    PublicKey,
    Reason,
    SignatureError,
    SigningError,
    private_algorithm,
    read_header,
    select_key,
    sign_compact,
    verify_compact,
)

__all__ = [
    "AUTH_METHODS",
    "HUB_PATH",
    "MANIFEST_MEDIA_TYPE",
    "MANIFEST_PATH",
    "PROTOCOL",
    "ManifestError",
    "build_manifest",
    "check_manifest",
    "sign_manifest",
    "verify_hub",
    "verify_manifest",
]

#: The ``agent`` member: the protocol and its minor version (A.3 pattern ``^uamp/1\\.[0-9]+$``).
PROTOCOL: Final = "uamp/1.0"
#: The media type of a signed manifest (section 11).
MANIFEST_MEDIA_TYPE: Final = "application/manifest+jws"
#: Where an agent's manifest is served (under ``/agents/{name}`` too).
MANIFEST_PATH: Final = "/.well-known/agent-manifest.json"
#: Where the hub document is served.
HUB_PATH: Final = "/.well-known/agent-hub.json"
#: The ``auth`` values A.3 allows.
AUTH_METHODS: Final = frozenset({"oauth2", "mtls"})
_ALGORITHMS: Final = frozenset({"ES256", "EdDSA"})
_MEMBERS: Final = frozenset({"agent", "description", "intents", "body_types", "auth", "limits"})
_LIMITS: Final = frozenset({"max_body_kb", "rate_lph"})
_TYP: Final = "manifest+jws"
_AGENT: Final = re.compile(r"uamp/1\.[0-9]+", re.ASCII)


class ManifestError(SignatureError):
    """A manifest or hub that does not verify or breaks Appendix A.3."""


def _strings(value: object, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(Reason.MALFORMED, f"{name} must be an array of strings")
    return value


def check_manifest(manifest: Mapping[str, Any]) -> None:
    """Refuse a manifest that breaks Appendix A.3 (members, types, patterns).

    Raises:
        ManifestError: ``reason`` is :attr:`~uamp_proto.jose.Reason.MALFORMED`.
    """
    if not isinstance(manifest, Mapping):
        raise ManifestError(Reason.MALFORMED, "a manifest is a JSON object")
    unknown = sorted(set(manifest) - _MEMBERS)
    missing = sorted(_MEMBERS - set(manifest))
    if unknown or missing:
        raise ManifestError(
            Reason.MALFORMED,
            f"manifest members: unknown {unknown or 'none'}, missing {missing or 'none'}",
        )
    agent = manifest["agent"]
    if not isinstance(agent, str) or not _AGENT.fullmatch(agent):
        raise ManifestError(Reason.MALFORMED, f"agent must match uamp/1.N, not {agent!r}")
    if not isinstance(manifest["description"], str):
        raise ManifestError(Reason.MALFORMED, "description must be a string")
    _strings(manifest["intents"], "intents")
    _strings(manifest["body_types"], "body_types")
    bad = sorted(set(_strings(manifest["auth"], "auth")) - AUTH_METHODS)
    if bad:
        raise ManifestError(Reason.MALFORMED, f"auth allows oauth2 and mtls, not {bad}")
    limits = manifest["limits"]
    if not isinstance(limits, Mapping) or set(limits) - _LIMITS:
        raise ManifestError(Reason.MALFORMED, "limits holds only max_body_kb and rate_lph")
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(Reason.MALFORMED, f"limits.{key} must be an integer")


def build_manifest(
    *,
    description: str,
    intents: Sequence[str],
    body_types: Sequence[str],
    auth: Sequence[str] = (),
    max_body_kb: int | None = None,
    rate_lph: int | None = None,
) -> dict[str, Any]:
    """A manifest (Appendix A.3), checked.

    Raises:
        ManifestError: An ``auth`` method A.3 does not name, or bad types.
    """
    limits: dict[str, int] = {}
    if max_body_kb is not None:
        limits["max_body_kb"] = max_body_kb
    if rate_lph is not None:
        limits["rate_lph"] = rate_lph
    manifest: dict[str, Any] = {
        "agent": PROTOCOL,
        "description": description,
        "intents": list(intents),
        "body_types": list(body_types),
        "auth": list(auth),
        "limits": limits,
    }
    check_manifest(manifest)
    return manifest


def sign_manifest(manifest: Mapping[str, Any], key: PrivateKey, kid: str | None) -> str:
    """The manifest as a compact JWS over its canonical JSON.

    Raises:
        ManifestError: The manifest breaks A.3.
        ValueError: The key cannot sign (RSA, another curve...).
    """
    check_manifest(manifest)
    alg = private_algorithm(key, _ALGORITHMS, "manifests")
    return sign_compact(canonical_json(dict(manifest)), key, alg, kid, typ=_TYP)


def verify_manifest(jws: str, keys: PrivateKey | PublicKey | JWKS) -> dict[str, Any]:
    """Check a signed manifest and return it.

    Raises:
        ManifestError: Not a compact JWS, a bad algorithm, an unknown
            ``kid``, a signature that does not verify (a tampered manifest),
            or a payload that breaks A.3.
    """
    parts = jws.strip().split(".")
    if len(parts) != 3 or not all(parts[:2]):
        raise ManifestError(Reason.MALFORMED, "a signed manifest is a compact JWS (three parts)")
    try:
        header = read_header(parts[0])
    except ValueError as exc:
        raise ManifestError(Reason.MALFORMED, str(exc)) from None
    try:
        alg, public = select_key(header, keys, _ALGORITHMS, ManifestError)
        payload = verify_compact(jws.strip(), alg, public, ManifestError)
    except SigningError as exc:
        if isinstance(exc, ManifestError):
            raise
        raise ManifestError(exc.reason, exc.message) from None
    try:
        manifest = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise ManifestError(Reason.MALFORMED, "the manifest payload is not JSON") from None
    check_manifest(manifest)
    return dict(manifest)


def verify_hub(hub: Mapping[str, Any], keys: JWKS | None = None) -> dict[str, dict[str, Any]]:
    """Verify every manifest a hub lists; ``{agent name: manifest}``.

    Args:
        hub: The hub document.
        keys: The keys to trust; ``None``: the hub's own ``trust_anchors``.

    Raises:
        ManifestError: A malformed hub, or any manifest that does not verify
            (the message names the agent).
    """
    agents = hub.get("agents") if isinstance(hub, Mapping) else None
    if not isinstance(agents, list):
        raise ManifestError(Reason.MALFORMED, "a hub lists its agents in an 'agents' array")
    if keys is None:
        try:
            keys = JWKS.parse(hub.get("trust_anchors", {}))
        except ValueError as exc:
            raise ManifestError(Reason.MALFORMED, f"trust_anchors: {exc}") from None
    out: dict[str, dict[str, Any]] = {}
    for entry in agents:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ManifestError(Reason.MALFORMED, "each hub entry has a name")
        signed = entry.get("manifest_jws")
        if not isinstance(signed, str):
            raise ManifestError(Reason.MALFORMED, f"{entry['name']}: no manifest_jws")
        try:
            out[entry["name"]] = verify_manifest(signed, keys)
        except ManifestError as exc:
            raise ManifestError(exc.reason, f"{entry['name']}: {exc.message}") from None
    return out
