"""Streaming (UAP section 12): event order, sources, turn, abort, backpressure."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from uamp_agents import AgentStreamEvent, agent
from uamp_agents.providers import function
from uamp_proto.events import ResponseDelta, UsageDelta
from uamp_proto.types import DeltaToolCall, Message, ToolDefinition


def replies(*items: Any) -> Any:
    queue = list(items)
    return function(lambda m, t: queue.pop(0))


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def label(event: AgentStreamEvent) -> str:
    if event.source == "uap":
        assert event.uap is not None
        return event.uap.type
    assert event.upp is not None
    if isinstance(event.upp, ResponseDelta):
        return "tool_delta" if isinstance(event.upp.delta, DeltaToolCall) else "text"
    return event.upp.type


async def test_events_in_chronological_order_with_sources() -> None:
    a = agent(model=replies([("add", {"a": 1, "b": 2})], "three it is"), tools=[add])
    stream = a.stream("1+2?")
    events = [e async for e in stream]
    labels = [label(e) for e in events]
    assert labels == [
        "step_start", "tool_delta", "tool_delta", "usage.delta", "action", "observation",
        "step_end", "step_start", "text", "text", "text", "usage.delta", "step_end",
    ]  # fmt: skip
    for e in events:
        if e.source == "uap":
            assert e.uap is not None and e.upp is None
            assert e.uap.agent_id == a.id
        else:
            assert e.upp is not None and e.uap is None
    steps = [e.uap.step for e in events if e.uap is not None]
    assert steps == [1, 1, 1, 1, 2, 2]
    action = next(e.uap for e in events if e.uap is not None and e.uap.type == "action")
    assert [c.name for c in action.data["tool_calls"]] == ["add"]
    observation = next(e.uap for e in events if e.uap is not None and e.uap.type == "observation")
    assert observation.data["results"][0].result == "3"
    end = next(e.uap for e in events if e.uap is not None and e.uap.type == "step_end")
    assert end.data["step_number"] == 1 and end.data["usage"].total_tokens > 0
    turn = await stream.turn
    assert "".join(e.text for e in events) == turn.response.text == "three it is"
    assert turn.usage.total_tokens == sum(
        e.upp.delta.total_tokens for e in events if isinstance(e.upp, UsageDelta)
    )


async def test_turn_without_iterating_and_async_with_form() -> None:
    a = agent(model=replies("one", "two"))
    assert (await a.stream("x").turn).response.text == "one"
    async with a.stream("y") as stream:
        texts = [e.text async for e in stream]
    assert "".join(texts) == "two"
    assert stream.done and (await stream.turn).response.text == "two"


async def test_errors_reach_iteration_and_turn() -> None:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        raise RuntimeError("model down")

    stream = agent(model=function(fn)).stream("x")
    with pytest.raises(RuntimeError, match="model down"):
        async for _ in stream:
            pass
    with pytest.raises(RuntimeError, match="model down"):
        await stream.turn


async def test_abort_cancels_calls_in_flight_and_resolves_partial_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cancelled: list[int] = []

    async def slow(i: int) -> int:
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            cancelled.append(i)
            raise
        return i

    async def quick() -> str:
        return "fast"

    calls = [("slow", {"i": 0}), ("quick", {}), ("slow", {"i": 1})]
    a = agent(model=replies(calls, "never"), tools=[slow, quick])
    stream = a.stream("go")
    async for event in stream:
        if event.uap is not None and event.uap.type == "action":
            await trio.sleep(1)  # let the calls start
            stream.abort()
    turn = await stream.turn
    assert sorted(cancelled) == [0, 1]
    assert trio.current_time() < 10
    assert turn.status == "aborted" and turn.stop_reason == "aborted"
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "tool", "tool"]
    results = [(e.output.result, bool(e.output.is_error)) for e in turn.tool_executions]
    assert results == [("cancelled", True), ("fast", False), ("cancelled", True)]


async def test_abort_before_start_and_leaving_async_with_early() -> None:
    stream = agent(model=replies("never")).stream("x")
    stream.abort()
    turn = await stream.turn
    assert turn.status == "aborted" and turn.messages == [Message(role="user", content="x")]

    a = agent(model=replies("a b c d e f"), stream_buffer=1)
    async with a.stream("y") as s:
        async for event in s:
            if event.source == "uap":  # step_start; leave right away
                break
    turn = await s.turn
    assert turn.status == "aborted" and s.done


async def test_abort_mid_text_keeps_partial_text() -> None:
    a = agent(model=replies("alpha beta gamma delta"))
    stream = a.stream("x")
    got = ""
    async for event in stream:
        got += event.text
        if got == "alpha beta ":
            stream.abort()
    turn = await stream.turn
    assert turn.status == "aborted"
    assert turn.response.text.startswith("alpha beta ")


async def test_bounded_channel_applies_backpressure() -> None:
    model = replies("one two three four five six seven eight")
    a = agent(model=model, stream_buffer=1)
    stream = a.stream("x")
    first = await stream.__anext__()
    assert label(first) == "step_start"
    await trio.testing.wait_all_tasks_blocked()
    assert not stream.done  # the run waits for the reader
    rest = [e async for e in stream]
    assert len(rest) == 8 + 2  # eight words, usage, step_end
    assert stream.done


async def test_checkpoint_events_from_on_step() -> None:
    seen: list[int] = []

    async def on_step(step: int, state: Any) -> str:
        seen.append(step)
        return f"cp-{step}"

    a = agent(model=replies([("add", {"a": 1, "b": 1})], "two"), tools=[add])
    stream = a.stream("x", on_step=on_step)
    events = [e.uap for e in stream_events(await collect(stream))]
    checkpoints = [(u.step, u.data["checkpoint_id"]) for u in events if u.type == "checkpoint"]
    assert checkpoints == [(1, "cp-1"), (2, "cp-2")] and seen == [1, 2]
    order = [u.type for u in events]
    assert order.index("checkpoint") == order.index("step_end") + 1


async def collect(stream: Any) -> list[AgentStreamEvent]:
    return [e async for e in stream]


def stream_events(events: list[AgentStreamEvent]) -> list[AgentStreamEvent]:
    return [e for e in events if e.source == "uap"]


async def test_entering_a_started_stream_and_aclose() -> None:
    stream = agent(model=replies("a b")).stream("x")
    await stream.__anext__()
    with pytest.raises(RuntimeError, match="already started"):
        async with stream:
            pass
    await stream.aclose()
    turn = await stream.turn
    assert turn.status in ("aborted", "completed") and stream.done


async def test_drive_hands_every_event_to_the_consumer_in_this_task() -> None:
    def make() -> Any:
        return agent(model=replies([("add", {"a": 1, "b": 2})], "three it is"), tools=[add])

    iterated = [label(e) async for e in make().stream("1+2?")]
    seen: list[str] = []
    tasks: set[object] = set()

    async def consumer(event: AgentStreamEvent) -> None:
        seen.append(label(event))
        tasks.add(trio.lowlevel.current_task())

    stream = make().stream("1+2?")
    turn = await stream.drive(consumer)
    assert seen == iterated  # the same events, in the same order, as iterating
    assert tasks == {trio.lowlevel.current_task()}  # no task in between
    assert turn.response.text == "three it is" and turn.status == "completed"
    assert stream.done and (await stream.turn) is turn
    with pytest.raises(RuntimeError, match="already started"):
        await stream.drive(consumer)


async def test_drive_consumer_failure_aborts_the_run_and_raises_it() -> None:
    model = replies("alpha beta gamma delta", "never asked")
    a = agent(model=model)
    texts: list[str] = []

    async def consumer(event: AgentStreamEvent) -> None:
        texts.append(event.text)
        if event.text == "beta ":
            raise ConnectionError("peer gone")

    stream = a.stream("x")
    with pytest.raises(ConnectionError, match="peer gone"):
        await stream.drive(consumer)
    # Nothing reached the consumer after its failure; the run ended there.
    assert "".join(texts) == "alpha beta "
    assert stream.done and model.calls == 1
    turn = await stream.turn
    assert turn.status == "aborted"


async def test_drive_raises_the_runs_error() -> None:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        raise RuntimeError("model down")

    stream = agent(model=function(fn)).stream("x")
    with pytest.raises(RuntimeError, match="model down"):
        await stream.drive(lambda e: trio.lowlevel.checkpoint())
    with pytest.raises(RuntimeError, match="model down"):
        await stream.turn
