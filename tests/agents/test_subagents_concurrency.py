"""Sub-agents as tools (UAP section 8) and structured concurrency of tool calls."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from uamp_agents import ToolContext, agent, tool
from uamp_agents.context import SubAgentDepthError, current_run
from uamp_agents.providers import function
from uamp_proto.types import Message, ToolDefinition


def replies(*items: Any) -> Any:
    queue = list(items)
    return function(lambda m, t: queue.pop(0))


async def test_sub_agent_runs_as_tool_and_is_tracked() -> None:
    child = agent(model=replies("child says hi"), name="helper", system="You help.")
    parent = agent(model=replies([("helper", {"task": "say hi"})], "parent done"), tools=[child])
    turn = await parent.run("go")
    assert turn.response.text == "parent done"
    (execution,) = turn.tool_executions
    assert execution.output.result == "child says hi"
    (child_turn,) = execution.child_turns
    assert child_turn.agent_id == child.id
    assert child_turn.parent_agent_id == parent.id
    assert child_turn.parent_turn_id == turn.id
    assert child_turn.messages[0].text == "say hi"
    # the child's usage is part of the parent's total
    assert turn.usage.total_tokens is not None and child_turn.usage.total_tokens is not None
    assert turn.usage.total_tokens > child_turn.usage.total_tokens > 0


async def test_sub_agent_without_model_inherits_parent_model_at_run_time() -> None:
    seen_by: list[str] = []

    def parent_fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        first = messages[0].text if messages else ""
        if first == "You help.":  # the child's conversation starts with its system prompt
            seen_by.append("child")
            return "inherited"
        seen_by.append("parent")
        if messages[-1].role == "tool":
            return "done"
        return [("helper", {"task": "t"})]

    child = agent(name="helper", system="You help.")
    parent = agent(model=function(parent_fn), tools=[child])
    turn = await parent.run("go")
    assert turn.tool_executions[0].output.result == "inherited"
    assert seen_by == ["parent", "child", "parent"]
    assert child.model is None  # resolved at execution time, not stored


async def test_sub_agent_with_own_model_never_inherits() -> None:
    child = agent(model=replies("own model"), name="helper")
    parent = agent(model=replies([("helper", {"task": "t"})], "done"), tools=[child])
    turn = await parent.run("go")
    assert turn.tool_executions[0].output.result == "own model"


async def test_inherited_config_flows_to_child() -> None:
    configs: list[dict[str, Any]] = []

    class Configurable:
        name = "cfg"
        model = "m"

        def __init__(self, inner: Any, config: dict[str, Any] | None = None) -> None:
            self.inner, self.config = inner, config

        def with_config(self, config: dict[str, Any]) -> Configurable:
            configs.append(config)
            return Configurable(self.inner, config)

        async def generate(self, request: Any) -> Any:
            return await self.inner.generate(request)

        def stream(self, request: Any) -> Any:
            return self.inner.stream(request)

    def child_tool(ctx: ToolContext) -> str:
        run = current_run()
        assert run is not None
        return str(run.config)

    inner = replies([("helper", {"task": "t"})], [("probe", {})], "child", "parent")
    child = agent(name="helper", tools=[tool(child_tool, name="probe")])
    parent = agent(model=Configurable(inner), config={"api_key": "k"}, tools=[child])
    turn = await parent.run("go")
    assert configs == [{"api_key": "k"}]
    child_turn = turn.tool_executions[0].child_turns[0]
    assert child_turn.tool_executions[0].output.result == "{'api_key': 'k'}"


async def test_custom_parameter_schema_passes_arguments_as_json() -> None:
    seen: list[str] = []

    def child_fn(messages: list[Message], tools: list[ToolDefinition]) -> str:
        seen.append(messages[-1].text)
        return "ok"

    child = agent(model=function(child_fn))
    t = child.to_tool(
        name="lookup", parameter_schema={"type": "object", "properties": {"q": {"type": "string"}}}
    )
    parent = agent(model=replies([("lookup", {"q": "cats"})], "done"), tools=[t])
    await parent.run("go")
    assert seen == ['{"q":"cats"}']


async def test_depth_limit_is_a_clear_error_result() -> None:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if messages[-1].role == "tool":
            return "stop: " + messages[-1].text
        return [("self", {"task": "again"})]

    me = agent(model=function(fn), name="self", max_depth=2)
    me.tools.append(me)
    me._tools.append(me.to_tool())  # an agent that calls itself
    turn = await me.run("go")
    # depth 0 -> 1 -> 2 run; the call from depth 2 fails with the limit error
    deepest = turn.tool_executions[0].child_turns[0].tool_executions[0].child_turns[0]
    error = deepest.tool_executions[0].output
    assert error.is_error
    assert error.result.startswith(
        "SubAgentDepthError: sub-agent nesting depth 3 exceeds the limit of 2"
    )
    assert deepest.response.text.startswith("stop: SubAgentDepthError")


async def test_depth_error_raised_directly_when_nested_by_hand() -> None:
    inner = agent(model=replies("never"), max_depth=0)

    async def call_inner() -> str:
        """Run a nested agent by hand."""
        return (await inner.run("x")).response.text

    outer = agent(model=replies([("call_inner", {})], "done"), tools=[call_inner], max_depth=0)
    turn = await outer.run("go")
    assert "SubAgentDepthError" in turn.tool_executions[0].output.result
    with pytest.raises(SubAgentDepthError):
        # top-level runs have depth 0, so max_depth=0 only forbids children
        async def nested() -> None:
            from uamp_agents.context import RunInfo, _running

            info = RunInfo(
                agent_id="a",
                turn_id="t",
                parent_agent_id=None,
                parent_turn_id=None,
                depth=0,
                max_depth=0,
                llm=inner.model,
                config={},
            )  # type: ignore[arg-type]
            with _running(info):
                await inner.run("x")

        await nested()


# --- concurrency ---------------------------------------------------------------


async def test_ten_slow_tools_run_concurrently(autojump_clock: trio.testing.MockClock) -> None:
    async def slow(i: int) -> int:
        """Sleep 100 ms."""
        await trio.sleep(0.1)
        return i

    calls = [("slow", {"i": i}) for i in range(10)]
    a = agent(model=replies(calls, "done"), tools=[slow])
    start = trio.current_time()
    turn = await a.run("go")
    elapsed = trio.current_time() - start
    assert elapsed == pytest.approx(0.1)  # virtual time: concurrent, not 1.0 s
    assert [e.output.result for e in turn.tool_executions] == [str(i) for i in range(10)]


async def test_results_in_call_order_and_failure_does_not_cancel_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    finished: list[int] = []

    async def work(i: int, delay: float) -> int:
        await trio.sleep(delay)
        if i == 1:
            raise ValueError("bad one")
        finished.append(i)
        return i

    calls = [
        ("work", {"i": 0, "delay": 0.3}),
        ("work", {"i": 1, "delay": 0.1}),
        ("work", {"i": 2, "delay": 0.2}),
    ]
    turn = await agent(model=replies(calls, "done"), tools=[work]).run("go")
    assert finished == [2, 0]  # finished by time, the failure cancelled nothing
    results = [(e.output.result, bool(e.output.is_error)) for e in turn.tool_executions]
    assert results == [("0", False), ("ValueError: bad one", True), ("2", False)]
    tool_msgs = [m for m in turn.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == [e.call.id for e in turn.tool_executions]


async def test_concurrent_sub_agents(autojump_clock: trio.testing.MockClock) -> None:
    async def nap() -> str:
        await trio.sleep(1)
        return "rested"

    def sub(name: str) -> Any:
        return agent(model=replies([("nap", {})], f"{name} rested"), tools=[nap], name=name)

    parent = agent(
        model=replies([("a", {"task": "x"}), ("b", {"task": "y"})], "both"),
        tools=[sub("a"), sub("b")],
    )
    start = trio.current_time()
    turn = await parent.run("go")
    assert trio.current_time() - start == pytest.approx(1.0)
    assert [e.output.result for e in turn.tool_executions] == ["a rested", "b rested"]


async def test_sequential_tool_is_a_barrier(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[str, float]] = []

    async def par(i: int) -> None:
        await trio.sleep(0.1)
        log.append((f"par{i}", trio.current_time()))

    @tool(sequential=True)
    async def seq() -> None:
        log.append(("seq-start", trio.current_time()))
        await trio.sleep(0.1)

    calls = [("par", {"i": 0}), ("par", {"i": 1}), ("seq", {}), ("par", {"i": 2})]
    start = trio.current_time()
    await agent(model=replies(calls, "done"), tools=[par, seq]).run("go")
    times = dict(log)
    assert times["seq-start"] - start == pytest.approx(0.1)  # after par0 and par1 finished
    assert times["par2"] - start == pytest.approx(0.3)  # after seq
    assert times["par0"] - start == pytest.approx(0.1) and times["par1"] - start == pytest.approx(
        0.1
    )


async def test_cancelling_a_run_cancels_every_call(autojump_clock: trio.testing.MockClock) -> None:
    cancelled: list[int] = []

    async def forever(i: int) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(i)
            raise

    a = agent(model=replies([("forever", {"i": i}) for i in range(3)]), tools=[forever])
    with trio.move_on_after(5) as scope:
        await a.run("go")
    assert scope.cancelled_caught
    assert sorted(cancelled) == [0, 1, 2]
