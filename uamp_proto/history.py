"""Bounds on a conversation a server keeps between a client's turns.

Transports whose protocol leaves the conversation with the server (ACP
sessions, MCP ``session`` names) keep each conversation's messages for the
next turn. A stranger can grow that with every turn, so what is kept is
bounded twice: in messages and in bytes (each message weighed by its
strings, about its JSON size, without encoding it). The newest messages
that fit both are kept, from a user message on, so no tool result is left
without the call it answers. The walk stops at the first message that does
not fit: a turn costs at most the kept part's size.

Bounded per conversation is not bounded per principal: a stranger who may
hold a hundred sessions holds a hundred kept histories. :class:`HistoryBudget`
adds the owner's bound: each store reports what a conversation keeps after
each turn, and once an owner's conversations keep more than the budget, the
ones the owner used least recently are emptied (their next turn starts
afresh) until the rest fit. The conversation just reported is never emptied
for the others: its own bound is below the budget.

A UAMP session keeps its conversation in the sans-IO core
(:class:`uamp_proto.connection.Connection`, bounded per session), and one
principal may hold sessions on many connections. :class:`SessionHistories`
is the budget over all of them: the core reports each session's weight
(``ConnectionConfig.on_history``), and what the budget empties is asked of
whatever keeps that session (``forget_history``: the core, or the host that
also drops its copy in an event log's record). Both servers keep one for
the whole app.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Protocol, cast

import attrs

from . import types as ty

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_OWNER_HISTORY_BYTES",
    "HistoryBudget",
    "KeepsHistories",
    "SessionHistories",
    "message_weight",
    "trim",
    "weight",
]

#: The most bytes (the messages' strings, about their JSON size) a conversation keeps.
MAX_HISTORY_BYTES = 2 * 1024 * 1024
#: The most bytes all of one owner's conversations keep (:class:`HistoryBudget`).
MAX_OWNER_HISTORY_BYTES = 16 * 1024 * 1024


def weight(value: object) -> int:
    """About how many bytes ``value`` holds as JSON: its strings' lengths, 8 for a scalar."""
    if value is None:
        return 0  # left out
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(weight(v) for v in value)
    if isinstance(value, Mapping):
        return sum(len(str(k)) + weight(v) for k, v in value.items())
    cls = type(value)
    if attrs.has(cls):
        return sum(weight(getattr(value, f.name)) for f in attrs.fields(cls))
    return 8


def message_weight(message: ty.Message) -> int:
    """:func:`weight` of one message, without the walk for a plain one (role, text, names)."""
    if message.content_items is None and message.tool_calls is None and not message.unknown:
        content, name, call = message.content, message.name, message.tool_call_id
        return (
            len(message.role)
            + (len(content) if content else 0)
            + (len(name) if name else 0)
            + (len(call) if call else 0)
        )
    return weight(message)


def trim(
    messages: list[ty.Message], *, max_messages: int, max_bytes: int = MAX_HISTORY_BYTES
) -> int:
    """Drop the oldest of ``messages``, in place, until the rest fit both bounds.

    A single turn over ``max_bytes`` leaves nothing (it has run; it is not
    replayed). Returns the kept messages' weight (:func:`weight`).
    """
    keep = 0  # how many of the newest fit, counted from the end
    total = 0
    for message in reversed(messages):
        size = message_weight(message)
        if keep == max_messages or total + size > max_bytes:
            break
        total += size
        keep += 1
    start = len(messages) - keep
    while start < len(messages) and messages[start].role != "user":
        total -= message_weight(messages[start])
        start += 1
    del messages[:start]
    return total


class HistoryBudget:
    """The bytes one owner's kept conversations hold, within a budget (module docstring).

    Owners and conversations are any hashable keys (a principal's key; a
    session id, or a tuple naming a conversation). Pure bookkeeping: the
    store that keeps the messages empties what :meth:`kept` names.
    """

    def __init__(self, max_bytes: int = MAX_OWNER_HISTORY_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.max_bytes = max_bytes
        #: Per owner: each conversation's kept bytes, least recently reported first.
        self._kept: dict[Hashable, OrderedDict[Hashable, int]] = {}
        self._totals: dict[Hashable, int] = {}

    def total(self, owner: Hashable) -> int:
        """The bytes ``owner`` 's conversations keep now."""
        return self._totals.get(owner, 0)

    def kept(self, owner: Hashable, conversation: Hashable, size: int) -> list[Hashable]:
        """``conversation`` of ``owner`` now keeps ``size`` bytes; what to empty for the budget.

        Returns the owner's other conversations to empty, least recently
        reported first (they are forgotten here), so that the owner's total
        fits the budget again; empty when it already does.
        """
        mine = self._kept.get(owner)
        if mine is None:
            mine = self._kept[owner] = OrderedDict()
        total = self._totals.get(owner, 0) - mine.pop(conversation, 0) + size
        mine[conversation] = size
        emptied: list[Hashable] = []
        while total > self.max_bytes and len(mine) > 1:
            oldest, freed = mine.popitem(last=False)
            total -= freed
            emptied.append(oldest)
        self._totals[owner] = total
        return emptied

    def forget(self, owner: Hashable, conversation: Hashable) -> None:
        """``conversation`` is gone (ended, evicted): its bytes leave ``owner`` 's total."""
        mine = self._kept.get(owner)
        if mine is None:
            return
        freed = mine.pop(conversation, None)
        if freed is None:
            return
        if mine:
            self._totals[owner] -= freed
        else:
            del self._kept[owner]
            del self._totals[owner]


class KeepsHistories(Protocol):
    """What keeps sessions' conversations: a core connection, or the host around it."""

    def forget_history(self, session_id: str) -> None:
        """Empty the kept conversation of ``session_id`` (its next turn starts afresh)."""
        ...


class SessionHistories:
    """One :class:`HistoryBudget` over live sessions on many connections (module docstring).

    A session is named by what keeps it and its id; the owner it was last
    reported for is remembered here, so ending a session or a whole
    connection needs neither. Pure bookkeeping: trimming calls the keeper's
    ``forget_history``.
    """

    def __init__(self, max_bytes: int = MAX_OWNER_HISTORY_BYTES) -> None:
        self.budget = HistoryBudget(max_bytes)
        #: Per keeper: its reported sessions' owners, by session id.
        self._owners: dict[KeepsHistories, dict[str, Hashable]] = {}

    def total(self, owner: Hashable) -> int:
        """The bytes ``owner`` 's live sessions keep now (as last reported)."""
        return self.budget.total(owner)

    def kept(self, owner: Hashable, keeper: KeepsHistories, session_id: str, size: int) -> None:
        """Session ``session_id`` of ``keeper``, ``owner`` 's, keeps ``size`` bytes now.

        Past the budget, ``owner`` 's least recently reported other sessions
        are emptied through their keepers (and forgotten here until they
        report again).
        """
        key = (keeper, session_id)
        mine = self._owners.get(keeper)
        if mine is None:
            mine = self._owners[keeper] = {}
        was = mine.get(session_id)
        if was is not None and was != owner:
            self.budget.forget(was, key)  # never happens to a session; kept exact anyway
        mine[session_id] = owner
        for emptied in self.budget.kept(owner, key, size):
            other, sid = cast("tuple[KeepsHistories, str]", emptied)
            theirs = self._owners.get(other)
            if theirs is not None:
                theirs.pop(sid, None)
                if not theirs:
                    del self._owners[other]
            other.forget_history(sid)

    def ended(self, keeper: KeepsHistories, session_id: str) -> None:
        """Session ``session_id`` of ``keeper`` is gone: its bytes leave its owner's total."""
        mine = self._owners.get(keeper)
        owner = mine.pop(session_id, None) if mine is not None else None
        if owner is None:
            return
        if not mine:
            del self._owners[keeper]
        self.budget.forget(owner, (keeper, session_id))

    def closed(self, keeper: KeepsHistories) -> None:
        """Every session ``keeper`` kept is gone (its connection closed)."""
        for session_id, owner in self._owners.pop(keeper, {}).items():
            self.budget.forget(owner, (keeper, session_id))
