"""An agent that streams without end is stopped at the response output bound (``uamp serve``).

The abuse: an endless response (an echo agent told to repeat forever, a
model that never stops) grew the server's tracker of it without limit -- an
abandoned one reached 6 GiB and the process died building ``response.done``.
The server keeps at most ``ServerConfig.max_response_output_bytes`` of one
response: past it the agent is stopped and the response ends with the
protocol's error, and the session or connection goes on. A hostile server
does the same to a client, which cancels the response at its own bound.
Real sockets: trio-websocket, the uamp client, the openai SDK.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
import trio

from tests._support.endless import (
    BOUND,
    Endless,
    assert_stopped_at_the_bound,
    completions_stopped_then_next,
    stopped_then_next,
)
from tests._support.wire import CREATE, open_stream, post, texts
from uamp_proto.response import MAX_OUTPUT_BYTES
from uamp_trio.app import create_app
from uamp_trio.client import connect


async def test_the_uamp_websocket_stops_an_endless_agent_at_the_bound(serve_app: Any) -> None:
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    url = server.url.replace("http", "ws", 1) + "/agents/endless/uamp"
    with trio.fail_after(60):
        await stopped_then_next(url, agent)


async def test_the_uamp_http_sse_session_stops_it_too(serve_app: Any) -> None:
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    with trio.fail_after(60):
        async with httpx.AsyncClient(base_url=server.url) as http:
            created = await post(http, CREATE, path="/agents/endless/events")
            sid = created.headers["x-session-id"]
            async with open_stream(http, sid, "/agents/endless/events/stream") as events:
                await events.until("capabilities")
                ask = [{"type": "input.text", "text": "forever"}, {"type": "response.create"}]
                await post(http, ask, sid, path="/agents/endless/events")
                got = await events.until("response.error")
                assert got[-1]["error"]["code"] == "output_too_large"
                assert_stopped_at_the_bound(len(texts(got)))
                assert agent.emitted == [len(texts(got))]
                ask = [{"type": "input.text", "text": "short"}, {"type": "response.create"}]
                await post(http, ask, sid, path="/agents/endless/events")
                assert texts(await events.until("response.done")) == "ok"


async def test_a_client_cancels_a_server_past_its_own_bound(serve_app: Any) -> None:
    """The server keeps 32 MiB; the client 1 MiB: it ends the response and cancels it."""
    agent = Endless()
    server = await serve_app(create_app([agent]))
    url = server.url.replace("http", "ws", 1) + "/agents/endless/uamp"
    with trio.fail_after(60):
        async with connect(url, max_response_output_bytes=BOUND) as client:
            session = await client.create_session()
            result = await session.ask("forever")
            assert result.status == "failed"
            assert result.error is not None and result.error.code == "output_too_large"
            assert len(result.text) <= BOUND
            # The server got the client's response.cancel: its agent stops.
            while not agent.emitted:
                await trio.sleep(0.01)
            assert agent.emitted[0] < MAX_OUTPUT_BYTES
            # The session goes on (also past the late events of the cancelled response).
            assert (await session.ask("short")).text == "ok"


# --- HTTP transports, with the protocols' own clients ---------------------------------


@pytest.fixture
def endless_server(thread_server: Any) -> tuple[Any, Endless]:
    agent = Endless()
    return thread_server(create_app([agent]), max_response_output_bytes=BOUND), agent


def _sdk(server: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/agents/endless/v1", api_key="k", timeout=30, max_retries=0
    )


def test_chat_completions_streaming_ends_with_openais_error_at_the_bound(
    endless_server: tuple[Any, Endless],
) -> None:
    server, agent = endless_server
    completions_stopped_then_next(server.url, agent)


def test_chat_completions_not_streamed_is_a_400_the_sdk_does_not_retry(
    endless_server: tuple[Any, Endless],
) -> None:
    server, agent = endless_server
    client = openai.OpenAI(base_url=server.url + "/agents/endless/v1", api_key="k", timeout=30)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="endless", messages=[{"role": "user", "content": "forever"}]
        )
    assert caught.value.code == "output_too_large"
    assert len(agent.emitted) == 1  # run once (the SDK retries 5xx, not this)


def test_responses_streaming_ends_with_response_failed(
    endless_server: tuple[Any, Endless],
) -> None:
    server, agent = endless_server
    client = _sdk(server)
    kinds = []
    failed = None
    with client.responses.stream(model="endless", input="forever") as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.failed":
                failed = event.response
    assert failed is not None and failed.status == "failed"
    # OpenAI's codes of a failed response are an enum: the bound is named in the message.
    assert failed.error is not None and failed.error.code == "server_error"
    assert str(BOUND) in failed.error.message
    assert "response.completed" not in kinds
    assert agent.emitted and agent.emitted[0] <= BOUND


def test_anthropic_messages_not_streamed_is_a_400(endless_server: tuple[Any, Endless]) -> None:
    server, agent = endless_server
    client = anthropic.Anthropic(
        base_url=server.url + "/agents/endless", api_key="k", timeout=30, max_retries=0
    )
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="endless", max_tokens=100, messages=[{"role": "user", "content": "forever"}]
        )
    assert str(BOUND) in str(caught.value)
    assert len(agent.emitted) == 1


def test_responses_not_streamed_is_a_400(endless_server: tuple[Any, Endless]) -> None:
    server, agent = endless_server
    with pytest.raises(openai.BadRequestError) as caught:
        _sdk(server).responses.create(model="endless", input="forever")
    assert caught.value.code == "output_too_large"
    assert len(agent.emitted) == 1
