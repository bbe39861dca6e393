"""Capability declarations over a session's life (UAMP section 9).

A client declares what it can show in ``session.create.client_capabilities``
and may re-declare it at any time with ``client.capabilities`` (section 5.5).
The spec's example of the latter repeats only some fields, so a later
declaration is merged over the earlier one: fields it names replace, fields
it leaves out keep their value (``extensions`` merge key by key). The merged
declaration is what the agent sees (``TurnRequest.client_capabilities``) and
what ``capabilities.query`` reports back (:func:`session_view`).
"""

from __future__ import annotations

from typing import Any

from .codec import from_dict, unstructure
from .types import Capabilities

__all__ = ["CLIENT_KEY", "merge_capabilities", "session_view"]

#: Where :func:`session_view` puts the client's declaration, in ``extensions``.
CLIENT_KEY = "client_capabilities"


def merge_capabilities(current: Capabilities | None, update: Capabilities) -> Capabilities:
    """``update`` over ``current``: named fields replace, ``extensions`` merge."""
    if current is None:
        return update
    base: dict[str, Any] = unstructure(current)
    new: dict[str, Any] = unstructure(update)
    extensions = {**(base.get("extensions") or {}), **(new.get("extensions") or {})}
    merged = {**base, **new}
    if extensions:
        merged["extensions"] = extensions
    result: Capabilities = from_dict(Capabilities, merged)
    return result


def session_view(agent: Capabilities, client: Capabilities | None) -> Capabilities:
    """What ``capabilities.query`` answers on a session: the agent's current
    declaration, with the client's merged one under ``extensions.client_capabilities``."""
    if client is None:
        return agent
    out: dict[str, Any] = unstructure(agent)
    out["extensions"] = {**(out.get("extensions") or {}), CLIENT_KEY: unstructure(client)}
    view: Capabilities = from_dict(Capabilities, out)
    return view
