"""Damaging decoded JSON at a path, for the generated-vs-generic codec tests.

:func:`paths` lists every place in a value, :func:`edit` replaces or drops
the member at one, and :func:`outcome` records what a decode function made
of the result (the value, or the details of its DecodeError), so the two
paths of the codec can be compared on the same damaged input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uamp_proto.codec import DecodeError

Path = tuple[Any, ...]


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every member path in ``value`` (dict keys and list indexes), outermost first."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def edit(value: Any, path: Path, new: Any = None, *, drop: bool = False) -> Any:
    """A copy of ``value`` with the member at ``path`` set to ``new`` (or dropped)."""
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        if not rest:
            return {k: v for k, v in value.items() if k != head} if drop else {**value, head: new}
        return {**value, head: edit(value[head], rest, new, drop=drop)}
    copy = list(value)
    if not rest:
        if drop:
            del copy[head]
        else:
            copy[head] = new
        return copy
    copy[head] = edit(value[head], rest, new, drop=drop)
    return copy


def outcome(decode: Callable[[Any], Any], value: Any) -> Any:
    """What ``decode`` makes of ``value``: the result, or its DecodeError's details."""
    try:
        return decode(value)
    except DecodeError as exc:
        return (exc.message, exc.path, exc.event_type, exc.event_id, exc.session_id)
