"""The session tracker: live sessions of a transport by owner and id.

A transport whose sessions outlive one request (UAMP over HTTP+SSE) keeps
them here, each under ``(owner's principal key, session id)``. The
composition root creates the tracker; the transport adds, finds and forgets.

Ownership (docs/security.md): a session can be found only by the principal
that created it, so another principal naming the id is answered as for an
id that never existed; and the same id proposed by two principals names two
separate sessions. Adding under a key in use is refused, never a replace.

Bounds: the tracker counts each owner's sessions (:meth:`SessionTracker.held_by`);
the transport refuses a principal's ``session.create`` past its limit
(``ServerConfig.sse_max_sessions``, docs/security.md).
"""

from __future__ import annotations

from collections import Counter
from typing import Generic, TypeVar

from uamp_proto.principal import Principal

__all__ = ["SessionTracker"]

S = TypeVar("S")


class SessionTracker(Generic[S]):
    """Live sessions by ``(owner, session id)``, in memory."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[tuple[str, str], str], S] = {}
        self._held: Counter[tuple[str, str]] = Counter()

    def __len__(self) -> int:
        return len(self._sessions)

    def held_by(self, owner: Principal) -> int:
        """How many sessions ``owner`` has here now."""
        return self._held[owner.key]

    def add(self, owner: Principal, session_id: str, session: S) -> bool:
        """Track ``session`` of ``owner`` under ``session_id``; ``False`` if that id is in use."""
        key = (owner.key, session_id)
        if key in self._sessions:
            return False
        self._sessions[key] = session
        self._held[owner.key] += 1
        return True

    def get(self, owner: Principal, session_id: str) -> S | None:
        """``owner``'s session ``session_id``, or ``None`` (also for another owner's)."""
        return self._sessions.get((owner.key, session_id))

    def discard(self, owner: Principal, session_id: str, session: S) -> None:
        """Forget ``session``, if it is still the one tracked under that key."""
        key = (owner.key, session_id)
        if self._sessions.get(key) is session:
            del self._sessions[key]
            self._held[owner.key] -= 1
            if not self._held[owner.key]:
                del self._held[owner.key]
