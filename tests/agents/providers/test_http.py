"""The shared plumbing: Retry-After, SSE reading, retries, message splitting."""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from uamp_agents.providers import ModelRequest, ProviderError, _http, openai
from uamp_agents.providers._http import RetryPolicy, iter_sse, parse_retry_after, retrying_stream
from uamp_agents.providers._wire import media_ref, split_message
from uamp_proto.types import (
    FileContent,
    ImageContent,
    MediaURL,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolInvocation,
)

from .conftest import OPENAI_KEY
from .fakeserver import FakeServer, Reply, json_reply

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"Retry-After": email.utils.formatdate(NOW + 30, usegmt=True)}, 30.0),
        ({"Retry-After": email.utils.formatdate(NOW - 30, usegmt=True)}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "nan"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


async def _chunks(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_iter_sse_fields_and_dispatch() -> None:
    body = (
        b": keep-alive comment\n"
        b"event: message_start\n"
        b"data: {\n"
        b'data:"a": 1}\n'
        b"id: 5\n"
        b"retry: 1000\n"
        b"\n"
        b"\n"
        b"data: second\r\n"
        b"\r\n"
        b"data: unterminated"
    )
    # Split anywhere, even inside a CRLF: the same events.
    for split in (len(body), 3, 61):
        pieces = [body[i : i + split] for i in range(0, len(body), split)]
        events = [e async for e in iter_sse(_chunks(*pieces))]
        assert [(e.event, e.data) for e in events] == [
            ("message_start", '{\n"a": 1}'),
            (None, "second"),
            (None, "unterminated"),
        ]


async def test_iter_sse_refuses_an_endless_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "MAX_SSE_EVENT", 16)
    with pytest.raises(ProviderError, match="unreadable event stream"):
        async for _ in iter_sse(_chunks(b"data: " + b"x" * 40)):
            pass


async def test_retrying_stream_stops_retrying_after_first_item() -> None:
    attempts: list[int] = []

    async def flaky() -> AsyncIterator[str]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ProviderError("early", retryable=True)
        yield "first"
        raise ProviderError("late", retryable=True)

    policy = RetryPolicy(max_retries=5, base_delay=0.001)
    seen = []
    with pytest.raises(ProviderError, match="late"):
        async for item in retrying_stream(policy, flaky):
            seen.append(item)
    assert seen == ["first"]
    assert len(attempts) == 2


def test_retry_policy_caps_and_honours_retry_after() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=1.0, max_delay=5.0)
    assert policy.delay(0, ProviderError("x", retry_after=2.0)) == 2.0
    assert policy.delay(0, ProviderError("x", retry_after=3600.0)) == 5.0
    assert 0.75 <= policy.delay(0, ProviderError("x")) <= 1.0
    assert 3.75 <= policy.delay(10, ProviderError("x")) <= 5.0


async def test_huge_retry_after_is_capped(openai_server: FakeServer) -> None:
    openai_server.queue(
        json_reply("openai/error_429.json", status=429, headers=(("retry-after", "3600"),)),
        json_reply("openai/text.json"),
    )
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, retry_max_delay=0.05)
    with trio.fail_after(30):  # a guard against hanging, not a timing assertion
        result = await p.generate(ModelRequest(messages=[Message(role="user", content="hi")]))
    assert result.message.content
    assert len(openai_server.requests) == 2


async def test_shared_http_client(openai_server: FakeServer) -> None:
    openai_server.queue(json_reply("openai/text.json"), json_reply("openai/text.json"))
    async with httpx.AsyncClient() as client:
        p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, http_client=client)
        for _ in range(2):
            await p.generate(ModelRequest(messages=[Message(role="user", content="hi")]))
        assert not client.is_closed  # a caller's client is not closed for it
    assert len(openai_server.requests) == 2


async def test_fake_server_checks_are_enforced(openai_server: FakeServer) -> None:
    def check(request: object) -> None:
        raise AssertionError("wrong body")

    openai_server.queue(Reply(check=check))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    with pytest.raises(ProviderError, match="wrong body") as info:
        await p.generate(ModelRequest(messages=[Message(role="user", content="hi")]))
    assert info.value.status == 400
    assert openai_server.failures == ["fake server check failed: wrong body"]
    openai_server.failures.clear()


def test_split_message_precedence() -> None:
    image = ImageContent(image=MediaURL(url="https://x.test/a.png"))
    both = Message(role="user", content="look", content_items=[TextContent(text="look"), image])
    assert split_message(both).content == [TextContent(text="look"), image]
    media_only = Message(role="user", content="look", content_items=[image])
    assert split_message(media_only).content == [TextContent(text="look"), image]
    call = ToolInvocation(id="c1", name="f", arguments="{}")
    other = ToolInvocation(id="c2", name="g", arguments="{}")
    assistant = Message(
        role="assistant",
        tool_calls=[call],
        content_items=[
            ThinkingContent(thinking="hm"),
            ToolCallContent(tool_call=call),
            ToolCallContent(tool_call=other),
        ],
    )
    parts = split_message(assistant)
    assert parts.tool_calls == [call, other]
    assert parts.thinking == [ThinkingContent(thinking="hm")]
    assert parts.content == []
    tool = split_message(Message(role="tool", tool_call_id="c1", content="42"))
    assert [(r.call_id, r.result) for r in tool.tool_results] == [("c1", "42")]
    assert tool.content == []


def test_media_ref() -> None:
    ref = media_ref(ImageContent(image="iVBORw0KGgoAAAANS"))
    assert (ref.url, ref.mime_type) == (None, "image/png")
    assert ref.data_url == "data:image/png;base64,iVBORw0KGgoAAAANS"
    ref = media_ref(ImageContent(image="data:image/webp;base64,UklGRabc"))
    assert (ref.data, ref.mime_type) == ("UklGRabc", "image/webp")
    ref = media_ref(ImageContent(image=MediaURL(url="https://x.test/p.jpg?x=1")))
    assert (ref.url, ref.mime_type) == ("https://x.test/p.jpg?x=1", "image/jpeg")
    ref = media_ref(FileContent(file="JVBERi0=", filename="a.pdf", mime_type="application/pdf"))
    assert ref.mime_type == "application/pdf"
