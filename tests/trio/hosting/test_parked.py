"""Turns that outlive their request (``uamp_trio.hosting.parked``): pauses, bounds, cleanup."""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.hosting.parked import ParkedTurns, turn_key


def _ask(iid: str) -> ev.InterruptRequest:
    return ev.InterruptRequest(interrupt_id=iid, kind="approval", prompt="ok?", tool_name="add")


class Asker(TestAgent):
    """Says a word, asks ``asks`` at once (siblings), waits for ``go``, then says more."""

    name = "asker"

    def __init__(self, asks: int = 1, after: int = 3) -> None:
        self.asks = asks
        self.after = after
        self.go = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first ")))
        if self.asks:
            async with trio.open_nursery() as nursery:
                for n in range(self.asks):
                    nursery.start_soon(emit, _ask(f"int_{n}"))
            await self.go.wait()
            for n in range(self.asks):
                await emit(ev.InterruptResolved(interrupt_id=f"int_{n}", outcome="approved"))
        for n in range(self.after):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"w{n} ")))


def _request() -> TurnRequest:
    return TurnRequest(agent="asker", session_id="s1", response_id="r1", messages=[])


KEY = turn_key("asker", "s1", ANONYMOUS)


def _texts(events: list[ev.Event]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaText)
    )


async def _read(turn) -> list[ev.Event]:  # type: ignore[no-untyped-def]
    async with aclosing(turn.read()) as events:
        return [e async for e in events]


@pytest.mark.parametrize("asks", [1, 3])
async def test_a_read_stops_at_the_pause_with_every_sibling_ask_then_reads_on(asks: int) -> None:
    lot = ParkedTurns()
    agent = Asker(asks=asks)
    async with trio.open_nursery() as nursery:
        turn = lot.start(nursery.start_soon, agent, _request(), key=KEY)
        first = await _read(turn)
        assert turn.paused and sorted(turn.asked) == [f"int_{n}" for n in range(asks)]
        assert _texts(first) == "first "
        shown = sorted(e.interrupt_id for e in first if isinstance(e, ev.InterruptRequest))
        assert shown == sorted(turn.asked)
        assert lot.find(KEY) is turn
        turn.answered(list(turn.asked))
        agent.go.set()
        rest = await _read(turn)
        assert _texts(rest) == "w0 w1 w2 "
        assert turn.outcome is not None and turn.outcome.status == "completed"
    assert lot.find(KEY) is None and len(lot) == 0  # read to the end: dropped


async def test_one_turn_per_key_and_one_reader_at_a_time() -> None:
    lot = ParkedTurns()
    agent = Asker()
    async with trio.open_nursery() as nursery:
        turn = lot.start(nursery.start_soon, agent, _request(), key=KEY)
        with pytest.raises(RuntimeError):
            lot.start(nursery.start_soon, agent, _request(), key=KEY)
        async with aclosing(turn.read()) as events:
            await events.__anext__()
            with pytest.raises(RuntimeError):
                await turn.read().__anext__()
        turn.cancel()
        agent.go.set()


async def test_a_turn_nobody_reads_is_cancelled_past_its_backlog() -> None:
    lot = ParkedTurns(max_backlog=10)
    agent = Asker(asks=0, after=1000)
    async with trio.open_nursery() as nursery:
        turn = lot.start(nursery.start_soon, agent, _request(), key=KEY)
        await trio.testing.wait_all_tasks_blocked()
    assert turn.finished and turn.outcome is not None
    assert turn.outcome.status == "cancelled"
    assert len(lot) == 0  # it never paused and nobody read it: dropped at once


async def test_a_reader_that_leaves_mid_run_leaves_nothing_parked() -> None:
    lot = ParkedTurns()
    agent = Asker(asks=0, after=50)
    async with trio.open_nursery() as nursery:
        for n in range(20):  # a client that starts runs and goes away, again and again
            key = turn_key("asker", f"s{n}", ANONYMOUS)
            turn = lot.start(nursery.start_soon, agent, _request(), key=key)
            async with aclosing(turn.read()) as events:
                await events.__anext__()
            turn.cancel()  # what a transport does when its client leaves mid-run
        await trio.testing.wait_all_tasks_blocked()
    assert len(lot) == 0
