"""Per-principal sliding windows, and the ``rate_limit`` notices they give (UAMP 6.17).

UAMP 6.17 lets a server tell a client how much of a limit is left
(``limit``, ``remaining``, ``reset_at``) before it is refused. The rule here:
a notice goes out when what is left falls to a tenth of the limit or below
(:func:`nearly_spent`), and when the limit is hit. :class:`SlidingWindow`
counts events per key over the last ``window`` seconds; the caller passes the
time in (monotonic seconds for the window, wall-clock seconds for
``reset_at``), so the count is pure and testable without a clock.

Memory is bounded: a key holds at most ``limit`` times, and at most
``max_keys`` keys are kept (the least recently used goes first).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable

import attrs

from . import events as ev

__all__ = ["SlidingWindow", "Verdict", "nearly_spent", "notice"]


def nearly_spent(limit: int, remaining: int) -> bool:
    """Whether ``remaining`` of ``limit`` is little enough to tell the client."""
    return remaining <= max(1, limit // 10)


def notice(
    limit: int, remaining: int, reset_at: float | None = None, session_id: str | None = None
) -> ev.RateLimit | None:
    """The ``rate_limit`` event for a limit with ``remaining`` left, or ``None`` (plenty left)."""
    if not nearly_spent(limit, remaining):
        return None
    reset = None if reset_at is None else round(reset_at, 3)
    return ev.RateLimit(
        session_id=session_id, limit=limit, remaining=max(0, remaining), reset_at=reset
    )


@attrs.frozen
class Verdict:
    """One counted (or refused) event.

    Attributes:
        allowed: Whether it fits in the window.
        limit: Events allowed per window.
        remaining: How many more fit now.
        reset_at: Wall-clock second the oldest counted event leaves the window.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_at: float

    def notice(self, session_id: str | None = None) -> ev.RateLimit | None:
        """The ``rate_limit`` event this verdict owes the client, if any."""
        return notice(self.limit, self.remaining, self.reset_at, session_id)


class SlidingWindow:
    """At most ``limit`` events per key in any ``window`` seconds.

    Args:
        limit: Events allowed per window and key.
        window: Seconds.
        max_keys: Keys remembered at once (least recently used dropped).
    """

    def __init__(self, limit: int, window: float = 60.0, max_keys: int = 10_000) -> None:
        if limit < 1 or window <= 0 or max_keys < 1:
            raise ValueError("limit and max_keys must be at least 1, window positive")
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._times: OrderedDict[Hashable, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._times)

    def hit(self, key: Hashable, now: float, wall: float) -> Verdict:
        """Count one event of ``key`` at ``now`` (monotonic), unless the window is full."""
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = deque(maxlen=self.limit)
            while len(self._times) > self.max_keys:
                self._times.popitem(last=False)
        else:
            self._times.move_to_end(key)
        while times and times[0] <= now - self.window:
            times.popleft()
        allowed = len(times) < self.limit
        if allowed:
            times.append(now)
        oldest = times[0] if times else now
        return Verdict(
            allowed=allowed,
            limit=self.limit,
            remaining=self.limit - len(times),
            reset_at=wall + (oldest + self.window - now),
        )
