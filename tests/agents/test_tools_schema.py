"""Tool schemas from type hints and docstrings, the validator, tool execution."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Optional

import attrs
import pytest
import trio

from uamp_agents import ToolContext, ToolError, agent, tool
from uamp_agents._schema import SchemaError, docstring_parts, schema_for, validate
from uamp_agents.providers import function
from uamp_agents.tools import as_tool, format_result
from uamp_proto.types import Message, ToolDefinition, ToolOutput


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.define
class Where:
    city: str
    zip: str | None = None


def search(
    query: str,
    limit: int = 10,
    mode: Literal["fast", "deep"] = "fast",
    tags: list[str] | None = None,
    weights: dict[str, float] | None = None,
    color: Color = Color.RED,
    where: Where | None = None,
    exact: bool = False,
) -> str:
    """Search the index.

    More details here.

    Args:
        query: What to look for,
            possibly over two lines.
        limit (int): Most results.
        mode: Speed.

    Returns:
        Matches.
    """
    return query


def test_schema_from_hints_and_docstring() -> None:
    t = tool(search)
    assert t.name == "search"
    assert t.description == "Search the index.\n\nMore details here."
    p = t.parameters
    assert p["required"] == ["query"]
    assert p["additionalProperties"] is False
    props = p["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "What to look for, possibly over two lines.",
    }
    assert props["limit"] == {"type": "integer", "description": "Most results.", "default": 10}
    assert props["mode"]["enum"] == ["fast", "deep"] and props["mode"]["default"] == "fast"
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert props["weights"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert props["color"] == {"enum": ["red", "blue"]}  # Enum default is not JSON: omitted
    assert props["where"]["anyOf"][0]["required"] == ["city"]
    assert props["exact"] == {"type": "boolean", "default": False}


def test_schema_of_assorted_types() -> None:
    assert schema_for(Optional[int]) == {"anyOf": [{"type": "integer"}, {"type": "null"}]}  # noqa: UP045
    assert schema_for(tuple[int, str]) == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert schema_for(tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert schema_for(Annotated[int, "a count"]) == {"type": "integer", "description": "a count"}
    assert schema_for(Any) == {}
    with pytest.raises(SchemaError, match="no JSON Schema"):
        schema_for(complex)


def test_unsupported_parameter_type_raises_at_definition() -> None:
    def f(x: complex) -> None: ...

    with pytest.raises(SchemaError, match="parameter 'x' of f"):
        tool(f)


def test_rest_docstrings() -> None:
    text, params = docstring_parts(
        """Do it.

        :param str a: first
        :param b: second
            continued
        :returns: nothing
        """
    )
    assert text == "Do it."
    assert params == {"a": "first", "b": "second continued"}


def test_explicit_tool_and_decorator_forms() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    t = tool(search, name="find", description="Finds.", parameters=schema)
    assert (t.name, t.description, t.parameters) == ("find", "Finds.", schema)
    d = t.definition()
    assert d.function.name == "find" and d.function.parameters == schema

    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    @tool(name="renamed", sequential=True)
    def other(x: int) -> int:
        return x

    assert plain.name == "plain" and plain.description == "Plain."
    assert other.name == "renamed" and other.sequential
    assert as_tool(plain) is plain
    with pytest.raises(TypeError, match="callable"):
        tool(3)  # type: ignore[call-overload]


def test_validator_reports_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
            "s": {"type": "string", "minLength": 2, "pattern": "^a"},
            "l": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
            "c": {"const": 1},
            "o": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    assert validate({"n": 3, "s": "ab", "l": [1, 2.5], "c": 1, "o": "x"}, schema) == []
    errors = validate({"n": 9, "s": "b", "l": [1, "x", 3], "c": 2, "o": 1.5, "z": 0}, schema)
    assert "$.n: 9 is greater than 5" in errors
    assert "$.s: shorter than 2 characters" in errors
    assert "$.s: 'b' does not match '^a'" in errors
    assert "$.l: more than 2 items" in errors
    assert "$.l[1]: expected number, got 'x'" in errors
    assert "$.c: expected 1, got 2" in errors
    assert any(e.startswith("$.o: 1.5 must match exactly one form") for e in errors)
    assert "$: unexpected property 'z'" in errors
    assert validate({}, schema) == ["$: missing required property 'n'"]
    assert validate(True, {"type": "integer"}) == ["$: expected integer, got True"]
    assert validate(None, {"anyOf": [{"type": "string"}]}) == [
        "$: None matches none of the allowed forms"
    ]


def test_format_result() -> None:
    assert format_result("x") == "x"
    assert format_result(None) == ""
    assert format_result({"a": [1, 2]}) == '{"a":[1,2]}'
    assert format_result(Where(city="Oslo")) == '{"city":"Oslo","zip":null}'
    assert format_result({"s": {1}}) == '{"s":[1]}'


def model_calling(*calls: tuple[str, Any]) -> Any:
    state = {"n": 0}

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        state["n"] += 1
        return list(calls) if state["n"] == 1 else "done"

    return function(fn)


async def test_tool_context_is_injected_and_not_in_schema() -> None:
    seen: list[ToolContext] = []

    def mark(ctx: ToolContext, note: str) -> str:
        """Record a note."""
        seen.append(ctx)
        ctx.metadata["note"] = note
        return "ok"

    t = tool(mark)
    assert list(t.parameters["properties"]) == ["note"]
    a = agent(model=model_calling(("mark", {"note": "hi"})), tools=[mark])
    turn = await a.run("x")
    assert turn.metadata["note"] == "hi"
    assert seen[0].agent_id == a.id and seen[0].turn_id == turn.id and seen[0].step == 1
    assert seen[0].tool_name == "mark"


async def test_async_sync_and_tooloutput_results() -> None:
    async def slow(x: int) -> int:
        await trio.sleep(0)
        return x * 2

    def custom(x: int) -> ToolOutput:
        return ToolOutput(call_id="ignored", result="custom", is_error=True)

    def fails(x: int) -> int:
        raise ToolError("exactly this")

    a = agent(
        model=model_calling(("slow", {"x": 2}), ("custom", {"x": 1}), ("fails", {"x": 1})),
        tools=[slow, custom, fails],
    )
    turn = await a.run("x")
    outs = [e.output for e in turn.tool_executions]
    assert [o.result for o in outs] == ["4", "custom", "exactly this"]
    assert [bool(o.is_error) for o in outs] == [False, True, True]
    calls = [e.call for e in turn.tool_executions]
    assert [o.call_id for o in outs] == [c.id for c in calls]  # call id always the real one


async def test_sync_tool_without_thread_runs_inline() -> None:
    import threading

    where: dict[str, str] = {}

    def here() -> str:
        where["here"] = threading.current_thread().name
        return "ok"

    def there() -> str:
        where["there"] = threading.current_thread().name
        return "ok"

    a = agent(
        model=model_calling(("here", {}), ("there", {})),
        tools=[tool(here, thread=False), there],
    )
    await a.run("x")
    main = threading.current_thread().name
    assert where["here"] == main and where["there"] != main
