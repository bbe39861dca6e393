"""The shared OpenAI-form tool parser (Completions, Realtime and A2A use it)."""

from __future__ import annotations

from typing import Any

import pytest

from uamp_proto import types as ty
from uamp_proto.adapters import _tools
from uamp_proto.adapters._tools import ToolFormError

NESTED = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
FLAT = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def test_nested_and_flat_declarations_agree() -> None:
    nested = _tools.parse_tool(NESTED, "t")
    assert nested == _tools.parse_tool(FLAT, "t", flat=True)
    assert nested.function == ty.FunctionDefinition(name="f", parameters={"type": "object"})


BAD_TOOLS: list[tuple[Any, dict[str, bool], str, str]] = [
    ("x", {}, "t", "invalid_type"),
    ({"type": "mcp"}, {}, "t.type", "unsupported_value"),
    ({"type": "function"}, {}, "t.function", "missing_required_parameter"),
    (FLAT, {}, "t.function", "missing_required_parameter"),
    ({"function": {"name": 3}}, {}, "t.function.name", "invalid_type"),
    ({"name": "f", "parameters": []}, {"flat": True}, "t.parameters", "invalid_type"),
    ({"function": {"name": "a b"}}, {"openai_rules": True}, "t.function.name", "invalid_value"),
    (
        {"function": {"name": "f", "strict": 1}},
        {"openai_rules": True},
        "t.function.strict",
        "invalid_type",
    ),
]


@pytest.mark.parametrize(("value", "options", "param", "code"), BAD_TOOLS)
def test_bad_declarations_name_the_field(
    value: Any, options: dict[str, bool], param: str, code: str
) -> None:
    with pytest.raises(ToolFormError) as err:
        _tools.parse_tool(value, "t", **options)
    assert (err.value.param, err.value.code) == (param, code)


def test_lists_and_unique_names() -> None:
    assert _tools.parse_tools(None, "tools") == []
    with pytest.raises(ToolFormError):
        _tools.parse_tools({}, "tools")
    twice = [NESTED, NESTED]
    assert len(_tools.parse_tools(twice, "tools")) == 2
    with pytest.raises(ToolFormError) as err:
        _tools.parse_tools(twice, "tools", openai_rules=True)
    assert err.value.param == "tools[1].function.name"


@pytest.mark.parametrize(
    ("value", "names", "flat", "expected"),
    [
        (None, {"f"}, False, None),
        ("auto", set(), False, "auto"),
        ("required", None, False, "required"),
        ({"type": "function", "function": {"name": "f"}}, {"f"}, False, "f"),
        ({"type": "function", "name": "f"}, None, True, "f"),
    ],
)
def test_tool_choices(value: Any, names: set[str] | None, flat: bool, expected: Any) -> None:
    got = _tools.parse_tool_choice(value, "tc", names=names, flat=flat)
    if isinstance(got, dict):
        got = got["function"]["name"]
    assert got == expected


@pytest.mark.parametrize(
    ("value", "names", "param"),
    [
        ("sometimes", None, "tc"),
        ("required", set(), "tc"),
        ({"type": "function", "function": {"name": "g"}}, {"f"}, "tc.function.name"),
        ({"type": "function", "name": "f"}, None, "tc.function"),
        ({"function": {"name": "f"}}, None, "tc.type"),
    ],
)
def test_bad_tool_choices(value: Any, names: set[str] | None, param: str) -> None:
    with pytest.raises(ToolFormError) as err:
        _tools.parse_tool_choice(value, "tc", names=names)
    assert err.value.param == param


def test_tool_calls_nested_and_flat() -> None:
    call = ty.ToolInvocation(id="c", name="f", arguments="{}")
    nested = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert _tools.parse_tool_call(nested, "m") == call
    flat = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert _tools.parse_tool_call(flat, "item", flat=True) == call
    with pytest.raises(ToolFormError) as err:
        _tools.parse_tool_call({"id": "c", "function": {"name": "f", "arguments": {}}}, "m")
    assert (err.value.param, err.value.code) == ("m.function.arguments", "invalid_type")
    with pytest.raises(ToolFormError) as err:
        _tools.parse_tool_call({"name": "f"}, "item", flat=True)
    assert err.value.param == "item.call_id"
