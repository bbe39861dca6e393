"""The providers' connection pool (``uamp_agents.http1_pool.LeanPool``) against a real
HTTP/1.1 server.

Each test counts the TCP connections the fake server accepted and closed, and
the idle connections the pool keeps.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from uamp_agents.http1_pool import LeanPool
from uamp_agents.providers import ModelRequest, _http, openai
from uamp_proto.types import Message

from .conftest import OPENAI_KEY
from .fakeserver import FakeServer, Request, collect, json_reply, sse_reply

HI = ModelRequest(messages=[Message(role="user", content="hi")])


def run_pool() -> LeanPool:
    """The current trio run's pool (the one the providers share)."""
    return _http._run_pool().pool


async def closed(server: FakeServer, count: int) -> None:
    """Wait until the server has closed ``count`` connections."""
    with trio.fail_after(10):  # a guard against hanging, not a timing assertion
        while server.closed < count:
            await trio.sleep(0.005)


async def test_calls_one_after_another_share_one_connection(openai_server: FakeServer) -> None:
    openai_server.queue(
        json_reply("openai/text.json"),
        sse_reply("openai/text.sse"),
        json_reply("openai/text.json"),
        sse_reply("openai/text.sse"),
    )
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    for _ in range(2):
        assert (await p.generate(HI)).message.content
        _, final = await collect(p.stream(HI))
        assert final.message.content
    assert openai_server.connections == 1
    assert run_pool().idle_count() == 1


async def test_concurrent_calls_get_a_connection_each_and_keep_them(
    openai_server: FakeServer,
) -> None:
    openai_server.queue(*(sse_reply("openai/text.sse") for _ in range(6)))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    streams = [p.stream(HI) for _ in range(3)]
    for stream in streams:  # all three in flight at once
        await anext(aiter(stream))
    for stream in streams:
        async for _ in stream:
            pass
    assert openai_server.connections == 3
    assert run_pool().idle_count() == 3
    for _ in range(3):
        await collect(p.stream(HI))
    assert openai_server.connections == 3
    assert openai_server.closed == 0


async def test_a_connection_the_server_dropped_is_not_used_again(
    openai_server: FakeServer,
) -> None:
    openai_server.queue(
        json_reply("openai/text.json", hang_up=True), json_reply("openai/text.json")
    )
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, max_retries=0)
    await p.generate(HI)
    assert run_pool().idle_count() == 1  # kept: the server did not say it would close
    await closed(openai_server, 1)
    # Without retries a reused dead connection would fail this call.
    assert (await p.generate(HI)).message.content
    assert openai_server.connections == 2
    assert run_pool().idle_count() == 1


async def test_connection_close_is_honoured(openai_server: FakeServer) -> None:
    openai_server.queue(
        json_reply("openai/text.json", headers=(("connection", "close"),)),
        json_reply("openai/text.json"),
    )
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, max_retries=0)
    await p.generate(HI)
    assert run_pool().idle_count() == 0
    await p.generate(HI)
    assert openai_server.connections == 2


async def test_a_stream_left_unread_closes_its_connection(openai_server: FakeServer) -> None:
    openai_server.queue(sse_reply("openai/text.sse"), sse_reply("openai/text.sse"))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    stream = p.stream(HI)
    await anext(aiter(stream))
    await stream.aclose()  # type: ignore[attr-defined]
    await closed(openai_server, 1)
    assert run_pool().idle_count() == 0
    _, final = await collect(p.stream(HI))
    assert final.message.content
    assert openai_server.connections == 2


async def test_idle_connections_are_bounded_and_closed_with_the_pool(
    openai_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.queue(*(sse_reply("openai/text.sse") for _ in range(3)))
    monkeypatch.setattr(_http, "LeanPool", lambda ssl_context: LeanPool(ssl_context, max_idle=2))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    streams = [p.stream(HI) for _ in range(3)]
    for stream in streams:
        await anext(aiter(stream))
    for stream in streams:
        async for _ in stream:
            pass
    assert run_pool().idle_count() == 2
    await closed(openai_server, 1)  # the third had no place on the stack
    await run_pool().aclose()
    await closed(openai_server, 3)
    assert openai_server.connections == 3
    assert run_pool().idle_count() == 0


async def test_a_proxy_from_the_environment_is_used(
    openai_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", openai_server.url)
    openai_server.queue(json_reply("openai/text.json"))
    p = openai(api_key=OPENAI_KEY, base_url="http://model.invalid/v1")
    assert (await p.generate(HI)).message.content
    assert openai_server.requests[0].target == "http://model.invalid/v1/chat/completions"


async def test_a_callers_client_sends_its_own_headers(openai_server: FakeServer) -> None:
    openai_server.queue(json_reply("openai/text.json"), sse_reply("openai/text.sse"))
    async with httpx.AsyncClient(headers={"x-team": "blue"}) as client:
        p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, http_client=client)
        await p.generate(HI)
        await collect(p.stream(HI))
    assert [r.headers.get("x-team") for r in openai_server.requests] == ["blue", "blue"]
    assert openai_server.requests[1].headers["accept"] == "text/event-stream"


async def test_a_large_request_goes_out_whole(openai_server: FakeServer) -> None:
    big = "word " * 100_000

    def check(request: Request) -> None:
        assert request.json["messages"][0]["content"] == big

    openai_server.queue(sse_reply("openai/text.sse", check=check))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    _, final = await collect(p.stream(ModelRequest(messages=[Message(role="user", content=big)])))
    assert final.message.content
