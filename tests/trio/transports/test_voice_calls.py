"""Voice calls over a real UAMP WebSocket (UAMP 5.16, 7.3; docs/voice.md).

The demo agent takes calls and echoes what it hears; an agent that does not
take calls declines them; audio after a declined or ended call is refused
with ``call_not_active``, saying why.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import Switchboard, TestAgent
from tests._support.wire import recv, send, until
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio import App, DemoAgent
from uamp_trio.demo import AUDIO_CHUNK, TONE_RATE
from uamp_trio.transports import uamp_ws

TIMEOUT = 15


@asynccontextmanager
async def _call_session(agent: Responder) -> AsyncIterator[WebSocketConnection]:
    """A UAMP WebSocket session with ``agent`` served over a real socket."""
    app = App([agent])
    app.mount(uamp_ws.mount)
    async with (
        wire.serving(app) as server,
        open_ws(f"ws://127.0.0.1:{server.port}/agents/{agent.name}/uamp") as ws,
    ):
        await wire.create_session(ws)
        yield ws


class Silent(TestAgent):
    """A text-only agent that takes no calls."""

    name = "silent"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        return


def _pcm(n: int) -> str:
    return base64.b64encode(bytes((i * 7) % 256 for i in range(n))).decode()


async def test_a_call_is_accepted_echoed_and_ended() -> None:
    spoken = [_pcm(6000), _pcm(9000)]
    with trio.fail_after(TIMEOUT):
        app = App([DemoAgent()])
        app.mount(uamp_ws.mount)
        async with (
            wire.serving(app) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws,
        ):
            sid = await wire.create_session(ws)
            await send(ws, type="voice.invite", call_id="call_1", sdp="v=0 offer")
            accept = await recv(ws)
            assert (accept["type"], accept["call_id"], accept["session_id"]) == (
                "voice.accept",
                "call_1",
                sid,
            )
            assert "sdp" not in accept  # audio flows in-band, not over WebRTC
            await send(ws, type="input.audio", audio=spoken[0], format="pcm16")
            await send(ws, type="input.audio", audio=spoken[1], format="pcm16", is_final=True)
            events = await until(ws, "response.done")
            kinds = [e["type"] for e in events]
            assert kinds[0] == "response.created"
            echoed = [e["audio"] for e in events if e["type"] == "audio.delta"]
            # The agent's echo: the same audio, in chunks, in order.
            assert "".join(echoed) == "".join(spoken)
            assert all(len(chunk) <= AUDIO_CHUNK for chunk in echoed)
            assert kinds.index("audio.done") > kinds.index("audio.delta")
            assert wire.texts(events) == "Hello! Send me a message. (with 2 attachments)"
            await send(ws, type="voice.end", call_id="call_1", duration_ms=1234)
            await send(ws, type="input.audio", audio=spoken[0], format="pcm16")
            refused = await recv(ws)
            assert refused["type"] == "session.error"
            assert refused["error"]["code"] == "call_not_active"
            assert "has ended" in refused["error"]["message"]
            # A new call works again.
            await send(ws, type="voice.invite")
            again = await recv(ws)
            assert again["type"] == "voice.accept" and again["call_id"].startswith("call_")


async def test_silence_is_answered_with_a_tone() -> None:
    with trio.fail_after(TIMEOUT):
        async with _call_session(DemoAgent()) as ws:
            await send(ws, type="voice.invite")
            assert (await recv(ws))["type"] == "voice.accept"
            silence = base64.b64encode(bytes(4800)).decode()
            await send(ws, type="input.audio", audio=silence, format="pcm16", is_final=True)
            events = await until(ws, "response.done")
            audio = base64.b64decode(
                "".join(e["audio"] for e in events if e["type"] == "audio.delta")
            )
            assert len(audio) == 2 * int(TONE_RATE * 0.2) and any(audio)


async def test_an_agent_that_takes_no_calls_declines_and_audio_is_refused() -> None:
    with trio.fail_after(TIMEOUT):
        async with _call_session(Silent()) as ws:
            await send(ws, type="voice.accept")  # nothing to accept
            wrong = await recv(ws)
            assert (wrong["type"], wrong["error"]["code"]) == ("session.error", "invalid_event")
            await send(ws, type="voice.invite", call_id="c")
            decline = await recv(ws)
            assert decline["type"] == "voice.decline" and decline["call_id"] == "c"
            assert "does not take calls" in decline["reason"]
            await send(ws, type="input.audio", audio=_pcm(30), format="pcm16", is_final=True)
            refused = await recv(ws)
            assert refused["error"]["code"] == "call_not_active"
            assert "declined" in refused["error"]["message"]
            # The session goes on for text.
            await wire.ask(ws, "still there?")
            assert (await until(ws, "response.done"))[-1]["type"] == "response.done"


async def test_two_people_in_a_room_call_each_other() -> None:
    from tests.trio.transports.test_chat_rooms import alice_and_bob

    spoken = _pcm(3000)
    with trio.fail_after(TIMEOUT):
        async with alice_and_bob() as (_, a, alice, b, bob):
            await send(a.ws, type="voice.invite", session_id=alice, to="bob", sdp="v=0 offer")
            ring = await _next(b, bob, "voice.invite")
            assert (ring["from"], ring["chat_id"], ring["sdp"]) == ("alice", "room", "v=0 offer")
            call_id = ring["call_id"]
            await send(b.ws, type="voice.accept", session_id=bob, call_id=call_id, sdp="v=0 answer")
            accepted = await _next(a, alice, "voice.accept")
            assert (accepted["call_id"], accepted["sdp"]) == (call_id, "v=0 answer")
            # Alice speaks: Bob hears it as audio.delta, and no agent answers.
            await send(
                a.ws,
                type="input.audio",
                session_id=alice,
                audio=spoken,
                format="pcm16",
                is_final=True,
            )
            heard = await _next(b, bob, "audio.delta")
            assert (heard["audio"], heard["from"], heard["call_id"]) == (spoken, "alice", call_id)
            await send(b.ws, type="voice.end", session_id=bob, call_id=call_id, duration_ms=900)
            ended = await _next(a, alice, "voice.end")
            assert ended["duration_ms"] == 900
            await send(a.ws, type="input.audio", session_id=alice, audio=spoken, format="pcm16")
            assert (await _next(a, alice, "session.error"))["error"]["code"] == "call_not_active"
            # Nobody by that name: declined at once.
            await send(a.ws, type="voice.invite", session_id=alice, to="zed")
            declined = await _next(a, alice, "voice.decline")
            assert "not in chat" in declined["reason"]


async def _next(reader: Any, sid: str, etype: str) -> dict[str, Any]:
    """The next event of ``etype`` for ``sid`` (room and voice events in between are skipped)."""
    while True:
        event = await reader.take_any(sid)
        if event["type"] == etype:
            return event  # type: ignore[no-any-return]


async def test_the_default_serve_agent_takes_calls_and_keeps_its_text_answers() -> None:
    from uamp_trio.cli import default_agent

    spoken = _pcm(3000)
    with trio.fail_after(TIMEOUT):
        async with _call_session(default_agent()) as ws:
            await send(ws, type="voice.invite", call_id="call_d")
            assert (await recv(ws))["type"] == "voice.accept"
            await send(ws, type="input.audio", audio=spoken, format="pcm16", is_final=True)
            events = await until(ws, "response.done")
            assert "".join(e["audio"] for e in events if e["type"] == "audio.delta") == spoken
            assert events[-1]["response"]["status"] == "completed"
            await send(ws, type="voice.end", call_id="call_d", duration_ms=10)
            await send(ws, type="input.text", text="what is 2+3?")
            await send(ws, type="response.create")
            answer = await until(ws, "response.done")
            said = "".join(
                e["delta"].get("text", "") for e in answer if e["type"] == "response.delta"
            )
            assert "2 + 3 = 5" in said
            assert not [e for e in answer if e["type"] == "audio.delta"]


async def _ended(agent: Switchboard, n: int) -> None:
    """Until ``agent`` was told of ``n`` ended calls."""
    while len(agent.ended) < n:
        await trio.sleep(0.01)


async def test_an_agents_call_hook_answers_an_sdp_offer_and_learns_each_end() -> None:
    agent = Switchboard()
    spoken = _pcm(3000)
    with trio.fail_after(TIMEOUT):
        async with _call_session(agent) as ws:
            # An SDP offer gets the agent's SDP answer in voice.accept.
            await send(ws, type="voice.invite", call_id="call_s", sdp="v=0 offer")
            accept = await recv(ws)
            assert (accept["type"], accept["call_id"]) == ("voice.accept", "call_s")
            assert accept["sdp"] == Switchboard.SDP
            (offer,) = agent.offers
            assert (offer.call_id, offer.sdp) == ("call_s", "v=0 offer")
            assert offer.transport == "uamp-websocket"
            assert offer.session_id == accept["session_id"]
            # The call works as any other: the agent echoes the utterance.
            await send(ws, type="input.audio", audio=spoken, format="pcm16", is_final=True)
            events = await until(ws, "response.done")
            assert "".join(e["audio"] for e in events if e["type"] == "audio.delta") == spoken
            await trio.sleep(0.05)
            await send(ws, type="voice.end", call_id="call_s", duration_ms=10)
            await _ended(agent, 1)
            first = agent.ended[0]
            assert (first.call_id, first.reason) == ("call_s", "ended")
            assert first.duration_ms is not None and first.duration_ms >= 50  # the server's clock
            # No offer, no SDP answer: audio stays in-band.
            await send(ws, type="voice.invite")
            plain = await recv(ws)
            assert plain["type"] == "voice.accept" and "sdp" not in plain
            # The connection closes mid-call: the agent learns that too.
        await _ended(agent, 2)
        assert (agent.ended[1].call_id, agent.ended[1].reason) == (plain["call_id"], "closed")


async def test_an_agents_call_hook_may_decline() -> None:
    agent = Switchboard(decline="in a meeting")
    with trio.fail_after(TIMEOUT):
        async with _call_session(agent) as ws:
            await send(ws, type="voice.invite", call_id="call_m", sdp="v=0 offer")
            decline = await recv(ws)
            assert (decline["type"], decline["call_id"]) == ("voice.decline", "call_m")
            assert decline["reason"] == "in a meeting"
            await send(ws, type="input.audio", audio=_pcm(30), format="pcm16")
            refused = await recv(ws)
            assert refused["error"]["code"] == "call_not_active"
            assert "in a meeting" in refused["error"]["message"]
            await wire.ask(ws, "hello")
            assert wire.texts(await until(ws, "response.done")) == "You said: hello"
        assert agent.ended == []  # a declined call never ran
