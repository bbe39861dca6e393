"""One-way spec 003 messages waiting for their sender's next exchange, bounded per principal.

An ``inform`` or ``notify`` without ``reply_to`` answers nothing: its
message waits until the same caller opens an exchange with the same agent
from the same ``from``, which takes it as conversation. Whatever waits is
memory a caller pins, so each principal has a budget: at most ``count``
messages and ``size`` bytes of ``body.content`` in all (a single message
larger than ``size`` is 4.13; one that does not fit is 5.04, for that
principal alone), each kept ``ttl`` seconds at most. At most ``principals``
principals have messages waiting (the least recently active are dropped
first); the clock is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from uamp_proto import types as ty
from uamp_proto.adapters.envelope import EnvelopeRefused
from uamp_proto.envelope import BACKEND_BUSY, PAYLOAD_TOO_LARGE

__all__ = ["Notes", "fits", "trimmed"]

Owner = tuple[str, str]
#: Whose messages: the agent and the sender's ``from``.
Address = tuple[str, str]

#: A message and when it came, and its size.
_Waiting = tuple[float, ty.Message, int]
_RETRY: Final = 1


class _Budget:
    """One principal's waiting messages, by address."""

    __slots__ = ("by_address", "count", "size", "touched")

    def __init__(self) -> None:
        self.by_address: dict[Address, list[_Waiting]] = {}
        self.count = 0
        self.size = 0
        self.touched = 0.0

    def expire(self, before: float) -> None:
        for address, waiting in list(self.by_address.items()):
            kept = [w for w in waiting if w[0] >= before]
            if len(kept) != len(waiting):
                self.count -= len(waiting) - len(kept)
                self.size -= sum(w[2] for w in waiting) - sum(w[2] for w in kept)
                if kept:
                    self.by_address[address] = kept
                else:
                    del self.by_address[address]


class Notes:
    """The waiting one-way messages of every principal (see the module docstring).

    Args:
        count: Messages one principal may have waiting.
        size: Their content bytes, in all.
        ttl: Seconds a message waits at most.
        principals: Principals with messages waiting at once.
    """

    def __init__(self, *, count: int, size: int, ttl: float, principals: int) -> None:
        self.count = count
        self.size = size
        self.ttl = ttl
        self.principals = principals
        self._budgets: OrderedDict[Owner, _Budget] = OrderedDict()

    def __len__(self) -> int:
        """Messages waiting, from everyone."""
        return sum(b.count for b in self._budgets.values())

    def held(self, owner: Owner) -> tuple[int, int]:
        """``(messages, bytes)`` waiting for ``owner``."""
        budget = self._budgets.get(owner)
        return (0, 0) if budget is None else (budget.count, budget.size)

    def _expire(self, now: float) -> None:
        """Drop the principals idle past ``ttl`` (the least recently active first)."""
        budgets = self._budgets
        while budgets:
            owner, budget = next(iter(budgets.items()))
            if now - budget.touched <= self.ttl:
                break
            del budgets[owner]

    def add(self, owner: Owner, address: Address, message: ty.Message, now: float) -> None:
        """Keep ``message`` for ``owner``'s next exchange at ``address``.

        Raises:
            EnvelopeRefused: 4.13 larger than the whole budget; 5.04 the
                budget cannot take it now.
        """
        size = _size(message)
        if size > self.size:
            raise EnvelopeRefused(
                PAYLOAD_TOO_LARGE,
                f"a one-way message of {size} bytes; at most {self.size} bytes of them "
                "wait for one sender's next exchange",
            )
        self._expire(now)
        budget = self._budgets.get(owner)
        if budget is None:
            budget = self._budgets[owner] = _Budget()
        budget.expire(now - self.ttl)
        if budget.count >= self.count or budget.size + size > self.size:
            raise EnvelopeRefused(
                BACKEND_BUSY,
                f"you have {budget.count} one-way messages ({budget.size} bytes) waiting "
                f"for your next exchange, the most one sender may ({self.count} messages, "
                f"{self.size} bytes); open an exchange or retry later",
                retry_after=_RETRY,
            )
        budget.by_address.setdefault(address, []).append((now, message, size))
        budget.count += 1
        budget.size += size
        budget.touched = now
        self._budgets.move_to_end(owner)
        while len(self._budgets) > self.principals:
            self._budgets.popitem(last=False)

    def take(self, owner: Owner, address: Address, now: float) -> list[ty.Message]:
        """The messages waiting for ``owner`` at ``address`` (now no longer waiting)."""
        budget = self._budgets.get(owner)
        if budget is None:
            return []
        budget.expire(now - self.ttl)
        waiting = budget.by_address.pop(address, [])
        budget.count -= len(waiting)
        budget.size -= sum(w[2] for w in waiting)
        if not budget.count:
            del self._budgets[owner]
        return [w[1] for w in waiting]


def _size(message: ty.Message) -> int:
    """Bytes of a one-way message's content (its ``body.content``, UTF-8)."""
    content = message.content
    if isinstance(content, str):
        return len(content.encode("utf-8", "surrogatepass"))
    return len(message.text.encode("utf-8", "surrogatepass"))


def fits(joined: tuple[int, int], message: ty.Message, count: int, size: int) -> tuple[int, int]:
    """``joined`` (messages, bytes) after ``message`` joins an exchange; 4.13 past the budget.

    An exchange takes at most ``count`` one-way messages of ``size`` bytes
    in all; its conversation does not grow past that (4.13: it never will).

    Raises:
        EnvelopeRefused: 4.13 the message does not fit.
    """
    n, total = joined
    extra = _size(message)
    if n >= count or total + extra > size:
        raise EnvelopeRefused(
            PAYLOAD_TOO_LARGE,
            f"this exchange has taken {n} one-way messages ({total} bytes); it takes at most "
            f"{count} messages, {size} bytes in all",
        )
    return n + 1, total + extra


def trimmed(updates: list[dict[str, object]], count: int, size: int) -> None:
    """Drop the oldest ``progress`` updates until at most ``count`` of ``size`` bytes remain."""
    del updates[: max(0, len(updates) - count)]
    while updates and sum(_update_size(u) for u in updates) > size:
        del updates[0]


def _update_size(update: dict[str, object]) -> int:
    content = update.get("content")
    return len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else 0
