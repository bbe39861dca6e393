"""The Realtime endpoint over a real WebSocket on 127.0.0.1: cancel, concurrency, audio out."""

from __future__ import annotations

from typing import Any

import trio
import trio_websocket

from tests._support.agents import TestAgent
from tests._support.wire import recv, send, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import App
from uamp_trio.transports.realtime import mount

TIMEOUT = 10


class SlowAgent(TestAgent):
    name = "slow"
    provider = "t"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="part")))
        await trio.sleep(30)


class VoiceAgent(TestAgent):
    name = "voice"
    provider = "t"
    modalities = ("text", "audio")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.AudioDelta(audio="AAECAw=="))
        await emit(ev.TranscriptDelta(transcript="hi"))
        await emit(ev.UsageDelta(delta=ty.UsageStats(input_tokens=1, output_tokens=1)))


def make_app() -> App:
    app = App([SlowAgent(), VoiceAgent()])
    mount(app)
    return app


async def test_cancel_and_single_active_response(serve_app: Any) -> None:
    server = await serve_app(make_app())
    url = f"ws://127.0.0.1:{server.port}/agents/slow/realtime?model=x"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            assert (await recv(ws))["type"] == "session.created"
            await send(ws, type="response.cancel")
            err = await recv(ws)
            assert err["error"]["code"] == "response_cancel_not_active"

            await send(ws, type="response.create")
            seen = await until(ws, "response.output_text.delta")
            response_id = seen[0]["response"]["id"]
            # A second response.create that asks for reject (docs/busy.md) is refused.
            await send(
                ws,
                type="response.create",
                event_id="c2",
                response={"metadata": {"uamp.on_busy": "reject"}},
            )
            busy = await recv(ws)
            assert busy["error"]["code"] == "conversation_already_has_active_response"
            assert busy["error"]["event_id"] == "c2"
            await send(ws, type="response.cancel", response_id="resp_other")
            assert (await recv(ws))["error"]["code"] == "response_cancel_not_active"

            await send(ws, type="response.cancel", response_id=response_id)
            seen = await until(ws, "response.done")
            done = seen[-1]["response"]
            assert done["status"] == "cancelled"
            assert done["status_details"]["reason"] == "client_cancelled"
            assert done["output"][0]["status"] == "incomplete"
            assert done["output"][0]["content"][0]["text"] == "part"

            # The socket survives: invalid JSON gets an error, a new response starts.
            await ws.send_message("{oops")
            assert (await recv(ws))["error"]["code"] == "invalid_json"
            await send(ws, type="response.create")
            assert (await recv(ws))["type"] == "response.created"


async def test_audio_output_parts(serve_app: Any) -> None:
    server = await serve_app(make_app())
    url = f"ws://127.0.0.1:{server.port}/agents/voice/realtime"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            created = await recv(ws)
            assert created["session"]["output_modalities"] == ["audio"]
            await send(ws, type="response.create")
            seen = await until(ws, "response.done")
            kinds = [e["type"] for e in seen]
            assert "response.output_audio.delta" in kinds
            audio = next(e for e in seen if e["type"] == "response.output_audio.delta")
            assert audio["delta"] == "AAECAw=="
            transcript = next(
                e for e in seen if e["type"] == "response.output_audio_transcript.done"
            )
            assert transcript["transcript"] == "hi"
            assert seen[-1]["response"]["output"][0]["content"] == [
                {"type": "output_audio", "transcript": "hi"}
            ]
            assert seen[-1]["response"]["usage"]["total_tokens"] == 2


async def test_unknown_agent_rejected_and_root_paths(serve_app: Any) -> None:
    server = await serve_app(make_app())
    with trio.fail_after(TIMEOUT):
        try:
            async with trio_websocket.open_websocket_url(
                f"ws://127.0.0.1:{server.port}/agents/ghost/realtime"
            ):
                raise AssertionError("should be rejected")
        except trio_websocket.ConnectionRejected as exc:
            assert exc.status_code == 404
        # At the root, ?model= picks the agent when several are hosted.
        async with trio_websocket.open_websocket_url(
            f"ws://127.0.0.1:{server.port}/v1/realtime?model=voice"
        ) as ws:
            assert (await recv(ws))["session"]["model"] == "voice"
