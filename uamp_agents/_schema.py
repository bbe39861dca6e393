"""JSON Schema from Python types, and a validator for the subset we emit.

Tool parameters and structured-output schemas are derived from type hints
(``str``, ``int``, ``float``, ``bool``, ``None``, ``list[T]``,
``dict[str, T]``, ``tuple``, ``Literal``, ``Enum``, unions, attrs classes,
dataclasses and TypedDicts). :func:`validate` checks a decoded JSON value
against a schema using the keywords those schemas use, plus the common
numeric, length and combinator keywords, so schemas written by hand work too.
Keywords it does not know are ignored, as JSON Schema says.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .errors import SchemaError

__all__ = [
    "SchemaError",
    "docstring_parts",
    "is_structured_class",
    "parameters_schema",
    "schema_for",
    "validate",
]

_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    bytes: {"type": "string"},
}


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def is_structured_class(tp: Any) -> bool:
    """Whether ``tp`` is an attrs class, a dataclass or a TypedDict."""
    return isinstance(tp, type) and (
        attrs.has(tp) or dataclasses.is_dataclass(tp) or _is_typeddict(tp)
    )


def schema_for(tp: Any, *, _seen: frozenset[Any] = frozenset()) -> dict[str, Any]:
    """Return the JSON Schema of the Python type ``tp``.

    Raises:
        SchemaError: ``tp`` (or a part of it) has no JSON Schema form.
    """
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return {}
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = schema_for(args[0], _seen=_seen)
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        options = [schema_for(a, _seen=_seen) for a in members]
        if len(members) != len(args):
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin in (list, set, frozenset, Sequence, typing.Sequence) or tp in (list, set):
        item = schema_for(args[0], _seen=_seen) if args else {}
        return {"type": "array", "items": item}
    if origin is tuple or tp is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for(args[0], _seen=_seen)}
        if not args:
            return {"type": "array"}
        return {
            "type": "array",
            "prefixItems": [schema_for(a, _seen=_seen) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        value = schema_for(args[1], _seen=_seen) if args else {}
        return {"type": "object", "additionalProperties": value}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if is_structured_class(tp):
        if tp in _seen:
            raise SchemaError(f"recursive type {tp.__name__} has no inline JSON Schema")
        return _class_schema(tp, _seen | {tp})
    raise SchemaError(f"no JSON Schema for type {tp!r}")


def _class_schema(tp: type, seen: frozenset[Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(tp, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    if attrs.has(tp):
        for a in attrs.fields(tp):
            properties[a.name] = schema_for(hints.get(a.name, Any), _seen=seen)
            if a.default is attrs.NOTHING:
                required.append(a.name)
    elif dataclasses.is_dataclass(tp):
        for f in dataclasses.fields(tp):
            properties[f.name] = schema_for(hints.get(f.name, Any), _seen=seen)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
    else:
        req_keys = getattr(tp, "__required_keys__", frozenset(hints))
        for name, hint in hints.items():
            properties[name] = schema_for(hint, _seen=seen)
            if name in req_keys:
                required.append(name)
    _, params = docstring_parts(tp.__doc__)
    for name, text in params.items():
        if name in properties:
            properties[name].setdefault("description", text)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return schema


# --- docstrings -------------------------------------------------------------

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Attributes):\s*$")
_OTHER_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def docstring_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter texts.

    Understands Google style (``Args:`` sections) and reST ``:param x:`` lines.
    The description is the text before the first section, joined into one
    paragraph per blank-line-separated block.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    in_other = False
    current: str | None = None
    args_indent: int | None = None
    for line in lines:
        rest = _REST_PARAM.match(line)
        if rest:
            params[rest.group(1)] = rest.group(2).strip()
            current, in_args, in_other = rest.group(1), False, True
            continue
        if _SECTION.match(line):
            in_args, in_other, current, args_indent = True, False, None, None
            continue
        if _OTHER_SECTION.match(line) or line.strip().startswith(":"):
            in_args, in_other, current = False, True, None
            continue
        if in_args:
            if not line.strip():
                current = None
                continue
            indent = len(line) - len(line.lstrip())
            m = _ARG_LINE.match(line)
            if m and (args_indent is None or indent <= args_indent):
                args_indent = indent
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current is not None:
                params[current] = (params[current] + " " + line.strip()).strip()
            continue
        if in_other:
            if current is not None and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
            continue
        description.append(line)
    paragraphs = " ".join(description).strip()
    text = "\n\n".join(
        " ".join(p.split()) for p in "\n".join(description).split("\n\n") if p.strip()
    )
    return (text or paragraphs), params


def parameters_schema(fn: Callable[..., Any], skip: Callable[[Any], bool]) -> dict[str, Any]:
    """The JSON Schema of ``fn``'s parameters (an object schema).

    Parameters whose annotation satisfies ``skip`` (injected context) and
    ``*args``/``**kwargs`` are left out.

    Raises:
        SchemaError: A parameter's annotation has no JSON Schema form.
    """
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    _, docs = docstring_parts(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, param.annotation)
        if skip(hint):
            continue
        try:
            prop = schema_for(hint)
        except SchemaError as exc:
            raise SchemaError(f"parameter {name!r} of {fn.__name__}: {exc}") from None
        if docs.get(name):
            prop.setdefault("description", docs[name])
        if param.default is param.empty:
            required.append(name)
        elif _jsonable(param.default):
            prop.setdefault("default", param.default)
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


# --- validation -------------------------------------------------------------

_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Check ``value`` against ``schema``; return the problems found (empty if valid).

    Each problem names the JSON path of the offending value, e.g.
    ``"$.issues[0].line: expected integer, got 'x'"``.
    """
    errors: list[str] = []
    _check(value, schema, path, errors)
    return errors


def _check(value: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if not isinstance(schema, Mapping):
        return
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPE_CHECKS.get(n, lambda v: True)(value) for n in names):
            errors.append(f"{path}: expected {' or '.join(names)}, got {value!r}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}, got {value!r}")
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, errors)
    if isinstance(value, list):
        _check_array(value, schema, path, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)
    for sub in schema.get("allOf", ()):
        _check(value, sub, path, errors)
    if "anyOf" in schema and not any(not validate(value, s, path) for s in schema["anyOf"]):
        errors.append(f"{path}: {value!r} matches none of the allowed forms")
    if "oneOf" in schema:
        matches = sum(1 for s in schema["oneOf"] if not validate(value, s, path))
        if matches != 1:
            errors.append(f"{path}: {value!r} must match exactly one form, matched {matches}")


def _check_string(value: str, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']} characters")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']!r}")


def _check_number(value: float, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} is less than {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: {value} is greater than {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        errors.append(f"{path}: {value} is not greater than {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        errors.append(f"{path}: {value} is not less than {schema['exclusiveMaximum']}")


def _check_array(value: list[Any], schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    prefix = schema.get("prefixItems", ())
    for i, (item, sub) in enumerate(zip(value, prefix, strict=False)):
        _check(item, sub, f"{path}[{i}]", errors)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value[len(prefix) :], start=len(prefix)):
            _check(item, items, f"{path}[{i}]", errors)
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for item in value:
            if item in seen:
                errors.append(f"{path}: duplicate item {item!r}")
                break
            seen.append(item)


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, errors: list[str]
) -> None:
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"{path}: missing required property {name!r}")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = f"{path}.{key}"
        if key in props:
            _check(item, props[key], sub, errors)
        elif extra is False:
            errors.append(f"{path}: unexpected property {key!r}")
        elif isinstance(extra, Mapping):
            _check(item, extra, sub, errors)
