"""Bounds on a conversation a server keeps between a client's turns.

Transports whose protocol leaves the conversation with the server (ACP
sessions, MCP ``session`` names) keep each conversation's messages for the
next turn. A stranger can grow that with every turn, so what is kept is
bounded twice: in messages and in bytes (each message weighed by its
strings, about its JSON size, without encoding it). The newest messages
that fit both are kept, from a user message on, so no tool result is left
without the call it answers. The walk stops at the first message that does
not fit: a turn costs at most the kept part's size.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from . import types as ty

__all__ = ["MAX_HISTORY_BYTES", "trim", "weight"]

#: The most bytes (the messages' strings, about their JSON size) a conversation keeps.
MAX_HISTORY_BYTES = 2 * 1024 * 1024


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


def trim(
    messages: list[ty.Message], *, max_messages: int, max_bytes: int = MAX_HISTORY_BYTES
) -> None:
    """Drop the oldest of ``messages``, in place, until the rest fit both bounds.

    A single turn over ``max_bytes`` leaves nothing (it has run; it is not
    replayed).
    """
    keep = 0  # how many of the newest fit, counted from the end
    total = 0
    for message in reversed(messages):
        total += weight(message)
        if keep == max_messages or total > max_bytes:
            break
        keep += 1
    start = len(messages) - keep
    while start < len(messages) and messages[start].role != "user":
        start += 1
    del messages[:start]
