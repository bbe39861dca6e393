"""Asking a served agent about its voice calls (docs/voice.md), on Trio.

The rule is :mod:`uamp_proto.voice`'s (:func:`~uamp_proto.voice.answer_call`,
:func:`~uamp_proto.voice.call_ended`), shared with ``uamp_asgi``: the agent's
``take_call`` hook when it has one, else its capabilities; a hook that fails
or takes longer than :data:`CALL_ANSWER_TIMEOUT` declines the call. Here it
runs with Trio's timeout scope and this module's logger.
"""

from __future__ import annotations

import logging

import trio

from uamp_proto import voice
from uamp_proto.responder import Responder
from uamp_proto.voice import CALL_ANSWER_TIMEOUT, CallAnswer, CallEnded, CallOffer, has_call_hook

__all__ = ["CALL_ANSWER_TIMEOUT", "answer_call", "call_ended", "has_call_hook"]

log = logging.getLogger("uamp_trio.calls")


async def answer_call(
    agent: Responder, offer: CallOffer, *, timeout: float = CALL_ANSWER_TIMEOUT
) -> CallAnswer:
    """``agent`` 's answer to ``offer``: its hook's, or the one its capabilities give."""
    return await voice.answer_call(
        agent, offer, move_on_after=trio.move_on_after, log=log, timeout=timeout
    )


async def call_ended(agent: Responder, ended: CallEnded) -> None:
    """Tell ``agent`` (its ``call_ended``, if any) how a call ended; never raises."""
    await voice.call_ended(agent, ended, log=log)
