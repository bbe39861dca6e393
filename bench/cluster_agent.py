"""The agent ``bench/cluster.py`` serves on every node: ``flood``.

``uamp serve --agent bench.cluster_agent:Flood``. A user message that is a
number N gets N one-word text deltas, emitted as fast as the node takes
them (no pause): the bench measures what a node spends per delta with the
Redis event log and the PostgreSQL ledger on the path, not the agent.
"""

from __future__ import annotations

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest


class Flood(TestAgent):
    """``w w w ...``: as many deltas as the last message's number says (else 10)."""

    name = "flood"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """The deltas, back to back."""
        said = request.messages[-1].text.strip() if request.messages else ""
        for _ in range(int(said) if said.isdigit() else 10):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="w ")))
