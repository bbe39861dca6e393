"""``Agent.drive`` (no stream object, no abort scope) against ``stream(...).drive``.

Differential, on every run of a small space -- tool rounds, the model
streamed or not, step events streamed or not, a consumer that fails at any
event -- both ways hand the consumer the same events, end with the same turn
or raise the same error, and the tools see the same things; so does
``drive`` with the model's events handed to an ``upp`` consumer, and the
agent's to a ``uap`` one, as they are (no stream event around them), either
way. An agent whose
run could tell the difference (a tool handed the run's context, middleware,
hooks, the plan strategy, a tracer) drives the stream's way.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pytest
import trio

from uamp_agents import AgentStrategy, AgentStreamEvent, ToolContext, agent, tool
from uamp_agents.execution import plan, react
from uamp_agents.middleware import Middleware
from uamp_agents.providers import function
from uamp_agents.streaming import UAPEvent
from uamp_agents.tracing import set_tracer


def _scripted(rounds: list[str], log: list[str], reporting: bool = True) -> Any:
    """An agent whose model calls ``rounds`` (one tool a step), then answers.

    ``reporting``: with ``report``, a tool that takes the run's context.
    """
    replies: list[Any] = [[(name, {"a": 1, "b": 2})] for name in rounds]
    replies.append("three it is")

    async def add(a: int, b: int) -> int:
        """Add."""
        log.append("add")
        return a + b

    async def report(ctx: ToolContext[Any], a: int, b: int) -> str:
        """Report progress twice, then answer."""
        log.append("report start")
        try:
            await ctx.progress("halfway")
            await trio.lowlevel.checkpoint()
            await ctx.progress("almost")
        except BaseException as exc:
            log.append(f"report stopped: {type(exc).__bases__[0].__name__}")
            raise
        log.append("report end")
        return "reported"

    async def mul(a: int, b: int) -> int:
        """Multiply."""
        log.append("mul")
        await trio.lowlevel.checkpoint()
        return a * b

    model = function(lambda messages, tools: replies.pop(0))
    tools = [tool(add), tool(mul)] + ([tool(report)] if reporting else [])
    return agent(model=model, tools=tools, name="calc")


def _shape(event: AgentStreamEvent) -> Any:
    """An event without what differs between two agents (ids)."""
    if event.uap is not None:
        return _uap_shape(event.uap)
    return ("upp", repr(event.upp))


def _uap_shape(event: UAPEvent) -> Any:
    data = {k: v for k, v in event.data.items() if k != "step_id"}
    return ("uap", event.type, event.step, repr(data))


async def _run(
    fast: bool, rounds: list[str], options: dict[str, Any], fail_at: int | None, direct: str = ""
) -> Any:
    log: list[str] = []
    seen: list[Any] = []
    a = _scripted(rounds, log, reporting="report" in rounds)
    assert a._drives_bare() == ("report" not in rounds)

    async def consumer(event: AgentStreamEvent) -> None:
        if len(seen) == fail_at:
            raise ConnectionError("peer gone")
        seen.append(_shape(event))

    async def model_events(event: Any) -> None:
        if len(seen) == fail_at:
            raise ConnectionError("peer gone")
        seen.append(("upp", repr(event)))

    async def agent_events(event: UAPEvent) -> None:
        if len(seen) == fail_at:
            raise ConnectionError("peer gone")
        seen.append(_uap_shape(event))

    try:
        if direct:
            given = {
                "upp": model_events if "upp" in direct else None,
                "uap": agent_events if "uap" in direct else None,
            }
            turn = await a.drive("1+2?", consumer=consumer, **given, **options)
        elif fast:
            turn = await a.drive("1+2?", consumer=consumer, **options)
        else:
            turn = await a.stream("1+2?", **options).drive(consumer)
    except Exception as exc:
        return seen, log, ("raised", type(exc).__name__, str(exc))
    ended = (
        turn.status,
        turn.stop_reason,
        turn.response.text,
        turn.steps,
        turn.usage,
        [(m.role, m.text) for m in turn.messages],
        [(e.call.name, e.output.result) for e in turn.tool_executions],
    )
    return seen, log, ("turn", ended)


_TOOLS = ["add", "mul", "report"]
_ROUNDS = [list(r) for n in range(3) for r in itertools.product(_TOOLS, repeat=n)]


@pytest.mark.parametrize("stream_model", [True, False])
@pytest.mark.parametrize("stream_steps", [True, False])
def test_drive_matches_the_streams_drive(stream_model: bool, stream_steps: bool) -> None:
    """Every run of up to two tool rounds, its consumer failing at each event in turn (or never)."""
    options = {"stream_model": stream_model, "stream_steps": stream_steps}
    for rounds in _ROUNDS:
        whole = trio.run(_run, False, rounds, options, None)
        assert whole[2][0] == "turn"
        for fail_at in [None, *range(len(whole[0]) + 1)]:
            general = trio.run(_run, False, rounds, options, fail_at)
            fast = trio.run(_run, True, rounds, options, fail_at)
            assert fast == general, (rounds, fail_at)
            for direct in ("upp", "uap", "upp uap"):
                handed = trio.run(_run, True, rounds, options, fail_at, direct)
                assert handed == general, (rounds, fail_at, direct)


async def test_without_step_events_the_stream_leaves_only_those_out() -> None:
    async def run(steps: bool) -> list[str]:
        seen: list[str] = []

        async def consumer(event: AgentStreamEvent) -> None:
            seen.append(event.uap.type if event.uap is not None else type(event.upp).__name__)

        await _scripted(["add"], [], False).drive("1+2?", consumer=consumer, stream_steps=steps)
        return seen

    full, quiet = await run(True), await run(False)
    assert "step_start" in full and "step_end" in full
    assert quiet == [kind for kind in full if kind not in ("step_start", "step_end")]


async def test_listeners_still_see_step_events_and_an_aborted_runs_turn() -> None:
    """Middleware (``on_event``, ``after``) runs ``drive`` the stream's way: it sees it all."""
    events: list[str] = []
    after: list[str] = []

    class Watch(Middleware):
        async def on_event(self, context: Any, event: UAPEvent) -> None:
            events.append(event.type)

        async def after(self, context: Any, turn: Any) -> Any:
            after.append(turn.status)
            return turn

    a = _scripted(["add"], [], False)
    a.middleware.append(Watch())
    assert not a._drives_bare()
    shown: list[AgentStreamEvent] = []

    async def consumer(event: AgentStreamEvent) -> None:
        if event.uap is not None and event.uap.type == "observation":
            raise ConnectionError("peer gone")
        shown.append(event)

    with pytest.raises(ConnectionError, match="peer gone"):
        await a.drive("1+2?", consumer=consumer, stream_steps=False)
    assert events[0] == "step_start" and "observation" in events
    assert not any(e.uap is not None and e.uap.type.startswith("step_") for e in shown)
    assert after == ["aborted"]


def test_what_keeps_the_abort_scope() -> None:
    def bare(**changes: Any) -> bool:
        a = _scripted([], [], reporting=changes.pop("reporting", False))
        for name, value in changes.items():
            setattr(a, name, value)
        return bool(a._drives_bare())

    assert bare()
    assert not bare(reporting=True)
    assert not bare(middleware=[Middleware()])
    assert not bare(strategy=AgentStrategy(on_complete=lambda turn: None))
    assert not bare(strategy=AgentStrategy(on_error=lambda exc, state: None))
    assert bare(strategy=AgentStrategy(on_step_start=lambda step, state: None))
    assert bare(execution=react())
    assert not bare(execution=plan())

    class Tracer:
        def model_call(self, agent: str, provider: str, model: str) -> Any:
            return contextlib.nullcontext()

        def tool_call(self, agent: str, tool: str, call_id: str) -> Any:
            return contextlib.nullcontext()

    set_tracer(Tracer())
    try:
        assert not bare()
    finally:
        set_tracer(None)
    assert bare()
