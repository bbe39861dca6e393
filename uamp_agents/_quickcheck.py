"""A quick pass over tool arguments: certainly valid, or ask ``jsonschema``.

Checking a tool call's arguments with ``jsonschema`` costs about 30 us (a
validator built per call, then its generic walk): a third of what a whole
server-side tool round costs the runtime. The schemas :func:`~uamp_agents.tool`
derives from type hints are mostly a handful of typed properties, which a
closure tree checks in a microsecond or two.

:func:`compile_check` turns a schema into ``check(value) -> bool`` when every
keyword in it is one this module knows (``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``anyOf``, a string
``enum``, and the annotations ``description``, ``title``, ``default``,
``examples``); any other keyword (``$ref``, ``minimum``, ``format`` ...)
means no quick check (``None``). The check is sound, not complete: ``True``
means ``jsonschema`` finds no problem; ``False`` means "not sure", and the
caller runs the full validation, which also words the problems. Where the
two could disagree the check says ``False``: ``1.0`` for an ``integer``,
say, which JSON Schema accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Check", "compile_check"]

Check = Callable[[Any], bool]

#: Keywords that assert nothing.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})

#: JSON Schema type name -> whether a decoded JSON value certainly is one.
_TYPES: dict[str, Check] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}

_KNOWN = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "anyOf", "enum"}
)


def compile_check(schema: Any) -> Check | None:
    """The quick check of ``schema``; ``None`` when it has a keyword this module does not know."""
    if schema is True or (isinstance(schema, Mapping) and not schema):
        return _anything
    if not isinstance(schema, Mapping) or set(schema) - _KNOWN - _ANNOTATIONS:
        return None
    checks: list[Check] = []
    if "type" in schema:
        kind = _type_check(schema["type"])
        if kind is None:
            return None
        checks.append(kind)
    if "enum" in schema:
        options = schema["enum"]
        if not isinstance(options, list) or not all(type(o) is str for o in options):
            return None
        allowed = frozenset(options)
        checks.append(lambda v: type(v) is str and v in allowed)
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            return None
        compiled = [compile_check(b) for b in branches]
        if any(c is None for c in compiled):
            return None
        ready = tuple(c for c in compiled if c is not None)
        checks.append(lambda v: any(c(v) for c in ready))
    if "items" in schema:
        item = compile_check(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    if {"properties", "required", "additionalProperties"} & set(schema):
        members = _object_check(schema)
        if members is None:
            return None
        checks.append(members)
    if not checks:
        return _anything
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # (a typed object: its type, then its members)
        first, second = checks
        return lambda v: first(v) and second(v)
    every = tuple(checks)
    return lambda v: all(c(v) for c in every)


def _anything(value: Any) -> bool:
    return True


def _type_check(kind: Any) -> Check | None:
    if isinstance(kind, str):
        return _TYPES.get(kind)
    if not isinstance(kind, list) or not kind or not all(isinstance(k, str) for k in kind):
        return None
    each = [_TYPES.get(k) for k in kind]
    if any(c is None for c in each):
        return None
    ready = tuple(c for c in each if c is not None)
    return lambda v: any(c(v) for c in ready)


def _object_check(schema: Mapping[str, Any]) -> Check | None:
    """``properties``, ``required`` and ``additionalProperties`` (they apply to objects only)."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    if not all(isinstance(r, str) for r in required):
        return None
    compiled = {name: compile_check(sub) for name, sub in properties.items()}
    if any(c is None for c in compiled.values()):
        return None
    members: dict[str, Check] = {k: c for k, c in compiled.items() if c is not None}
    others: Check | None
    if extra is True:
        others = _anything
    elif extra is False:
        others = None
    else:
        others = compile_check(extra)
        if others is None:
            return None
    needed = tuple(required)

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True  # these keywords ignore anything that is not an object
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            member = members.get(name)
            if member is not None:
                if not member(item):
                    return False
            elif others is None or not others(item):
                return False
        return True

    return check
