"""The session host's voice calls: answering a call, its turns, its end.

Theory of operation
-------------------
UAMP sections 5.16 and 7.3, as ``docs/voice.md`` tells it. The core keeps
each session's call state (:class:`uamp_proto.voice.CallState`) and refuses
audio the call does not allow; :class:`CallPart` does what a call asks of
the server:

* ``voice.invite``: the session's agent answers (:meth:`CallPart._voice`) --
  its ``take_call`` hook when it has one, in a task (the reader never waits;
  audio meanwhile is refused as the call still rings), else its
  capabilities at once -- with ``voice.accept`` (carrying the hook's SDP
  answer if it gave one; without it the call's audio goes in-band as
  ``input.audio`` / ``audio.delta``) or ``voice.decline``.
* Turns: in a call the server detects them, as Realtime's ``server_vad``
  does. An ``input.audio`` chunk marked ``is_final``, or a pause the
  session's detector hears (:meth:`CallPart._detect_turn`), ends the
  caller's turn: a ``response.create`` is queued behind the message being
  processed (:meth:`CallPart._audio_turn`), so the audio so far goes to the
  agent as one user message, with audio asked for in return.
* ``voice.end`` from the client, or the session's end: the agent's
  ``call_ended`` hook learns how long the call ran (:meth:`CallPart._call_over`).

:class:`CallPart` is that side of
:class:`~uamp_trio.hosting.sessions.SessionHost`, which subclasses it; the
state it uses is declared by :class:`~uamp_trio.hosting.session_state.HostState`.
"""

from __future__ import annotations

import logging

import trio

from uamp_proto import events as ev
from uamp_proto.calls import audio_turn, heard_pause, offer_of, reply_of
from uamp_proto.errors import LocalProtocolError
from uamp_proto.voice import CallAnswer, CallOffer, default_answer

from .calls import answer_call, call_ended, has_call_hook
from .outbox import Overloaded
from .session_state import HostState, SessionState

__all__ = ["CallPart"]

log = logging.getLogger("uamp_trio.sessions")


class CallPart(HostState):
    """The session host's voice calls (module docstring)."""

    def _voice(self, session: SessionState, event: ev.Event) -> None:
        """Answer a call to the session's agent, or end it (``voice.end`` from the client).

        The agent's ``take_call`` hook answers when it has one (in a task:
        the reader never waits; audio meanwhile is refused as the call still
        rings), else its capabilities do, at once. An accept carries the
        hook's SDP answer if it gave one; without it uamp carries the call's
        audio in-band (``input.audio`` / ``audio.delta`` on this connection).
        """
        if isinstance(event, ev.VoiceEnd):
            self._call_over(session, event.reason or "ended")
            return
        assert isinstance(event, ev.VoiceInvite)
        offer = offer_of(event, session.id, transport=self._transport, principal=session.principal)
        if has_call_hook(session.agent):
            self._nursery.start_soon(self._ask_agent, session, offer)
        else:
            answer = default_answer(session.agent.name, session.agent.capabilities())
            self._answer_call(session, offer, answer)

    async def _ask_agent(self, session: SessionState, offer: CallOffer) -> None:
        answer = await answer_call(session.agent, offer)
        if self._sessions.get(session.id) is session:
            self._answer_call(session, offer, answer)

    def _answer_call(self, session: SessionState, offer: CallOffer, answer: CallAnswer) -> None:
        """Send the agent's ``answer`` to ``offer``: ``voice.accept`` or ``voice.decline``."""
        try:
            self._owe(reply_of(offer, answer))
        except (LocalProtocolError, Overloaded) as exc:  # the caller hung up meanwhile
            log.info("session %s: voice.invite not answered: %s", session.id, exc)
            return
        if answer.accept:
            session.call.accepted(offer.call_id, trio.current_time())

    def _call_over(self, session: SessionState, reason: str) -> None:
        """The session's accepted call ended: the agent's ``call_ended`` learns how long it ran."""
        ended = session.call.over(session.id, trio.current_time(), reason)
        if ended is None:
            return
        background = self._app.background if self._app is not None else None
        (background or self._nursery).start_soon(call_ended, session.agent, ended)

    def _audio_turn(self, session: SessionState) -> None:
        """The caller finished an utterance (``is_final``): the agent answers it.

        In a call the server detects turns (as Realtime's ``server_vad``
        does): the audio so far goes to the agent as one user message with
        audio asked for in return, exactly as if the client had sent
        ``response.create``. Outside a call a final chunk changes nothing.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None or not session.call.active or ctx.response is not None:
            return
        # Queued behind the message being processed: feed's loop takes it next.
        self.conn.receive(audio_turn(session.id))

    def _detect_turn(self, session: SessionState, event: ev.InputAudio) -> None:
        """``server_vad``: the caller's audio through the detector; a pause ends the turn."""
        detector = session.detector
        if detector is None or not session.call.active:
            return
        ctx = self._contexts.get(session.id)
        if heard_pause(detector, event, ctx.config if ctx is not None else None):
            self._audio_turn(session)
