"""A counting agent: the demo agent that records who each turn was for."""

from __future__ import annotations

from uamp_proto.principal import Principal
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import DemoAgent


class CountingAgent(DemoAgent):
    """``DemoAgent`` that appends each turn's principal to :attr:`runs`."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Principal] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.runs.append(request.principal)
        await super().respond(request, emit)
