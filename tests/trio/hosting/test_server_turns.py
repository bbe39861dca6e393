"""The turn driver: lifecycle events, cancellation, errors, tool calls, backpressure.

Both faces are covered: :func:`open_response` (events through a channel) and the
inline :class:`ResponseRunner` (events handed to a sink callback).
"""

from __future__ import annotations

import contextlib

import trio
import trio.testing

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_trio.hosting.turns import ResponseRunner, open_response, run_response

TIMEOUT = 10


class ScriptedAgent(TestAgent):
    """Emits ``count`` text deltas, then behaves as ``mode`` says."""

    name = "scripted"

    def __init__(self, mode: str = "ok", count: int = 3) -> None:
        self.mode = mode
        self.count = count
        self.emitted = 0
        self.blocked = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(self.count):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"t{i} ")))
            self.emitted += 1
        await emit(ev.UsageDelta(delta=ty.UsageStats(input_tokens=1, output_tokens=2)))
        if self.mode == "hang":
            self.blocked.set()
            await trio.sleep_forever()
        elif self.mode == "agent_error":
            raise ResponderError("tool_failed", "the tool broke", {"tool": "x"})
        elif self.mode == "crash":
            raise KeyError("oops")
        elif self.mode == "tool":
            await emit(ev.ToolCall(call_id="c1", name="lookup", arguments='{"q": 1}'))
        elif self.mode == "pay":
            raise PaymentRequiredError(ty.PaymentRequirements(amount="0.50", currency="USD"))
        elif self.mode == "terminal":
            output = ty.ResponseOutput(id="x", status="completed", output=[])
            await emit(ev.ResponseDone(response=output))
        elif self.mode == "swallow":
            # An agent that ignores emit's failure and goes on.
            for _ in range(3):
                with contextlib.suppress(Exception):
                    await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x")))


def request() -> TurnRequest:
    return TurnRequest(
        agent="scripted",
        session_id="sess_1",
        response_id="resp_1",
        messages=[ty.Message(role="user", content="hi")],
    )


async def run(agent: ScriptedAgent, buffer: int = 16):  # type: ignore[no-untyped-def]
    events = []
    async with open_response(agent, request(), buffer=buffer) as turn:
        async for event in turn:
            events.append(event)
    return turn.outcome, events


async def test_completed_turn_sends_created_deltas_done() -> None:
    with trio.fail_after(TIMEOUT):
        outcome, events = await run(ScriptedAgent())
    assert isinstance(events[0], ev.ResponseCreated) and events[0].response_id == "resp_1"
    assert [type(e) for e in events[1:]] == [ev.ResponseDelta] * 3 + [
        ev.UsageDelta,
        ev.ResponseDone,
    ]
    assert all(e.response_id == "resp_1" and e.session_id == "sess_1" for e in events)
    done = events[-1]
    assert done.response.status == "completed"
    assert done.response.output == [ty.TextContent(text="t0 t1 t2 ")]
    assert done.response.usage.total_tokens == 3
    assert outcome.status == "completed" and outcome.final is done


async def test_cancel_gives_response_cancelled_with_partial_output() -> None:
    with trio.fail_after(TIMEOUT):
        agent = ScriptedAgent("hang", count=2)
        events = []
        async with open_response(agent, request()) as turn:
            async for event in turn:
                events.append(event)
                if isinstance(event, ev.UsageDelta):
                    await agent.blocked.wait()
                    turn.cancel()
    assert isinstance(events[-1], ev.ResponseCancelled)
    assert events[-1].partial_output == [ty.TextContent(text="t0 t1 ")]
    assert turn.outcome is not None and turn.outcome.status == "cancelled"


async def test_agent_error_and_crash_become_response_error() -> None:
    with trio.fail_after(TIMEOUT):
        outcome, events = await run(ScriptedAgent("agent_error"))
        assert isinstance(events[-1], ev.ResponseErrorEvent)
        assert events[-1].error == ty.ErrorInfo(
            code="tool_failed", message="the tool broke", details={"tool": "x"}
        )
        assert outcome.status == "failed" and outcome.error.code == "tool_failed"
        outcome, events = await run(ScriptedAgent("crash"))
        assert events[-1].error.code == "internal_error"
        assert "KeyError" in events[-1].error.message


async def test_client_tool_call_leaves_the_turn_requiring_action() -> None:
    with trio.fail_after(TIMEOUT):
        outcome, events = await run(ScriptedAgent("tool"))
    assert isinstance(events[-1], ev.ToolCall)  # no terminal event
    assert outcome.status == "requires_action" and outcome.final is None
    assert outcome.pending_tool_calls == [
        ty.ToolInvocation(id="c1", name="lookup", arguments='{"q": 1}')
    ]


async def test_emit_applies_backpressure() -> None:
    with trio.fail_after(TIMEOUT):
        agent = ScriptedAgent(count=50)
        async with open_response(agent, request(), buffer=2) as turn:
            seen = 0
            async for _ in turn:
                seen += 1
                if seen == 3:
                    await trio.testing.wait_all_tasks_blocked()
                    # created + 2 buffered + 1 blocked in send: the agent is held back.
                    assert agent.emitted <= 4
        assert agent.emitted == 50


async def test_leaving_early_cancels_the_agent() -> None:
    with trio.fail_after(TIMEOUT):
        agent = ScriptedAgent("hang", count=1)
        async with open_response(agent, request(), buffer=1) as turn:
            async for event in turn:
                if isinstance(event, ev.ResponseDelta):
                    break
        assert turn.outcome is None


# --- the inline runner -----------------------------------------------------------------


class Collect:
    """A sink that records events; optionally fails on the ``fail_at``-th one."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.events: list[ev.Event] = []
        self.fail_at = fail_at

    async def __call__(self, event: ev.Event) -> None:
        if self.fail_at is not None and len(self.events) == self.fail_at:
            raise trio.BrokenResourceError("peer gone")
        self.events.append(event)


async def test_inline_runner_has_the_same_contract_as_open_turn() -> None:
    for mode in ("ok", "agent_error", "crash", "tool"):
        with trio.fail_after(TIMEOUT):
            outcome, events = await run(ScriptedAgent(mode))
            sink = Collect()
            inline = await run_response(ScriptedAgent(mode), request(), sink)
        assert [type(e) for e in sink.events] == [type(e) for e in events], mode
        assert sink.events == events, mode
        assert inline.status == outcome.status and inline.final == outcome.final, mode


async def test_inline_runner_delivers_without_task_switches() -> None:
    # Every event reaches the sink while the agent is still inside respond().
    order: list[str] = []

    class Agent(ScriptedAgent):
        async def respond(self, request: TurnRequest, emit: Emit) -> None:
            order.append("agent")
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="a")))
            order.append("after emit")

    async def sink(event: ev.Event) -> None:
        order.append(type(event).__name__)

    with trio.fail_after(TIMEOUT):
        outcome = await run_response(Agent(), request(), sink)
    assert order == ["ResponseCreated", "agent", "ResponseDelta", "after emit", "ResponseDone"]
    assert outcome.status == "completed"


async def test_inline_cancel_gives_partial_output_also_before_run() -> None:
    with trio.fail_after(TIMEOUT):
        sink = Collect()
        agent = ScriptedAgent("hang", count=2)
        runner = ResponseRunner(agent, request(), sink)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.run)
            await agent.blocked.wait()
            runner.cancel()
        assert runner.outcome is not None and runner.outcome.status == "cancelled"
        final = runner.outcome.final
        assert sink.events[-1] == final and isinstance(final, ev.ResponseCancelled)
        assert final.partial_output == [ty.TextContent(text="t0 t1 ")]

        early = Collect()
        runner = ResponseRunner(ScriptedAgent("hang"), request(), early)
        runner.cancel()
        outcome = await runner.run()
    assert runner.cancel_requested and outcome.status == "cancelled"
    assert [type(e) for e in early.events] == [ev.ResponseCreated, ev.ResponseCancelled]


async def test_payment_required_becomes_its_own_error_code() -> None:
    with trio.fail_after(TIMEOUT):
        outcome, events = await run(ScriptedAgent("pay"))
    assert outcome.status == "failed" and outcome.error is not None
    assert outcome.error.code == "payment_required"
    assert outcome.error.details is not None and outcome.error.details["accepts"]
    assert events[-1] == outcome.final


async def test_an_agent_may_not_send_the_terminal_event() -> None:
    with trio.fail_after(TIMEOUT):
        sink = Collect()
        outcome = await run_response(ScriptedAgent("terminal"), request(), sink)
    assert outcome.status == "failed" and outcome.error is not None
    assert outcome.error.code == "internal_error"
    terminals = [e for e in sink.events if isinstance(e, ev.ResponseDone | ev.ResponseErrorEvent)]
    assert terminals == [outcome.final]


async def test_a_failing_sink_stops_the_agent_and_is_reraised() -> None:
    for mode, fail_at in (("ok", 2), ("ok", 0), ("swallow", 5)):
        sink = Collect(fail_at=fail_at)
        runner = ResponseRunner(ScriptedAgent(mode, count=3), request(), sink)
        with trio.fail_after(TIMEOUT):
            try:
                await runner.run()
            except trio.BrokenResourceError:
                pass
            else:
                raise AssertionError("the sink's error was swallowed")
        assert len(sink.events) == fail_at, mode
        assert runner.outcome is None  # no terminal event: nowhere to send it


async def test_later_tool_round_continues_the_tracker_without_created() -> None:
    with trio.fail_after(TIMEOUT):
        first = Collect()
        outcome = await run_response(ScriptedAgent("tool", count=1), request(), first)
        assert outcome.status == "requires_action"
        outcome.tracker.add_tool_result("c1", "42")
        second = Collect()
        done = await run_response(
            ScriptedAgent(count=1), request(), second, tracker=outcome.tracker, created=False
        )
    assert not any(isinstance(e, ev.ResponseCreated) for e in second.events)
    assert done.status == "completed" and done.tracker is outcome.tracker
    assert isinstance(done.final, ev.ResponseDone)
    assert done.final.response.usage is not None
    assert done.final.response.usage.total_tokens == 6  # both rounds counted


async def test_an_agent_that_never_waits_still_yields() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async def sink(event: ev.Event) -> None:
        pass  # never waits

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)  # runs only when the runner yields
            await run_response(ScriptedAgent(count=200), request(), sink)
            nursery.cancel_scope.cancel()
    assert ticks > 0


async def test_unstamped_untracked_runner_leaves_ids_and_tracking_to_the_sink() -> None:
    # stamp=False / track=False: the sink gets the agent's events as they are
    # and applies them to the shared tracker itself; the outcome is the same.
    from uamp_proto.response import ResponseTracker

    for mode in ("ok", "agent_error", "tool"):
        with trio.fail_after(TIMEOUT):
            stamped = Collect()
            expected = await run_response(ScriptedAgent(mode), request(), stamped)
            req = request()
            tracker = ResponseTracker(req.response_id, req.messages)
            seen: list[ev.Event] = []

            async def sink(
                event: ev.Event, tracker: ResponseTracker = tracker, seen: list[ev.Event] = seen
            ) -> None:
                tracker.apply(event)
                seen.append(event)

            runner = ResponseRunner(
                ScriptedAgent(mode), req, sink, tracker=tracker, stamp=False, track=False
            )
            outcome = await runner.run()
        assert outcome.status == expected.status, mode
        assert outcome.tracker is tracker and tracker.output == expected.tracker.output, mode
        assert outcome.pending_tool_calls == expected.pending_tool_calls, mode
        assert [type(e) for e in seen] == [type(e) for e in stamped.events], mode
        deltas = [e for e in seen if type(e) is ev.ResponseDelta]
        assert deltas and all(e.session_id is None and e.response_id is None for e in deltas)
        assert all(e.session_id == "sess_1" for e in stamped.events), mode


async def test_a_turn_without_a_sink_still_tracks_ends_and_maps_errors() -> None:
    with trio.fail_after(TIMEOUT):
        done = await run_response(ScriptedAgent(), request(), None)
        failed = await run_response(ScriptedAgent("agent_error", count=1), request(), None)
        tool = await run_response(ScriptedAgent("tool", count=0), request(), None)
    assert done.status == "completed" and done.tracker.text == "t0 t1 t2 "
    assert isinstance(done.final, ev.ResponseDone) and done.final.session_id == "sess_1"
    assert done.final.response.usage is not None and done.final.response.usage.total_tokens == 3
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "tool_failed" and failed.tracker.text == "t0 "
    assert tool.status == "requires_action" and tool.final is None
    assert [c.name for c in tool.pending_tool_calls] == ["lookup"]


async def test_a_turn_without_a_sink_ends_as_one_with_a_sink() -> None:
    """No sink: no ``response.created`` is built, and the turn ends the same way."""
    for mode, count in (("ok", 3), ("agent_error", 1), ("crash", 0), ("tool", 0)):
        seen: list[ev.Event] = []

        async def sink(event: ev.Event, seen: list[ev.Event] = seen) -> None:
            seen.append(event)

        with trio.fail_after(TIMEOUT):
            quiet = await run_response(ScriptedAgent(mode, count), request(), None)
            heard = await run_response(ScriptedAgent(mode, count), request(), sink)
        assert type(seen[0]) is ev.ResponseCreated, mode
        assert quiet.status == heard.status and quiet.final == heard.final, mode
        assert quiet.tracker.state is heard.tracker.state, mode
        assert quiet.tracker.output == heard.tracker.output, mode
        assert quiet.tracker.usage == heard.tracker.usage, mode
        assert quiet.pending_tool_calls == heard.pending_tool_calls, mode
