"""The A2A agent card (A2A 1.0 section 8; 0.3 for older clients; UAMP 9.2).

Two shapes of one card:

* :func:`agent_card` is the A2A 1.0 card. It has exactly the members of the
  specification's ``AgentCard`` (its JSON schema allows no others): every
  interface the agent is served on in ``supportedInterfaces`` (JSON-RPC in
  both protocol versions, HTTP+JSON, gRPC), and uamp's own data -- the
  agent's UAMP Capabilities object -- as the ``params`` of the
  :data:`CAPABILITIES_EXTENSION` entry of ``capabilities.extensions``.
* :func:`legacy_card` adds what a 0.3 client reads (``url``,
  ``preferredTransport``, ``protocolVersion``, ``additionalInterfaces``)
  and what UAMP discovery promises at ``/.well-known/agent.json``
  (``modelCapabilities``, UAMP 9.2). Its ``securitySchemes``, ``security``
  and ``supportsAuthenticatedExtendedCard`` have the 0.3 shapes (a 0.3
  reader takes a 1.0-shaped scheme for something else).
* :func:`sdk_0_3_payload` is what a2a-sdk 0.3's signature verifier rebuilds
  of a 0.3 card: only the members of its 0.3 ``AgentCard`` model, members
  equal to the model's default left out, then its sorted compact JSON. A
  signed 0.3 card carries a signature over that beside the one over the
  whole card (RFC 8785, what a verifier written from the specification
  checks); a verifier accepts a card when any one signature verifies.

:func:`card_etag` is the validator the server sends with either (the card
changes only when the agent or the request's host does, so a hash of its
bytes is a strong one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from .. import types as ty
from ..card_signing import sign_card, without_empty
from ..codec import unstructure

if TYPE_CHECKING:
    from ..jose import PrivateKey

__all__ = [
    "CAPABILITIES_EXTENSION",
    "EXTENDABLE",
    "Interface",
    "agent_card",
    "card_etag",
    "extend_card",
    "legacy_card",
    "sdk_0_3_payload",
    "sign_served_card",
]

#: The extension URI under which the card carries the UAMP capabilities.
CAPABILITIES_EXTENSION = "https://uamp.dev/extensions/capabilities/v1"

_MODE_BY_MODALITY = {
    "text": "text/plain",
    "image": "image/*",
    "audio": "audio/*",
    "video": "video/*",
    "file": "application/octet-stream",
}


@attrs.frozen
class Interface:
    """One ``supportedInterfaces`` entry: where, which binding, which protocol version.

    ``tenant`` is set where the binding's URL cannot name the agent (gRPC
    methods have fixed paths: the tenant is the agent's name).
    """

    url: str
    binding: str  # "JSONRPC" | "HTTP+JSON" | "GRPC"
    version: str = "1.0"
    tenant: str | None = None

    def render(self) -> dict[str, Any]:
        """The ``AgentInterface`` object."""
        out = {"url": self.url, "protocolBinding": self.binding, "protocolVersion": self.version}
        if self.tenant:
            out["tenant"] = self.tenant
        return out


def _skills(
    name: str, description: str, caps: ty.Capabilities, modes: list[str]
) -> list[dict[str, Any]]:
    skills: list[dict[str, Any]] = [
        {
            "id": name,
            "name": name,
            "description": description,
            "tags": ["uamp", *caps.modalities],
            "inputModes": modes,
            "outputModes": modes,
        }
    ]
    tools = caps.tools
    for tool in (tools.built_in_tools if tools else None) or []:
        skills.append(
            {
                "id": f"tool.{tool}",
                "name": tool,
                "description": f"Uses its built-in tool {tool}.",
                "tags": ["tool", tool],
            }
        )
    for provided in caps.provides or []:
        if any(s["id"] == f"tool.{provided}" for s in skills):
            continue
        skills.append(
            {
                "id": f"provides.{provided}",
                "name": provided,
                "description": f"Provides {provided}.",
                "tags": ["provides", provided],
            }
        )
    if tools and tools.supports_tools:
        skills[0]["tags"].append("client-tools")
    return skills


def input_modes(capabilities: ty.Capabilities) -> list[str]:
    """The media types the agent accepts (``defaultInputModes``)."""
    modes = [_MODE_BY_MODALITY.get(m, m) for m in capabilities.modalities] or ["text/plain"]
    return [*modes, "application/json"]


def agent_card(
    *,
    name: str,
    capabilities: ty.Capabilities,
    interfaces: list[Interface],
    base_url: str,
    description: str | None = None,
    version: str = "1.0.0",
    push_notifications: bool = False,
    extended_card: bool = False,
    security_schemes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The A2A 1.0 agent card: only members the specification's schema defines.

    Skills come from the capabilities (one general skill, one per built-in
    tool and per ``provides`` entry); the UAMP Capabilities object is the
    ``params`` of the :data:`CAPABILITIES_EXTENSION` extension.
    """
    caps = unstructure(capabilities)
    modes = [_MODE_BY_MODALITY.get(m, m) for m in capabilities.modalities] or ["text/plain"]
    text = description or f"The {name} agent, served over UAMP."
    card: dict[str, Any] = {
        "name": name,
        "description": text,
        "version": version,
        "supportedInterfaces": [i.render() for i in interfaces],
        "provider": {"organization": capabilities.provider, "url": base_url},
        "capabilities": {
            "streaming": bool(capabilities.supports_streaming is not False),
            "pushNotifications": push_notifications,
            "extendedAgentCard": extended_card,
            "extensions": [
                {
                    "uri": CAPABILITIES_EXTENSION,
                    "description": "The agent's UAMP Capabilities object (UAMP section 9).",
                    # "required": false is the default: left out, as a protobuf reader
                    # drops it (a signed card signs only what every reader sees).
                    "params": caps,
                }
            ],
        },
        "defaultInputModes": input_modes(capabilities),
        "defaultOutputModes": modes,
        "skills": _skills(name, text, capabilities, modes),
    }
    if security_schemes:
        card["securitySchemes"] = security_schemes
        card["securityRequirements"] = [
            {"schemes": {key: {"list": []}}} for key in security_schemes
        ]
    return card


#: The card members an operator may add for authenticated callers (``extend_card``).
EXTENDABLE: Final = frozenset(
    {
        "description",
        "documentationUrl",
        "iconUrl",
        "skills",
        "defaultInputModes",
        "defaultOutputModes",
    }
)


def extend_card(card: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """The authenticated extended card: ``card`` with the operator's ``more``.

    ``skills`` are added after the card's own; the other members of
    :data:`EXTENDABLE` replace the card's.

    Raises:
        ValueError: ``more`` has a member outside :data:`EXTENDABLE`, or a
            ``skills`` that is not a list of objects.
    """
    unknown = sorted(set(more) - EXTENDABLE)
    if unknown:
        raise ValueError(
            f"the extended card may set {', '.join(sorted(EXTENDABLE))}; not {', '.join(unknown)}"
        )
    skills = more.get("skills", [])
    if not isinstance(skills, list) or not all(isinstance(s, dict) for s in skills):
        raise ValueError("the extended card's skills are a list of AgentSkill objects")
    out = {**card, **{k: v for k, v in more.items() if k != "skills"}}
    out["skills"] = [*card["skills"], *skills]
    return out


#: A 1.0 ``SecurityScheme`` member -> the 0.3 scheme's ``type``.
_SCHEME_TYPE_0_3: Final = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}


def _scheme_0_3(scheme: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 ``SecurityScheme`` (one member naming its kind) in its 0.3 shape."""
    for member, kind in _SCHEME_TYPE_0_3.items():
        if member in scheme:
            body = dict(scheme[member])
            if kind == "apiKey" and "location" in body:
                body["in"] = body.pop("location")
            return {"type": kind, **body}
    return dict(scheme)


def _security_0_3(card: Mapping[str, Any]) -> dict[str, Any]:
    """The 0.3 members that say how to authenticate, from the 1.0 card's."""
    out: dict[str, Any] = {}
    schemes = card.get("securitySchemes")
    if schemes:
        out["securitySchemes"] = {k: _scheme_0_3(v) for k, v in schemes.items()}
    requirements = card.get("securityRequirements")
    if requirements:
        out["security"] = [
            {k: list(v.get("list", [])) for k, v in r.get("schemes", {}).items()}
            for r in requirements
        ]
    if card.get("capabilities", {}).get("extendedAgentCard"):
        out["supportsAuthenticatedExtendedCard"] = True
    return out


def legacy_card(card: dict[str, Any], *, rpc_url: str) -> dict[str, Any]:
    """``card`` with the 0.3 members and UAMP's ``modelCapabilities`` added.

    What ``/.well-known/agent.json`` serves (UAMP 9.2 puts
    ``modelCapabilities`` there), and ``agent-card.json`` to a request that
    asks for ``A2A-Version: 0.3``. Sign it after this (a 1.0 card's
    signatures do not cover it and are dropped).
    """
    extensions = card["capabilities"]["extensions"]
    caps = next(e["params"] for e in extensions if e["uri"] == CAPABILITIES_EXTENSION)
    signed_as_1_0 = ("signatures",)  # a 1.0 card's signatures do not cover this one
    return {
        **{k: v for k, v in card.items() if k not in signed_as_1_0},
        **_security_0_3(card),
        "modelCapabilities": caps,
        "url": rpc_url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "additionalInterfaces": [{"url": rpc_url, "transport": "JSONRPC"}],
    }


# --- what a2a-sdk 0.3 reads of a 0.3 card --------------------------------------------------
# Its AgentCard model (a2a-sdk 0.3.x ``a2a.types``) keeps only these members;
# a nested object's members are named by the entry for its kind, ``None`` is
# a value kept as it is. ``_DEFAULTS_0_3`` are the model's non-null defaults,
# which its canonical form leaves out when a card repeats them.
_Shape = dict[str, "str | None"]
_SHAPES_0_3: Final[dict[str, _Shape]] = {
    "card": {
        "additionalInterfaces": "interface",
        "capabilities": "capabilities",
        "defaultInputModes": None,
        "defaultOutputModes": None,
        "description": None,
        "documentationUrl": None,
        "iconUrl": None,
        "name": None,
        "preferredTransport": None,
        "protocolVersion": None,
        "provider": "provider",
        "security": None,
        "securitySchemes": "schemes",
        "skills": "skill",
        "supportsAuthenticatedExtendedCard": None,
        "url": None,
        "version": None,
    },
    "capabilities": {
        "extensions": "extension",
        "pushNotifications": None,
        "stateTransitionHistory": None,
        "streaming": None,
    },
    "extension": {"description": None, "params": None, "required": None, "uri": None},
    "skill": {
        "description": None,
        "examples": None,
        "id": None,
        "inputModes": None,
        "name": None,
        "outputModes": None,
        "security": None,
        "tags": None,
    },
    "provider": {"organization": None, "url": None},
    "interface": {"transport": None, "url": None},
}
_DEFAULTS_0_3: Final[dict[str, dict[str, Any]]] = {
    "card": {"preferredTransport": "JSONRPC", "protocolVersion": "0.3.0"},
}


def _view_0_3(value: Any, kind: str) -> Any:
    """``value`` as the 0.3 model of ``kind`` reads it (a list: each item)."""
    if isinstance(value, list):
        return [_view_0_3(item, kind) for item in value]
    if not isinstance(value, Mapping):
        return value
    if kind == "schemes":  # name -> scheme; each scheme's ``type`` is its model's default
        return {k: {m: v for m, v in s.items() if m != "type"} for k, s in value.items()}
    shape, defaults = _SHAPES_0_3[kind], _DEFAULTS_0_3.get(kind, {})
    out = {}
    for member, item in value.items():
        if member not in shape or (member in defaults and defaults[member] == item):
            continue
        inner = shape[member]
        out[member] = item if inner is None else _view_0_3(item, inner)
    return out


def sdk_0_3_payload(card: Mapping[str, Any]) -> bytes:
    """What a2a-sdk 0.3's verifier checks a signature of the 0.3 ``card`` against.

    Its model's members only, defaults and empty members (``""``, ``[]``,
    ``{}``, ``null``) left out, keys sorted, compact, non-ASCII escaped (its
    ``json.dumps``; the same bytes as RFC 8785 for ASCII text and integers).
    """
    body = {k: v for k, v in card.items() if k != "signatures"}
    view = without_empty(_view_0_3(body, "card")) or {}
    return json.dumps(view, sort_keys=True, separators=(",", ":")).encode()


def sign_served_card(
    card: Mapping[str, Any], key: PrivateKey, kid: str, *, jku: str, legacy: bool
) -> dict[str, Any]:
    """``card`` as a server signs it (``uamp serve --a2a-sign-cards``, ``uamp_asgi``).

    One signature over its canonical form (:func:`~uamp_proto.card_signing.sign_card`),
    naming ``kid`` and the JWKS at ``jku``; a 0.3 card (``legacy``) gets a
    second one over what a2a-sdk 0.3 reads of it (:func:`sdk_0_3_payload`).
    """
    signed = sign_card(card, key, kid, jku=jku)
    if legacy:
        signed = sign_card(signed, key, kid, jku=jku, payload=sdk_0_3_payload(signed))
    return signed


def card_etag(body: bytes) -> str:
    """A strong ``ETag`` for a card's bytes."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
