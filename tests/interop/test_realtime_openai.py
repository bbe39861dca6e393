"""The openai SDK's realtime client against a real uamp server on 127.0.0.1.

The SDK is asyncio; the trio server runs in its own thread (``thread_server``).
The voice-call tests run twice: against ``uamp serve`` and against the ASGI
app (``uamp_asgi`` under uvicorn), the same test body (the ``serve`` fixture).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from tests._support.agents import Switchboard, TestAgent
from tests._support.tools import WEATHER_REALTIME_TOOL
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio.app import App
from uamp_trio.demo import DemoAgent
from uamp_trio.transports.realtime import mount as mount_realtime

TIMEOUT = 20


def _app(policy: TokenPolicy | None = None, *agents: Responder) -> App:
    app = App(list(agents) or [DemoAgent()])
    mount_realtime(app, payment_policy=policy)
    return app


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def serve(request: pytest.FixtureRequest, thread_server: Any) -> Iterator[Callable[..., Any]]:
    """``server = serve(*agents)``: the agents' Realtime endpoint on either server."""
    with ExitStack() as stack:

        def start(
            *agents: Responder, policy: TokenPolicy | None = None, payment_wait: float = 600.0
        ) -> Any:
            listed = list(agents) or [DemoAgent()]
            if request.param == "uamp serve":
                app = App(listed)
                mount_realtime(app, payment_policy=policy, payment_wait=payment_wait)
                return thread_server(app)
            import uamp_asgi
            from tests._support.asgi import uvicorn_server

            config = uamp_asgi.Config(
                transports=("realtime",), payment_policy=policy, payment_wait=payment_wait
            )
            url = stack.enter_context(uvicorn_server(uamp_asgi.app(listed, config=config)))
            return SimpleNamespace(url=url)

        yield start


def _client(server: Any, agent: str = "demo") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url=f"{server.url}/agents/{agent}", max_retries=0
    )


async def _until(conn: Any, kind: str, seen: list[Any]) -> Any:
    async for event in conn:
        seen.append(event)
        if event.type == kind:
            return event
    raise AssertionError(f"connection closed before {kind}")


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def test_text_round_trip(thread_server: Any) -> None:
    server = thread_server(_app())

    async def main() -> None:
        client = _client(server)
        async with client.realtime.connect(model="gpt-realtime") as conn:
            created = await conn.recv()
            assert created.type == "session.created"
            assert created.session.model == "gpt-realtime"

            await conn.session.update(
                session={
                    "type": "realtime",
                    "output_modalities": ["text"],
                    "instructions": "Be brief.",
                }
            )
            updated = await conn.recv()
            assert updated.type == "session.updated"
            assert updated.session.instructions == "Be brief."

            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hello realtime world"}],
                }
            )
            added = await conn.recv()
            assert added.type == "conversation.item.added"
            assert added.item.content[0].text == "hello realtime world"
            assert (await conn.recv()).type == "conversation.item.done"

            await conn.response.create()
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            kinds = [e.type for e in seen]
            assert kinds[0] == "response.created"
            assert kinds[1:5] == [
                "response.output_item.added",
                "conversation.item.added",
                "response.content_part.added",
                "response.output_text.delta",
            ]
            assert kinds[-5:] == [
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "conversation.item.done",
                "response.done",
            ]
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            assert text == "You said: hello realtime world"
            text_done = next(e for e in seen if e.type == "response.output_text.done")
            assert text_done.text == text
            assert done.response.status == "completed"
            assert done.response.output[0].content[0].text == text
            assert done.response.usage.output_tokens == 5
            assert done.response.usage.total_tokens == done.response.usage.input_tokens + 5

    _run(main())


def test_function_call_round_trip(thread_server: Any) -> None:
    server = thread_server(_app())

    async def main() -> None:
        client = _client(server)
        async with client.realtime.connect(model="gpt-realtime") as conn:
            assert (await conn.recv()).type == "session.created"
            await conn.session.update(
                session={"type": "realtime", "tools": [WEATHER_REALTIME_TOOL]}
            )
            assert (await conn.recv()).type == "session.updated"
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "get weather in Paris"}],
                }
            )
            await conn.response.create()
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            args_done = next(e for e in seen if e.type == "response.function_call_arguments.done")
            assert args_done.name == "get_weather"
            assert json.loads(args_done.arguments) == {"city": "get weather in Paris"}
            deltas = [e for e in seen if e.type == "response.function_call_arguments.delta"]
            assert "".join(d.delta for d in deltas) == args_done.arguments
            assert done.response.status == "completed"
            call = done.response.output[0]
            assert call.type == "function_call" and call.call_id == args_done.call_id

            await conn.conversation.item.create(
                item={
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": "sunny, 21C",
                }
            )
            assert (await conn.recv()).type == "conversation.item.added"
            await conn.response.create()
            seen = []
            done = await _until(conn, "response.done", seen)
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            assert text == "Tool get_weather returned: sunny, 21C"
            assert done.response.status == "completed"

    _run(main())


def test_audio_reaches_the_agent_and_errors_keep_the_socket(thread_server: Any) -> None:
    server = thread_server(_app())

    async def main() -> None:
        client = _client(server)
        async with client.realtime.connect(model="m") as conn:
            assert (await conn.recv()).type == "session.created"
            await conn.input_audio_buffer.commit()
            err = await conn.recv()
            assert err.type == "error" and err.error.code == "input_audio_buffer_commit_empty"

            pcm = base64.b64encode(b"\x00\x01" * 200).decode()
            await conn.input_audio_buffer.append(audio=pcm)
            assert (await conn.recv()).type == "voice.accept"  # the first audio places a call
            await conn.input_audio_buffer.append(audio=pcm)
            await conn.input_audio_buffer.commit()
            committed = await conn.recv()
            assert committed.type == "input_audio_buffer.committed"
            added = await conn.recv()
            assert added.type == "conversation.item.added"
            assert base64.b64decode(added.item.content[0].audio) == b"\x00\x01" * 400
            assert (await conn.recv()).type == "conversation.item.done"

            await conn.conversation.item.delete(item_id="item_missing")
            err = await conn.recv()
            assert err.type == "error" and err.error.code == "item_not_found"

            await conn.send({"type": "no.such_event"})  # type: ignore[arg-type]
            err = await conn.recv()
            assert err.type == "error" and err.error.param == "type"

            await conn.response.create()
            seen: list[Any] = []
            await _until(conn, "response.done", seen)
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            # The demo agent counts the audio attachment of the user message.
            assert text == "Hello! Send me a message. (with 1 attachment)"

    _run(main())


def test_beta_header_gets_beta_event_names(thread_server: Any) -> None:
    server = thread_server(_app())

    async def main() -> None:
        client = _client(server)
        async with client.realtime.connect(
            model="m", extra_headers={"OpenAI-Beta": "realtime=v1"}
        ) as conn:
            created = await conn.recv_bytes()
            session = json.loads(created)["session"]
            assert session["modalities"] == ["text"] and session["input_audio_format"] == "pcm16"
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}],
                }
            )
            assert json.loads(await conn.recv_bytes())["type"] == "conversation.item.created"
            await conn.response.create()
            kinds = []
            while True:
                event = json.loads(await conn.recv_bytes())
                kinds.append(event["type"])
                if event["type"] == "response.done":
                    break
            assert "response.text.delta" in kinds and "response.text.done" in kinds
            assert "response.output_text.delta" not in kinds
            assert event["response"]["output"][0]["content"][0] == {
                "type": "text",
                "text": "You said: hi",
            }

    _run(main())


def test_payment_required_then_submit(serve: Any) -> None:
    server = serve(policy=TokenPolicy({"tok_ok"}))

    async def main() -> None:
        client = _client(server)
        async with client.realtime.connect(model="m") as conn:
            assert (await conn.recv()).type == "session.created"
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "pay me"}],
                }
            )
            await conn.recv()
            await conn.recv()
            await conn.response.create()
            required = json.loads(await conn.recv_bytes())
            assert required["type"] == "payment.required"
            assert required["requirements"]["amount"] == "0.01"

            await conn.send({"type": "payment.submit", "payment": {"token": "tok_bad"}})  # type: ignore[arg-type]
            error = json.loads(await conn.recv_bytes())
            assert error["type"] == "payment.error" and error["can_retry"] is True

            await conn.send({"type": "payment.submit", "payment": {"token": "tok_ok"}})  # type: ignore[arg-type]
            assert json.loads(await conn.recv_bytes())["type"] == "payment.accepted"
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            assert done.response.status == "completed"
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            assert text == "You said: pay me"

    _run(main())


def test_unknown_agent_is_refused(thread_server: Any) -> None:
    server = thread_server(_app())

    async def main() -> None:
        client = _client(server, agent="nobody")
        with pytest.raises(Exception) as info:
            async with client.realtime.connect(model="m") as conn:
                await conn.recv()
        assert "404" in str(info.value)

    _run(main())


# --- calls: the input audio buffer is a voice call (docs/voice.md) --------------------------


async def _wait_for(items: list[Any], n: int) -> None:
    """Until the server thread has put ``n`` things into ``items``."""
    for _ in range(200):
        if len(items) >= n:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"only {len(items)} of {n} arrived")


def test_realtime_audio_is_a_call_from_first_audio_to_close(serve: Any) -> None:
    agent = Switchboard()
    server = serve(agent)
    hello = base64.b64encode(bytes(range(256)) * 4).decode()

    async def main() -> None:
        client = _client(server, agent="switchboard")
        async with client.realtime.connect(model="m") as conn:
            created = await conn.recv()
            assert created.type == "session.created"
            session_id = created.session.id
            # The first audio places the call: the agent's hook takes it.
            await conn.input_audio_buffer.append(audio=hello)
            accept = json.loads(await conn.recv_bytes())
            assert accept["type"] == "voice.accept" and "sdp" not in accept
            first_call = accept["call_id"]
            (offer,) = agent.offers
            assert offer.call_id == first_call and offer.transport == "realtime"
            assert offer.session_id == session_id and offer.sdp is None
            # More audio joins the call; the commit makes it a user message.
            await conn.input_audio_buffer.append(audio=hello)
            await conn.input_audio_buffer.commit()
            assert (await conn.recv()).type == "input_audio_buffer.committed"
            added = await conn.recv()
            assert added.type == "conversation.item.added"
            both = base64.b64decode(hello) * 2
            assert base64.b64decode(added.item.content[0].audio) == both
            assert (await conn.recv()).type == "conversation.item.done"
            # The agent answers the utterance in audio: it echoes what it heard.
            await conn.response.create(response={"output_modalities": ["audio"]})
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            heard = "".join(e.delta for e in seen if e.type == "response.output_audio.delta")
            assert base64.b64decode(heard) == both
            assert done.response.status == "completed"
            # The client ends the call: voice.end with the server's duration.
            await asyncio.sleep(0.05)
            await conn.send({"type": "voice.end", "call_id": first_call})  # type: ignore[arg-type]
            end = json.loads(await conn.recv_bytes())
            assert end["type"] == "voice.end" and end["call_id"] == first_call
            assert end["reason"] == "ended" and end["duration_ms"] >= 50
            await _wait_for(agent.ended, 1)
            assert agent.ended[0].call_id == first_call
            assert agent.ended[0].duration_ms == end["duration_ms"]
            # A second voice.end finds no call; the socket goes on.
            await conn.send({"type": "voice.end"})  # type: ignore[arg-type]
            err = await conn.recv()
            assert err.type == "error" and err.error.code == "invalid_event"
            # New audio places a new call, which the closing socket ends.
            await conn.input_audio_buffer.append(audio=hello)
            second = json.loads(await conn.recv_bytes())
            assert second["type"] == "voice.accept" and second["call_id"] != first_call
        await _wait_for(agent.ended, 2)
        closed = agent.ended[1]
        assert closed.call_id == second["call_id"] and closed.reason == "closed"
        assert closed.duration_ms is not None and closed.duration_ms >= 0

    _run(main())


class _Typist(TestAgent):
    """A text agent that takes no calls: it answers ``typed``."""

    name = "typist"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="typed")))


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        (_Typist(), "agent 'typist' does not take calls"),
        (Switchboard("busy", decline="busy"), "(busy)"),
    ],
    ids=["no-calls", "hook-declines"],
)
def test_audio_to_an_agent_that_takes_no_call_is_refused_and_text_goes_on(
    serve: Any, agent: Responder, reason: str
) -> None:
    server = serve(agent)

    async def main() -> None:
        client = _client(server, agent=agent.name)
        async with client.realtime.connect(model="m") as conn:
            assert (await conn.recv()).type == "session.created"
            pcm = base64.b64encode(b"\x00\x01" * 100).decode()
            for _ in range(2):  # every try is refused the same way
                await conn.send(
                    {"type": "input_audio_buffer.append", "audio": pcm, "event_id": "ev_a"}
                )
                err = await conn.recv()
                assert err.type == "error"
                assert err.error.code == "call_not_active" and err.error.param == "audio"
                assert err.error.event_id == "ev_a" and reason in err.error.message
            # Nothing was buffered...
            await conn.input_audio_buffer.commit()
            err = await conn.recv()
            assert err.type == "error" and err.error.code == "input_audio_buffer_commit_empty"
            # ... and the session keeps working in text.
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}],
                }
            )
            await conn.recv()
            await conn.recv()
            await conn.response.create()
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            assert done.response.status == "completed"
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            assert text == ("typed" if agent.name == "typist" else "You said: hi")

    _run(main())


def test_server_vad_turns_with_the_sdk(serve: Any) -> None:
    """UAMP 8.1 / Realtime ``server_vad``: the server hears the turn end and answers it."""
    from tests.proto.test_audio import silence, voiced

    agent = Switchboard()
    server = serve(agent)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    async def main() -> None:
        client = _client(server, agent="switchboard")
        async with client.realtime.connect(model="m") as conn:
            assert (await conn.recv()).type == "session.created"
            turns = {"type": "server_vad", "silence_duration_ms": 400}
            await conn.session.update(
                session={
                    "type": "realtime",
                    "output_modalities": ["audio"],
                    "audio": {"input": {"turn_detection": turns}},
                }
            )
            updated = await conn.recv()
            assert updated.type == "session.updated"
            assert updated.session.audio.input.turn_detection.type == "server_vad"
            await conn.input_audio_buffer.append(audio=b64(voiced(100)))
            assert json.loads(await conn.recv_bytes())["type"] == "voice.accept"
            for _ in range(5):
                await conn.input_audio_buffer.append(audio=b64(voiced(100)))
            await conn.input_audio_buffer.append(audio=b64(silence(600)))
            seen: list[Any] = []
            done = await _until(conn, "response.done", seen)
            kinds = [e.type for e in seen]
            started = seen[kinds.index("input_audio_buffer.speech_started")]
            stopped = seen[kinds.index("input_audio_buffer.speech_stopped")]
            assert started.item_id == stopped.item_id
            assert 0 <= started.audio_start_ms < stopped.audio_end_ms
            assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
            assert done.response.status == "completed"

    _run(main())


# --- voice, session expiry, payment expiry (UAMP 7.2, 8.1) ---------------------------------


class Voiced(TestAgent):
    """Speaks with two voices; keeps every request (the server runs in another thread)."""

    name = "voiced"
    modalities = ("text", "audio")

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []

    def capabilities(self) -> ty.Capabilities:
        caps = super().capabilities()
        audio = ty.AudioCapabilities(voices=["echo", "sage"], output_formats=["pcm16"])
        return ty.Capabilities(
            id=caps.id, provider=caps.provider, modalities=caps.modalities, audio=audio
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


def test_the_sessions_voice_reaches_the_agent_and_an_undeclared_one_is_refused(
    serve: Any,
) -> None:
    agent = Voiced()
    server = serve(agent)

    async def main() -> None:
        async with _client(server, "voiced").realtime.connect(model="m") as conn:
            created = await conn.recv()
            # "alloy" is not the agent's: the session starts with its first voice.
            assert created.session.audio.output.voice == "echo"
            await conn.session.update(
                session={"type": "realtime", "audio": {"output": {"voice": "sage"}}}
            )
            assert (await conn.recv()).session.audio.output.voice == "sage"
            await conn.session.update(
                session={"type": "realtime", "audio": {"output": {"voice": "marin"}}}
            )
            refused = await conn.recv()
            assert refused.type == "error" and refused.error.code == "unsupported_value"
            assert refused.error.param == "session.audio.output.voice"
            assert "echo, sage" in refused.error.message
            await conn.response.create()
            await _until(conn, "response.done", [])

    _run(main())
    (request,) = agent.requests
    assert request.metadata["voice"] == {"voice_id": "sage"}  # the refused one changed nothing


def test_the_session_expires_when_its_credential_does(thread_server: Any, tmp_path: Any) -> None:
    from tests.trio.trust.issuer import Issuer

    issuer = Issuer()
    app = App([DemoAgent()], authenticator=issuer.authenticator(tmp_path))
    mount_realtime(app)
    server = thread_server(app)
    exp = int(time.time()) + 3600
    token = issuer.token("alice", exp=exp)

    async def main() -> None:
        client = openai.AsyncOpenAI(
            api_key=token, base_url=f"{server.url}/agents/demo", max_retries=0
        )
        async with client.realtime.connect(model="m") as conn:
            created = await conn.recv()
            assert created.type == "session.created"
            assert created.session.model_extra["expires_at"] == exp

    _run(main())


def test_an_unpaid_response_is_dropped_at_the_requirements_expires_at(serve: Any) -> None:
    server = serve(policy=TokenPolicy({"tok_ok"}), payment_wait=1.0)

    async def main() -> None:
        async with _client(server).realtime.connect(model="m") as conn:
            assert (await conn.recv()).type == "session.created"
            before = time.time()
            await conn.send({"type": "response.create", "event_id": "evt_ask"})
            required = json.loads(await conn.recv_bytes())
            assert required["type"] == "payment.required"
            expires_at = required["requirements"]["expires_at"]
            # now + payment_wait, rounded up to a whole second (UAMP 7.2's epoch seconds)
            assert isinstance(expires_at, int) and before < expires_at <= math.ceil(time.time()) + 1
            dropped = await conn.recv()  # nothing paid: the held response is dropped
            assert dropped.type == "error" and dropped.error.code == "payment_required"
            assert dropped.error.event_id == "evt_ask"
            # Its place is free: paying now and asking again runs a response.
            await conn.send({"type": "payment.submit", "payment": {"token": "tok_ok"}})  # type: ignore[arg-type]
            assert json.loads(await conn.recv_bytes())["type"] == "payment.accepted"
            await conn.response.create()
            done = await _until(conn, "response.done", [])
            assert done.response.status == "completed"

    _run(main())
