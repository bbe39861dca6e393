"""Voice settings (UAMP 8.1, 8.2) honoured or refused, over a real UAMP WebSocket with raw JSON.

``turn_detection: server_vad`` ends a caller's turn where WebRTC's detector
hears a pause as long as ``silence_duration_ms``; G.711 audio is converted to
pcm16 for the agent and the agent's pcm16 back to G.711; ``voice`` reaches the
agent; what neither the server nor the agent can do is refused at
``session.create`` with ``session.error`` ``unsupported`` naming the field.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.wire import recv, send, until
from tests.proto.test_audio import silence, voiced
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.audio import from_pcm16
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.transports import uamp_ws

TIMEOUT = 15


class Speaker(TestAgent):
    """Takes calls, speaks with two voices; answers each turn with 0.1 s of pcm16."""

    name = "speaker"
    modalities = ("text", "audio")

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []

    def capabilities(self) -> ty.Capabilities:
        caps = super().capabilities()
        audio = ty.AudioCapabilities(
            supports_realtime=True, voices=["alloy", "echo"], output_formats=["pcm16"]
        )
        return ty.Capabilities(
            id=caps.id, provider=caps.provider, modalities=caps.modalities, audio=audio
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        reply = base64.b64encode(voiced(100)).decode()
        await emit(ev.AudioDelta(audio=reply))
        await emit(ev.AudioDone())


class Writer(TestAgent):
    """Text only."""

    name = "writer"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


def _app() -> App:
    app = App([Speaker(), Writer()])
    app.mount(uamp_ws.mount)
    return app


def _ulaw(pcm: bytes) -> str:
    return base64.b64encode(from_pcm16(pcm, "g711_ulaw")).decode()


async def test_server_vad_g711_and_voice_in_a_call() -> None:
    app = _app()
    speaker = app.agents["speaker"]
    settings = {
        "modalities": ["audio", "text"],
        "input_audio_format": "g711_ulaw",
        "output_audio_format": "g711_ulaw",
        "voice": {"provider": "uamp", "voice_id": "echo"},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 400},
    }
    async with wire.serving(app) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/speaker/uamp") as ws:
                await send(ws, type="session.create", uamp_version="1.0", session=settings)
                created = await recv(ws)
                assert created["type"] == "session.created", created
                assert (await recv(ws))["type"] == "capabilities"
                await send(ws, type="voice.invite", call_id="call_1")
                assert (await recv(ws))["type"] == "voice.accept"
                # The caller speaks 0.6 s, then pauses: no is_final, the server hears the end.
                for _ in range(6):
                    await send(ws, type="input.audio", audio=_ulaw(voiced(100)), format="g711_ulaw")
                await send(ws, type="input.audio", audio=_ulaw(silence(200)), format="g711_ulaw")
                with trio.move_on_after(0.3):  # 200 ms of silence is not a turn yet
                    assert (await recv(ws))["type"] is None  # pragma: no cover
                await send(ws, type="input.audio", audio=_ulaw(silence(400)), format="g711_ulaw")
                events = await until(ws, "response.done")
    assert events[0]["type"] == "response.created"
    spoken = [base64.b64decode(e["audio"]) for e in events if e["type"] == "audio.delta"]
    # The agent's 0.1 s of pcm16 (4,800 bytes at 24 kHz) reaches the caller as µ-law.
    assert [len(s) for s in spoken] == [2400]
    (request,) = speaker.requests  # type: ignore[attr-defined]
    assert request.metadata["voice"] == {"provider": "uamp", "voice_id": "echo"}
    heard = [
        i for m in request.messages for i in m.content_items or () if isinstance(i, ty.AudioContent)
    ]
    assert {i.format for i in heard} == {"pcm16"}
    # Every byte the caller sent, as pcm16: two bytes a sample.
    total = sum(len(base64.b64decode(i.audio)) for i in heard if isinstance(i.audio, str))
    assert total == 2 * (6 * 2400 + 4800 + 9600)


@pytest.mark.parametrize(
    ("agent", "session", "field"),
    [
        ("speaker", {"input_audio_format": "mp3"}, "session.input_audio_format"),
        ("speaker", {"output_audio_format": "opus"}, "session.output_audio_format"),
        ("speaker", {"turn_detection": {"type": "semantic_vad"}}, "session.turn_detection"),
        (
            "speaker",
            {"turn_detection": {"type": "server_vad", "threshold": 7}},
            "session.turn_detection",
        ),
        ("speaker", {"voice": {"voice_id": "nova"}}, "session.voice"),
        ("writer", {"voice": {"voice_id": "alloy"}}, "session.voice"),
    ],
)
async def test_what_cannot_be_honoured_is_refused_at_session_create(
    agent: str, session: dict[str, Any], field: str
) -> None:
    async with wire.serving(_app()) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/ws") as ws:
                config = {"modalities": ["audio", "text"], **session}
                await send(
                    ws, type="session.create", uamp_version="1.0", agent=agent, session=config
                )
                refused = await recv(ws)
                assert refused["type"] == "session.error", refused
                assert refused["error"]["code"] == "unsupported"
                assert refused["error"]["details"] == {"field": field}
                # Nothing was created; the connection serves a session that asks for less.
                await wire.create_session(ws, agent=agent)


async def test_realtime_server_vad_announces_speech_and_answers_the_turn() -> None:
    from uamp_trio.transports import realtime

    app = App([Speaker()])
    realtime.mount(app)
    speaker = app.agents["speaker"]
    turns = {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 400}
    update = {
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {
            "input": {"format": {"type": "audio/pcmu"}, "turn_detection": turns},
            "output": {"format": {"type": "audio/pcmu"}},
        },
    }
    async with wire.serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/speaker/realtime?model=x"
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                assert (await recv(ws))["type"] == "session.created"
                await send(ws, type="session.update", session=update)
                updated = await recv(ws)
                assert updated["type"] == "session.updated", updated
                reported = updated["session"]["audio"]["input"]["turn_detection"]
                assert reported["type"] == "server_vad"
                assert reported["silence_duration_ms"] == 400 and reported["create_response"]
                for _ in range(6):
                    await send(ws, type="input_audio_buffer.append", audio=_ulaw(voiced(100)))
                await send(ws, type="input_audio_buffer.append", audio=_ulaw(silence(600)))
                events = await until(ws, "response.done")
    kinds = [e["type"] for e in events]
    started = kinds.index("input_audio_buffer.speech_started")
    stopped = kinds.index("input_audio_buffer.speech_stopped")
    committed = kinds.index("input_audio_buffer.committed")
    assert started < stopped < committed < kinds.index("response.created")
    item = events[committed]["item_id"]
    assert events[started]["item_id"] == events[stopped]["item_id"] == item
    assert events[started]["audio_start_ms"] < events[stopped]["audio_end_ms"] <= 700
    (request,) = speaker.requests  # type: ignore[attr-defined]
    heard = [
        i for m in request.messages for i in m.content_items or () if isinstance(i, ty.AudioContent)
    ]
    # G.711 in: the agent hears pcm16, two bytes for each µ-law byte the client sent.
    assert [i.format for i in heard] == ["pcm16"]
    assert len(base64.b64decode(heard[0].audio)) == 2 * (6 * 2400 + 4800 * 3)  # type: ignore[arg-type]
    # pcm16 out: the client asked for µ-law and gets it (0.1 s: 2,400 bytes).
    spoken = [e["delta"] for e in events if e["type"] == "response.output_audio.delta"]
    assert [len(base64.b64decode(s)) for s in spoken] == [2400]


async def test_realtime_refuses_a_turn_detection_it_cannot_run() -> None:
    from uamp_trio.transports import realtime

    app = App([Speaker()])
    realtime.mount(app)
    async with wire.serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/speaker/realtime?model=x"
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                assert (await recv(ws))["type"] == "session.created"
                bad = {
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}},
                }
                await send(ws, type="session.update", session=bad)
                error = await recv(ws)
                assert error["type"] == "error"
                assert error["error"]["code"] == "unsupported_value"
                assert error["error"]["param"] == "session.audio.input.turn_detection.type"
