"""OpenAI Realtime <-> UAMP, sans-IO (UAMP section 1.3, spec 004 "Realtime").

Theory of operation
-------------------
UAMP borrows the Realtime API's event structure, so the mapping is close to
one to one; what Realtime adds is a *conversation* of items the server keeps
and an *output item / content part* nesting on the way out. Two classes hold
that state:

:class:`RealtimeSession` is one Realtime connection's server side. Feed it
each client event (a parsed JSON object) with :meth:`~RealtimeSession.handle`;
it answers with the server events owed right away (``session.updated``,
``conversation.item.added`` ...) and, for the events a transport must act on,
an action: :class:`CreateResponse` (``response.create``; build the agent's
:class:`~uamp_proto.responder.TurnRequest` with
:meth:`~RealtimeSession.turn_request`), :class:`CancelResponse`
(``response.cancel``) or :class:`SubmitPayment` (``payment.submit``, the
UAMP payment extension spec 004 puts on the Realtime socket). Client events
handled: ``session.update``; ``input_audio_buffer.append`` / ``.commit`` /
``.clear`` (committed audio becomes a user message whose ``input_audio``
content reaches the agent as an ``audio`` content item);
``conversation.item.create`` (``message`` items with ``input_text`` /
``input_audio`` / ``input_image`` / ``output_text`` content,
``function_call`` and ``function_call_output`` items), ``.delete``,
``.truncate``, ``.retrieve``; ``response.create``; ``response.cancel``;
``payment.submit``. Bad input raises nothing: it is answered with an
``error`` event and the session goes on.

**Calls.** The input audio buffer is a voice call (UAMP 5.16, 7.3; the
lifecycle is :class:`uamp_proto.voice.Call`). Realtime has no invite, so the
first ``input_audio_buffer.append`` outside a call places one: the session
answers with the :class:`PlaceCall` action, the transport asks the agent and
hands its :class:`~uamp_proto.voice.CallAnswer` to
:meth:`~RealtimeSession.call_answered`. Accepted, the server sends the UAMP
event ``voice.accept`` (with ``call_id``) and the audio is buffered;
declined, the audio is refused with an ``error`` event (``call_not_active``,
``param`` ``audio``, the agent's reason in the message) and the session goes
on. ``voice.end`` from the client (the :class:`EndCall` action) ends the
call; :meth:`~RealtimeSession.end_call` answers ``voice.end`` with the
call's ``duration_ms``, and is what the transport calls when the socket
closes mid-call too. Audio in ``conversation.item.create`` is a voice note,
never a call.

:class:`ResponseEncoder` turns the UAMP events of one turn into Realtime
server events, opening and closing output items and content parts in order::

    response.created
      response.output_item.added        (message, in_progress)
      conversation.item.added
        response.content_part.added     (text)
          response.output_text.delta ...
          response.output_text.done
        response.content_part.done
      response.output_item.done
      conversation.item.done
      response.output_item.added        (function_call, for a client tool.call)
      conversation.item.added
        response.function_call_arguments.delta
        response.function_call_arguments.done
      response.output_item.done
      conversation.item.done
    response.done                       (status, output, usage)

Audio output opens an ``audio`` content part (``response.output_audio.delta``,
transcripts as ``response.output_audio_transcript.delta``). The agent's own
(server-side) tools are not Realtime function calls and are not shown.

**Beta protocol.** A client that asks for ``OpenAI-Beta: realtime=v1`` gets
the older names: ``response.text.delta`` / ``.done``, ``response.audio.*``,
``response.audio_transcript.*``, ``conversation.item.created`` (instead of
``added`` + ``done``), ``text`` / ``audio`` assistant content and the beta
session object (``modalities``, ``voice``, ``input_audio_format`` ...).
Client events are read leniently in either dialect.

Ids come from an :data:`~uamp_proto.ids.IdSource`; nothing here does I/O.

Where each part lives (every name is importable from here, which also keeps
what both servers do around a session: :func:`open_session`,
:func:`cancel_refusal`, :func:`needs_signature`, :func:`hold_expired`,
:func:`payment_event`):

* :mod:`~uamp_proto.adapters.realtime_session` -- :class:`RealtimeSession`;
* :mod:`~uamp_proto.adapters.realtime_actions` -- the actions a client
  event hands the transport, and :class:`Handled`;
* :mod:`~uamp_proto.adapters.realtime_fields` -- strict reading of client
  events' members, :class:`RealtimeError` and the ``error`` event;
* :mod:`~uamp_proto.adapters.realtime_encoder` -- :class:`ResponseEncoder`.
"""

from __future__ import annotations

from typing import Any

from .. import events as ev
from .. import types as ty
from ..codec import to_dict
from ..ids import IdSource
from .realtime_actions import Action as Action
from .realtime_actions import (
    CancelResponse,
    CreateResponse,
    EndCall,
    Handled,
    PlaceCall,
    ResponseOptions,
    SubmitPayment,
)
from .realtime_encoder import ResponseEncoder
from .realtime_fields import RealtimeError, error_event
from .realtime_session import DEFAULT_MAX_AUDIO_BUFFER, RealtimeSession

__all__ = [
    "DEFAULT_MAX_AUDIO_BUFFER",
    "CancelResponse",
    "CreateResponse",
    "EndCall",
    "Handled",
    "PlaceCall",
    "RealtimeError",
    "RealtimeSession",
    "ResponseEncoder",
    "ResponseOptions",
    "SubmitPayment",
    "cancel_refusal",
    "error_event",
    "hold_expired",
    "needs_signature",
    "open_session",
    "payment_event",
]

#: The subprotocol a browser client offers to ask for the beta event names.
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"


def open_session(
    capabilities: ty.Capabilities,
    *,
    model: str | None,
    openai_beta: str | None,
    subprotocols: list[str],
    expires_at: float | None,
    ids: IdSource,
) -> tuple[RealtimeSession, str | None]:
    """The session a new connection to an agent of ``capabilities`` opens, and the
    subprotocol to accept (both servers).

    ``openai_beta``: the ``OpenAI-Beta`` header (``realtime=v1`` asks for the
    beta event names, as does offering :data:`BETA_SUBPROTOCOL`). An audio
    agent's session starts in audio (text and audio for beta clients); the
    agent's declared voices are the only ones ``session.update`` may pick;
    ``expires_at``: when the caller's credential does (``None``: never).
    """
    beta = "realtime=v1" in (openai_beta or "").replace(" ", "")
    beta = beta or BETA_SUBPROTOCOL in subprotocols
    modalities = ["audio"] if "audio" in capabilities.modalities else ["text"]
    heard = capabilities.audio
    session = RealtimeSession(
        session_id=ids("sess"),
        model=model,
        beta=beta,
        ids=ids,
        modalities=["text", "audio"] if beta and modalities == ["audio"] else modalities,
        voices=(heard.voices or None) if heard else None,
        expires_at=None if expires_at is None else int(expires_at),
    )
    return session, ("realtime" if "realtime" in subprotocols else None)


def cancel_refusal(requested: str | None, active: str | None) -> str | None:
    """Why ``response.cancel`` (naming ``requested``) finds nothing to cancel; ``None`` if it does.

    ``active``: the id of the response running now, if any.
    """
    if active is not None and requested in (None, active):
        return None
    return "Cancellation failed: no active response found" + (
        f" with id {requested}." if requested else "."
    )


def needs_signature(out: dict[str, Any]) -> bool:
    """Whether server event ``out`` is a completed ``response.done`` (what a signer signs)."""
    return out.get("type") == "response.done" and out["response"].get("status") == "completed"


def hold_expired(wait: float) -> str:
    """The ``error`` message (code ``payment_required``) of a ``response.create`` held
    for payment and dropped after ``wait`` seconds (the requirements' ``expires_at``)."""
    return (
        f"No payment was accepted within {wait:g} s (the requirements' expires_at): "
        "the response.create was dropped."
    )


def payment_event(event: ev.Event, event_id: str) -> dict[str, Any]:
    """A UAMP payment event (``payment.required`` ...) as a Realtime socket message."""
    out = to_dict(event)
    out["event_id"] = event_id
    return out
