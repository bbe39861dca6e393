"""The function and demo models: replies, usage, stream events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_agents import agent
from uamp_agents.execution import plan, react
from uamp_agents.providers import ModelRequest, ModelResponse, Provider, demo, function
from uamp_agents.providers._function import text_chunks
from uamp_proto.events import ResponseDelta, UsageDelta
from uamp_proto.types import (
    DeltaText,
    DeltaToolCall,
    FunctionDefinition,
    Message,
    ResponseFormat,
    ToolDefinition,
    UsageStats,
)


def request(text: str, tools: list[str] = (), **kw: Any) -> ModelRequest:  # type: ignore[assignment]
    defs = [ToolDefinition(function=FunctionDefinition(name=n)) for n in tools]
    return ModelRequest(messages=[Message(role="user", content=text)], tools=defs, **kw)


async def collect(provider: Provider, req: ModelRequest) -> list[Any]:
    return [e async for e in provider.stream(req)]


async def test_function_model_text_and_usage() -> None:
    seen: list[Any] = []

    async def fn(messages: list[Message], tools: list[ToolDefinition]) -> str:
        seen.append((messages, tools))
        return "hello there world"

    model = function(fn, model="scripted")
    assert isinstance(model, Provider)
    assert (model.name, model.model) == ("function", "scripted")
    resp = await model.generate(request("one two", ["t"]))
    assert resp.message == Message(role="assistant", content="hello there world")
    assert resp.usage == UsageStats(input_tokens=2, output_tokens=3, total_tokens=5)
    assert resp.finish_reason == "stop" and resp.model == "scripted"
    assert seen[0][1][0].function.name == "t"


async def test_function_model_tool_calls_and_stream_events() -> None:
    model = function(lambda m, t: [("add", {"a": 1}), ("now", "{}")])
    events = await collect(model, request("x"))
    deltas = [e.delta for e in events if isinstance(e, ResponseDelta)]
    assert all(isinstance(d, DeltaToolCall) for d in deltas)
    assert [(d.tool_call.name, d.tool_call.arguments) for d in deltas] == [
        ("add", None),
        (None, '{"a":1}'),
        ("now", None),
        (None, "{}"),
    ]
    assert isinstance(events[-2], UsageDelta)
    final = events[-1]
    assert isinstance(final, ModelResponse) and final.finish_reason == "tool_calls"
    calls = final.message.tool_calls or []
    assert [c.name for c in calls] == ["add", "now"]
    assert len({c.id for c in calls}) == 2
    assert deltas[0].tool_call.id == calls[0].id


async def test_function_model_text_stream_joins_back() -> None:
    model = function(lambda m, t: "a  b\nc ")
    events = await collect(model, request("x"))
    texts = [e.delta.text for e in events if isinstance(e, ResponseDelta)]
    assert len(texts) == 4 and "".join(texts) == "a  b\nc "
    assert all(isinstance(e.delta, DeltaText) for e in events if isinstance(e, ResponseDelta))


async def test_function_model_other_replies() -> None:
    assert (await function(lambda m, t: {"k": 1}).generate(request("x"))).message.text == '{"k":1}'
    msg = Message(role="assistant", content="given")
    assert (await function(lambda m, t: msg).generate(request("x"))).message is msg
    resp = ModelResponse(message=msg, finish_reason="length")
    assert await function(lambda m, t: resp).generate(request("x")) is resp
    with pytest.raises(TypeError, match="must return a str"):
        await function(lambda m, t: 42).generate(request("x"))
    with pytest.raises(TypeError, match="pair"):
        await function(lambda m, t: [("only-name",)]).generate(request("x"))


async def test_demo_arithmetic_with_and_without_tools() -> None:
    model = demo()
    resp = await model.generate(request("what is 2+3", ["add", "multiply"]))
    call = (resp.message.tool_calls or [])[0]
    assert call.name == "add" and orjson.loads(call.arguments) == {"a": 2, "b": 3}
    resp = await model.generate(request("what is 6 times 7"))
    assert resp.message.text == "6 * 7 = 42"
    a = agent(model=model, tools=model.tools())
    turn = await a.run("what is 2.5 * 4")
    assert turn.response.text == "2.5 * 4 = 10"
    assert [e.call.name for e in turn.tool_executions] == ["multiply"]


async def test_demo_time_chat_and_determinism() -> None:
    model = demo()
    turn = await agent(model=model, tools=model.tools()).run("what time is it?")
    assert [e.call.name for e in turn.tool_executions] == ["now"]
    assert turn.response.text.startswith("The current time is 20")
    first = await model.generate(request("tell me a story"))
    second = await model.generate(request("tell me a story"))
    assert first.message.text == second.message.text == "You said: tell me a story"


async def test_demo_structured_output_and_strategies() -> None:
    model = demo()
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3}, "s": {"type": "string"}},
        "required": ["n", "s"],
    }
    turn = await agent(model=model, structure=schema).run("hi")
    assert turn.data == {"n": 3, "s": "You said: hi"}
    fmt = ResponseFormat(type="json_schema", json_schema={"schema": {"type": "boolean"}})
    assert (await model.generate(request("x", response_format=fmt))).message.text == "false"
    turn = await agent(model=model, tools=model.tools(), execution=react()).run("what is 3*3")
    assert turn.response.text == "3 * 3 = 9"
    turn = await agent(model=model, tools=model.tools(), execution=plan()).run("what is 3 plus 4")
    assert turn.response.text == "3 + 4 = 7"


async def test_demo_streams_words() -> None:
    events = await collect(demo(), request("what is 1+1"))
    text = "".join(e.delta.text for e in events if isinstance(e, ResponseDelta))
    assert text == "1 + 1 = 2"
    assert isinstance(events[-1], ModelResponse)


@given(st.text(alphabet=st.sampled_from("ab \t\n\u00a0\u2003\x1c")))
def test_text_chunks_cut_after_each_whitespace_character(text: str) -> None:
    chunks = text_chunks(text)
    assert "".join(chunks) == text
    for i, chunk in enumerate(chunks):
        assert chunk  # no empty delta
        body = chunk[:-1] if chunk[-1].isspace() else chunk
        assert not any(c.isspace() for c in body)  # one whitespace, at the end
        if i < len(chunks) - 1:
            assert chunk[-1].isspace()  # only the last piece may end in a word
