"""A persistence adapter that keeps sessions in this process."""

from __future__ import annotations

import builtins
from typing import Any

import orjson

from uamp_proto.principal import Principal

from ._base import encode_session, owner_key, session_id_of, stored_owner

__all__ = ["MemoryAdapter"]


class MemoryAdapter:
    """Keeps encoded SessionJSON values in a dict; lost when the process ends.

    Values are stored as JSON bytes, so a later change to the saved object
    does not change what was stored, and what is not JSON is refused at once.
    """

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], bytes] = {}

    async def save(self, session_json: dict[str, Any]) -> None:
        """Store ``session_json`` under its ``owner`` and ``id``.

        Raises:
            PersistenceError: No string ``id``, a malformed ``owner``, or not
                JSON-serialisable.
        """
        session_id = session_id_of(session_json)
        key = (stored_owner(session_json), session_id)
        self._data[key] = encode_session(session_json, session_id)

    async def load(
        self, session_id: str, *, owner: Principal | None = None
    ) -> dict[str, Any] | None:
        """The stored value of ``owner``'s ``session_id``, or ``None``."""
        encoded = self._data.get((owner_key(owner), session_id))
        if encoded is None:
            return None
        value: dict[str, Any] = orjson.loads(encoded)
        return value

    async def list(self, *, owner: Principal | None = None) -> builtins.list[str]:
        """The session ids stored for ``owner``, sorted."""
        key = owner_key(owner)
        return sorted(sid for who, sid in self._data if who == key)

    async def delete(self, session_id: str, *, owner: Principal | None = None) -> None:
        """Forget ``owner``'s ``session_id``."""
        self._data.pop((owner_key(owner), session_id), None)
