"""Level 5 (UAP section 15.1): react(), plan(), custom strategies, hooks (section 11)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio
import trio.testing

from uamp_agents import ToolContext, Turn, agent
from uamp_agents.context import ExecutionContext
from uamp_agents.execution import ExecutionStrategy, PlanError, format_observations, plan, react
from uamp_agents.providers import function
from uamp_proto.types import Message, ToolDefinition, ToolInvocation, ToolOutput


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def recorder() -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    log: list[tuple[Any, ...]] = []
    hooks: dict[str, Any] = {
        "on_step_start": lambda step, state: log.append(("start", step)),
        "on_reason": lambda step, text: log.append(("reason", step, text)),
        "on_act": lambda step, calls: log.append(("act", step, [c.name for c in calls])),
        "on_observe": lambda step, outs: log.append(("observe", step, [o.result for o in outs])),
        "on_step_end": lambda step, result: log.append(("end", step, result.turn.response.text)),
        "stop_condition": lambda state: log.append(("stop?", state.step)) or False,
        "on_complete": lambda turn: log.append(("complete", turn.response.text)),
    }
    return hooks, log


def react_model() -> Any:
    """Reasons when offered no tools; acts with add once, then answers."""

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        has_result = any(m.role == "tool" for m in messages)
        if not tools:
            return "I have the sum" if has_result else "I should add 2 and 3"
        return "The sum is 5" if has_result else [("add", {"a": 2, "b": 3})]

    return function(fn)


async def test_react_phases_hooks_order_and_reasoning() -> None:
    hooks, log = recorder()
    a = agent(model=react_model(), tools=[add], execution=react(), strategy=hooks)
    turn = await a.run("2+3?")
    assert log == [
        ("start", 1),
        ("reason", 1, "I should add 2 and 3"),
        ("act", 1, ["add"]),
        ("observe", 1, ["5"]),
        ("end", 1, ""),
        ("stop?", 1),
        ("start", 2),
        ("reason", 2, "I have the sum"),
        ("end", 2, "The sum is 5"),
        ("stop?", 2),
        ("complete", "The sum is 5"),
    ]
    assert turn.response.text == "The sum is 5" and turn.steps == 2
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "assistant"]
    # usage aggregated over the 4 model calls (2 reason + 2 act)
    assert turn.usage.output_tokens == 6 + 2 + 4 + 4  # reasoning, call, reasoning, answer


async def test_react_observations_open_next_reasoning_prompt() -> None:
    prompts: list[str] = []
    base = react_model()

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if not tools:
            prompts.append(messages[-1].text)
        return base._fn(messages, tools)

    a = agent(
        model=function(fn),
        tools=[add],
        execution=react(reasoning_prompt="Why?", observation_format="json"),
    )
    await a.run("go")
    assert prompts[0] == "Why?"
    assert prompts[1] == 'Observations:\n\n[{"tool":"add","result":"5","is_error":false}]\n\nWhy?'


async def test_react_max_steps_and_stop_condition() -> None:
    def loops(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        return [("add", {"a": 1, "b": 1})] if tools else "again"

    turn = await agent(model=function(loops), tools=[add], execution=react(max_steps=3)).run("x")
    assert turn.steps == 3 and turn.stop_reason == "max_steps"
    assert turn.metadata == {}
    stops: list[int] = []

    def stop(state: Any) -> bool:
        stops.append(state.step)
        return state.step == 2

    turn = await agent(
        model=function(loops), tools=[add], execution=react(), strategy={"stop_condition": stop}
    ).run("x")
    assert stops == [1, 2] and turn.stop_reason == "stop_condition" and turn.steps == 2


def test_react_and_observation_format_errors() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        react(max_steps=0)
    with pytest.raises(ValueError, match="unknown observation format"):
        react(observation_format="xml")
    call = ToolInvocation(id="1", name="t", arguments="{}")
    out = ToolOutput(call_id="1", result="r", is_error=True)
    assert format_observations([call], [out], "markdown") == "### t (error)\n\n```\nr\n```"
    assert format_observations([call], [out], "text") == "t failed: r"
    with pytest.raises(ValueError):
        format_observations([call], [out], "yaml")


async def test_react_tracks_state_reasoning() -> None:
    states: list[Any] = []
    a = agent(
        model=react_model(),
        tools=[add],
        execution=react(),
        strategy={"on_complete": lambda turn: None, "stop_condition": lambda s: states.append(s)},
    )
    await a.run("x")
    assert states[-1].reasoning == ["I should add 2 and 3", "I have the sum"]


# --- plan ---------------------------------------------------------------------------


def planner(plans: list[dict[str, Any]], final: str = "final answer") -> Any:
    """Replies with the next plan to planning prompts, ``final`` to the answer prompt."""
    queue = list(plans)

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        last = messages[-1].text
        if last.startswith("Make a plan"):
            return queue.pop(0)
        if last.startswith("The plan has been executed"):
            return final + "\n" + last
        if last.startswith("Carry out this step") or messages[-1].role != "user":
            return "did " + last.split(":", 1)[1].strip().split("\n")[0]
        raise AssertionError(last)

    return function(fn)


async def test_plan_runs_in_dependency_order_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []

    async def fetch(name: str) -> str:
        """Fetch."""
        await trio.sleep(1)
        log.append((name, trio.current_time()))
        return f"got {name}"

    steps = [
        {"id": "c", "description": "combine", "depends_on": ["a", "b"]},
        {
            "id": "a",
            "description": "A",
            "tool": "fetch",
            "arguments": {"name": "a"},
            "depends_on": [],
        },
        {
            "id": "b",
            "description": "B",
            "tool": "fetch",
            "arguments": {"name": "b"},
            "depends_on": [],
        },
    ]
    statuses: list[list[str]] = []
    a = agent(
        model=planner([{"steps": steps}]),
        tools=[fetch],
        execution=plan(),
        strategy={"on_step_end": lambda step, r: statuses.append([s.status for s in r.state.plan])},
    )
    start = trio.current_time()
    turn = await a.run("do it")
    assert [t for _, t in log] == [pytest.approx(start + 1)] * 2  # a and b together
    plan_state = turn.metadata  # metadata untouched by the strategy
    assert plan_state == {}
    assert statuses[0] == ["pending", "pending", "pending"]  # after planning: a, b, c order
    assert statuses[-1] == ["completed"] * 3
    assert turn.response.text.startswith("final answer")
    assert "[completed] c: combine -> did combine" in turn.response.text
    assert "[completed] a: A -> got a" in turn.response.text
    assert turn.steps == 1 + 3 + 1


async def test_plan_tracks_state_plan_and_topological_order() -> None:
    seen: list[Any] = []
    steps = [
        {"id": "2", "description": "second", "depends_on": ["1"]},
        {"id": "1", "description": "first", "depends_on": []},
    ]
    a = agent(
        model=planner([{"steps": steps}]),
        execution=plan(),
        strategy={
            "on_complete": lambda t: None,
            "stop_condition": lambda s: seen.append(s) or False,
        },
    )
    await a.run("x")
    state = seen[-1]
    assert [s.id for s in state.plan] == ["1", "2"]
    assert [s.status for s in state.plan] == ["completed", "completed"]
    assert state.plan[1].result == "did second"


async def test_plan_replans_after_failure() -> None:
    def flaky(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x

    first = {
        "steps": [
            {
                "id": "s",
                "description": "try",
                "tool": "flaky",
                "arguments": {"x": -1},
                "depends_on": [],
            },
            {"id": "t", "description": "after", "depends_on": ["s"]},
        ]
    }
    second = {
        "steps": [
            {
                "id": "s2",
                "description": "retry",
                "tool": "flaky",
                "arguments": {"x": 1},
                "depends_on": [],
            }
        ]
    }
    prompts: list[str] = []
    base = planner([first, second])

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        prompts.append(messages[-1].text)
        return base._fn(messages, tools)

    turn = await agent(model=function(fn), tools=[flaky], execution=plan()).run("x")
    replan = [p for p in prompts if "The plan failed" in p]
    assert len(replan) == 1 and "step s: ValueError: negative" in replan[0]
    assert "[failed] s: try" in replan[0]
    assert "[completed] s2: retry -> 1" in turn.response.text
    assert [bool(e.output.is_error) for e in turn.tool_executions] == [True, False]


async def test_plan_without_replan_fails_dependents() -> None:
    def broken() -> None:
        raise RuntimeError("no")

    steps = {"steps": [
        {"id": "a", "description": "A", "tool": "broken", "arguments": {}, "depends_on": []},
        {"id": "b", "description": "B", "depends_on": ["a"]},
        {"id": "c", "description": "C", "depends_on": []},
    ]}  # fmt: skip
    turn = await agent(
        model=planner([steps]), tools=[broken], execution=plan(allow_replan=False)
    ).run("x")
    text = turn.response.text
    assert "[failed] a: A -> RuntimeError: no" in text
    assert "[failed] b: B -> skipped: a step it depends on failed" in text
    assert "[completed] c: C -> did C" in text


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("not json", "not valid JSON"),
        ({"steps": [{"id": "a"}]}, "does not match the plan schema"),
        ({"steps": [{"id": "a", "description": "", "depends_on": ["zz"]}]}, "unknown step 'zz'"),
        (
            {
                "steps": [
                    {"id": "a", "description": "", "depends_on": ["b"]},
                    {"id": "b", "description": "", "depends_on": ["a"]},
                ]
            },
            "cycle among: a, b",
        ),
        (
            {"steps": [{"id": "a", "description": "", "depends_on": []}] * 2},
            "two steps with id 'a'",
        ),
        (
            {"steps": [{"id": str(i), "description": "", "depends_on": []} for i in range(3)]},
            "at most 2",
        ),
    ],
)
async def test_bad_plans_raise_plan_error(reply: Any, message: str) -> None:
    model = function(lambda m, t: reply)
    with pytest.raises(PlanError, match=message):
        await agent(model=model, execution=plan(max_plan_steps=2)).run("x")


def test_plan_option_errors() -> None:
    with pytest.raises(ValueError):
        plan(max_plan_steps=0)
    with pytest.raises(ValueError):
        plan(max_replans=-1)


async def test_plan_custom_schema_with_camel_case_dependencies() -> None:
    schema = {"type": "object", "properties": {"steps": {"type": "array"}}, "required": ["steps"]}
    reply = {
        "steps": [
            {"id": "y", "description": "Y", "dependsOn": ["x"]},
            {"id": "x", "description": "X"},
        ]
    }
    seen: list[Any] = []
    a = agent(
        model=planner([reply]),
        execution=plan(plan_schema=schema),
        strategy={"stop_condition": lambda s: seen.append([p.id for p in s.plan or []]) or False},
    )
    await a.run("x")
    assert seen[0] == ["x", "y"]


async def test_plan_structured_final_answer() -> None:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if messages[-1].text.startswith("Make a plan"):
            return {"steps": []}
        return {"ok": True}

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    turn = await agent(model=function(fn), execution=plan(), structure=schema).run("x")
    assert turn.data == {"ok": True}


# --- custom strategies and error hooks ----------------------------------------------


class OneShot(ExecutionStrategy):
    name = "one-shot"

    async def execute(self, context: ExecutionContext) -> Turn:
        step = await context.begin_step()
        response = await context.generate(context.conversation(), tools=[])
        context.state.messages.append(response.message)
        context.state.metadata["custom"] = True
        await context.end_step(step, response.message)
        return context.make_turn(response.message)


async def test_custom_strategy() -> None:
    hooks, log = recorder()
    turn = await agent(model=function(lambda m, t: "hi"), execution=OneShot(), strategy=hooks).run(
        "x"
    )
    assert turn.response.text == "hi" and turn.metadata == {"custom": True}
    assert [e[0] for e in log] == ["start", "end", "stop?", "complete"]


async def test_on_error_recovers_or_propagates() -> None:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        raise ConnectionError("context too long")

    seen: list[Any] = []

    def recover(error: Exception, state: Any) -> Turn:
        seen.append((type(error), state.step))
        return Turn(messages=[], response=Message(role="assistant", content="summary"))

    completed: list[str] = []
    turn = await agent(
        model=function(fn),
        strategy={"on_error": recover, "on_complete": lambda t: completed.append(t.text)},
    ).run("x")
    assert turn.response.text == "summary" and seen == [(ConnectionError, 1)]
    assert completed == ["summary"]

    with pytest.raises(ConnectionError):
        await agent(model=function(fn), strategy={"on_error": lambda e, s: None}).run("x")
    with pytest.raises(TypeError, match="on_error must return a Turn"):
        await agent(model=function(fn), strategy={"on_error": lambda e, s: "nope"}).run("x")


async def test_async_hooks_are_awaited() -> None:
    order: list[str] = []

    async def slow_start(step: int, state: Any) -> None:
        await trio.sleep(0)
        order.append("start")

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> str:
        order.append("model")
        return "ok"

    await agent(model=function(fn), strategy={"on_step_start": slow_start}).run("x")
    assert order == ["start", "model"]


async def test_stop_condition_in_loop_after_every_step() -> None:
    calls = iter([[("add", {"a": 1, "b": 1})]] * 3 + ["done"])
    stops: list[int] = []
    turn = await agent(
        model=function(lambda m, t: next(calls)),
        tools=[add],
        strategy={
            "stop_condition": lambda s: stops.append(s.step) or s.metadata.get("halt", False)
        },
    ).run("x")
    assert stops == [1, 2, 3, 4] and turn.stop_reason == "end_turn"

    def halt(ctx: ToolContext) -> str:
        ctx.metadata["halt"] = True
        return "halting"

    calls2 = iter([[("halt", {})], "never"])
    turn = await agent(
        model=function(lambda m, t: next(calls2)),
        tools=[halt],
        strategy={"stop_condition": lambda s: s.metadata.get("halt", False)},
    ).run("x")
    assert turn.stop_reason == "stop_condition" and turn.steps == 1
    assert turn.tool_executions[0].output.result == "halting"
    assert orjson.loads((turn.response.tool_calls or [])[0].arguments) == {}
