"""The agent ``bench/attacks.py`` serves: it counts its runs in a file.

Each run appends one byte to the file named by ``UAMP_ATTACK_COUNTS``, so
the attack suite reads how often the server invoked the agent from its file
size, from outside the server process. It answers ``ok``; a last user
message ``flood N`` makes it stream ``N`` deltas of 1 KiB each instead (for
the stalled-reader attack), ``hold N`` answers after ``N`` seconds (a
conversation kept busy, for the busy-queue flood), ``ask`` asks its
caller a question (a run paused for a person, for the interrupt flood) and
answers ``refused: REASON`` when the host refuses to ask, ``history``
answers how many characters of conversation the run was given (``kept N``),
and ``forever`` streams deltas of 64 KiB until it is stopped (the endless
output the server's ``max_response_output_bytes`` ends).
It runs on Trio
(``uamp serve``) and on asyncio (``uamp_asgi`` under uvicorn) alike.
"""

from __future__ import annotations

import os

import anyio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.interrupts import QUESTION, Interrupt
from uamp_proto.responder import Emit, TurnRequest

_CHUNK = "x" * 1024
_BIG_CHUNK = "x" * (64 * 1024)


class CountingAgent:
    """Counts its runs (see the module docstring)."""

    name = "counter"

    def capabilities(self) -> ty.Capabilities:
        """Text in, text out, streaming."""
        return ty.Capabilities(
            id=self.name, provider="bench", modalities=["text"], supports_streaming=True
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Count the run, then answer ``ok`` (or flood)."""
        path = os.environ.get("UAMP_ATTACK_COUNTS")
        if path:
            with open(path, "ab") as counts:
                counts.write(b".")
        last = request.messages[-1].text.strip() if request.messages else ""
        words = last.split()
        if len(words) == 2 and words[0] == "flood" and words[1].isdigit():
            for _ in range(int(words[1])):
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=_CHUNK)))
            return
        if words == ["forever"]:
            n = 0
            while True:  # a new string each time, as a model's or an echo's text is
                n += 1
                text = f"{n:08d}{_BIG_CHUNK[8:]}"
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))
        if len(words) == 2 and words[0] == "hold" and words[1].isdigit():
            await anyio.sleep(int(words[1]))
        if words == ["history"]:
            kept = sum(len(m.text) for m in request.messages[:-1])
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"kept {kept}")))
            return
        if words == ["ask"] and request.interrupts is not None:
            question = Interrupt(id="", kind=QUESTION, key="attack", prompt="Go on?")
            answer = await request.interrupts.ask(question)
            if answer.approved is False:
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"refused: {answer.reason}")))
                return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))
