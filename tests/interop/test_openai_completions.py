"""Real clients against a real server: the official openai SDK over HTTP/1.1,
httpx over HTTP/2 (h2c prior knowledge and TLS + ALPN)."""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx
import openai
import pytest

from tests._support.tools import FORCED, WEATHER_TOOL
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    return thread_server(create_app([DemoAgent()]), max_body_size=64 * 1024)


@pytest.fixture
def sdk(server) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(
        base_url=f"{server.url}/agents/demo/v1", api_key="unused", timeout=10, max_retries=0
    )


# --- the openai SDK over HTTP/1.1 ----------------------------------------------


def test_sdk_non_streaming(sdk: openai.OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hello world"}]
    )
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "You said: hello world"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 2
    assert completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == 6


def test_sdk_streaming(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "stream this please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: stream this please"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) >= 3  # really streamed in pieces
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_sdk_tool_call_round_trip(sdk: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "Paris"}]
    first = sdk.chat.completions.create(
        model="demo", messages=messages, tools=[WEATHER_TOOL], tool_choice=FORCED
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
    second = sdk.chat.completions.create(model="demo", messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Tool get_weather returned: sunny, 21C"


def test_sdk_streamed_tool_call(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "Oslo"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        stream=True,
    )
    chunks = list(stream)
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"city": "Oslo"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_sdk_reports_bad_input(sdk: openai.OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}], n=2)
    assert bad.value.status_code == 400
    assert bad.value.param == "n"
    other = openai.OpenAI(
        base_url=f"{server.url}/agents/nobody/v1", api_key="x", timeout=10, max_retries=0
    )
    with pytest.raises(openai.NotFoundError) as missing:
        other.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "agent_not_found"


# --- bad input, raw ----------------------------------------------------------------


def test_malformed_json_unknown_agent_and_oversized_body(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=10) as client:
        r = client.post(
            "/agents/demo/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["code"] == "invalid_json"
        r = client.post("/agents/ghost/chat/completions", json={"messages": []})
        assert r.status_code == 404 and r.json()["error"]["code"] == "agent_not_found"
        huge = {"messages": [{"role": "user", "content": "x" * 100_000}]}
        r = client.post("/agents/demo/chat/completions", json=huge)
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "request_too_large"


# --- httpx over HTTP/2 ---------------------------------------------------------------


def _h2_round_trips(client: httpx.Client) -> None:
    url = "/agents/demo/v1/chat/completions"
    # non-streaming
    r = client.post(url, json={"model": "demo", "messages": [{"role": "user", "content": "hi"}]})
    assert r.http_version == "HTTP/2"
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "You said: hi"
    # streaming
    body = {"messages": [{"role": "user", "content": "one two three"}], "stream": True}
    with client.stream("POST", url, json=body) as s:
        assert s.http_version == "HTTP/2"
        assert s.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "You said: one two three"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # tool round trip
    messages: list[Any] = [{"role": "user", "content": "Rome"}]
    r = client.post(
        url, json={"messages": messages, "tools": [WEATHER_TOOL], "tool_choice": FORCED}
    )
    assert r.http_version == "HTTP/2"
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"city": "Rome"}
    messages += [
        choice["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "cloudy"},
    ]
    r = client.post(url, json={"messages": messages, "tools": [WEATHER_TOOL]})
    assert r.json()["choices"][0]["message"]["content"] == "Tool get_weather returned: cloudy"


def test_http2_cleartext_prior_knowledge(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=10) as client:
        _h2_round_trips(client)


def test_http2_over_tls_with_alpn(thread_server, tls_files) -> None:  # type: ignore[no-untyped-def]
    certfile, keyfile = tls_files
    server = thread_server(create_app([DemoAgent()]), certfile=certfile, keyfile=keyfile)
    ctx = ssl.create_default_context(cafile=certfile)
    with httpx.Client(base_url=server.url, http2=True, verify=ctx, timeout=10) as client:
        _h2_round_trips(client)
    # The openai SDK (HTTP/1.1) reaches the same TLS server through ALPN http/1.1.
    sdk = openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=10,
        http_client=openai.DefaultHttpxClient(verify=ctx),
    )
    completion = sdk.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "over tls"}]
    )
    assert completion.choices[0].message.content == "You said: over tls"
