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


class HoldingAgent(DemoAgent):
    """``echo TEXT [what it saw]``; ``hold PATH``: ``echo hold PATH``, held until PATH exists.

    The busy tests of the relay (tests/interop/test_busy_relay.py) run it in
    ``uamp connect``: a file is how the test, in another process, lets a
    held turn end. What it saw is the conversation before the message, as
    ``role:text`` joined with ``/``.
    """

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        text = request.messages[-1].text if request.messages else ""
        if text.startswith("hold "):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"echo {text}")))
            release = trio.Path(text[5:])
            while not await release.exists():
                await trio.sleep(0.02)
            return
        seen = "/".join(f"{m.role}:{m.text}" for m in request.messages[:-1])
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"echo {text} [{seen}]")))


holding = HoldingAgent("holding")
