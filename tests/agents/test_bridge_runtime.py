"""The runtime additions the agent bridge relies on.

Deferred (client) tools, resuming a conversation without new input, a run's
tool choice, ``Agent.derive``, cancelling a structured stream from outside,
and the demo model's tool-choice and client-tool rules.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio

from uamp_agents import ToolError, agent, tool
from uamp_agents.execution import plan, react
from uamp_agents.providers import ModelRequest, demo, function
from uamp_agents.tools import deferred_tool
from uamp_proto.types import FunctionDefinition, Message, ToolDefinition, ToolInvocation

WEATHER = deferred_tool(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def both_then_answer(messages: list[Message], tools: list[ToolDefinition]) -> Any:
    """Calls add and get_weather in one step, then answers from the results."""
    if messages[-1].role == "tool":
        return "answer: " + ", ".join(m.text for m in messages if m.role == "tool")
    return [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Oslo"})]


async def test_a_deferred_call_ends_the_run_after_the_local_ones() -> None:
    with trio.fail_after(5):
        a = agent(model=function(both_then_answer), tools=[add])
        served = a.derive(tools=[WEATHER])
        turn = await served.run("go")
    assert turn.stop_reason == "client_tool"
    assert [c.name for c in turn.pending_tool_calls] == ["get_weather"]
    assert [e.call.name for e in turn.tool_executions] == ["add"]
    # the local result is in the conversation, the deferred call has none yet
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool"]
    assert turn.messages[-1].text == "3"
    # the agent itself is unchanged
    assert [t.name for t in a.resolved_tools] == ["add"]
    assert [t.name for t in served.resolved_tools] == ["add", "get_weather"]
    assert served.id == a.id


async def test_resume_continues_from_tool_results() -> None:
    a = agent(model=function(both_then_answer), tools=[add]).derive(tools=[WEATHER])
    with trio.fail_after(5):
        first = await a.run("go")
        call = first.pending_tool_calls[0]
        history = [
            *first.messages,
            Message(role="tool", tool_call_id=call.id, name=call.name, content="sunny"),
        ]
        turn = await a.run(history, resume=True)
    assert turn.stop_reason == "end_turn"
    assert turn.text == "answer: 3, sunny"
    assert [m.role for m in turn.messages] == ["assistant"]  # no new input message
    with pytest.raises(TypeError, match="no input"):
        await a.run(history, "extra", resume=True)


async def test_react_defers_too() -> None:
    def model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if not tools:
            return "thinking"
        return [("get_weather", {"city": "Oslo"})]

    with trio.fail_after(5):
        turn = await agent(model=function(model), execution=react(), tools=[WEATHER]).run("x")
    assert turn.stop_reason == "client_tool"
    assert turn.pending_tool_calls[0].name == "get_weather"
    # a deferred tool's function, reached by a strategy that does not defer
    with pytest.raises(ToolError, match="run by the client"):
        WEATHER.fn(city="Oslo")


async def test_plan_strategy_gets_an_error_result_for_a_deferred_tool() -> None:
    model = demo()
    with trio.fail_after(5):
        a = agent(model=model, execution=plan(allow_replan=False), tools=[WEATHER])
        turn = await a.run("get weather please")
    failed = [e for e in turn.tool_executions if e.call.name == "get_weather"]
    assert failed and failed[0].output.is_error
    assert "run by the client" in failed[0].output.result


async def test_forced_tool_choice_applies_to_the_first_call_only() -> None:
    seen: list[Any] = []

    class Recording:
        name = "rec"
        model = "rec"

        async def generate(self, request: ModelRequest) -> Any:
            seen.append(request.tool_choice)
            return await demo().generate(request)

        async def stream(self, request: ModelRequest) -> Any:
            seen.append(request.tool_choice)
            async for event in demo().stream(request):
                yield event

    forced = {"type": "function", "function": {"name": "add"}}
    with trio.fail_after(5):
        turn = await agent(model=Recording(), tools=[add]).run("what is 2+2", tool_choice=forced)
        assert turn.text == "2 + 2 = 4"
        assert seen == [forced, None]
        seen.clear()
        turn = await agent(model=Recording(), tools=[add]).run("what is 2+2", tool_choice="none")
    assert turn.text == "2 + 2 = 4" and not turn.tool_executions
    assert seen == ["none"]


def test_derive_replaces_what_it_is_given() -> None:
    a = agent(model=demo(), tools=[add], system="own", params={"temperature": 1})
    b = a.derive(system="own\n\nmore", params={"max_tokens": 3}, structure={"type": "object"})
    assert (b.system, b.params, b.schema) == ("own\n\nmore", {"max_tokens": 3}, {"type": "object"})
    assert (a.system, a.params, a.schema) == ("own", {"temperature": 1}, None)
    assert a.derive().system == "own"
    with pytest.raises(ValueError, match="clash"):
        a.derive(tools=[deferred_tool("add")])


async def test_cancelling_a_structured_stream_from_outside_cancels_its_tools() -> None:
    state = {"started": False, "cancelled": False}

    async def block() -> str:
        """Wait forever."""
        state["started"] = True
        try:
            await trio.sleep_forever()
        finally:
            state["cancelled"] = True

    def model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        return [("block", {})]

    a = agent(model=function(model), tools=[tool(block)])
    with trio.fail_after(5):
        with trio.move_on_after(0.3) as scope:
            async with a.stream("go") as stream:
                async for _ in stream:
                    pass
    assert scope.cancelled_caught
    assert state == {"started": True, "cancelled": True}


# --- the demo model ------------------------------------------------------------

WEATHER_DEF = ToolDefinition(
    function=FunctionDefinition(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    )
)
SEARCH_DEF = ToolDefinition(function=FunctionDefinition(name="search"))
ADD_DEF = tool(add).definition()


def req(text: str, tools: list[ToolDefinition], choice: Any = None, **kw: Any) -> ModelRequest:
    return ModelRequest(
        messages=[Message(role="user", content=text)], tools=tools, tool_choice=choice, **kw
    )


async def calls_for(request: ModelRequest) -> list[ToolInvocation]:
    return list((await demo().generate(request)).message.tool_calls or [])


async def test_demo_tool_choice_rules() -> None:
    tools = [ADD_DEF, SEARCH_DEF, WEATHER_DEF]
    assert not await calls_for(req("what is 2+3 get_weather", tools, "none"))
    auto = await calls_for(req("please get weather in Oslo", tools))
    assert [c.name for c in auto] == ["get_weather"]
    assert orjson.loads(auto[0].arguments) == {"city": "please get weather in Oslo", "days": 0}
    assert not await calls_for(req("what is the weather", tools, "auto"))
    assert not await calls_for(req("research this", [SEARCH_DEF]))  # whole words only
    required = await calls_for(req("Oslo", [SEARCH_DEF, WEATHER_DEF], "required"))
    assert [(c.name, orjson.loads(c.arguments)) for c in required] == [
        ("search", {"query": "Oslo"})
    ]
    named = {"type": "function", "function": {"name": "get_weather"}}
    both = await calls_for(req("what is 2+3", tools, named))
    assert [c.name for c in both] == ["add", "get_weather"]
    assert len({c.id for c in both}) == 2
    assert both == await calls_for(req("what is 2+3", tools, named))  # deterministic ids


async def test_demo_answers_from_client_tool_results_and_cuts_at_max_tokens() -> None:
    call = ToolInvocation(id="c1", name="get_weather", arguments="{}")
    messages = [
        Message(role="user", content="what is 2+3"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", tool_call_id="c1", content="sunny"),
    ]
    # add is not answered yet: it is called; get_weather is not called again
    named = {"type": "function", "function": {"name": "get_weather"}}
    calls = await calls_for(
        ModelRequest(messages=messages, tools=[ADD_DEF, WEATHER_DEF], tool_choice=named)
    )
    assert [c.name for c in calls] == ["add"]
    add_call = ToolInvocation(id="c2", name="add", arguments='{"a":2,"b":3}')
    done = [
        *messages,
        Message(role="assistant", tool_calls=[add_call]),
        Message(role="tool", tool_call_id="c2", content="5.0"),
    ]
    reply = await demo().generate(ModelRequest(messages=done, tools=[ADD_DEF, WEATHER_DEF]))
    assert reply.message.text == "Tool get_weather returned: sunny 2 + 3 = 5"
    chat = [Message(role="user", content="Oslo"), *messages[1:]]
    reply = await demo().generate(ModelRequest(messages=chat, tools=[WEATHER_DEF]))
    assert reply.message.text == "Tool get_weather returned: sunny"
    cut = await demo().generate(req("one two three four", [], params={"max_tokens": 3}))
    assert (cut.message.text, cut.finish_reason) == ("You said: one", "length")


async def test_demo_task_is_the_latest_user_message() -> None:
    messages = [
        Message(role="user", content="what is 2+3"),
        Message(role="assistant", content="2 + 3 = 5"),
        Message(role="user", content="hello"),
    ]
    reply = await demo().generate(ModelRequest(messages=messages, tools=[ADD_DEF]))
    assert reply.message.text == "You said: hello"
