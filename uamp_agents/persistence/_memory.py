"""A persistence adapter that keeps sessions in this process."""

from __future__ import annotations

import builtins
from typing import Any

import orjson

from ._base import encode_session, session_id_of

__all__ = ["MemoryAdapter"]


class MemoryAdapter:
    """Keeps encoded SessionJSON values in a dict; lost when the process ends.

    Values are stored as JSON bytes, so a later change to the saved object
    does not change what was stored, and what is not JSON is refused at once.
    """

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    async def save(self, session_json: dict[str, Any]) -> None:
        """Store ``session_json`` under its ``id``.

        Raises:
            PersistenceError: No string ``id``, or not JSON-serialisable.
        """
        session_id = session_id_of(session_json)
        self._data[session_id] = encode_session(session_json, session_id)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        """The stored value of ``session_id``, or ``None``."""
        encoded = self._data.get(session_id)
        if encoded is None:
            return None
        value: dict[str, Any] = orjson.loads(encoded)
        return value

    async def list(self) -> builtins.list[str]:
        """The stored session ids, sorted."""
        return sorted(self._data)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id``."""
        self._data.pop(session_id, None)
