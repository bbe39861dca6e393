"""Tool approval and questions to a person (docs/human-in-the-loop.md), table-driven."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
import trio

from uamp_agents import ToolContext, agent, tool
from uamp_agents.providers import _demo
from uamp_agents.providers._openai import _wire_messages
from uamp_proto import events as ev
from uamp_proto.interrupts import APPROVAL, QUESTION, Answer, Interrupt
from uamp_proto.response import ResponseTracker
from uamp_proto.types import ToolResultContent

ADD = tool(_demo.add, thread=False)
NOW = tool(_demo.now, thread=False, read_only=True)
QUESTION_TEXT = "what is 2+3?"


def calc(**kw: Any) -> Any:
    return agent(model=_demo.demo(), tools=[ADD, NOW], name="calc", **kw)


def recorder(answer: Answer | None) -> tuple[list[Interrupt], Any]:
    asked: list[Interrupt] = []

    async def handler(interrupt: Interrupt) -> Answer:
        asked.append(interrupt)
        if answer is None:
            await trio.sleep_forever()
        assert answer is not None
        return answer

    return asked, handler


# (answer, expected text in the reply, add ran, error result)
ANSWERS = {
    "approve": (Answer(approved=True), "2 + 3 = 5", True, False),
    "deny": (Answer(approved=False, reason="not today"), "denied by the user", False, True),
    "edit": (Answer(approved=True, arguments={"a": 2, "b": 40}), "2 + 3 = 42", True, False),
    "expire": (Answer.expiry(), "nobody approved it in time", False, True),
}


@pytest.mark.parametrize("case", list(ANSWERS))
async def test_an_answer_given_in_place_decides_the_call(case: str) -> None:
    answer, text, ran, failed = ANSWERS[case]
    asked, handler = recorder(answer)
    turn = await calc(approve={"add"}).run(QUESTION_TEXT, on_interrupt=handler)
    assert [(i.kind, i.tool_name, i.arguments) for i in asked] == [
        (APPROVAL, "add", {"a": 2, "b": 3})
    ]
    assert text in turn.text and turn.stop_reason == "end_turn"
    [execution] = turn.tool_executions
    assert bool(execution.output.is_error) is failed
    assert ("not run" in execution.output.result) is not ran
    tool_msg = next(m for m in turn.messages if m.role == "tool")
    errors = [i for i in tool_msg.content_items or () if isinstance(i, ToolResultContent)]
    assert bool(errors and errors[0].tool_result.is_error) is failed


@pytest.mark.parametrize("case", list(ANSWERS))
async def test_a_run_without_a_handler_suspends_and_resumes_with_the_answer(case: str) -> None:
    answer, text, _, failed = ANSWERS[case]
    a = calc(approve={"add"})
    paused = await a.run(QUESTION_TEXT)
    assert paused.stop_reason == "interrupted"
    [pending] = paused.interrupts
    assert pending.kind == APPROVAL and pending.tool_name == "add"
    assert [m.role for m in paused.messages] == ["user", "assistant"]  # the checkpoint
    resumed = await a.run(paused.messages, resume=True, answers={pending.key: answer})
    assert text in resumed.text
    assert bool(resumed.tool_executions[0].output.is_error) is failed


async def test_a_handler_that_does_not_answer_in_time_expires() -> None:
    asked, handler = recorder(None)
    with trio.fail_after(10):
        turn = await calc(approve={"add"}).run(
            QUESTION_TEXT, on_interrupt=handler, interrupt_timeout=0.05
        )
    assert len(asked) == 1 and "nobody approved it in time" in turn.text


# (how approval is asked for, whether "what is 2+3?" asks)
POLICIES = {
    "no policy": ({}, [ADD, NOW], False),
    "by name": ({"approve": {"add"}}, [ADD, NOW], True),
    "other name": ({"approve": {"now"}}, [ADD, NOW], False),
    "callable yes": ({"approve": lambda name, args: args.get("b") == 3}, [ADD], True),
    "callable no": ({"approve": lambda name, args: args.get("b") == 4}, [ADD], False),
    "side effects": ({"approve": "side_effects"}, [ADD], True),
    "side effects, read-only": (
        {"approve": "side_effects"},
        [tool(_demo.add, thread=False, read_only=True)],
        False,
    ),
    "tool flag": ({}, [tool(_demo.add, thread=False, requires_approval=True)], True),
    "tool predicate yes": (
        {},
        [tool(_demo.add, thread=False, requires_approval=lambda a: a["a"] == 2)],
        True,
    ),
    "tool predicate no": (
        {},
        [tool(_demo.add, thread=False, requires_approval=lambda a: a["a"] == 9)],
        False,
    ),
}


@pytest.mark.parametrize("case", list(POLICIES))
async def test_which_calls_ask(case: str) -> None:
    options, tools, asks = POLICIES[case]
    a = agent(model=_demo.demo(), tools=tools, name="calc", **options)
    asked, handler = recorder(Answer(approved=True))
    turn = await a.run(QUESTION_TEXT, on_interrupt=handler)
    assert bool(asked) is asks
    assert "2 + 3 = 5" in turn.text


def test_an_unknown_policy_word_is_refused() -> None:
    with pytest.raises(ValueError, match="side_effects"):
        agent(model=_demo.demo(), approve="everything")


# (parent's approve, sub-agent's approve, whether the sub-agent's add asks)
INHERITANCE = {
    "parent asks": ({"add"}, None, True),
    "sub-agent cannot widen": ({"add"}, {"now"}, True),
    "sub-agent asks itself": (None, {"add"}, True),
    "nobody asks": (None, None, False),
}


@pytest.mark.parametrize("case", list(INHERITANCE))
async def test_sub_agents_inherit_the_policy(case: str) -> None:
    parent_policy, sub_policy, asks = INHERITANCE[case]
    sub = agent(tools=[ADD], name="calculator", description="adds", approve=sub_policy)
    boss = agent(model=_demo.demo(), tools=[sub], name="boss", approve=parent_policy)
    asked, handler = recorder(Answer(approved=False))
    turn = await boss.run("ask the calculator: what is 2+3?", on_interrupt=handler)
    assert [i.tool_name for i in asked] == (["add"] if asks else [])
    assert ("denied" in turn.text) is asks


async def test_a_sub_agent_call_suspends_its_parent_and_resumes() -> None:
    sub = agent(tools=[ADD], name="calculator", description="adds")
    boss = agent(model=_demo.demo(), tools=[sub], name="boss", approve={"add"})
    paused = await boss.run("ask the calculator: what is 2+3?")
    assert paused.stop_reason == "interrupted"
    [pending] = paused.interrupts
    assert pending.tool_name == "add" and "/" in pending.key  # inside the calculator call
    answers = {pending.key: Answer(approved=True)}
    resumed = await boss.run(paused.messages, resume=True, answers=answers)
    assert "2 + 3 = 5" in resumed.text


@attrs.frozen
class Order:
    count: int
    size: str


# (schema, answers given in turn, expected value or error)
QUESTIONS = {
    "int": (int, [3], 3),
    "json schema": ({"type": "string", "enum": ["s", "m"]}, ["m"], "m"),
    "class": (Order, [{"count": 2, "size": "m"}], Order(count=2, size="m")),
    "asked again": (int, ["three", 3], 3),
    "never fits": (int, ["a", "b", "c"], "no answer"),
    "any": (None, [{"x": [1]}], {"x": [1]}),
}


@pytest.mark.parametrize("case", list(QUESTIONS))
async def test_ask_human_returns_a_typed_answer(case: str) -> None:
    schema, given, expected = QUESTIONS[case]
    got: list[Any] = []

    async def order(ctx: ToolContext, query: str) -> str:
        """Order pizza."""
        got.append(await ctx.ask_human("How many?", schema=schema))
        return "ordered"

    feed = iter(given)
    asked: list[Interrupt] = []

    async def handler(interrupt: Interrupt) -> Answer:
        asked.append(interrupt)
        return Answer(value=next(feed))

    a = agent(model=_demo.demo(), tools=[tool(order)], name="pizza")
    turn = await a.run("please order pizza", on_interrupt=handler)
    assert all(i.kind == QUESTION and i.prompt.startswith("How many?") for i in asked)
    assert len(asked) == len(given)
    if expected == "no answer":
        assert got == [] and turn.tool_executions[0].output.is_error
    else:
        assert got == [expected]


async def test_ask_human_suspends_and_the_call_runs_again_with_the_answer() -> None:
    runs: list[int] = []

    async def order(ctx: ToolContext, query: str) -> str:
        """Order pizza."""
        count = await ctx.ask_human("How many?", schema=int)
        runs.append(count)
        return f"ordered {count}"

    a = agent(model=_demo.demo(), tools=[tool(order)], name="pizza")
    paused = await a.run("please order pizza")
    [pending] = paused.interrupts
    assert pending.kind == QUESTION and pending.schema == {"type": "integer"}
    resumed = await a.run(paused.messages, resume=True, answers={pending.key: Answer(value=4)})
    assert runs == [4] and "ordered 4" in resumed.text


async def test_steps_have_uuid4_ids_in_events_and_tool_contexts() -> None:
    seen: list[str | None] = []

    async def probe(ctx: ToolContext, query: str) -> str:
        """Probe."""
        seen.append(ctx.step_id)
        return "ok"

    a = agent(model=_demo.demo(), tools=[tool(probe)], name="p")
    starts, ends = [], []
    async with a.stream("please probe") as stream:
        async for event in stream:
            if event.uap is not None and event.uap.type == "step_start":
                starts.append(event.uap.data["step_id"])
            if event.uap is not None and event.uap.type == "step_end":
                ends.append(event.uap.data["step_id"])
    assert starts == ends and len(starts) == 2 and len(set(starts)) == 2
    assert all(uuid.UUID(s).version == 4 for s in starts)
    assert seen == [starts[0]]


def test_a_client_error_result_reaches_the_model_as_an_error() -> None:
    tracker = ResponseTracker("resp_1", [])
    for call_id in ("call_1", "call_2"):
        tracker.apply(ev.ToolCall(call_id=call_id, name="read", arguments="{}"))
    tracker.add_tool_result("call_1", "no such file", True)
    tracker.add_tool_result("call_2", "fine", None)
    failed, ok = [m for m in tracker.messages() if m.role == "tool"]
    assert _wire_messages(failed)[0]["content"] == "Error: no such file"
    assert _wire_messages(ok)[0]["content"] == "fine"
