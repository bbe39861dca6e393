"""The voice call lifecycle (UAMP 5.16, 7.3): the table, durations and audio refusals."""

from __future__ import annotations

import pytest

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.calls import audio_turn
from uamp_proto.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from uamp_proto.voice import CALL_TRANSITIONS, Call, CallState, takes_calls

from .pair import Pair

VOICE = ("voice.invite", "voice.accept", "voice.decline", "voice.end")


def _at(state: CallState) -> Call:
    call = Call()
    path = {
        CallState.IDLE: [],
        CallState.RINGING: ["voice.invite"],
        CallState.ACTIVE: ["voice.invite", "voice.accept"],
    }[state]
    for etype in path:
        call.apply(etype, 0.0, call_id="c1")
    return call


@pytest.mark.parametrize("state", list(CallState))
@pytest.mark.parametrize("etype", VOICE)
def test_every_move_of_the_call_table(state: CallState, etype: str) -> None:
    call = _at(state)
    after = CALL_TRANSITIONS[state].get(etype)
    if after is None:
        with pytest.raises(ProtocolError) as err:
            call.apply(etype, 1.0, call_id="c1")
        assert err.value.code == "invalid_event"
        assert call.state is state
    else:
        call.apply(etype, 1.0, call_id="c1")
        assert call.state is after


def test_duration_runs_from_accept_to_end() -> None:
    call = Call()
    call.apply("voice.invite", 10.0)
    call.apply("voice.accept", 12.0)
    assert call.apply("voice.end", 13.5) == pytest.approx(1500.0)
    ringing = Call()
    ringing.apply("voice.invite", 0.0)
    assert ringing.apply("voice.end", 5.0) is None  # never answered: no duration


def test_another_calls_id_is_refused() -> None:
    call = _at(CallState.RINGING)
    with pytest.raises(ProtocolError) as err:
        call.apply("voice.accept", 1.0, call_id="other")
    assert err.value.code == "unknown_call"


AUDIO_TABLE = [
    ([], None),
    (["voice.invite"], "not been accepted"),
    (["voice.invite", "voice.accept"], None),
    (["voice.invite", "voice.decline"], "was declined (busy)"),
    (["voice.invite", "voice.accept", "voice.end"], "has ended"),
]


@pytest.mark.parametrize(("path", "refusal"), AUDIO_TABLE)
def test_audio_is_refused_outside_an_active_call(path: list[str], refusal: str | None) -> None:
    call = Call()
    for etype in path:
        call.apply(etype, 0.0, reason="busy")
    if refusal is None:
        call.check_audio()
        return
    with pytest.raises(ProtocolError) as err:
        call.check_audio()
    assert err.value.code == "call_not_active" and refusal in err.value.message


def test_the_connection_refuses_audio_after_a_decline_and_says_why() -> None:
    pair = Pair()
    pair.open(session_id="s1")
    audio = ev.InputAudio(session_id="s1", audio="AAAA", format="pcm16")
    pair.client_sends(audio)  # no call: a voice note, as before
    pair.client_sends(ev.VoiceInvite(session_id="s1", call_id="c1"))
    pair.server_sends(ev.VoiceDecline(session_id="s1", call_id="c1", reason="busy"))
    with pytest.raises(LocalProtocolError) as local:
        pair.client.send(audio)
    assert local.value.code == "call_not_active" and "busy" in local.value.message
    pair.server.receive(b'{"type":"input.audio","session_id":"s1","audio":"AAAA","format":"pcm16"}')
    with pytest.raises(RemoteProtocolError) as remote:
        pair.server.next_event()
    assert remote.value.code == "call_not_active"


def test_takes_calls() -> None:
    audio = ty.AudioCapabilities(supports_realtime=True)
    base = {"id": "a", "provider": "p"}
    assert takes_calls(ty.Capabilities(**base, modalities=["text"], audio=audio))
    not_realtime = ty.AudioCapabilities(supports_realtime=False)
    assert not takes_calls(ty.Capabilities(**base, modalities=["audio"], audio=not_realtime))
    assert not takes_calls(ty.Capabilities(**base, modalities=["audio"]))


#: Where the client's call is -> whether it takes a response the server started.
SERVER_TURN_TABLE = [
    ([], False),
    (["voice.invite"], False),
    (["voice.invite", "voice.accept"], True),
    (["voice.invite", "voice.decline"], False),
    (["voice.invite", "voice.accept", "voice.end"], False),
]


@pytest.mark.parametrize(("path", "taken"), SERVER_TURN_TABLE)
def test_the_client_follows_a_turn_the_server_found_only_in_a_call(
    path: list[str], taken: bool
) -> None:
    """In a call the server ends the caller's turns (``is_final``, ``server_vad``) and
    answers them; the client's core takes that response as if it had asked for it."""
    pair = Pair()
    pair.open(session_id="s1")
    moves = {
        "voice.invite": lambda: pair.client_sends(ev.VoiceInvite(session_id="s1", call_id="c1")),
        "voice.accept": lambda: pair.server_sends(ev.VoiceAccept(session_id="s1", call_id="c1")),
        "voice.decline": lambda: pair.server_sends(ev.VoiceDecline(session_id="s1", call_id="c1")),
        "voice.end": lambda: pair.client_sends(ev.VoiceEnd(session_id="s1", call_id="c1")),
    }
    for etype in path:
        moves[etype]()
    if not taken:
        pair.client.receive(b'{"type":"response.created","session_id":"s1","response_id":"r9"}')
        with pytest.raises(RemoteProtocolError) as refused:
            pair.client.next_event()
        assert refused.value.code == "invalid_event"
        return
    pair.client_sends(ev.InputAudio(session_id="s1", audio="AAAA", format="pcm16"))
    pair.to_server(audio_turn("s1"))  # what both servers queue for themselves
    server_side = pair.server.session("s1").response
    assert server_side is not None
    rid = server_side.response_id
    pair.server_sends(ev.ResponseCreated(session_id="s1", response_id=rid))
    tracker = pair.client.session("s1").response
    assert tracker is not None and tracker.response_id == rid
    assert [m.role for m in tracker.input_messages] == ["user"]  # the caller's audio
    pair.server_sends(server_side.done_event(session_id="s1"))
    assert pair.client.session("s1").response is None
