"""Voice calls over uamp_asgi's UAMP WebSocket (UAMP 5.16, 7.3, 8.1; docs/voice.md), as uamp serve.

uvicorn serves the ASGI app; uamp's own client places the calls
(``voice.invite`` through :meth:`ClientSession.send`, the answers from
:meth:`ClientSession.room_events`) and reads the responses a call's turns
start (a :class:`ResponseStream` whose opening events are the caller's audio).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest
import trio

import uamp_asgi
from tests._support.agents import Switchboard, TestAgent
from tests._support.asgi import uvicorn_server
from tests.proto.test_audio import silence, voiced
from tests.trio.transports.test_voice_settings import Speaker
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.audio import from_pcm16
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.client import ClientError, connect, connect_sse
from uamp_trio.client.uamp import ClientSession, ResponseStream, UampClient
from uamp_trio.demo import AUDIO_CHUNK, DemoAgent

TIMEOUT = 30


class Silent(TestAgent):
    """A text-only agent that takes no calls."""

    name = "silent"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="still here")))


SWITCHBOARD = Switchboard()
DECLINER = Switchboard("decliner", decline="in a meeting")
SPEAKER = Speaker()


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    agents = [DemoAgent(), Silent(), SWITCHBOARD, DECLINER, SPEAKER]
    with uvicorn_server(uamp_asgi.app(agents)) as url:
        yield url.replace("http://", "ws://")


def _pcm(n: int) -> str:
    return base64.b64encode(bytes((i * 7) % 256 for i in range(n))).decode()


async def _answer(session: ClientSession) -> ev.Event:
    """The next voice event the server sent the session."""
    async for event in session.room_events():
        return event
    raise AssertionError("the session ended")


async def _turn(session: ClientSession, chunks: Sequence[ev.Event]) -> list[ev.Event]:
    """Send the caller's audio; the events of the response the server starts for it."""
    return [e async for e in ResponseStream(session, list(chunks))]


async def _raw(client: UampClient, session: ClientSession, **event: Any) -> None:
    """Send ``event`` past the client's own checks (which refuse what the server must)."""
    await client.send_raw(orjson.dumps({**event, "session_id": session.id}))


async def _refusal(session: ClientSession, errors: int) -> ev.SessionErrorEvent:
    """The session's ``errors + 1`` th ``session.error``."""
    while len(session.errors) <= errors:
        await trio.sleep(0.01)
    return session.errors[errors]


def _audio(events: list[ev.Event]) -> str:
    return "".join(e.audio for e in events if isinstance(e, ev.AudioDelta))


async def test_a_call_is_accepted_its_turns_answered_and_ended(base: str) -> None:
    spoken = [_pcm(6000), _pcm(9000)]
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/demo/uamp") as client:
            session = await client.create_session()
            await session.send(ev.VoiceInvite(call_id="call_1", sdp="v=0 offer"))
            accept = await _answer(session)
            assert isinstance(accept, ev.VoiceAccept)
            assert (accept.call_id, accept.session_id, accept.sdp) == ("call_1", session.id, None)
            chunks = [
                ev.InputAudio(audio=spoken[0], format="pcm16"),
                ev.InputAudio(audio=spoken[1], format="pcm16", is_final=True),
            ]
            events = await _turn(session, chunks)
            kinds = [e.type for e in events]
            assert kinds[0] == "response.created" and kinds[-1] == "response.done"
            # The demo agent echoes the utterance, in chunks, in order.
            assert _audio(events) == "".join(spoken)
            assert all(len(e.audio) <= AUDIO_CHUNK for e in events if isinstance(e, ev.AudioDelta))
            assert kinds.index("audio.done") > kinds.index("audio.delta")
            await session.send(ev.VoiceEnd(call_id="call_1", duration_ms=1234))
            await _raw(client, session, type="input.audio", audio=spoken[0], format="pcm16")
            refused = await _refusal(session, 0)
            assert refused.error.code == "call_not_active"
            assert "has ended" in refused.error.message
            # A new call works again, with an id the server made.
            await session.send(ev.VoiceInvite())
            again = await _answer(session)
            assert isinstance(again, ev.VoiceAccept)
            assert again.call_id is not None and again.call_id.startswith("call_")


async def test_an_agent_that_takes_no_calls_declines_and_text_goes_on(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/ws") as client:
            session = await client.create_session("silent")
            await _raw(client, session, type="voice.accept")  # nothing rings
            wrong = await _refusal(session, 0)
            assert wrong.error.code == "invalid_event"
            await session.send(ev.VoiceInvite(call_id="c"))
            decline = await _answer(session)
            assert isinstance(decline, ev.VoiceDecline) and decline.call_id == "c"
            assert decline.reason is not None and "does not take calls" in decline.reason
            await _raw(
                client, session, type="input.audio", audio=_pcm(30), format="pcm16", is_final=True
            )
            refused = await _refusal(session, 1)
            assert refused.error.code == "call_not_active", session.errors
            assert "declined" in refused.error.message
            assert (await session.ask("still there?")).text == "still here"


async def _told(agent: Switchboard, n: int) -> None:
    """Until ``agent`` was told of ``n`` ended calls (it runs in uvicorn's thread)."""
    while len(agent.ended) < n:
        await trio.sleep(0.01)


async def test_an_agents_call_hook_answers_an_sdp_offer_and_learns_each_end(base: str) -> None:
    agent = SWITCHBOARD
    spoken = _pcm(3000)
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/switchboard/uamp") as client:
            session = await client.create_session()
            await session.send(ev.VoiceInvite(call_id="call_s", sdp="v=0 offer"))
            accept = await _answer(session)
            assert isinstance(accept, ev.VoiceAccept) and accept.call_id == "call_s"
            assert accept.sdp == Switchboard.SDP
            (offer,) = agent.offers
            assert (offer.call_id, offer.sdp, offer.transport) == (
                "call_s",
                "v=0 offer",
                "uamp-websocket",
            )
            assert offer.session_id == session.id
            events = await _turn(
                session, [ev.InputAudio(audio=spoken, format="pcm16", is_final=True)]
            )
            assert _audio(events) == spoken
            await trio.sleep(0.05)
            await session.send(ev.VoiceEnd(call_id="call_s"))
            await _told(agent, 1)
            first = agent.ended[0]
            assert (first.call_id, first.reason, first.session_id) == (
                "call_s",
                "ended",
                session.id,
            )
            assert first.duration_ms is not None and first.duration_ms >= 50  # the server's clock
            await session.send(ev.VoiceInvite())  # no offer: no SDP answer, audio in-band
            plain = await _answer(session)
            assert isinstance(plain, ev.VoiceAccept) and plain.sdp is None
            # The connection closes mid-call: the agent learns that too.
        await _told(agent, 2)
    assert (agent.ended[1].call_id, agent.ended[1].reason) == (plain.call_id, "closed")


async def test_a_hook_may_decline_and_a_declined_call_never_ends(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/decliner/uamp") as client:
            session = await client.create_session()
            await session.send(ev.VoiceInvite(call_id="call_m", sdp="v=0 offer"))
            decline = await _answer(session)
            assert isinstance(decline, ev.VoiceDecline)
            assert (decline.call_id, decline.reason) == ("call_m", "in a meeting")
            await _raw(client, session, type="input.audio", audio=_pcm(30), format="pcm16")
            refused = await _refusal(session, 0)
            assert refused.error.code == "call_not_active"
            assert "in a meeting" in refused.error.message
            await session.end()
    await trio.sleep(0.1)
    assert DECLINER.ended == []


def _ulaw(pcm: bytes) -> str:
    return base64.b64encode(from_pcm16(pcm, "g711_ulaw")).decode()


async def test_server_vad_g711_and_the_voice_in_a_call(base: str) -> None:
    config = ty.SessionConfig(
        modalities=["audio", "text"],
        input_audio_format="g711_ulaw",
        output_audio_format="g711_ulaw",
        voice={"provider": "uamp", "voice_id": "echo"},
        turn_detection={"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 400},
    )
    SPEAKER.requests.clear()
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/speaker/uamp") as client:
            session = await client.create_session(config=config)
            await session.send(ev.VoiceInvite(call_id="call_v"))
            assert isinstance(await _answer(session), ev.VoiceAccept)
            # 0.6 s of speech, then a pause: no is_final, the server hears the turn end.
            chunks: list[ev.Event] = [
                ev.InputAudio(audio=_ulaw(voiced(100)), format="g711_ulaw") for _ in range(6)
            ]
            chunks.append(ev.InputAudio(audio=_ulaw(silence(600)), format="g711_ulaw"))
            events = await _turn(session, chunks)
    assert events[0].type == "response.created" and events[-1].type == "response.done"
    spoken = [base64.b64decode(e.audio) for e in events if isinstance(e, ev.AudioDelta)]
    # The agent's 0.1 s of pcm16 (4,800 bytes at 24 kHz) reaches the caller as µ-law.
    assert [len(s) for s in spoken] == [2400]
    (request,) = SPEAKER.requests
    assert request.modalities == ["audio", "text"]
    assert request.metadata["voice"] == {"provider": "uamp", "voice_id": "echo"}
    assert request.metadata["transport"] == "uamp-websocket"
    heard = [
        i for m in request.messages for i in m.content_items or () if isinstance(i, ty.AudioContent)
    ]
    assert {i.format for i in heard} == {"pcm16"}
    total = sum(len(base64.b64decode(i.audio)) for i in heard if isinstance(i.audio, str))
    assert total == 2 * (6 * 2400 + 14400)  # every byte the caller sent, as pcm16


@pytest.mark.parametrize(
    ("agent", "session", "field"),
    [
        ("speaker", {"input_audio_format": "mp3"}, "session.input_audio_format"),
        ("speaker", {"output_audio_format": "opus"}, "session.output_audio_format"),
        ("speaker", {"turn_detection": {"type": "semantic_vad"}}, "session.turn_detection"),
        ("speaker", {"voice": {"voice_id": "nova"}}, "session.voice"),
        ("silent", {"voice": {"voice_id": "alloy"}}, "session.voice"),
    ],
)
async def test_what_cannot_be_honoured_is_refused_at_session_create(
    base: str, agent: str, session: dict[str, Any], field: str
) -> None:
    from uamp_proto.codec import from_dict

    config = from_dict(ty.SessionConfig, {"modalities": ["audio", "text"], **session})
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/ws") as client:
            with pytest.raises(ClientError) as refused:
                await client.create_session(agent, config=config)
            assert refused.value.code == "unsupported"
            event = refused.value.event
            assert isinstance(event, ev.SessionErrorEvent)
            assert event.error.details == {"field": field}
            # Nothing was created; the connection serves a session that asks for less.
            assert (await client.create_session(agent)).id


async def test_a_call_over_http_sse_is_answered_the_same_way(base: str) -> None:
    """HTTP+SSE sessions are the same Connection: a call, its turn, its end."""
    spoken = _pcm(3000)
    SWITCHBOARD.ended.clear()
    with trio.fail_after(TIMEOUT):
        async with connect_sse(base.replace("ws://", "http://")) as client:
            session = await client.create_session(agent="switchboard")
            await session.send(ev.VoiceInvite(call_id="call_h"))
            accept = await _answer(session)
            assert isinstance(accept, ev.VoiceAccept) and accept.call_id == "call_h"
            assert SWITCHBOARD.offers[-1].transport == "uamp-sse"
            events = await _turn(
                session, [ev.InputAudio(audio=spoken, format="pcm16", is_final=True)]
            )
            assert _audio(events) == spoken
            await session.send(ev.VoiceEnd(call_id="call_h"))
            await _told(SWITCHBOARD, 1)
    assert (SWITCHBOARD.ended[0].call_id, SWITCHBOARD.ended[0].reason) == ("call_h", "ended")
