"""Function tools in OpenAI's JSON form: one parser for every adapter that reads them.

Theory of operation
-------------------
Chat Completions, the Realtime API and A2A (client tools in
``metadata.tools``) all declare tools, choose among them and name calls in
OpenAI's shape::

    {"type": "function", "function": {"name", "description", "parameters", "strict"}}
    "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
    {"id", "type": "function", "function": {"name", "arguments"}}

The Realtime API flattens each (``{"type": "function", "name": ...}``, a
``function_call`` item with ``call_id``, ``name``, ``arguments``); ``flat=True``
accepts that form too. Chat Completions adds its own rules (function-name
pattern, ``strict``, unique names): ``openai_rules=True``.

Every helper raises :class:`ToolFormError` naming the parameter path and an
OpenAI-style code; each adapter turns it into its own error (a Completions
400, a Realtime ``error`` event, an A2A ``-32602``) at its boundary.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from .. import types as ty
from ..codec import json_type_name
from ..errors import UampError

__all__ = [
    "TOOL_CHOICES",
    "ToolFormError",
    "kind_of",
    "parse_tool",
    "parse_tool_call",
    "parse_tool_choice",
    "parse_tools",
]

#: The string forms of ``tool_choice``.
TOOL_CHOICES = frozenset({"auto", "none", "required"})
# OpenAI's rule for function names.
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@attrs.define(auto_exc=True)
class ToolFormError(UampError):
    """A tool declaration, choice or call that does not parse.

    Attributes:
        message: What is wrong, naming the parameter.
        param: The parameter path (``tools[0].function.name``).
        code: OpenAI-style code: ``invalid_type``, ``invalid_value``,
            ``missing_required_parameter`` or ``unsupported_value``.
    """

    message: str
    param: str
    code: str = "invalid_value"


#: The article each JSON type takes in a sentence (``"null"`` takes none).
_ARTICLE = {"boolean": "a ", "number": "a ", "string": "a ", "array": "an ", "object": "an "}


def kind_of(value: object) -> str:
    """A JSON value's kind for error messages: ``"a string"``, ``"null"`` ..."""
    name = json_type_name(value)
    return _ARTICLE.get(name, "") + name


def _obj(value: object, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ToolFormError(
            f"'{param}' must be an object, got {kind_of(value)}.", param, "invalid_type"
        )
    return value


def _str(obj: Mapping[str, Any], key: str, param: str) -> str:
    value = obj.get(key)
    if value is None:
        raise ToolFormError(
            f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
        )
    if not isinstance(value, str):
        raise ToolFormError(
            f"'{param}' must be a string, got {kind_of(value)}.", param, "invalid_type"
        )
    return value


def _function(obj: dict[str, Any], where: str, flat: bool) -> tuple[dict[str, Any], str]:
    """The function object of a tool or choice, and its parameter path."""
    nested = obj.get("function")
    if flat and not isinstance(nested, dict):
        return obj, where
    if nested is None:
        raise ToolFormError(
            f"Missing required parameter: '{where}.function'.",
            f"{where}.function",
            "missing_required_parameter",
        )
    return _obj(nested, f"{where}.function"), f"{where}.function"


def parse_tool(
    value: object, where: str, *, flat: bool = False, openai_rules: bool = False
) -> ty.ToolDefinition:
    """One function-tool declaration.

    Args:
        value: The decoded tool object.
        where: Its parameter path, for errors.
        flat: Also accept the Realtime form (no ``function`` wrapper).
        openai_rules: Apply Chat Completions' name pattern and read ``strict``.

    Raises:
        ToolFormError: naming the offending field.
    """
    tool = _obj(value, where)
    kind = tool.get("type", "function")
    if kind != "function":
        raise ToolFormError(
            f"'{where}.type' {kind!r} is not supported; use 'function'.",
            f"{where}.type",
            "unsupported_value",
        )
    fn, path = _function(tool, where, flat)
    name = _str(fn, "name", f"{path}.name")
    if openai_rules and not _FUNCTION_NAME.match(name):
        raise ToolFormError(
            f"'{path}.name' must be 1-64 letters, digits, '_' or '-'.", f"{path}.name"
        )
    description = fn.get("description")
    if description is not None:
        description = _str(fn, "description", f"{path}.description") or None
    params = fn.get("parameters")
    if params is not None:
        _obj(params, f"{path}.parameters")
    strict = fn.get("strict") if openai_rules else None
    if strict is not None and not isinstance(strict, bool):
        raise ToolFormError(f"'{path}.strict' must be a boolean.", f"{path}.strict", "invalid_type")
    return ty.ToolDefinition(
        function=ty.FunctionDefinition(
            name=name, description=description, parameters=params, strict=strict
        )
    )


def parse_tools(
    value: object, where: str, *, flat: bool = False, openai_rules: bool = False
) -> list[ty.ToolDefinition]:
    """A list of tool declarations (``None``: none); see :func:`parse_tool`.

    With ``openai_rules`` the function names must also be unique.

    Raises:
        ToolFormError: naming the offending field.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise ToolFormError(f"'{where}' must be an array.", where, "invalid_type")
    tools = [
        parse_tool(raw, f"{where}[{i}]", flat=flat, openai_rules=openai_rules)
        for i, raw in enumerate(value)
    ]
    if openai_rules:
        seen: set[str] = set()
        for i, tool in enumerate(tools):
            name = tool.function.name
            if name in seen:
                raise ToolFormError(
                    f"Duplicate function name {name!r} in '{where}'.",
                    f"{where}[{i}].function.name",
                )
            seen.add(name)
    return tools


def parse_tool_choice(
    value: object, where: str, *, names: Collection[str] | None = None, flat: bool = False
) -> str | dict[str, Any] | None:
    """A ``tool_choice``: ``"auto"``/``"none"``/``"required"`` or one function.

    Args:
        value: The decoded value (``None``: not given).
        where: Its parameter path, for errors.
        names: The declared function names to check against (``None``: do
            not check; ``"required"`` then needs no tools either).
        flat: Also accept ``{"type": "function", "name": ...}``.

    Returns:
        The string, or ``{"type": "function", "function": {"name": ...}}``.

    Raises:
        ToolFormError: naming the offending field.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise ToolFormError(
                f"'{where}' must be 'auto', 'none', 'required' or a function choice.", where
            )
        if value == "required" and names is not None and not names:
            raise ToolFormError(f"'{where}' is 'required' but no 'tools' were given.", where)
        return value
    obj = _obj(value, where)
    if obj.get("type") != "function":
        raise ToolFormError(f"'{where}.type' must be 'function'.", f"{where}.type")
    fn, path = _function(obj, where, flat)
    name = _str(fn, "name", f"{path}.name")
    if names is not None and name not in names:
        raise ToolFormError(
            f"'{where}' names function {name!r}, which is not in 'tools'.", f"{path}.name"
        )
    return {"type": "function", "function": {"name": name}}


def parse_tool_call(value: object, where: str, *, flat: bool = False) -> ty.ToolInvocation:
    """One tool call: ``{"id", "type", "function": {"name", "arguments"}}``.

    With ``flat`` it is a Realtime ``function_call`` item instead
    (``call_id``, ``name``, ``arguments``). ``arguments`` defaults to ``""``.

    Raises:
        ToolFormError: naming the offending field.
    """
    obj = _obj(value, where)
    if flat:
        call_id = _str(obj, "call_id", f"{where}.call_id")
        fn, path = obj, where
    else:
        call_id = _str(obj, "id", f"{where}.id")
        if obj.get("type", "function") != "function":
            raise ToolFormError(f"'{where}.type' must be 'function'.", f"{where}.type")
        fn, path = _function(obj, where, False)
    name = _str(fn, "name", f"{path}.name")
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        raise ToolFormError(
            f"'{path}.arguments' must be a JSON string.", f"{path}.arguments", "invalid_type"
        )
    return ty.ToolInvocation(id=call_id, name=name, arguments=args)
