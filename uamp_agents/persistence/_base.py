"""The persistence adapter interface.

Sessions are kept by ``(owner, id)``. The owner is the principal a session
runs for (its SessionJSON ``owner``, ``{"scheme", "id"}``; ``Session.owner``):
session ids that reach an agent from a server are unique only per principal
or per connection, so two callers' sessions of one id are two records, and
asking for a session under another owner finds nothing, exactly like an id
never saved. Sessions without an owner are kept under the empty owner.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import orjson

from uamp_proto.principal import Principal

from ..errors import PersistenceError

__all__ = [
    "PersistenceAdapter",
    "PersistenceError",
    "encode_session",
    "owner_key",
    "session_id_of",
    "stored_owner",
]


@runtime_checkable
class PersistenceAdapter(Protocol):
    """Stores SessionJSON values by ``(owner, session id)`` (see the module docstring).

    ``save`` replaces what was stored under the value's ``owner`` and ``id``;
    after it returns, the value survives the process being killed (for
    durable adapters). ``load`` returns ``None`` for an id that ``owner`` has
    not saved.
    """

    async def save(self, session_json: dict[str, Any]) -> None:
        """Store ``session_json`` under its ``owner`` and ``id``, replacing any earlier value."""
        ...

    async def load(
        self, session_id: str, *, owner: Principal | None = None
    ) -> dict[str, Any] | None:
        """The stored SessionJSON of ``owner``'s ``session_id``, or ``None``."""
        ...

    async def list(self, *, owner: Principal | None = None) -> list[str]:
        """The ids of every session stored for ``owner``, sorted."""
        ...

    async def delete(self, session_id: str, *, owner: Principal | None = None) -> None:
        """Forget ``owner``'s ``session_id``; deleting an unknown id does nothing."""
        ...


def owner_key(owner: Principal | None) -> str:
    """The storage key of an owner: ``scheme:id``, or ``""`` for none."""
    return "" if owner is None else f"{owner.scheme}:{owner.id}"


def stored_owner(session_json: dict[str, Any]) -> str:
    """The storage key of the owner a SessionJSON value names (``""``: none).

    Raises:
        PersistenceError: ``owner`` is not ``{"scheme": str, "id": str}``.
    """
    owner = session_json.get("owner")
    if owner is None:
        return ""
    if (
        not isinstance(owner, dict)
        or not isinstance(owner.get("scheme"), str)
        or not isinstance(owner.get("id"), str)
    ):
        raise PersistenceError('a session\'s \'owner\' must be {"scheme": str, "id": str}')
    return f"{owner['scheme']}:{owner['id']}"


def session_id_of(session_json: dict[str, Any]) -> str:
    """The ``id`` of a SessionJSON value to save.

    Raises:
        PersistenceError: It is not an object with a non-empty string ``id``.
    """
    if not isinstance(session_json, dict):
        raise PersistenceError("a session to save must be a SessionJSON object")
    session_id = session_json.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise PersistenceError("a session to save must have a non-empty string 'id'")
    return session_id


def encode_session(value: Any, session_id: str, *, option: int | None = None) -> bytes:
    """``value`` (a SessionJSON value, or its head) as JSON for the store.

    Raises:
        PersistenceError: It is not JSON-serialisable.
    """
    try:
        return orjson.dumps(value, option=option)
    except TypeError as exc:
        raise PersistenceError(
            f"session is not JSON-serialisable: {exc}", session_id=session_id
        ) from None
