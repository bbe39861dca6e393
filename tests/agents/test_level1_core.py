"""Level 1 (UAP section 15.1): agent(), run(), loop(), tools, structured output."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, TypedDict

import attrs
import pytest

from uamp_agents import Agent, Turn, agent, tool
from uamp_agents.agent import SUB_AGENT_PARAMETERS, NoModelError
from uamp_agents.context import StructuredOutputError
from uamp_agents.execution import loop
from uamp_agents.providers import function
from uamp_proto.types import ImageContent, Message, TextContent, ToolDefinition


def scripted(*replies: Any) -> tuple[Any, list[list[Message]]]:
    """A function model answering with ``replies`` in order; records what it saw."""
    seen: list[list[Message]] = []
    queue = list(replies)

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        seen.append(messages)
        return queue.pop(0)

    return function(fn), seen


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_agent_has_uuid4_id_and_keeps_its_definition() -> None:
    model, _ = scripted()
    a = agent(model=model, system="Be brief.", tools=[add])
    assert isinstance(a, Agent)
    assert uuid.UUID(a.id).version == 4
    assert a.id != agent(model=model).id
    assert a.model is model and a.system == "Be brief." and a.tools == [add]


async def test_run_with_text_returns_turn_with_messages_in_order() -> None:
    model, seen = scripted("Hello Alice")
    turn = await agent(model=model, system="sys").run("Hi")
    assert isinstance(turn, Turn)
    assert turn.response.text == "Hello Alice"
    assert [m.role for m in turn.messages] == ["user", "assistant"]
    assert turn.messages[0] == Message(role="user", content="Hi")
    assert turn.steps == 1 and turn.status == "completed" and turn.stop_reason == "end_turn"
    assert [m.role for m in seen[0]] == ["system", "user"]
    assert seen[0][0].content == "sys"


async def test_run_with_history_list_and_thread_like_object() -> None:
    model, seen = scripted("one", "two")
    a = agent(model=model)
    history = [
        Message(role="user", content="My name is Alice"),
        Message(role="assistant", content="ok"),
    ]
    turn = await a.run(history, "What is my name?")
    assert [m.text for m in seen[0]] == ["My name is Alice", "ok", "What is my name?"]
    assert len(turn.messages) == 2  # the history is not repeated in the turn

    class Thread:
        def history(self) -> list[Message]:
            return [Message(role="user", content="from thread")]

    await a.run(Thread(), Message(role="user", content="next"))
    assert [m.text for m in seen[1]] == ["from thread", "next"]


async def test_run_with_content_items() -> None:
    model, seen = scripted("seen", "seen")
    a = agent(model=model)
    await a.run([TextContent(text="only text")])
    assert seen[0][-1] == Message(role="user", content="only text")
    items = [TextContent(text="look"), ImageContent(image="aGVsbG8=", format="png")]
    turn = await a.run(items)
    assert turn.messages[0].content_items == items


async def test_bad_input_and_history_types_raise() -> None:
    model, _ = scripted()
    a = agent(model=model)
    with pytest.raises(TypeError, match="input must be"):
        await a.run(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="history must be"):
        await a.run(42, "x")


async def test_tool_loop_runs_tools_and_aggregates_usage() -> None:
    model, seen = scripted([("add", {"a": 2, "b": 3})], "The answer is 5")
    turn = await agent(model=model, tools=[add]).run("what is 2+3")
    assert turn.response.text == "The answer is 5"
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "assistant"]
    tool_msg = turn.messages[2]
    assert tool_msg.content == "5" and tool_msg.tool_call_id == turn.messages[1].tool_calls[0].id
    assert turn.steps == 2
    assert [e.output.result for e in turn.tool_executions] == ["5"]
    # usage summed over both model calls (the function model counts words):
    # call 1 reads 3 words, writes a call (2); call 2 reads 3 + 2 + 1, writes 4
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (9, 6)
    assert turn.usage.total_tokens == 15
    # the model saw the tool definition derived from the function
    assert seen[1][-1].role == "tool"


async def test_tool_errors_become_error_results() -> None:
    def boom(x: int) -> int:
        """Always fails."""
        raise RuntimeError("disk on fire")

    model, seen = scripted(
        [("boom", {"x": 1}), ("nope", {}), ("add", "{not json"), ("add", {"a": "two", "b": 1})],
        "recovered",
    )
    turn = await agent(model=model, tools=[boom, add]).run("go")
    assert turn.response.text == "recovered"
    outputs = [e.output for e in turn.tool_executions]
    assert all(o.is_error for o in outputs)
    assert outputs[0].result == "RuntimeError: disk on fire"
    assert "unknown tool 'nope'" in outputs[1].result and "add, boom" in outputs[1].result
    assert "not valid JSON" in outputs[2].result
    assert "arguments.a: expected integer" in outputs[3].result
    assert [m.content for m in seen[1] if m.role == "tool"] == [o.result for o in outputs]


async def test_loop_max_iterations_stops_the_run() -> None:
    model, seen = scripted(*([[("add", {"a": 1, "b": 1})]] * 5))
    turn = await agent(model=model, tools=[add], execution=loop(max_iterations=3)).run("loop")
    assert len(seen) == 3
    assert turn.stop_reason == "max_steps" and turn.steps == 3
    assert turn.response.tool_calls is not None


async def test_no_model_raises_clear_error() -> None:
    with pytest.raises(NoModelError, match="has no model"):
        await agent().run("hi")


def test_bad_agent_options_raise() -> None:
    model, _ = scripted()
    with pytest.raises(ValueError, match="share the name"):
        agent(model=model, tools=[add, tool(add)])
    with pytest.raises(TypeError, match="execution must"):
        agent(model=model, execution=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown strategy hook"):
        agent(model=model, strategy={"on_stepstart": print})
    with pytest.raises(TypeError, match="strategy must be"):
        agent(model=model, strategy=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tools must be"):
        agent(model=model, tools=[42])
    with pytest.raises(ValueError, match="max_depth"):
        agent(model=model, max_depth=-1)


# --- structured output --------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "issues": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "line": {"type": "number"},
                    "severity": {"type": "string", "enum": ["error", "warning", "info"]},
                },
                "required": ["line", "severity"],
            },
        },
        "summary": {"type": "string"},
    },
    "required": ["issues", "summary"],
}


async def test_structured_output_with_dict_schema() -> None:
    reply = {"issues": [{"line": 3, "severity": "error"}], "summary": "one"}
    seen_formats: list[Any] = []

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        return reply

    model = function(fn)
    original = model.generate

    async def spy(request: Any) -> Any:
        seen_formats.append(request.response_format)
        return await original(request)

    model.generate = spy  # type: ignore[method-assign]
    turn = await agent(model=model, structure=SCHEMA).run("analyze")
    assert turn.data == reply
    assert seen_formats[0].type == "json_schema"
    assert seen_formats[0].json_schema["schema"] == SCHEMA


async def test_structured_output_accepts_code_fences() -> None:
    model, _ = scripted('```json\n{"issues": [], "summary": "ok"}\n```')
    turn = await agent(model=model, structure=SCHEMA).run("x")
    assert turn.data == {"issues": [], "summary": "ok"}


@attrs.define
class Point:
    """A point.

    Attributes:
        x: Horizontal.
        y: Vertical.
    """

    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    label: str
    corners: list[Point]


class Movie(TypedDict):
    title: str
    year: int


async def test_structured_output_with_classes() -> None:
    model, _ = scripted('{"x": 1, "y": 2}')
    turn = await agent(model=model, structure=Point).run("x")
    assert turn.data == Point(1, 2)

    model, _ = scripted('{"label": "b", "corners": [{"x": 1, "y": 2}]}')
    turn = await agent(model=model, structure=Box).run("x")
    assert turn.data == Box("b", [Point(1, 2)])

    model, _ = scripted('{"title": "Heat", "year": 1995}')
    a = agent(model=model, structure=Movie)
    assert a.schema == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title", "year"],
        "additionalProperties": False,
    }
    turn = await a.run("x")
    assert turn.data == {"title": "Heat", "year": 1995}


async def test_structured_output_retries_once_then_succeeds() -> None:
    model, seen = scripted('{"summary": 1}', '{"issues": [], "summary": "fixed"}')
    turn = await agent(model=model, structure=SCHEMA).run("x")
    assert turn.data == {"issues": [], "summary": "fixed"}
    repair = seen[1][-1]
    assert repair.role == "user" and "missing required property 'issues'" in repair.text
    assert turn.steps == 2


async def test_structured_output_failure_raises() -> None:
    model, _ = scripted("not json", "still not json")
    with pytest.raises(StructuredOutputError, match="not valid JSON") as info:
        await agent(model=model, structure=SCHEMA).run("x")
    assert info.value.text == "still not json"
    model, _ = scripted('{"x": "a"}')
    with pytest.raises(StructuredOutputError, match=r"\$.x: expected integer"):
        await agent(model=model, structure=Point, execution=loop(structure_retries=0)).run("x")


def test_to_tool_defaults_follow_section_8_2() -> None:
    model, _ = scripted()
    sub = agent(model=model, system="You explore codebases.")
    t = sub.to_tool()
    assert t.name == f"agent_{sub.id}"
    assert "You explore codebases." in t.description
    assert t.parameters == SUB_AGENT_PARAMETERS
    assert t.agent is sub
    custom = sub.to_tool(
        name="explorer", description="Explores.", parameter_schema={"type": "object"}
    )
    assert (custom.name, custom.description, custom.parameters) == (
        "explorer",
        "Explores.",
        {"type": "object"},
    )
    assert agent(model=model, name="helper").to_tool().name == "helper"


def test_package_exports_and_lazy_names() -> None:
    import uamp_agents
    from uamp_agents import execution, middleware, providers

    assert uamp_agents.agent is agent and uamp_agents.Turn is Turn
    for name in ("session", "Session", "ThreadTree", "ThreadNode", "Checkpoint", "ask", "query"):
        assert getattr(uamp_agents, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        uamp_agents.nothing  # noqa: B018
    assert {"loop", "react", "plan", "ExecutionStrategy"} <= set(execution.__all__)
    assert {"logging", "budget", "guardrails"} <= set(middleware.__all__)
    assert callable(providers.function) and callable(providers.demo)
