"""Capabilities discovery on the Realtime transport (UAMP 9.2: session.created)."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio_websocket

from tests._support.agents import TestAgent
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import App
from uamp_trio.transports.realtime import mount


class VoiceAgent(TestAgent):
    name = "voice"
    provider = "t"
    modalities = ("text", "audio")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        return None


async def test_session_created_carries_the_agents_capabilities(serve_app: Any) -> None:
    app = App([VoiceAgent()])
    mount(app)
    server = await serve_app(app)
    url = f"ws://127.0.0.1:{server.port}/agents/voice/realtime?model=x"
    with trio.fail_after(10):
        async with trio_websocket.open_websocket_url(url) as ws:
            created = json.loads(await ws.get_message())
    assert created["type"] == "session.created"
    caps = created["capabilities"]
    assert caps == {"id": "voice", "provider": "t", "modalities": ["text", "audio"]}
    assert ty.Capabilities(**caps).modalities == ["text", "audio"]
