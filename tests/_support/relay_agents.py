"""Agents ``uamp connect`` serves in the relay tests (``--agent tests._support.relay_agents:X``)."""

from __future__ import annotations

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import PAID_TOKEN, Emit, ResponderError, TurnRequest
from uamp_trio.demo import DemoAgent

#: Two demo agents under their own names.
alpha = DemoAgent("alpha")
beta = DemoAgent("beta")


class SlowAgent(DemoAgent):
    """Streams ``tick N`` every 50 ms, 400 times: long enough to cancel or kill mid-stream."""

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for n in range(400):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"tick {n} ")))
            await trio.sleep(0.05)


slow = SlowAgent("slow")

#: What ``topup`` asks for in the middle of its answer.
TOPUP = ty.PaymentRequirements(amount="0.50", currency="USD")


class TopUpAgent(DemoAgent):
    """Answers half, asks for a top-up mid-stream, then says which token paid for the rest."""

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first half; ")))
        await emit(ev.PaymentRequired(requirements=TOPUP, extra={"action": "topup"}))
        paid = request.metadata.get(PAID_TOKEN)
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"second half, paid with {paid}")))


topup = TopUpAgent("topup")


def uap_demo() -> object:
    """The UAP demo agent (server-side tools ``add`` and ``now``) as ``uap``, for ``--agent``."""
    from uamp_agents.bridge import demo_agent

    return demo_agent("uap")


class FailingAgent(DemoAgent):
    """Streams one delta, then fails with its own error code."""

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="trying ")))
        raise ResponderError("tool_failed", "the weather service is down")


failing = FailingAgent("failing")
