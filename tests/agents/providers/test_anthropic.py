"""The Anthropic provider against a fake Messages API server."""

from __future__ import annotations

import orjson

from uamp_agents.providers import ModelRequest, anthropic
from uamp_proto import types as ty
from uamp_proto.events import Thinking

from . import fakeserver as fake
from .conftest import ANTHROPIC_KEY
from .conftest import anthropic_provider as provider
from .fakeserver import ASK, weather_tool

WEATHER = weather_tool()
SIGNATURE = fake.fixture_json("anthropic/thinking.json")["content"][0]["signature"]


def check_text_request(request: fake.Request) -> None:
    assert request.target == "/v1/messages"
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = request.json
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 1024
    assert body["system"] == "Answer briefly."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}
    ]
    assert body["stop_sequences"] == ["END"]


async def test_generate_text_and_cached_usage(anthropic_server: fake.FakeServer) -> None:
    anthropic_server.queue(fake.json_reply("anthropic/text.json", check=check_text_request))
    result = await provider(anthropic_server, params={"stop": "END"}).generate(
        ModelRequest(messages=ASK)
    )
    # Spec 8.7: Anthropic input_tokens exclude cached; cached = reads + writes.
    usage = ty.UsageStats(input_tokens=21, cached_tokens=4200, output_tokens=9, total_tokens=30)
    fake.check_answer(result, model="claude-sonnet-4-5-20250929", usage=usage)


async def test_stream_text(anthropic_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["stream"] is True
        assert request.headers["accept"] == "text/event-stream"

    anthropic_server.queue(fake.sse_reply("anthropic/text.sse", check=check))
    events, final = await fake.collect(
        provider(anthropic_server).stream(ModelRequest(messages=ASK))
    )
    usage = fake.check_streamed(events, final, ["Paris", " is the capital", " of France."])
    # Output tokens come from message_delta; cache fields from message_start.
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (21, 4200, 9)


async def test_tool_use_generate(anthropic_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        body = request.json
        assert body["tools"] == [
            {
                "name": "get_weather",
                "description": "Current weather in a city",
                "input_schema": WEATHER.function.parameters,
            }
        ]
        assert body["tool_choice"] == {"type": "tool", "name": "get_weather"}

    anthropic_server.queue(fake.json_reply("anthropic/tool_use.json", check=check))
    request = fake.question(
        "Weather in Paris?", WEATHER, {"type": "function", "function": {"name": "get_weather"}}
    )
    result = await provider(anthropic_server).generate(request)
    assert result.finish_reason == "tool_calls"
    assert result.message.content == "I'll check the weather."
    assert result.message.tool_calls is not None
    [call] = result.message.tool_calls
    assert call.id == "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    assert call.name == "get_weather"
    assert orjson.loads(call.arguments) == {"city": "Paris", "unit": "celsius"}


async def test_tool_use_stream_assembles_input(anthropic_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["tool_choice"] == {"type": "any"}

    anthropic_server.queue(fake.sse_reply("anthropic/tool_use.sse", check=check))
    request = ModelRequest(
        messages=[ty.Message(role="user", content="Weather?")],
        tools=[WEATHER],
        tool_choice="required",
    )
    events, final = await fake.collect(provider(anthropic_server).stream(request))
    frags = fake.fragments(events)
    assert frags[0].id == "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    assert frags[0].name == "get_weather"
    assert "".join(f.arguments or "" for f in frags) == '{"city": "Paris", "unit": "celsius"}'
    assert fake.texts(events) == ["I'll check the weather."]
    assert final.finish_reason == "tool_calls"
    arguments = '{"city": "Paris", "unit": "celsius"}'
    assert final.message.tool_calls == [
        fake.weather_call("toolu_01T1x1fJ34qAmk2tNTrN7Up6", arguments)
    ]


async def test_tool_result_round_trip(anthropic_server: fake.FakeServer) -> None:
    calls = [
        ty.ToolInvocation(id="toolu_A", name="get_weather", arguments='{"city":"Paris"}'),
        ty.ToolInvocation(id="toolu_B", name="get_weather", arguments='{"city":"Lyon"}'),
    ]
    thought = ty.ThinkingContent(thinking="Two cities.", unknown={"signature": SIGNATURE})

    def check(request: fake.Request) -> None:
        body = request.json
        assert body["system"] == "Answer briefly."
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Lyon?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Two cities.", "signature": SIGNATURE},
                    {"type": "text", "text": "Checking both."},
                    {
                        "type": "tool_use",
                        "id": "toolu_A",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_B",
                        "name": "get_weather",
                        "input": {"city": "Lyon"},
                    },
                ],
            },
            # Parallel results travel in one user turn.
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_A", "content": "18 C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_B",
                        "content": "city not found",
                        "is_error": True,
                    },
                ],
            },
        ]

    anthropic_server.queue(fake.json_reply("anthropic/after_tool.json", check=check))
    request = ModelRequest(
        messages=[
            ASK[0],
            ty.Message(role="user", content="Weather in Paris and Lyon?"),
            ty.Message(
                role="assistant",
                content="Checking both.",
                content_items=[thought],
                tool_calls=calls,
            ),
            ty.Message(role="tool", tool_call_id="toolu_A", content="18 C"),
            ty.Message(
                role="tool",
                tool_call_id="toolu_B",
                content_items=[
                    ty.ToolResultContent(
                        tool_result=ty.ToolOutput(
                            call_id="toolu_B", result="city not found", is_error=True
                        )
                    )
                ],
            ),
        ],
        tools=[WEATHER],
    )
    result = await provider(anthropic_server).generate(request)
    assert result.message.content == "It is 18 °C and sunny in Paris."


async def test_thinking_stream(anthropic_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["thinking"] == {"type": "enabled", "budget_tokens": 2048}

    anthropic_server.queue(fake.sse_reply("anthropic/thinking.sse", check=check))
    p = provider(anthropic_server, thinking=2048, max_tokens=4096)
    events, final = await fake.collect(p.stream(ModelRequest(messages=ASK)))
    thinking = fake.thoughts(events)
    assert [t.content for t in thinking] == ["The user wants 6 times 7.", " 6 x 7 is 42."]
    assert all(t.is_delta for t in thinking)
    assert events.index(thinking[-1]) < events.index(
        next(e for e in events if not isinstance(e, Thinking))
    )
    assert final.thinking == "The user wants 6 times 7. 6 x 7 is 42."
    assert final.message.content == "6 x 7 = 42"
    # The signature is kept so the thinking block can be sent back.
    assert final.message.content_items == [
        ty.ThinkingContent(thinking="The user wants 6 times 7. 6 x 7 is 42.")
    ]
    assert final.message.content_items[0].unknown == {"signature": SIGNATURE}  # type: ignore[union-attr]


async def test_thinking_generate_with_redacted_block(anthropic_server: fake.FakeServer) -> None:
    anthropic_server.queue(fake.json_reply("anthropic/thinking.json"))
    result = await provider(anthropic_server, thinking=1024).generate(ModelRequest(messages=ASK))
    assert result.thinking == "The user wants 6 times 7. 6 x 7 is 42."
    items = result.message.content_items
    assert items is not None
    assert [type(i).__name__ for i in items] == ["ThinkingContent", "ThinkingContent"]
    redacted = items[1]
    assert isinstance(redacted, ty.ThinkingContent)
    assert redacted.redacted is True
    assert str(redacted.unknown["data"]).startswith("EmwKAhgB")


async def test_structured_output_via_forced_tool(anthropic_server: fake.FakeServer) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    }

    def check(request: fake.Request) -> None:
        body = request.json
        assert body["tool_choice"] == {"type": "tool", "name": "capital"}
        assert body["tools"][-1]["name"] == "capital"
        assert body["tools"][-1]["input_schema"] == schema

    anthropic_server.queue(fake.sse_reply("anthropic/structured.sse", check=check))
    fmt = ty.ResponseFormat(type="json_schema", json_schema={"name": "capital", "schema": schema})
    request = ModelRequest(messages=ASK, response_format=fmt)
    events, final = await fake.collect(provider(anthropic_server).stream(request))
    # The forced tool is unwrapped: its input streams as text, no tool call.
    assert fake.fragments(events) == []
    assert "".join(fake.texts(events)) == final.message.content
    assert orjson.loads(final.message.content or "") == {"city": "Paris", "country": "France"}
    assert final.message.tool_calls is None
    assert final.finish_reason == "stop"


async def test_images_as_sources(anthropic_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["messages"][0]["content"] == [
            {"type": "text", "text": "Compare"},
            {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
            },
        ]
        assert "json" in request.json["system"].lower()

    anthropic_server.queue(fake.json_reply("anthropic/text.json", check=check))
    message = ty.Message(
        role="user",
        content_items=[
            ty.TextContent(text="Compare"),
            ty.ImageContent(image=ty.MediaURL(url="https://x.test/a.jpg")),
            ty.ImageContent(image="/9j/4AAQ"),
        ],
    )
    request = ModelRequest(
        messages=[message], response_format=ty.ResponseFormat(type="json_object")
    )
    await provider(anthropic_server).generate(request)


async def test_missing_version_header_is_refused(anthropic_server: fake.FakeServer) -> None:
    p = anthropic(
        api_key=ANTHROPIC_KEY, base_url=anthropic_server.url, headers={"anthropic-version": "x"}
    )
    error = await fake.provider_error(p.generate(ModelRequest(messages=ASK)))
    assert error.status == 401


async def test_overloaded_error_event_before_output_is_retried(
    anthropic_server: fake.FakeServer,
) -> None:
    anthropic_server.queue(
        fake.sse_reply("anthropic/overloaded.sse"), fake.sse_reply("anthropic/text.sse")
    )
    events, final = await fake.collect(
        provider(anthropic_server).stream(ModelRequest(messages=ASK))
    )
    assert len(anthropic_server.requests) == 2
    assert fake.texts(events) == ["Paris", " is the capital", " of France."]
    assert final.message.content == "Paris is the capital of France."
