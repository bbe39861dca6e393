"""Asking a served agent about its voice calls (docs/voice.md).

Every transport that places a call to an agent (the UAMP session host on
``voice.invite``, Realtime on a connection's first audio) asks it here, so
the rule is the same everywhere: the agent's ``take_call`` hook when it has
one (:class:`uamp_proto.voice.CallHook`), else its capabilities
(:func:`uamp_proto.voice.default_answer`). A hook that fails or takes longer
than :data:`CALL_ANSWER_TIMEOUT` declines the call; the caller never waits
forever on a ringing call.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from uamp_proto.responder import Responder
from uamp_proto.voice import CallAnswer, CallEnded, CallOffer, default_answer

__all__ = ["CALL_ANSWER_TIMEOUT", "answer_call", "call_ended", "has_call_hook"]

log = logging.getLogger("uamp_trio.calls")

#: Seconds an agent's ``take_call`` may take before the call is declined.
CALL_ANSWER_TIMEOUT: Final = 10.0


def has_call_hook(agent: Responder) -> bool:
    """Whether ``agent`` answers its calls itself (has ``take_call``)."""
    return callable(getattr(agent, "take_call", None))


async def answer_call(
    agent: Responder, offer: CallOffer, *, timeout: float = CALL_ANSWER_TIMEOUT
) -> CallAnswer:
    """``agent`` 's answer to ``offer``: its hook's, or the one its capabilities give."""
    hook = getattr(agent, "take_call", None)
    if not callable(hook):
        return default_answer(agent.name, agent.capabilities())
    with trio.move_on_after(timeout):
        try:
            answer = await hook(offer)
        except Exception:
            log.exception("agent %r: take_call failed for call %s", agent.name, offer.call_id)
            return CallAnswer(accept=False, reason="the agent could not take the call")
        if isinstance(answer, CallAnswer):
            return answer
        log.warning("agent %r: take_call returned %r, not a CallAnswer", agent.name, answer)
        return CallAnswer(accept=False, reason="the agent could not take the call")
    return CallAnswer(accept=False, reason="the agent did not answer")


async def call_ended(agent: Responder, ended: CallEnded) -> None:
    """Tell ``agent`` (its ``call_ended``, if any) how a call ended; never raises."""
    log.info(
        "call %s of agent %r ended (%s) after %s ms",
        ended.call_id,
        agent.name,
        ended.reason,
        None if ended.duration_ms is None else round(ended.duration_ms),
    )
    hook = getattr(agent, "call_ended", None)
    if not callable(hook):
        return
    try:
        await hook(ended)
    except Exception:
        log.exception("agent %r: call_ended failed for call %s", agent.name, ended.call_id)
