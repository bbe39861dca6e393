"""The Gemini provider against a fake Generative Language API server."""

from __future__ import annotations

import orjson
import pytest

from uamp_agents.providers import ModelRequest, google
from uamp_proto import types as ty

from . import fakeserver as fake
from .conftest import GOOGLE_KEY
from .conftest import google_provider as provider
from .fakeserver import ASK, weather_tool

WEATHER = weather_tool(required=["city"], additionalProperties=False)
SIGNATURE = fake.fixture_json("google/tool_call.json")["candidates"][0]["content"]["parts"][0][
    "thoughtSignature"
]


def check_text_request(request: fake.Request) -> None:
    assert request.target == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert request.headers["x-goog-api-key"] == GOOGLE_KEY
    body = request.json
    assert body["systemInstruction"] == {"parts": [{"text": "Answer briefly."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "What is the capital of France?"}]}
    ]
    assert body["generationConfig"] == {
        "temperature": 0.3,
        "maxOutputTokens": 256,
        "stopSequences": ["END"],
    }


async def test_generate_text_and_cached_usage(google_server: fake.FakeServer) -> None:
    google_server.queue(fake.json_reply("google/text.json", check=check_text_request))
    p = provider(google_server, params={"temperature": 0.3, "max_tokens": 256})
    result = await p.generate(ModelRequest(messages=ASK, params={"stop": "END"}))
    # Spec 8.7: Gemini input includes cached; cached = cachedContentTokenCount.
    usage = ty.UsageStats(
        input_tokens=4210,
        cached_tokens=4096,
        output_tokens=8 + 32,  # candidates + thoughts
        total_tokens=4250,
    )
    fake.check_answer(result, model="gemini-2.5-flash", usage=usage)


async def test_stream_text(google_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.target == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        assert request.headers["x-goog-api-key"] == GOOGLE_KEY

    google_server.queue(fake.sse_reply("google/text.sse", check=check))
    events, final = await fake.collect(provider(google_server).stream(ModelRequest(messages=ASK)))
    # Usage is cumulative per chunk: one UsageDelta with the last totals.
    usage = fake.check_streamed(events, final, ["Paris", " is the capital", " of France."])
    assert usage.output_tokens == 40


async def test_function_call_generate(google_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        body = request.json
        assert body["tools"] == [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Current weather in a city",
                        # additionalProperties is not accepted by Gemini's Schema.
                        "parameters": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        ]
        assert body["toolConfig"] == {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
        }

    google_server.queue(fake.json_reply("google/tool_call.json", check=check))
    request = fake.question(
        "Weather in Paris and Lyon?",
        WEATHER,
        {"type": "function", "function": {"name": "get_weather"}},
    )
    result = await provider(google_server).generate(request)
    assert result.finish_reason == "tool_calls"
    calls = result.message.tool_calls
    assert calls is not None
    assert [(c.name, orjson.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Lyon"}),
    ]
    assert calls[0].id != calls[1].id
    assert calls[0].unknown == {"thought_signature": SIGNATURE}


async def test_function_call_stream(google_server: fake.FakeServer) -> None:
    google_server.queue(fake.sse_reply("google/tool_call.sse"))
    request = ModelRequest(messages=[ty.Message(role="user", content="Weather?")], tools=[WEATHER])
    events, final = await fake.collect(provider(google_server).stream(request))
    frags = fake.fragments(events)
    assert [(f.name, f.arguments) for f in frags] == [
        ("get_weather", '{"city":"Paris"}'),
        ("get_weather", '{"city":"Lyon"}'),
    ]
    assert final.message.tool_calls is not None
    assert [c.id for c in final.message.tool_calls] == [f.id for f in frags]
    assert final.finish_reason == "tool_calls"


async def test_function_response_round_trip(google_server: fake.FakeServer) -> None:
    calls = [
        fake.weather_call("call_1", '{"city":"Paris"}', thought_signature=SIGNATURE),
        fake.weather_call("call_2", '{"city":"Lyon"}'),
    ]

    def check(request: fake.Request) -> None:
        assert request.json["contents"] == [
            {"role": "user", "parts": [{"text": "Weather in Paris and Lyon?"}]},
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": SIGNATURE,
                    },
                    {"functionCall": {"name": "get_weather", "args": {"city": "Lyon"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "get_weather",
                            "response": {"temp_c": 18, "sky": "sunny"},
                        }
                    },
                    {"functionResponse": {"name": "get_weather", "response": {"result": "n/a"}}},
                ],
            },
        ]

    google_server.queue(fake.json_reply("google/after_tool.json", check=check))
    request = ModelRequest(
        messages=[
            ty.Message(role="user", content="Weather in Paris and Lyon?"),
            ty.Message(role="assistant", tool_calls=calls),
            ty.Message(
                role="tool", tool_call_id="call_1", content='{"temp_c": 18, "sky": "sunny"}'
            ),
            ty.Message(role="tool", tool_call_id="call_2", content="n/a"),
        ],
        tools=[WEATHER],
    )
    result = await provider(google_server).generate(request)
    assert result.message.content == "Paris: 18 °C and sunny. Lyon: not found."


async def test_thinking_stream(google_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["generationConfig"]["thinkingConfig"] == {
            "includeThoughts": True,
            "thinkingBudget": 1024,
        }

    google_server.queue(fake.sse_reply("google/thinking.sse", check=check))
    events, final = await fake.collect(
        provider(google_server, thinking=1024).stream(ModelRequest(messages=ASK))
    )
    thinking = fake.thoughts(events)
    assert [t.content for t in thinking] == [
        "**Multiplying numbers**\n\nThe user wants 6 times 7.",
        " That is 42.",
    ]
    assert all(t.is_delta for t in thinking)
    assert fake.texts(events) == ["6 x 7 = 42"]
    assert final.thinking == "**Multiplying numbers**\n\nThe user wants 6 times 7. That is 42."
    assert final.message.content == "6 x 7 = 42"
    assert final.usage is not None
    assert final.usage.output_tokens == 47


async def test_structured_output_and_media(google_server: fake.FakeServer) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "additionalProperties": False,
    }

    def check(request: fake.Request) -> None:
        body = request.json
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        assert body["generationConfig"]["responseSchema"] == {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        }
        assert body["contents"][0]["parts"] == [
            {"text": "Where is this?"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAA"}},
            {"fileData": {"mimeType": "audio/mpeg", "fileUri": "https://x.test/a.mp3"}},
            {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0xLjQ="}},
        ]

    google_server.queue(fake.json_reply("google/structured.json", check=check))
    message = ty.Message(
        role="user",
        content="Where is this?",
        content_items=[
            ty.ImageContent(image="iVBORw0KGgoAAA", format="png"),
            ty.AudioContent(audio=ty.MediaURL(url="https://x.test/a.mp3"), format="mp3"),
            ty.FileContent(file="JVBERi0xLjQ=", filename="a.pdf", mime_type="application/pdf"),
        ],
    )
    fmt = ty.ResponseFormat(type="json_schema", json_schema={"name": "place", "schema": schema})
    result = await provider(google_server).generate(
        ModelRequest(messages=[message], response_format=fmt)
    )
    assert orjson.loads(result.message.content or "") == {"city": "Paris", "country": "France"}


async def test_blocked_prompt(google_server: fake.FakeServer) -> None:
    google_server.queue(fake.json_reply("google/blocked.json"))
    result = await provider(google_server).generate(ModelRequest(messages=ASK))
    assert result.finish_reason == "content_filter"
    assert result.message.content == ""


async def test_api_key_from_environment(
    google_server: fake.FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", GOOGLE_KEY)
    google_server.queue(fake.json_reply("google/text.json"))
    p = google(base_url=google_server.url)
    assert (await p.generate(ModelRequest(messages=ASK))).message.content


async def test_text_content_items_only(google_server: fake.FakeServer) -> None:
    def check(request: fake.Request) -> None:
        assert request.json["contents"] == [{"role": "user", "parts": [{"text": "ab"}]}]

    google_server.queue(fake.json_reply("google/text.json", check=check))
    message = ty.Message(
        role="user", content_items=[ty.TextContent(text="a"), ty.TextContent(text="b")]
    )
    await provider(google_server).generate(ModelRequest(messages=[message]))
