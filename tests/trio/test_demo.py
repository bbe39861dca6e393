"""The demo agent's documented rules."""

from __future__ import annotations

import json
from typing import Any

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Responder, TurnRequest
from uamp_trio.demo import DemoAgent


def tool(name: str, schema: dict[str, Any] | None = None) -> ty.ToolDefinition:
    return ty.ToolDefinition(function=ty.FunctionDefinition(name=name, parameters=schema))


SEARCH = tool("search")
WEATHER = tool(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
)


async def respond(messages: list[ty.Message], **kw: Any) -> list[Any]:
    out: list[Any] = []

    async def emit(event: Any) -> None:
        out.append(event)

    req = TurnRequest(agent="demo", session_id="s", response_id="r", messages=messages, **kw)
    with trio.fail_after(5):
        await DemoAgent().respond(req, emit)
    return out


def said(text: str) -> list[ty.Message]:
    return [ty.Message(role="system", content="be nice"), ty.Message(role="user", content=text)]


def text_of(events: list[Any]) -> str:
    return "".join(e.delta.text for e in events if isinstance(e, ev.ResponseDelta))


async def test_reply_is_streamed_deterministic_and_counted() -> None:
    first = await respond(said("tell me more"))
    assert text_of(first) == "You said: tell me more"
    assert sum(isinstance(e, ev.ResponseDelta) for e in first) == 5
    usage = [e for e in first if isinstance(e, ev.UsageDelta)]
    assert usage[0].delta == ty.UsageStats(input_tokens=5, output_tokens=5)
    assert await respond(said("tell me more")) == first
    assert text_of(await respond(said(""))) == "Hello! Send me a message."
    assert isinstance(DemoAgent(), Responder)


async def test_attachments_are_mentioned() -> None:
    msg = ty.Message(
        role="user",
        content="look",
        content_items=[ty.TextContent(text="look"), ty.ImageContent(image=ty.MediaURL(url="u"))],
    )
    assert text_of(await respond([msg])) == "You said: look (with 1 attachment)"


async def test_tool_choice_rules() -> None:
    tools = [SEARCH, WEATHER]
    # none: never, even when named
    assert not [
        e
        for e in await respond(said("get_weather now"), tools=tools, tool_choice="none")
        if isinstance(e, ev.ToolCall)
    ]
    # auto: only when the text names a tool (underscores may be spaces)
    auto = await respond(said("what is the weather"), tools=tools, tool_choice="auto")
    assert not [e for e in auto if isinstance(e, ev.ToolCall)]
    auto = await respond(said("please get weather in Oslo"), tools=tools)
    calls = [e for e in auto if isinstance(e, ev.ToolCall)]
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == {"city": "please get weather in Oslo", "days": 0}
    assert not any(isinstance(e, ev.ResponseDelta) for e in auto)
    # required: the mentioned tool, else the first one, with {"query": text}
    req = await respond(said("Oslo"), tools=tools, tool_choice="required")
    call = next(e for e in req if isinstance(e, ev.ToolCall))
    assert call.name == "search" and json.loads(call.arguments) == {"query": "Oslo"}
    assert call.call_id.startswith("call_")
    again = await respond(said("Oslo"), tools=tools, tool_choice="required")
    assert next(e for e in again if isinstance(e, ev.ToolCall)).call_id == call.call_id
    # a named function
    named = await respond(
        said("Oslo"),
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert next(e for e in named if isinstance(e, ev.ToolCall)).name == "get_weather"


async def test_answers_with_tool_results() -> None:
    call = ty.ToolInvocation(id="c9", name="get_weather", arguments="{}")
    messages = [
        *said("Oslo"),
        ty.Message(role="assistant", tool_calls=[call]),
        ty.Message(role="tool", tool_call_id="c9", content="snow"),
    ]
    assert text_of(await respond(messages, tools=[WEATHER])) == "Tool get_weather returned: snow"
