"""A UAP agent's response goes on from its last checkpoint after its process was lost.

The lost process is played by a run whose sink fails (the process "dies")
some events after the agent's first step checkpointed; its events are in the
session's log and its record names a process that no longer runs. The
continuation (:func:`uamp_trio.hosting.continuation.carry_on`) then runs the
same agent -- served through the bridge with ``checkpoints=True`` -- from
that checkpoint. The tool of the completed step is not called again.
(``tests/trio/test_scale_out.py`` does the same with real processes and Redis.)
"""

from __future__ import annotations

import attrs
import pytest
import trio

from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import _demo
from uamp_agents.tools import tool
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import decode, encode, unstructure
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest
from uamp_stores.event_log import LogKey, MemoryEventLog, SessionRecord
from uamp_stores.orphans import interrupt_lost
from uamp_trio.hosting.continuation import carry_on
from uamp_trio.hosting.turns import ResponseRunner

KEY = (ANONYMOUS.key, "sess_1")
QUESTION = ty.Message(role="user", content="what is 2+3?")


class Lost(Exception):
    """The process running the response died."""


def _calculator(calls: list[tuple[float, float]]) -> object:
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        calls.append((a, b))
        return a + b

    model = agent(model=_demo.demo(), tools=[tool(add, thread=False)], name="calc")
    return serve_agent(model, checkpoints=True)


async def _lose_after(endpoint: object, log: MemoryEventLog, extra: int) -> str:
    """Run the response into the log; the process dies ``extra`` events after a checkpoint."""
    request = TurnRequest(
        agent="calc", session_id=KEY[1], response_id="resp_1", messages=[QUESTION]
    )
    seen_checkpoint, left = False, extra

    async def sink(event: ev.Event) -> None:
        nonlocal seen_checkpoint, left
        if seen_checkpoint:
            if left == 0:
                raise Lost
            left -= 1
        event_id = f"evt_{len(await log.read(KEY, 0))}"
        log.append(KEY, encode(attrs.evolve(event, event_id=event_id)), event_id)
        seen_checkpoint |= type(event) is ev.Progress and event.stage == "checkpoint"

    with pytest.raises(Lost):
        await ResponseRunner(endpoint, request, sink).run()  # type: ignore[arg-type]
    return request.response_id


def lost_log(
    key: LogKey, agent: str, logged: list[ev.Event]
) -> tuple[MemoryEventLog, SessionRecord]:
    """A session whose response ``resp_1`` ran in a process that is gone, having logged ``logged``.

    Returns the log, which this process holds as the process that claimed
    the loss does, and the record, which names the lost process.
    """
    log = MemoryEventLog()
    record = SessionRecord(agent=agent, node="a-lost-process", running="resp_1")
    log.begin(key, attrs.evolve(record))
    for i, event in enumerate(logged):
        log.append(key, encode(attrs.evolve(event, event_id=f"evt_{i}")), f"evt_{i}")
    return log, record


@pytest.mark.parametrize("extra", [0, 3])
async def test_the_response_goes_on_from_its_checkpoint(extra: int) -> None:
    calls: list[tuple[float, float]] = []
    endpoint = _calculator(calls)
    log = MemoryEventLog()
    record = SessionRecord(agent="calc", node="a-lost-process")
    log.begin(KEY, attrs.evolve(record))
    running = await _lose_after(endpoint, log, extra)
    assert calls == [(2, 3)]
    record.running, record.input = running, unstructure([QUESTION])
    log.put_record(KEY, attrs.evolve(record))
    with trio.fail_after(10):
        await carry_on(log, KEY, record, endpoint, ANONYMOUS, None)  # type: ignore[arg-type]
    events = [decode(e.data) for e in await log.read(KEY, 0)]
    assert calls == [(2, 3)]  # the completed tool step was not run again
    restored = [e for e in events if type(e) is ev.Progress and e.stage == "restored"]
    assert len(restored) == 1
    done = events[-1]
    assert isinstance(done, ev.ResponseDone) and done.response_id == running
    kinds = [type(item).__name__ for item in done.response.output]
    assert kinds == ["ToolCallContent", "ToolResultContent", "TextContent"]
    assert done.response.output[2].text == "2 + 3 = 5"  # type: ignore[union-attr]
    # The session's record: nothing runs, and the conversation holds the answer.
    after = await log.load(KEY)
    assert after.running is None and after.input == []
    assert after.history[0]["content"] == "what is 2+3?"
    assert after.history[-1] == {"role": "assistant", "content": "2 + 3 = 5"}


async def test_without_a_checkpoint_it_ends_interrupted() -> None:
    deltas = [
        ev.ResponseDelta(response_id="resp_1", delta=ty.DeltaText(text=t)) for t in ["half ", "way"]
    ]
    log, record = lost_log(KEY, "calc", deltas)
    calls: list[tuple[float, float]] = []
    await carry_on(log, KEY, record, _calculator(calls), ANONYMOUS, None)  # type: ignore[arg-type]
    last = decode((await log.read(KEY, 0))[-1].data)
    assert isinstance(last, ev.ResponseErrorEvent) and last.error.code == "interrupted"
    assert last.error.details == {
        "partial_output": [{"type": "text", "text": "half way"}],
        "text": "half way",
    }
    assert calls == []
    assert (await log.load(KEY)).history == [{"role": "assistant", "content": "half way"}]


async def test_a_response_that_ended_in_the_log_is_not_ended_again() -> None:
    # Its writer was lost after it logged response.done, before its record said so
    # (or the record was read before it said so): only the record catches up.
    output = ty.ResponseOutput(
        id="resp_1", status="completed", output=[ty.TextContent(text="five")]
    )
    logged = [
        ev.ResponseCreated(response_id="resp_1"),
        ev.Progress(target="response", target_id="resp_1", stage="checkpoint", message="c1"),
        ev.ResponseDelta(response_id="resp_1", delta=ty.DeltaText(text="five")),
        ev.ResponseDone(response_id="resp_1", response=output),
    ]
    log, record = lost_log(KEY, "calc", logged)
    record.input = unstructure([QUESTION])
    calls: list[tuple[float, float]] = []
    await carry_on(log, KEY, record, _calculator(calls), ANONYMOUS, None)  # type: ignore[arg-type]
    events = [decode(e.data) for e in await log.read(KEY, 0)]
    assert [type(e) for e in events] == [type(e) for e in logged]  # no response.error after it
    assert calls == []
    after = await log.load(KEY)
    assert after.running is None and after.input == []
    assert after.history == [
        {"role": "user", "content": "what is 2+3?"},
        {"role": "assistant", "content": "five"},
    ]


async def test_a_lost_response_that_ended_in_the_log_is_not_ended_again() -> None:
    # The same for a server that ends a lost response rather than carrying it on.
    output = ty.ResponseOutput(id="resp_1", status="completed", output=[])
    log, record = lost_log(KEY, "calc", [ev.ResponseDone(response_id="resp_1", response=output)])
    log.release(KEY)  # a server that ends it claims and adopts it itself
    assert await interrupt_lost(log, KEY, record)
    assert [type(decode(e.data)) for e in await log.read(KEY, 0)] == [ev.ResponseDone]
    assert (await log.load(KEY)).running is None


class _HeldFlush(MemoryEventLog):
    """A log whose first flush once ``armed`` waits for ``go`` (a slow store's write)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.held = trio.Event()
        self.go = trio.Event()

    async def flush(self) -> None:
        if self.armed and not self.held.is_set():
            self.held.set()
            await self.go.wait()
        await super().flush()


async def test_a_session_that_goes_on_meanwhile_keeps_its_hold_on_the_log() -> None:
    # The continuation's last write says nothing runs; a client following the
    # log may start its next turn at once, and its session adopts the log
    # while the continuation still waits for that write. When the write
    # returns, the continuation lets go of its own hold only: the session's
    # stays (a release of any holder made the next turn's first event fail
    # with the log "not open in this process", which ended the connection).
    log = _HeldFlush()
    record = SessionRecord(agent="calc", node="a-lost-process", running="resp_1")
    log.begin(KEY, attrs.evolve(record))

    def carrying() -> None:
        """The continuation's hold."""

    def session() -> None:
        """The following session's hold."""

    await log.adopt(KEY, carrying)
    log.armed = True
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                carry_on,
                log,
                KEY,
                record,
                _calculator([]),
                ANONYMOUS,
                None,
                carrying,
            )
            await log.held.wait()  # the continuation's final write is on its way
            assert (await log.load(KEY)).running is None
            await log.adopt(KEY, session)  # the next turn takes the session on
            log.go.set()
    assert log.writing(KEY)
    last = (await log.window(KEY)).last  # the continuation's interrupted event
    entry = log.append(KEY, b"{}", "evt_next")  # the next turn's first event
    assert entry.position == last + 1
