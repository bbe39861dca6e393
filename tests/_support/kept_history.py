"""One principal's UAMP sessions filled with conversation, over real WebSockets.

Both servers' tests of the per-principal history budget
(:class:`uamp_proto.history.SessionHistories`) drive the same client: turns
of :data:`BIG` fill a session near the core's per-session bound, and a turn
saying ``history`` asks the agent (:class:`Kept`) how many characters of
conversation it was given -- what the server kept for that session.
"""

from __future__ import annotations

from trio_websocket import WebSocketConnection

from tests._support.agents import TestAgent
from tests._support.wire import send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

#: One turn's text: three fill a session to about 3.6 MiB (the core keeps 4 MiB).
BIG = "x" * (1200 * 1024)
#: What three turns of :data:`BIG` leave in a session, at least.
FILLED = 3 * len(BIG)


class Kept(TestAgent):
    """Answers ``ok``; to ``history``, ``kept N``: the characters of conversation it was given."""

    name = "kept"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages and request.messages[-1].text == "history":
            kept = sum(len(m.text) for m in request.messages[:-1])
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"kept {kept}")))
            return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


async def turn(ws: WebSocketConnection, sid: str, text: str) -> str:
    """One turn on session ``sid``: its answer's text."""
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)
    events = await until(ws, "response.done")
    assert all(e.get("session_id") == sid for e in events if e["type"].startswith("response."))
    return texts(events)


async def fill(ws: WebSocketConnection, sid: str) -> None:
    """Three turns of :data:`BIG` on session ``sid``."""
    for n in range(3):
        assert await turn(ws, sid, f"{n} {BIG}") == "ok"


async def kept(ws: WebSocketConnection, sid: str) -> int:
    """How many characters of conversation session ``sid`` keeps (a turn asks the agent)."""
    answer = await turn(ws, sid, "history")
    assert answer.startswith("kept "), answer
    return int(answer.split()[1])
