"""The providers' connection pool (``_pool.LeanPool``) against a real HTTP/1.1 server.

Each test counts the TCP connections the fake server accepted and closed, and
the idle connections the pool keeps.
"""

from __future__ import annotations

import ssl

import httpcore
import httpx
import pytest
import trio

from uamp_agents.providers import ModelRequest, _http, _pool, openai
from uamp_agents.providers._pool import LeanPool, LeanTransport
from uamp_proto.types import Message

from .conftest import OPENAI_KEY
from .fakeserver import FakeServer, Request, collect, json_reply, sse_reply

HI = ModelRequest(messages=[Message(role="user", content="hi")])


def run_pool() -> LeanPool:
    """The current trio run's pool (the one the providers share)."""
    return _http._run_pool().transport.pool


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


async def test_idle_connections_are_bounded_and_closed_with_the_client(
    openai_server: FakeServer,
) -> None:
    openai_server.queue(*(sse_reply("openai/text.sse") for _ in range(3)))
    transport = LeanTransport(ssl.create_default_context(), max_idle=2)
    async with httpx.AsyncClient(transport=transport) as client:
        p = openai(api_key=OPENAI_KEY, base_url=openai_server.url, http_client=client)
        streams = [p.stream(HI) for _ in range(3)]
        for stream in streams:
            await anext(aiter(stream))
        for stream in streams:
            async for _ in stream:
                pass
        # httpx sent through the lean pool: it holds the connections.
        assert transport.pool.idle_count() == 2
        await closed(openai_server, 1)
    await closed(openai_server, 3)
    assert openai_server.connections == 3
    assert transport.pool.idle_count() == 0


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


class _Recorder(httpcore.AsyncNetworkStream):
    """A network stream that records its writes and answers reads with ``b"reply"``."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"reply"

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return f"info:{info}"


async def test_writes_wait_for_the_next_read_and_leave_in_one_send() -> None:
    raw = _Recorder()
    corked = _pool._CorkedStream(raw)
    await corked.write(b"POST / HTTP/1.1\r\n\r\n")
    await corked.write(b"")
    await corked.write(b'{"a": 1}')
    assert raw.writes == []
    assert await corked.read(100) == b"reply"
    assert raw.writes == [b'POST / HTTP/1.1\r\n\r\n{"a": 1}']
    assert await corked.read(100) == b"reply"  # nothing held: nothing sent
    assert len(raw.writes) == 1
    # Past the limit it sends without waiting for a read.
    await corked.write(b"x" * _pool.CORK_LIMIT)
    assert raw.writes[1:] == []
    await corked.write(b"y")
    assert raw.writes[1:] == [b"x" * _pool.CORK_LIMIT + b"y"]
    # Closing drops what is held.
    await corked.write(b"late")
    await corked.aclose()
    assert raw.closed and len(raw.writes) == 2
    assert corked.get_extra_info("is_readable") == "info:is_readable"


async def test_a_request_larger_than_the_cork_limit_goes_out_whole(
    openai_server: FakeServer,
) -> None:
    big = "word " * (_pool.CORK_LIMIT // 2)

    def check(request: Request) -> None:
        assert request.json["messages"][0]["content"] == big

    openai_server.queue(sse_reply("openai/text.sse", check=check))
    p = openai(api_key=OPENAI_KEY, base_url=openai_server.url)
    _, final = await collect(p.stream(ModelRequest(messages=[Message(role="user", content=big)])))
    assert final.message.content
