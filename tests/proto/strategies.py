"""Hypothesis strategies for every UAMP event and type.

Strategies are derived from the attrs fields and their type hints, so a field
added to :mod:`uamp_proto.events` or :mod:`uamp_proto.types` is covered
without touching this module. Values are JSON-safe: finite floats, integers
within 2**53, text without lone surrogates (orjson refuses those).
"""

from __future__ import annotations

import types as pytypes
import typing
from functools import cache
from typing import Any

import attrs
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty

#: Deepest nesting of content items inside tool results.
MAX_DEPTH = 2
_INT_LIMIT = 2**53

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
integers = st.integers(-_INT_LIMIT, _INT_LIMIT)
# JSON numbers: a float field takes integers too and keeps them as integers.
numbers = st.floats(allow_nan=False, allow_infinity=False) | integers
json_scalars = st.none() | st.booleans() | integers | numbers | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(text, json_values, max_size=3)

CONTENT_TAGS = frozenset(cls.type for cls in ty.CONTENT_TYPES)
DELTA_TAGS = frozenset(cls.type for cls in ty.DELTA_TYPES)


def known_keys(cls: type[Any]) -> frozenset[str]:
    """The wire keys ``cls`` declares, its tag included."""
    return frozenset(f.name for f in attrs.fields(cls) if f.name != "unknown") | {"type"}


def unknown_bags(cls: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Extra keys for ``cls``'s ``unknown``: none clashes with a declared one."""
    known = known_keys(cls)
    keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8).filter(
        lambda k: k not in known and k != "function"
    )
    return st.dictionaries(keys, json_values, max_size=2)


def _unknown_tagged(tags: frozenset[str]) -> st.SearchStrategy[dict[str, Any]]:
    tag = text.filter(lambda t: t not in tags)
    return st.builds(lambda t, rest: {**rest, "type": t}, tag, json_objects)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, pytypes.UnionType)


@cache
def for_type(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Valid values of the annotation ``tp``."""
    if tp is str:
        return text
    if tp is bool:
        return st.booleans()
    if tp is int:
        return integers
    if tp is float:
        return numbers
    if tp is Any:
        return json_values
    if tp == dict[str, Any]:
        return json_objects
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return st.lists(for_type(item, depth), max_size=3)
    if _is_union(tp):
        members = [m for m in typing.get_args(tp) if m is not type(None)]
        nullable = len(members) != len(typing.get_args(tp))
        if nullable and depth >= MAX_DEPTH:
            return st.none()  # stops tool results nesting content forever
        if set(members) <= set(ty.CONTENT_TYPES) | {ty.UnknownContent}:
            inner = content_items(depth)
        elif set(members) <= set(ty.DELTA_TYPES) | {ty.DeltaUnknown}:
            inner = deltas()
        else:
            inner = st.one_of([for_type(m, depth) for m in members])
        return st.none() | inner if nullable else inner
    if attrs.has(tp):
        return instances(tp, depth)
    raise TypeError(f"no strategy for {tp!r}")  # pragma: no cover


@cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def instances(cls: type[Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Instances of an attrs class of the protocol, ``unknown`` included."""
    if cls is ty.UnknownContent:
        return st.builds(ty.UnknownContent, raw=_unknown_tagged(CONTENT_TAGS))
    if cls is ty.DeltaUnknown:
        return st.builds(ty.DeltaUnknown, raw=_unknown_tagged(DELTA_TAGS))
    hints = _hints(cls)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in attrs.fields(cls):
        if f.name == "unknown":
            fields["unknown"] = unknown_bags(cls)
        else:
            child_depth = depth + 1 if cls is ty.ToolOutput else depth
            fields[f.name] = for_type(hints[f.name], child_depth)
    return st.builds(cls, **fields)


@cache
def content_items(depth: int = 0) -> st.SearchStrategy[Any]:
    """Content items of every type, unknown ones included; media as text or URL."""
    return st.one_of(
        [instances(cls, depth) for cls in ty.CONTENT_TYPES] + [instances(ty.UnknownContent, depth)]
    )


@cache
def deltas() -> st.SearchStrategy[Any]:
    """Response deltas of every type, unknown ones included."""
    return st.one_of([instances(cls) for cls in ty.DELTA_TYPES] + [instances(ty.DeltaUnknown)])


def unknown_events() -> st.SearchStrategy[ev.UnknownEvent]:
    """Events of types this version does not know."""
    tag = text.filter(lambda t: t not in ev.EVENT_TYPES)
    return st.builds(
        lambda t, rest: ev.UnknownEvent(type=t, raw={**rest, "type": t}), tag, json_objects
    )


@cache
def events() -> st.SearchStrategy[Any]:
    """Every event class of ``events.EVENT_TYPES``, and unknown events."""
    return st.one_of([instances(cls) for cls in ev.EVENT_TYPES.values()] + [unknown_events()])
