"""What the agent of a UAMP session is given for a response, and how its audio goes out.

Both servers run a session's response the same way (``uamp serve``'s
:mod:`uamp_trio.hosting.sessions`, ``uamp_asgi``'s UAMP WebSocket and
HTTP+SSE): :func:`turn_request` builds the agent's
:class:`~uamp_proto.responder.TurnRequest` from the core's session and the
``response.create`` that started the response (its ``response`` overrides
the session's instructions, tools and modalities, UAMP 5.10), with the
caller's G.711 audio given to the agent as ``pcm16`` (UAMP 8.2) and the
session's ``voice`` in ``metadata``. :func:`spoken_format` and
:func:`recoded` turn the agent's ``pcm16`` speech back into the session's
``output_audio_format``.
"""

from __future__ import annotations

from typing import Any

import attrs

from . import _fastinit, audio
from . import events as ev
from . import types as ty
from .interrupts import InterruptPort
from .principal import Principal
from .responder import TurnRequest
from .session_context import SessionContext

__all__ = ["recoded", "spoken_format", "turn_request"]


def turn_request(
    ctx: SessionContext,
    create: ev.ResponseCreate | None,
    *,
    agent: str,
    transport: str,
    token: str | None,
    principal: Principal,
    interrupts: InterruptPort | None = None,
) -> TurnRequest | None:
    """The request of the session's current response (``None``: none runs).

    Args:
        ctx: The core's session.
        create: The ``response.create`` that started the response, if known.
        agent: The agent's name.
        transport: ``metadata["transport"]`` (``uamp-websocket``, ``uamp-sse``).
        token: The credential the agent is handed.
        principal: Who the response is for.
        interrupts: The response's interrupt port, if the host has one (built
            into the request rather than added by a copy of it).
    """
    tracker = ctx.response
    if tracker is None:
        return None
    config = ctx.config or ty.SessionConfig(modalities=["text"])
    override = create.response if create is not None else None
    instructions = config.instructions
    tools = config.tools or []
    modalities = config.modalities
    if override is not None:
        if override.instructions is not None:
            instructions = override.instructions
        tools = override.tools if override.tools is not None else tools
        modalities = override.modalities or modalities
    extensions = {}
    if config.extensions:
        extensions = dict(config.extensions)
        extensions.pop("flow", None)  # the transport's business, not the agent's
    messages = ctx.conversation()
    heard = config.input_audio_format
    if heard in audio.CONVERTED_FORMATS:
        messages = audio.pcm16_messages(messages, heard)  # the agent hears pcm16
    metadata: dict[str, Any] = {"transport": transport}
    if config.voice is not None:
        metadata["voice"] = config.voice  # the agent's speech output (UAMP 8.1)
    return _make_request(
        agent,
        ctx.id,
        tracker.response_id,
        messages,
        instructions,
        list(tools),
        (create.response_format if create is not None else None) or config.response_format,
        list(modalities or ["text"]),
        token,
        ctx.payment.token,
        extensions,
        metadata,
        principal,
        ctx.client_capabilities,
        tracker.context,
        interrupts,
    )


#: ``TurnRequest(agent=..., ...)`` with the fields above, positionally
#: (:func:`uamp_proto._fastinit.maker`: no keyword dict per turn).
_make_request = _fastinit.maker(
    TurnRequest,
    (
        "agent",
        "session_id",
        "response_id",
        "messages",
        "instructions",
        "tools",
        "response_format",
        "modalities",
        "token",
        "payment_token",
        "extensions",
        "metadata",
        "principal",
        "client_capabilities",
        "context",
        "interrupts",
    ),
)


def spoken_format(ctx: SessionContext | None) -> str | None:
    """The session's ``output_audio_format`` when the agent's ``pcm16`` must be converted to it."""
    config = ctx.config if ctx is not None else None
    fmt = config.output_audio_format if config is not None else None
    return fmt if fmt in audio.CONVERTED_FORMATS else None


def recoded(event: ev.AudioDelta, fmt: str) -> ev.AudioDelta:
    """``event`` with its ``pcm16`` audio in ``fmt`` (UAMP 8.2)."""
    return attrs.evolve(event, audio=audio.recode_b64(event.audio, fmt))
