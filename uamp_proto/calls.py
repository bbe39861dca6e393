"""A UAMP session's voice call to its agent, as both servers answer it (UAMP 5.16, 7.3, 8.1).

Theory of operation
-------------------
The core keeps the call's state (:class:`uamp_proto.voice.Call` on each
session: what may be sent when). This module is the server's part around
it, with no I/O and no clock (times are passed in), so ``uamp serve``
(:mod:`uamp_trio.hosting.sessions`) and ``uamp_asgi``
(:mod:`uamp_asgi.transports.uamp_ws`) answer a call alike:

* ``voice.invite`` becomes a :class:`~uamp_proto.voice.CallOffer`
  (:func:`offer_of`), which the agent answers
  (:func:`uamp_proto.voice.answer_call`); :func:`reply_of` turns the answer
  into ``voice.accept`` or ``voice.decline``;
* :class:`AnsweredCall` remembers the accepted call, so the agent's
  ``call_ended`` learns how long it ran when ``voice.end`` comes or the
  session goes away (:meth:`AnsweredCall.over`);
* in a call the server finds the caller's turns: an ``input.audio`` marked
  ``is_final``, or a pause its ``server_vad`` detector heard
  (:func:`heard_pause`), queues :func:`audio_turn`, a ``response.create``
  asking for audio and text, into the core as if the client had sent it;
* a session's voice settings are honoured or refused at ``session.create``
  (:func:`settings_refusal`), never echoed as if they were.
"""

from __future__ import annotations

from typing import Final

import orjson

from . import audio
from . import events as ev
from . import types as ty
from .ids import IdSource, random_ids
from .principal import Principal
from .responder import Responder
from .voice import CallAnswer, CallEnded, CallOffer

__all__ = [
    "AUDIO_TURN_MODALITIES",
    "AnsweredCall",
    "audio_turn",
    "heard_pause",
    "offer_of",
    "reply_of",
    "settings_refusal",
    "turn_detector",
]

#: What a turn the server found in a call asks the agent for.
AUDIO_TURN_MODALITIES: Final = ("audio", "text")


def offer_of(
    invite: ev.VoiceInvite,
    session_id: str,
    *,
    transport: str,
    principal: Principal,
    ids: IdSource = random_ids,
) -> CallOffer:
    """The offer a ``voice.invite`` places to the session's agent (an id made when it has none)."""
    return CallOffer(
        call_id=invite.call_id or ids("call"),
        session_id=session_id,
        sdp=invite.sdp,
        transport=transport,
        principal=principal,
    )


def reply_of(offer: CallOffer, answer: CallAnswer) -> ev.VoiceAccept | ev.VoiceDecline:
    """``voice.accept`` (with the agent's SDP answer, if any) or ``voice.decline``."""
    if answer.accept:
        return ev.VoiceAccept(session_id=offer.session_id, call_id=offer.call_id, sdp=answer.sdp)
    return ev.VoiceDecline(session_id=offer.session_id, call_id=offer.call_id, reason=answer.reason)


class AnsweredCall:
    """The call a session's agent took, until it ends (times in the server's seconds)."""

    __slots__ = ("call_id", "started")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.started: float | None = None

    @property
    def active(self) -> bool:
        """Whether the agent is in a call."""
        return self.started is not None

    def accepted(self, call_id: str, now: float) -> None:
        """The agent took call ``call_id`` at ``now``."""
        self.call_id, self.started = call_id, now

    def over(self, session_id: str, now: float, reason: str) -> CallEnded | None:
        """The call ended at ``now``: what its agent is told (``None``: it took none)."""
        started, call_id = self.started, self.call_id
        self.call_id = self.started = None
        if started is None or call_id is None:
            return None
        return CallEnded(
            call_id=call_id,
            session_id=session_id,
            duration_ms=max(0.0, now - started) * 1000.0,
            reason=reason,
        )


def audio_turn(session_id: str) -> bytes:
    """The ``response.create`` a turn found in a call gives the core (as the client's)."""
    create = {
        "type": "response.create",
        "session_id": session_id,
        "response": {"modalities": list(AUDIO_TURN_MODALITIES)},
    }
    return orjson.dumps(create)


def heard_pause(
    detector: audio.TurnDetector, chunk: ev.InputAudio, config: ty.SessionConfig | None
) -> bool:
    """Feed ``chunk`` to the session's ``server_vad`` detector; whether the caller paused.

    A chunk that names no format is in the session's ``input_audio_format``;
    one that does not decode is not judged.
    """
    fmt: str | None = chunk.format or (config.input_audio_format if config else None)
    try:
        pcm = audio.to_pcm16(audio.decode_b64(chunk.audio), fmt)
    except ValueError:
        return False
    return any(e.kind == "speech_stopped" for e in detector.feed(pcm))


def turn_detector(config: ty.SessionConfig | None) -> audio.TurnDetector | None:
    """The detector a session's ``turn_detection`` asks for (checked at ``session.create``)."""
    turns = config.turn_detection if config is not None else None
    return None if turns is None else audio.TurnDetector(audio.TurnSettings.of(turns))


def settings_refusal(config: ty.SessionConfig | None, agent: Responder) -> tuple[str, str] | None:
    """Which voice setting of ``config`` neither the server nor ``agent`` honours, and why.

    Returns:
        ``(field, message)``: ``session.error`` ``unsupported`` with
        ``details.field`` ``session.<field>``; ``None`` when all are honoured.
    """
    if config is None or (
        config.voice is None
        and config.turn_detection is None
        and config.input_audio_format is None
        and config.output_audio_format is None
    ):
        return None
    capabilities = agent.capabilities()
    heard = capabilities.audio
    speaks = "audio" in capabilities.modalities or bool(heard and heard.output_formats)
    return audio.refusal(config, heard.voices if heard else None, speaks)
