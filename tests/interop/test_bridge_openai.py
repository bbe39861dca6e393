"""The official openai SDK against UAP agents served through the bridge.

The bridged demo agent (what ``uamp serve`` hosts by default) must keep the
rules the transports' tests rely on for the hand-written ``DemoAgent``; the
tests marked ``both`` run against each of them.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import trio

from tests._support.tools import FORCED, WEATHER_TOOL
from uamp_agents import agent, tool
from uamp_agents.bridge import demo_agent, serve_agent
from uamp_agents.providers import demo
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent


def make_boss() -> Any:
    """An agent with a sub-agent tool (its usage is not streamed by the boss's model)."""
    helper = agent(model=demo(), name="helper", description="Answers anything.")
    return agent(model=demo(), tools=[helper, tool(demo().tools()[0])], name="boss")


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    app = create_app(
        [serve_agent(demo_agent()), DemoAgent("handwritten"), serve_agent(make_boss())]
    )
    return thread_server(app)


def sdk_for(server: Any, name: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/agents/{name}/v1", api_key="unused", timeout=10, max_retries=0
    )


both = pytest.mark.parametrize("name", ["demo", "handwritten"])


@both
def test_same_reply_non_streaming_and_streaming(server: Any, name: str) -> None:
    sdk = sdk_for(server, name)
    completion = sdk.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "hello world"}]
    )
    choice = completion.choices[0]
    assert choice.message.content == "You said: hello world"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    again = sdk.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "hello world"}]
    )
    assert again.choices[0].message.content == choice.message.content
    stream = sdk.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "stream this please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: stream this please"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


@both
def test_client_tool_rules_by_tool_choice(server: Any, name: str) -> None:
    sdk = sdk_for(server, name)

    def calls(text: str, choice: Any) -> list[str]:
        completion = sdk.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": text}],
            tools=[WEATHER_TOOL],
            tool_choice=choice,
        )
        made: list[Any] = completion.choices[0].message.tool_calls or []
        return [c.function.name for c in made]

    assert calls("get_weather in Oslo", "none") == []
    assert calls("what is the weather", "auto") == []
    assert calls("please get weather in Oslo", "auto") == ["get_weather"]
    assert calls("Oslo", "required") == ["get_weather"]
    assert calls("Oslo", FORCED) == ["get_weather"]


@both
def test_client_tool_round_trip(server: Any, name: str) -> None:
    sdk = sdk_for(server, name)
    messages: list[Any] = [{"role": "user", "content": "Paris"}]
    first = sdk.chat.completions.create(
        model=name,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice=FORCED,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call: Any = (choice.message.tool_calls or [])[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
    # the client sends the same forced tool_choice again: it is not forced twice
    second = sdk.chat.completions.create(
        model=name,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice=FORCED,
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Tool get_weather returned: sunny, 21C"


def test_own_tool_and_client_tool_in_one_turn_streaming(server: Any) -> None:
    sdk = sdk_for(server, "demo")
    messages: list[Any] = [{"role": "user", "content": "what is 2+3"}]
    stream = sdk.chat.completions.create(
        model="demo",
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice=FORCED,
        stream=True,
    )
    chunks = list(stream)
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # only the client's tool reaches the client; add ran on the server
    names = [d.function.name for d in deltas if d.function and d.function.name]
    assert names == ["get_weather"]
    call_id = next(d.id for d in deltas if d.id)
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"city": "what is 2+3"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    messages.append(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call_id, "content": "rain"})
    final = sdk.chat.completions.create(
        model="demo",
        messages=messages,
        tools=[WEATHER_TOOL],
    )
    assert final.choices[0].message.content == "Tool get_weather returned: rain 2 + 3 = 5"
    assert final.choices[0].message.tool_calls is None


def test_server_side_tools_and_sub_agent_usage(server: Any) -> None:
    sdk = sdk_for(server, "demo")
    completion = sdk.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "what is 19 plus 23"}]
    )
    assert completion.choices[0].message.content == "19 + 23 = 42"
    assert completion.choices[0].message.tool_calls is None
    # a sub-agent's usage is not streamed by the parent's model: it is still counted
    boss = sdk_for(server, "boss")
    # the demo model calls a tool the text names: here the helper sub-agent
    result = boss.chat.completions.create(
        model="boss", messages=[{"role": "user", "content": "ask the helper"}]
    )
    assert result.choices[0].message.content == "Tool helper returned: You said: ask the helper"
    expected = trio.run(make_boss().run, "ask the helper")
    assert [e.call.name for e in expected.tool_executions] == ["helper"]
    usage = result.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        expected.usage.input_tokens,
        expected.usage.output_tokens,
        expected.usage.total_tokens,
    )
    own_calls = (
        expected.usage.total_tokens - expected.tool_executions[0].child_turns[0].usage.total_tokens
    )
    assert usage.total_tokens > own_calls  # the helper's share is included
