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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .codec import from_dict, unstructure
from .types import Capabilities

if TYPE_CHECKING:
    from .responder import Responder

__all__ = ["CLIENT_KEY", "merge_capabilities", "queried", "session_view"]

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


def queried(
    agent: Responder | None,
    model: str | None,
    hosted: Callable[[str | None], Responder | None],
) -> Capabilities | None:
    """The capabilities a ``capabilities.query`` asks about (UAMP 5.4, 9.1); ``None``: unknown.

    In a session (``agent``, its agent): that agent when ``model`` is
    ``None`` or its name, else the agent as it would be on that model of its
    provider (its ``capabilities_for``, when it has one), else the hosted
    agent of that name. Outside a session ``model`` names a hosted agent.

    Args:
        hosted: The hosted agent a name (``None``: the default one) addresses.
    """
    if agent is not None and model in (None, agent.name):
        return agent.capabilities()
    if agent is not None:
        answer = getattr(agent, "capabilities_for", None)
        caps = answer(model) if callable(answer) else None
        if isinstance(caps, Capabilities):
            return caps
    found = hosted(model)
    return found.capabilities() if found is not None else None
