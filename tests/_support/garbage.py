"""What the garbage-cycle tests share: an agent that remembers its requests weakly, no collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.interrupts import QUESTION, Interrupt
from uamp_proto.responder import Emit, ResponderError, TurnRequest


class Keeps(TestAgent):
    """Remembers (weakly) each request it gets, and its port; ``"fail"`` fails, ``"ask"`` asks."""

    name = "keeps"

    def __init__(self) -> None:
        self.requests: list[weakref.ref[TurnRequest]] = []
        self.ports: list[Any] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(weakref.ref(request))
        self.ports.append(request.interrupts)
        said = request.messages[-1].text if request.messages else ""
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="hi ")))
        if said == "fail":
            raise ResponderError("tool_failed", "it failed")
        if said == "ask":
            assert request.interrupts is not None
            await request.interrupts.ask(question())

    def freed(self) -> bool:
        """Whether every request it got is gone, and every port it was given closed."""
        return all(ref() is None for ref in self.requests) and all(
            port is None or port.emit is None for port in self.ports
        )


def question() -> Interrupt:
    return Interrupt(id="", kind=QUESTION, key="k", prompt="sure?")


@contextmanager
def collector_off() -> Iterator[None]:
    """The garbage collector off (what is still there was kept by a cycle, or held)."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
