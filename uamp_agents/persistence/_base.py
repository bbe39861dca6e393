"""The persistence adapter interface."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import orjson

from ..errors import PersistenceError

__all__ = ["PersistenceAdapter", "PersistenceError", "encode_session", "session_id_of"]


@runtime_checkable
class PersistenceAdapter(Protocol):
    """Stores SessionJSON values by session id.

    ``save`` replaces what was stored under the value's ``id``; after it
    returns, the value survives the process being killed (for durable
    adapters). ``load`` returns ``None`` for an unknown id.
    """

    async def save(self, session_json: dict[str, Any]) -> None:
        """Store ``session_json`` under its ``id``, replacing any earlier value."""
        ...

    async def load(self, session_id: str) -> dict[str, Any] | None:
        """The stored SessionJSON of ``session_id``, or ``None``."""
        ...

    async def list(self) -> list[str]:
        """The ids of every stored session, sorted."""
        ...

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id``; deleting an unknown id does nothing."""
        ...


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
