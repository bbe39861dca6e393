"""The OpenAI-compatible provider against a fake Chat Completions server."""

from __future__ import annotations

import email.utils
import time

import pytest

from uamp_agents.providers import ModelRequest, ProviderError, openai
from uamp_proto import types as ty
from uamp_proto.events import ResponseDelta

from . import fakeserver as fake
from .conftest import OPENAI_KEY
from .conftest import openai_provider as provider
from .fakeserver import ASK, weather_tool

WEATHER = weather_tool(
    properties={"city": {"type": "string"}, "unit": {"type": "string"}}, required=["city"]
)


def check_text_request(request: fake.Request) -> None:
    assert request.method == "POST"
    assert request.target == "/v1/chat/completions"
    assert request.headers["content-type"] == "application/json"
    body = request.json
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert body["temperature"] == 0.2
    assert "stream" not in body


async def test_generate_text_and_cached_usage(openai_server: fake.FakeServer) -> None:
    openai_server.queue(fake.json_reply("openai/text.json", check=check_text_request))
    p = provider(openai_server, params={"temperature": 0.2})
    result = await p.generate(ModelRequest(messages=ASK))
    assert result.message.role == "assistant"
    # Spec 8.7: OpenAI input_tokens include the cached ones; cached = reads.
    usage = ty.UsageStats(input_tokens=2006, cached_tokens=1920, output_tokens=8, total_tokens=2014)
    fake.check_answer(result, model="gpt-4o-mini-2024-07-18", usage=usage)


async def test_stream_text(openai_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        body = request.json
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert request.headers["accept"] == "text/event-stream"

    openai_server.queue(fake.sse_reply("openai/text.sse", check=check))
    events, final = await fake.collect(provider(openai_server).stream(ModelRequest(messages=ASK)))
    # Usage arrives once, after the text and before the final response.
    usage = fake.check_streamed(events, final, ["Paris", " is the", " capital", " of France."])
    assert len([e for e in events if isinstance(e, ResponseDelta)]) == 4
    assert usage.cached_tokens == 1920


async def test_tool_call_generate(openai_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        body = request.json
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather in a city",
                    "parameters": WEATHER.function.parameters,
                },
            }
        ]
        assert body["tool_choice"] == "required"

    openai_server.queue(fake.json_reply("openai/tool_call.json", check=check))
    request = fake.question("Weather in Paris?", WEATHER, "required")
    result = await provider(openai_server).generate(request)
    assert result.finish_reason == "tool_calls"
    assert result.message.content is None
    arguments = '{"city":"Paris","unit":"celsius"}'
    assert result.message.tool_calls == [
        fake.weather_call("call_8fYz3Qk1LmN0pR2sT4uV6wXy", arguments)
    ]


async def test_tool_call_stream_assembles_arguments(openai_server: fake.FakeServer) -> None:
    openai_server.queue(fake.sse_reply("openai/tool_call.sse"))
    request = ModelRequest(messages=[ty.Message(role="user", content="Weather?")], tools=[WEATHER])
    events, final = await fake.collect(provider(openai_server).stream(request))
    frags = fake.fragments(events)
    assert len(frags) == len([e for e in events if isinstance(e, ResponseDelta)])
    # The name is announced once per call; every fragment carries the call id.
    assert [f.name for f in frags if f.name] == ["get_weather", "get_time"]
    first = "".join(f.arguments or "" for f in frags if f.id == "call_8fYz3Qk1LmN0pR2sT4uV6wXy")
    assert first == '{"city":"Paris"}'
    assert final.finish_reason == "tool_calls"
    assert final.message.tool_calls == [
        ty.ToolInvocation(
            id="call_8fYz3Qk1LmN0pR2sT4uV6wXy", name="get_weather", arguments='{"city":"Paris"}'
        ),
        ty.ToolInvocation(
            id="call_Q2w3E4r5T6y7U8i9O0pAsDfG",
            name="get_time",
            arguments='{"tz":"Europe/Paris"}',
        ),
    ]


async def test_tool_result_round_trip(openai_server: fake.FakeServer) -> None:
    call = ty.ToolInvocation(id="call_8fYz", name="get_weather", arguments='{"city":"Paris"}')

    def check(request: fake.Request) -> None:
        assert request.json["messages"] == [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_8fYz",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_8fYz", "content": '{"temp_c": 18}'},
        ]

    openai_server.queue(fake.json_reply("openai/after_tool.json", check=check))
    request = ModelRequest(
        messages=[
            ty.Message(role="user", content="Weather in Paris?"),
            ty.Message(role="assistant", tool_calls=[call]),
            ty.Message(role="tool", tool_call_id="call_8fYz", content='{"temp_c": 18}'),
        ],
        tools=[WEATHER],
    )
    result = await provider(openai_server).generate(request)
    assert result.message.content == "It is 18 °C and sunny in Paris."


async def test_reasoning_content_becomes_thinking(openai_server: fake.FakeServer) -> None:
    openai_server.queue(fake.sse_reply("openai/reasoning.sse"))
    p = openai("deepseek-reasoner", api_key=OPENAI_KEY, base_url=openai_server.url)
    events, final = await fake.collect(p.stream(ModelRequest(messages=ASK)))
    thinking = fake.thoughts(events)
    assert [t.content for t in thinking] == ["The user asks", " for 6 times 7.", " That is 42."]
    assert all(t.is_delta for t in thinking)
    # Thinking comes before the answer's text, as the model produced it.
    first_text = next(i for i, e in enumerate(events) if isinstance(e, ResponseDelta))
    assert events.index(thinking[-1]) < first_text
    assert final.thinking == "The user asks for 6 times 7. That is 42."
    assert final.message.content == "6 x 7 = 42"


async def test_multimodal_and_response_format(openai_server: fake.FakeServer) -> None:
    schema = {"name": "capital", "schema": {"type": "object"}, "strict": True}

    def check(request: fake.Request) -> None:
        body = request.json
        assert body["messages"][0]["content"] == [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAA"}},
        ]
        assert body["response_format"] == {"type": "json_schema", "json_schema": schema}

    openai_server.queue(fake.json_reply("openai/text.json", check=check))
    message = ty.Message(
        role="user",
        content="What is this?",
        content_items=[
            ty.TextContent(text="What is this?"),
            ty.ImageContent(image=ty.MediaURL(url="https://x.test/a.png"), detail="low"),
            ty.ImageContent(image="iVBORw0KGgoAAA"),
        ],
    )
    request = ModelRequest(
        messages=[message],
        response_format=ty.ResponseFormat(type="json_schema", json_schema=schema),
    )
    await provider(openai_server).generate(request)


async def test_retry_after_as_an_http_date(openai_server: fake.FakeServer) -> None:
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    openai_server.queue(
        fake.json_reply("openai/error_429.json", status=429, headers=(("retry-after", later),)),
    )
    p = provider(openai_server, max_retries=0)
    error = await fake.provider_error(p.generate(ModelRequest(messages=ASK)))
    assert error.retry_after is not None
    assert 100 < error.retry_after <= 120


async def test_bad_api_key_is_401(openai_server: fake.FakeServer) -> None:
    p = openai(api_key="wrong", base_url=openai_server.url)
    error = await fake.provider_error(p.generate(ModelRequest(messages=ASK)))
    assert error.status == 401
    assert not error.retryable
    assert "Incorrect API key" in error.message


async def test_api_key_from_environment(
    openai_server: fake.FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    openai_server.queue(fake.json_reply("openai/text.json"))
    result = await openai(base_url=openai_server.url).generate(ModelRequest(messages=ASK))
    assert result.message.content


async def test_connection_cut_mid_stream(openai_server: fake.FakeServer) -> None:
    openai_server.queue(fake.sse_reply("openai/text.sse", cut_after=2))
    p = provider(openai_server)
    seen = []
    with pytest.raises(ProviderError) as info:
        async for item in p.stream(ModelRequest(messages=ASK)):
            seen.append(item)
    assert info.value.retryable
    # Events were already yielded, so the stream is not replayed.
    assert len(openai_server.requests) == 1
    assert fake.texts(seen) == ["Paris"]


async def test_stream_retries_before_first_event(openai_server: fake.FakeServer) -> None:
    openai_server.queue(
        fake.json_reply("openai/error_429.json", status=429, headers=(("retry-after", "0"),)),
        fake.sse_reply("openai/text.sse", cut_after=1),
        fake.sse_reply("openai/text.sse"),
    )
    events, final = await fake.collect(provider(openai_server).stream(ModelRequest(messages=ASK)))
    # The cut after the role-only chunk happened before any event was yielded.
    assert len(openai_server.requests) == 3
    assert final.message.content == "Paris is the capital of France."
    assert len([e for e in events if isinstance(e, ResponseDelta)]) == 4


async def test_stalled_server_times_out(openai_server: fake.FakeServer) -> None:
    openai_server.queue(fake.Reply(stall=True), fake.Reply(stall=True))
    p = provider(openai_server, timeout=0.3, max_retries=1)
    error = await fake.provider_error(p.generate(ModelRequest(messages=ASK)))
    assert error.retryable
    assert "timed out" in error.message
    assert len(openai_server.requests) == 2
