"""The official ``anthropic`` SDK against a uamp agent, over real sockets.

Every client is built with ``_strict_response_validation=True``: each reply
and stream event must parse as the SDK's own pydantic models.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests._support.agents import TestAgent, Words
from tests._support.envelopes import envelope
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.envelope import decode_envelope, encode_envelope
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import anthropic as transport
from uamp_trio.trust.auth import APIKeyAuthenticator

KEY = "k-anthropic-0123"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


class Thinker(TestAgent):
    """Thinks in two deltas, then answers in two."""

    name = "thinker"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.Thinking(content="Let me ", is_delta=True))
        await emit(ev.Thinking(content="think.", is_delta=True))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Done ")))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="thinking.")))


class Counts(Thinker):
    """Counts the tokens of a turn itself: one per message."""

    name = "counts"

    async def count_tokens(self, request: TurnRequest) -> int:
        return 100 + len(request.messages)


class Breaks(TestAgent):
    """Says a word, then fails."""

    name = "breaks"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Hello ")))
        raise ResponderError("rate_limit_exceeded", "The model is busy.")


def _app(**options: Any) -> Any:
    agents = [DemoAgent(), Thinker(), Breaks(), Words("slow", "one ", "two", pause=0.4), Counts()]
    app = create_app(agents, transports=[], **options)
    # The default transports, with a short ping interval for the silent agent.
    from uamp_trio.app import default_transports

    app.mount(*(t for t in default_transports() if t is not transport.mount))
    transport.AnthropicTransport(app, ping_interval=0.1).mount()
    return app


@pytest.fixture
def server(thread_server: Any) -> Any:
    return thread_server(_app())


def client(server: Any, base: str = "/agents/demo", **kw: Any) -> anthropic.Anthropic:
    kw.setdefault("api_key", KEY)
    return anthropic.Anthropic(
        base_url=server.url + base,
        max_retries=0,
        timeout=10,
        _strict_response_validation=True,
        **kw,
    )


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# --- messages ---------------------------------------------------------------------------


@pytest.mark.parametrize("base", ["/agents/demo", ""])
def test_create(server: Any, base: str) -> None:
    reply = client(server, base).messages.create(
        model="demo", max_tokens=100, messages=ask("hello world")
    )
    assert reply.id.startswith("msg_") and reply.type == "message" and reply.role == "assistant"
    assert [(b.type, getattr(b, "text", None)) for b in reply.content] == [
        ("text", "You said: hello world")
    ]
    assert reply.model == "demo"
    assert (reply.stop_reason, reply.stop_sequence) == ("end_turn", None)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (2, 4)


def test_a_client_model_name_is_kept_at_the_agent_url(server: Any) -> None:
    # Tools that take an Anthropic base URL send their own model names.
    reply = client(server).messages.create(
        model="some-other-model", max_tokens=100, messages=ask("hi")
    )
    assert reply.model == "some-other-model"
    assert reply.content[0].type == "text" and reply.content[0].text == "You said: hi"


def test_system_blocks_and_media(server: Any) -> None:
    reply = client(server).messages.create(
        model="demo",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                        "title": "notes.txt",
                    },
                ],
            }
        ],
    )
    assert reply.content[0].type == "text"
    assert reply.content[0].text == "You said: look (with 2 attachments)"


def test_stream_helper(server: Any) -> None:
    with client(server).messages.stream(
        model="demo", max_tokens=100, messages=ask("stream this please")
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "You said: stream this please" and len(pieces) >= 3
    assert final.content[0].type == "text"
    assert final.content[0].text == "You said: stream this please"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 5)


def test_create_stream_event_order(server: Any) -> None:
    events = list(
        client(server).messages.create(
            model="demo", max_tokens=100, messages=ask("two words"), stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-4:] == [
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.text for d in deltas if d.type == "text_delta") == "You said: two words"
    stop = events[-2]
    assert stop.type == "message_delta" and stop.delta.stop_reason == "end_turn"
    assert stop.usage.output_tokens == 4


def test_every_sse_event_is_named(server: Any) -> None:
    body = {"model": "demo", "max_tokens": 50, "messages": ask("hi"), "stream": True}
    headers = {"anthropic-version": "2023-06-01", "authorization": f"Bearer {KEY}"}
    reply = httpx.post(f"{server.url}/agents/demo/v1/messages", json=body, headers=headers)
    assert reply.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in reply.text.split("\n\n") if f]
    assert frames and all(f.startswith("event: ") for f in frames)
    for frame in frames:
        name, data = frame.split("\n")
        assert json.loads(data.removeprefix("data: "))["type"] == name.removeprefix("event: ")


def test_max_tokens_and_stop_sequences(server: Any) -> None:
    sdk = client(server)
    cut = sdk.messages.create(model="demo", max_tokens=2, messages=ask("a b c d"))
    assert cut.stop_reason == "max_tokens"
    assert cut.content[0].type == "text" and cut.content[0].text == "You said:"
    stopped = sdk.messages.create(
        model="demo", max_tokens=100, messages=ask("one two three"), stop_sequences=["x", " two"]
    )
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", " two")
    assert stopped.content[0].type == "text" and stopped.content[0].text == "You said: one"
    with sdk.messages.stream(
        model="demo", max_tokens=100, messages=ask("one two three"), stop_sequences=["d: o"]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "You sai"
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "d: o")


def test_a_stop_sequence_found_only_when_the_reply_ends(server: Any) -> None:
    # "z" is whole in "qz", but "qzz" starts earlier and could still come: the
    # reply's end decides, and the stop must say which sequence cut it.
    sdk = client(server)
    kw: dict[str, Any] = {"model": "demo", "max_tokens": 100, "stop_sequences": ["z", "qzz"]}
    whole = sdk.messages.create(messages=ask("qz"), **kw)
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", "z")
    assert whole.content[0].type == "text" and whole.content[0].text == "You said: q"
    with sdk.messages.stream(messages=ask("qz"), **kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "You said: q"
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "z")
    longer = sdk.messages.create(messages=ask("qzz"), **kw)
    assert (longer.stop_reason, longer.stop_sequence) == ("stop_sequence", "qzz")
    assert longer.content[0].type == "text" and longer.content[0].text == "You said: "


# --- client tools ---------------------------------------------------------------------------


def test_tool_round_trip(server: Any) -> None:
    sdk = client(server)
    messages: list[Any] = ask("Paris")
    first = sdk.messages.create(
        model="demo",
        max_tokens=100,
        messages=messages,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Paris"} and call.id
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}],
        },
    ]
    second = sdk.messages.create(model="demo", max_tokens=100, messages=messages, tools=[WEATHER])
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"
    assert second.content[0].text == "Tool get_weather returned: 18C"


def test_streamed_tool_use(server: Any) -> None:
    with client(server).messages.stream(
        model="demo",
        max_tokens=100,
        messages=ask("weather in get_weather Rome"),
        tools=[WEATHER],
        tool_choice={"type": "any"},
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds
    assert final.stop_reason == "tool_use"
    (call,) = [b for b in final.content if b.type == "tool_use"]
    assert call.input == {"city": "weather in get_weather Rome"}


def test_tool_choice_none_answers_in_text(server: Any) -> None:
    reply = client(server).messages.create(
        model="demo",
        max_tokens=100,
        messages=ask("get_weather now"),
        tools=[WEATHER],
        tool_choice={"type": "none"},
    )
    assert reply.stop_reason == "end_turn" and reply.content[0].type == "text"


# --- thinking -------------------------------------------------------------------------------


def test_thinking_blocks_when_enabled(server: Any) -> None:
    sdk = client(server, "/agents/thinker")
    thinking = {"type": "enabled", "budget_tokens": 1024}
    reply = sdk.messages.create(model="t", max_tokens=2000, messages=ask("q"), thinking=thinking)
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].type == "thinking" and reply.content[0].thinking == "Let me think."
    with sdk.messages.stream(
        model="t", max_tokens=2000, messages=ask("q"), thinking=thinking
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert [e.type for e in events].count("thinking") == 2
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].type == "thinking" and final.content[0].thinking == "Let me think."
    plain = sdk.messages.create(model="t", max_tokens=100, messages=ask("q"))
    assert [b.type for b in plain.content] == ["text"]  # not asked for: not shown
    # A thinking block sent back in the history is accepted (and left out of the turn).
    again = sdk.messages.create(
        model="t",
        max_tokens=2000,
        thinking=thinking,
        messages=[
            *ask("q"),
            {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
            *ask("more"),
        ],
    )
    assert again.content[-1].type == "text"


# --- count_tokens and models ---------------------------------------------------------------------


def test_count_tokens(server: Any) -> None:
    count = client(server).messages.count_tokens(
        model="demo", system="be kind", messages=ask("three little words")
    )
    assert count.input_tokens == 5
    # An agent with a count of its own answers for itself.
    own = client(server, "/agents/counts").messages.count_tokens(model="c", messages=ask("a b"))
    assert own.input_tokens == 101


@pytest.mark.parametrize("base", ["/agents/demo", ""])
def test_models(server: Any, base: str) -> None:
    sdk = client(server, base)
    listed = list(sdk.models.list())
    names = [m.id for m in listed]
    assert names == (["demo"] if base else ["demo", "thinker", "breaks", "slow", "counts"])
    assert all(m.type == "model" and m.display_name == m.id for m in listed)
    assert sdk.models.retrieve("demo").id == "demo"
    with pytest.raises(anthropic.NotFoundError) as caught:
        sdk.models.retrieve("nobody")
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_the_openai_model_list_stays_on_the_same_path(server: Any) -> None:
    import openai

    listed = openai.OpenAI(base_url=f"{server.url}/agents/demo/v1", api_key="x").models.list()
    assert [(m.id, m.object) for m in listed] == [("demo", "model")]


# --- errors ---------------------------------------------------------------------------------


def test_bad_request(server: Any) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(server).messages.create(model="demo", max_tokens=0, messages=ask("hi"))
    assert caught.value.body == {  # type: ignore[comparison-overlap]
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: must be an integer of at least 1",
        },
    }


def test_unknown_agent_is_not_found(server: Any) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        client(server, "/agents/nobody").messages.create(
            model="demo", max_tokens=10, messages=ask("hi")
        )
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_an_agent_failure_mid_stream_is_an_error_event(server: Any) -> None:
    sdk = client(server, "/agents/breaks")
    stream = sdk.messages.stream(model="b", max_tokens=10, messages=ask("hi"))
    with pytest.raises(anthropic.APIStatusError) as caught, stream as events:
        for _ in events:
            pass
    assert caught.value.body == {  # type: ignore[comparison-overlap]
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "The model is busy."},
    }
    with pytest.raises(anthropic.RateLimitError):
        sdk.messages.create(model="b", max_tokens=10, messages=ask("hi"))


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def either(request: pytest.FixtureRequest, thread_server: Any) -> Iterator[Any]:
    """The agents under ``uamp serve`` or ``uamp_asgi`` (uvicorn), pinging after 0.1 s."""
    if request.param == "uamp serve":
        yield thread_server(_app())
        return
    import types

    import anyio

    import uamp_asgi
    from tests._support.asgi import uvicorn_server
    from uamp_asgi.responders import function_agent

    async def slow(turn: TurnRequest) -> AsyncIterator[str]:
        """Two words, 0.4 s of silence before each (on asyncio: no Trio sleep)."""
        for word in ("one ", "two"):
            await anyio.sleep(0.4)
            yield word

    config = uamp_asgi.Config(anthropic_ping_interval=0.1)
    with uvicorn_server(uamp_asgi.app([function_agent(slow)], config=config)) as url:
        yield types.SimpleNamespace(url=url)


def test_a_silent_agent_gets_pings(either: Any) -> None:
    server = either
    body = {"model": "s", "max_tokens": 50, "messages": ask("hi"), "stream": True}
    headers = {"anthropic-version": "2023-06-01"}
    reply = httpx.post(f"{server.url}/agents/slow/v1/messages", json=body, headers=headers)
    assert "event: ping\n" in reply.text
    with client(server, "/agents/slow").messages.stream(
        model="s", max_tokens=50, messages=ask("hi")
    ) as stream:
        assert "".join(stream.text_stream) == "one two"


@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
def test_authentication(thread_server: Any, header: str) -> None:
    server = thread_server(_app(authenticator=APIKeyAuthenticator([("alice", KEY)])))
    url = f"{server.url}/agents/demo/v1/messages"
    body = {"model": "demo", "max_tokens": 10, "messages": ask("hi")}
    value = f"Bearer {KEY}" if header == "authorization" else KEY
    base = {"anthropic-version": "2023-06-01"}
    assert httpx.post(url, json=body, headers={**base, header: value}).status_code == 200
    refused = httpx.post(url, json=body, headers={**base, header: value + "x"})
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        client(server, api_key="wrong").messages.create(
            model="demo", max_tokens=10, messages=ask("hi")
        )
    assert client(server).messages.count_tokens(model="d", messages=ask("a b")).input_tokens == 2


def test_payment_required(thread_server: Any) -> None:
    server = thread_server(_app(payment_policy=TokenPolicy({"tok_ok"})))
    with pytest.raises(anthropic.PaymentRequiredError) as caught:
        client(server).messages.create(model="demo", max_tokens=10, messages=ask("hi"))
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "billing_error" and error["accepts"]
    paid = client(server, default_headers={"X-PAYMENT": "tok_ok"}).messages.create(
        model="demo", max_tokens=10, messages=ask("hi")
    )
    assert paid.content[0].type == "text"


# --- the envelope binding on the same path -------------------------------------------------------


def test_envelopes_still_work_on_the_same_path(server: Any) -> None:
    url = f"{server.url}/agents/demo/v1/messages"
    for extra in ({}, {"anthropic-version": "2023-06-01"}):
        # The content type decides first: an envelope stays an envelope.
        env = envelope(to="urn:uamp:agent:demo")
        headers = {"content-type": "application/uamp+json;v=1", **extra}
        reply = httpx.post(url, content=encode_envelope(env), headers=headers)
        assert reply.status_code == 202, reply.text
        assert reply.headers["location"] == f"/agents/demo/v1/stream/{env.id}"
    # Anthropic JSON without an Anthropic header is read as an envelope (and refused as one).
    body = {"model": "demo", "max_tokens": 10, "messages": ask("hi")}
    refused = httpx.post(url, json=body)
    assert refused.status_code == 400
    assert decode_envelope(refused.content).intent.value == "error"
    # The same body, with the SDK's header: the Messages API.
    reply = client(server).messages.create(model="demo", max_tokens=10, messages=ask("hi"))
    assert reply.content[0].type == "text"


def test_over_the_connection_limit_is_overloaded(thread_server: Any) -> None:
    server = thread_server(_app(), max_connections=1)
    with socket.create_connection(("127.0.0.1", server.port)) as held:
        held.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200")  # served: it holds the one slot
        with pytest.raises(anthropic.OverloadedError) as caught:
            client(server).messages.create(model="demo", max_tokens=10, messages=ask("hi"))
        assert caught.value.status_code == 529
        assert caught.value.body == {  # type: ignore[comparison-overlap]
            "type": "error",
            "error": {
                "type": "overloaded_error",
                "message": "The server is at its connection limit; retry later.",
            },
        }
        # Another protocol on the same server keeps its own answer to the same limit.
        busy = httpx.post(f"{server.url}/v1/chat/completions", json={})
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "server_busy"
