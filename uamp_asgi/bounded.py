"""What the ASGI app keeps in memory for callers: bounded per principal and in all.

Every store of the app (stored responses, A2A tasks, MCP and ACP sessions,
UAMP session logs) is an :class:`OwnedLRU`: entries belong to the principal
that made them; a principal past its own cap loses its own least recently
used entry, never another principal's; past the overall cap the least
recently used entry of all goes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from uamp_proto.principal import Principal

__all__ = ["OwnedLRU"]

V = TypeVar("V")
Owner = tuple[str, str]


class OwnedLRU(Generic[V]):
    """Values by ``(owner, key)``: at most ``per_owner`` an owner, ``total`` in all.

    ``on_drop`` is told ``(owner key, key)`` of every entry that goes
    (evicted or popped), for bookkeeping kept beside the values.
    """

    def __init__(
        self,
        *,
        per_owner: int,
        total: int,
        on_drop: Callable[[Owner, str], None] | None = None,
    ) -> None:
        if per_owner < 1 or total < 1:
            raise ValueError("the caps must be at least 1")
        self.per_owner = per_owner
        self.total = total
        self._on_drop = on_drop
        self._all: OrderedDict[tuple[Owner, str], V] = OrderedDict()
        self._counts: dict[Owner, int] = {}

    def __len__(self) -> int:
        return len(self._all)

    def held_by(self, owner: Principal) -> int:
        """How many entries ``owner`` holds."""
        return self._counts.get(owner.key, 0)

    def put(self, owner: Principal, key: str, value: V) -> None:
        """Keep ``value``; over a cap, the oldest entry (the owner's own first) goes."""
        slot = (owner.key, key)
        if slot not in self._all:
            self._counts[owner.key] = self._counts.get(owner.key, 0) + 1
        self._all[slot] = value
        self._all.move_to_end(slot)
        if self._counts[owner.key] > self.per_owner:
            oldest = next(s for s in self._all if s[0] == owner.key)
            self._drop(oldest)
        while len(self._all) > self.total:
            self._drop(next(iter(self._all)))

    def owned_by(self, owner: Principal) -> list[V]:
        """``owner``'s entries, least recently used first."""
        return [v for (who, _), v in self._all.items() if who == owner.key]

    def get(self, owner: Principal, key: str) -> V | None:
        """``owner``'s entry ``key`` (another owner's: ``None``, as a missing one)."""
        slot = (owner.key, key)
        value = self._all.get(slot)
        if value is not None:
            self._all.move_to_end(slot)
        return value

    def peek(self, owner: Principal, key: str) -> V | None:
        """``owner``'s entry ``key``, leaving its place in the order as it is."""
        return self._all.get((owner.key, key))

    def pop(self, owner: Principal, key: str) -> V | None:
        """Forget ``owner``'s entry ``key``; the value, or ``None``."""
        slot = (owner.key, key)
        if slot not in self._all:
            return None
        value = self._all[slot]
        self._drop(slot)
        return value

    def _drop(self, slot: tuple[Owner, str]) -> None:
        del self._all[slot]
        left = self._counts[slot[0]] - 1
        if left:
            self._counts[slot[0]] = left
        else:
            del self._counts[slot[0]]
        if self._on_drop is not None:
            self._on_drop(*slot)
