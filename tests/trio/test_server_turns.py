"""The turn driver: lifecycle events, cancellation, errors, tool calls, backpressure."""

from __future__ import annotations

import trio
import trio.testing

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.agent import AgentError, Emit, TurnRequest
from uamp_trio.turns import open_turn

TIMEOUT = 10


class ScriptedAgent:
    """Emits ``count`` text deltas, then behaves as ``mode`` says."""

    def __init__(self, mode: str = "ok", count: int = 3) -> None:
        self.mode = mode
        self.count = count
        self.emitted = 0
        self.blocked = trio.Event()

    @property
    def name(self) -> str:
        return "scripted"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="scripted", provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(self.count):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"t{i} ")))
            self.emitted += 1
        await emit(ev.UsageDelta(delta=ty.UsageStats(input_tokens=1, output_tokens=2)))
        if self.mode == "hang":
            self.blocked.set()
            await trio.sleep_forever()
        elif self.mode == "agent_error":
            raise AgentError("tool_failed", "the tool broke", {"tool": "x"})
        elif self.mode == "crash":
            raise KeyError("oops")
        elif self.mode == "tool":
            await emit(ev.ToolCall(call_id="c1", name="lookup", arguments='{"q": 1}'))


def request() -> TurnRequest:
    return TurnRequest(
        agent="scripted",
        session_id="sess_1",
        response_id="resp_1",
        messages=[ty.Message(role="user", content="hi")],
    )


async def run(agent: ScriptedAgent, buffer: int = 16):  # type: ignore[no-untyped-def]
    events = []
    async with open_turn(agent, request(), buffer=buffer) as turn:
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
        async with open_turn(agent, request()) as turn:
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
        assert isinstance(events[-1], ev.ResponseError)
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
        async with open_turn(agent, request(), buffer=2) as turn:
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
        async with open_turn(agent, request(), buffer=1) as turn:
            async for event in turn:
                if isinstance(event, ev.ResponseDelta):
                    break
        assert turn.outcome is None
