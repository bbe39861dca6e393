"""A run let into an idle conversation without its slot (``ConversationGate.defer``)
is, to everybody who looks, the run that entered its slot when it started.

Each case runs one script of arrivals and ends twice: once with the first run
entering its slot at once (``enter``), once deferred (``defer``, entered when
somebody arrives); the traces -- admissions, refusals, stops, who runs, who
waits, whether the conversation is busy -- must be the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import orjson
import pytest
import trio
import trio.testing

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.busy import BusyError, BusyPolicy
from uamp_proto.principal import Principal
from uamp_proto.responder import Emit, TurnRequest
from uamp_stores.busy import ConversationGate, Slot
from uamp_trio.app import create_app
from uamp_trio.hosting.sessions import SessionHost

P = Principal(id="p", scheme="test")
Q = Principal(id="q", scheme="test")
KEY = ("uamp", P.key, "s")

#: ``("arrive", name, policy, principal)``, ``("end", name)``, ``("other", key)``.
Step = tuple[object, ...]


class Run:
    """The first run of the script, entered at once or deferred."""

    def __init__(self, gate: ConversationGate, trace: list[object], deferred: bool) -> None:
        self.gate, self.trace = gate, trace
        self.slot: Slot | None = None
        self.enter: Callable[[], None] | None = None
        if deferred:
            self.enter = functools.partial(self._enter_late)
            assert gate.defer(KEY, self.enter)
        else:
            self._enter_late()

    def _enter_late(self) -> None:
        self.enter = None
        self.slot = self.gate.enter(KEY, P)
        self.slot.bind(lambda: self.trace.append("first stopped"))

    def end(self) -> None:
        if self.enter is not None:
            assert self.gate.undefer(KEY, self.enter)
            self.enter = None
        elif self.slot is not None:
            self.slot.close()


def play(script: list[Step], deferred: bool) -> list[object]:
    gate = ConversationGate()
    trace: list[object] = []
    first = Run(gate, trace, deferred)
    slots: dict[str, Slot] = {}

    def look(what: str) -> None:
        ticket = gate.lanes.running(KEY)
        names = {slot.ticket: name for name, slot in slots.items()}
        if first.slot is not None:
            names[first.slot.ticket] = "first"
        # The lanes hold a deferred run only once it entered; until then the
        # gate answers busy with no ticket running: that run is the first.
        running = names.get(ticket, ticket) if ticket is not None else None
        if running is None and gate.busy(KEY):
            running = "first"
        trace.append(
            (
                what,
                gate.busy(KEY),
                running,
                [names.get(t, t) for t in gate.lanes.waiting(KEY)],
                first.slot.stopped if first.slot is not None else None,
            )
        )

    for step in script:
        if step[0] == "arrive":
            _, name, policy, principal = step
            assert isinstance(name, str) and isinstance(principal, Principal)
            try:
                slot = gate.enter(KEY, principal, BusyPolicy(policy))
            except BusyError as exc:
                trace.append((name, "refused", exc.code))
            else:
                slots[name] = slot
                trace.append((name, "ready" if slot.ready else "waits"))
        elif step[0] == "end":
            if step[1] == "first":
                first.end()
            else:
                slots.pop(str(step[1])).close()
        elif step[0] == "other":
            gate.enter(step[1], Q).close()  # another conversation comes and goes
        look(str(step))
    return trace


SCRIPTS: dict[str, list[Step]] = {
    "nobody comes": [("end", "first")],
    "another conversation only": [("other", ("uamp", Q.key, "s")), ("end", "first")],
    "a second message is refused": [("arrive", "b", "reject", P), ("end", "first")],
    "a second message waits": [
        ("arrive", "b", "enqueue", P),
        ("end", "first"),
        ("end", "b"),
    ],
    "an interrupt stops the first": [
        ("arrive", "b", "interrupt", P),
        ("end", "first"),
        ("end", "b"),
    ],
    "a rollback drops the first": [("arrive", "b", "rollback", Q), ("end", "first"), ("end", "b")],
    "two wait, the first leaves": [
        ("arrive", "b", "enqueue", P),
        ("arrive", "c", "interrupt", Q),
        ("end", "first"),
        ("end", "c"),
        ("end", "b"),
    ],
    "the next run after the first ended": [
        ("end", "first"),
        ("arrive", "b", "reject", P),
        ("end", "b"),
    ],
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_deferred_run_looks_like_one_that_entered_its_slot(name: str) -> None:
    script = SCRIPTS[name]
    assert play(script, deferred=True) == play(script, deferred=False)


def test_the_script_traces_say_something() -> None:
    """The traces compared above show the gate's moves (so equal traces mean equal moves)."""
    trace = play(SCRIPTS["an interrupt stops the first"], deferred=True)
    assert trace[0] == "first stopped"  # the deferred run entered, then was stopped
    assert trace[1] == ("b", "waits")
    assert trace[2][1:] == (True, "first", ["b"], "keep")
    assert trace[-1][1:] == (False, None, [], "keep")


def test_defer_is_refused_where_a_run_is_active() -> None:
    gate = ConversationGate()
    held = gate.enter(KEY, P)
    assert not gate.defer(KEY, lambda: None)
    held.close()
    enter = functools.partial(lambda: None)
    assert gate.defer(KEY, enter) and gate.busy(KEY)
    assert not gate.defer(KEY, lambda: None)  # one deferred run per conversation
    assert gate.undefer(KEY, enter) and not gate.busy(KEY)
    assert not gate.undefer(KEY, enter)  # once


# --- the UAMP session host's responses (uamp_trio.hosting.sessions) -----------------


class Gated(TestAgent):
    """An agent whose run waits for :attr:`go` when its input says ``wait``."""

    name = "gated"

    def __init__(self) -> None:
        self.go = trio.Event()
        self.runs = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.runs += 1
        if request.messages[-1].text == "wait":
            await self.go.wait()
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


@pytest.mark.parametrize("end", ["done", "session.end", "second waits"])
async def test_a_session_s_response_leaves_the_gate_as_it_found_it(end: str) -> None:
    def msg(**fields: object) -> bytes:
        return orjson.dumps({"session_id": "s", **fields})

    agent = Gated()
    app = create_app([agent])
    gate = app.conversations
    key = ("uamp", ("anonymous", "anonymous"), "s")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            host = SessionHost(nursery, {"gated": agent}, agent, app=app)
            host.feed(msg(type="session.create", uamp_version="1.0", session={}))
            host.feed(msg(type="input.text", text="wait" if end != "done" else "go"))
            host.feed(msg(type="response.create"))
            await trio.testing.wait_all_tasks_blocked()
            if end == "done":
                assert not host.busy
            else:
                # Running, deferred: busy to the gate, no ticket taken.
                assert host.busy and gate.busy(key) and len(gate.lanes) == 0
            if end == "session.end":
                host.feed(msg(type="session.end"))
            elif end == "second waits":
                host.feed(msg(type="input.text", text="go"))
                host.feed(msg(type="response.create"))  # held: the first takes its place
                assert gate.lanes.running(key) is not None and len(gate.lanes.waiting(key)) == 1
                agent.go.set()
            await trio.testing.wait_all_tasks_blocked()
            assert not host.busy
            assert agent.runs == (2 if end == "second waits" else 1)
            nursery.cancel_scope.cancel()
    assert not gate.busy(key) and len(gate.lanes) == 0 and not gate._deferred
