"""Agents for the payment tests that run ``uamp serve`` as a subprocess (``--agent``)."""

from __future__ import annotations

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from .agents import TestAgent


class Slow(TestAgent):
    """Says a word, then works for a minute (long enough to be killed mid-response)."""

    name = "slow"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="working")))
        await trio.sleep(60)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=" done")))
