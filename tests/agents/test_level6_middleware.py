"""Level 6 (UAP section 15.1): the middleware onion, logging, budget, guardrails."""

from __future__ import annotations

import logging as stdlib_logging
from typing import Any

import pytest
import trio
import trio.testing

from uamp_agents import Turn, agent
from uamp_agents.execution import plan
from uamp_agents.middleware import (
    BudgetExceededError,
    GuardrailError,
    Middleware,
    MiddlewareContext,
    budget,
    guardrails,
    logging,
)
from uamp_agents.providers import function
from uamp_proto.types import Message, ToolDefinition


def echo() -> Any:
    return function(lambda m, t: "echo: " + m[-1].text)


class Recorder(Middleware):
    def __init__(self, name: str, log: list[str], *, fail_before: bool = False) -> None:
        self.name, self.log, self.fail_before = name, log, fail_before

    async def before(self, context: MiddlewareContext) -> None:
        self.log.append(f"{self.name}.before")
        if self.fail_before:
            raise RuntimeError(f"{self.name} refuses")

    async def after(self, context: MiddlewareContext, turn: Turn) -> Turn:
        self.log.append(f"{self.name}.after")
        return turn

    async def on_error(self, context: MiddlewareContext, error: Exception) -> None:
        self.log.append(f"{self.name}.on_error")


async def test_onion_order() -> None:
    log: list[str] = []
    mws = [Recorder(n, log) for n in ("first", "second", "third")]
    await agent(model=echo(), middleware=mws).run("x")
    assert log == [
        "first.before", "second.before", "third.before",
        "third.after", "second.after", "first.after",
    ]  # fmt: skip


async def test_on_error_in_reverse_order_and_propagates() -> None:
    log: list[str] = []

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> str:
        raise KeyError("model")

    mws = [Recorder(n, log) for n in ("first", "second")]
    with pytest.raises(KeyError):
        await agent(model=function(fn), middleware=mws).run("x")
    assert log == ["first.before", "second.before", "second.on_error", "first.on_error"]

    log.clear()
    mws = [Recorder("outer", log), Recorder("inner", log, fail_before=True)]
    with pytest.raises(RuntimeError, match="inner refuses"):
        await agent(model=echo(), middleware=mws).run("x")
    assert log == ["outer.before", "inner.before", "outer.on_error"]


async def test_before_modifies_context_downstream_and_on_error_recovers() -> None:
    class Rewrite(Middleware):
        name = "rewrite"

        async def before(self, context: MiddlewareContext) -> MiddlewareContext:
            context.metadata["tag"] = "t1"
            return MiddlewareContext(
                agent=context.agent,
                input=Message(role="user", content="rewritten"),
                history=[Message(role="user", content="injected")],
                metadata=context.metadata,
            )

    seen: list[list[str]] = []

    def fn(messages: list[Message], tools: list[ToolDefinition]) -> str:
        seen.append([m.text for m in messages])
        return "ok"

    turn = await agent(model=function(fn), middleware=[Rewrite()]).run("original")
    assert seen == [["injected", "rewritten"]]
    assert turn.messages[0].text == "rewritten" and turn.metadata["tag"] == "t1"

    class Recover(Middleware):
        name = "recover"

        async def on_error(self, context: MiddlewareContext, error: Exception) -> Turn:
            return Turn(
                messages=[context.input], response=Message(role="assistant", content="fallback")
            )

    def broken(messages: list[Message], tools: list[ToolDefinition]) -> str:
        raise RuntimeError("down")

    log: list[str] = []
    turn = await agent(model=function(broken), middleware=[Recorder("outer", log), Recover()]).run(
        "x"
    )
    assert turn.response.text == "fallback"
    assert log == ["outer.before", "outer.after"]  # outer sees the recovered turn


async def test_hooks_returning_wrong_types_raise() -> None:
    class BadAfter:
        name = "bad"

        def after(self, context: Any, turn: Turn) -> str:
            return "not a turn"

    with pytest.raises(TypeError, match=r"bad\.after must return a Turn"):
        await agent(model=echo(), middleware=[BadAfter()]).run("x")

    class BadError:
        name = "bad"

        def on_error(self, context: Any, error: Exception) -> int:
            return 3

    with pytest.raises(TypeError, match=r"bad\.on_error must return a Turn or None"):
        await agent(model=function(lambda m, t: 1 / 0), middleware=[BadError()]).run("x")


# --- logging ----------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def test_logging_with_stdlib_logger(caplog: pytest.LogCaptureFixture) -> None:
    calls = iter([[("add", {"a": 1, "b": 2})], "three"])
    a = agent(
        model=function(lambda m, t: next(calls)), tools=[add], middleware=[logging(level="debug")]
    )
    with caplog.at_level(stdlib_logging.DEBUG, logger="uamp_agents"):
        await a.run("Hello")
    text = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "uamp_agents"]
    assert text[0] == ("INFO", f"Agent {a.id} starting execution")
    assert ("DEBUG", "Input: 'Hello'") in text
    assert ("INFO", 'Tool call: add({"a":1,"b":2})') in text
    assert ("DEBUG", f"Agent {a.id} step 1 started") in text
    assert ("DEBUG", "Tool result (ok): '3'") in text
    done = text[-1]
    assert done[0] == "INFO" and done[1].startswith(f"Agent {a.id} completed in ")
    assert "tokens), 2 step(s), completed" in done[1]


async def test_logging_to_a_function_filters_by_level(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[str] = []

    def slow_model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        return "ok"

    async def wait_then(messages: list[Message], tools: list[ToolDefinition]) -> str:
        await trio.sleep(1.5)
        return "ok"

    a = agent(
        model=function(wait_then), middleware=[logging(logger=lines.append, include_messages=True)]
    )
    await a.run([Message(role="user", content="earlier")], "Hello")
    assert lines[0] == f"[INFO] Agent {a.id} starting execution"
    assert "[INFO] History user: 'earlier'" in lines
    assert not any(line.startswith("[DEBUG]") for line in lines)
    assert any(f"Agent {a.id} completed in 1.50s" in line for line in lines)
    assert "[INFO] Output assistant: 'ok'" in lines

    lines.clear()
    b = agent(
        model=function(lambda m, t: 1 / 0),
        middleware=[logging(level="warn", logger=lines.append, include_timing=False)],
    )
    with pytest.raises(ZeroDivisionError):
        await b.run("x")
    assert lines == [f"[ERROR] Agent {b.id} failed: ZeroDivisionError: division by zero"]


def test_logging_rejects_unknown_level() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        logging(level="loud")


# --- budget ----------------------------------------------------------------------------


async def test_budget_tokens() -> None:
    calls = iter([[("add", {"a": 1, "b": 2})]] * 10)
    a = agent(
        model=function(lambda m, t: next(calls)), tools=[add], middleware=[budget(max_tokens=20)]
    )
    with pytest.raises(
        BudgetExceededError, match=r"budget exceeded: .* tokens used, the limit is 20"
    ) as info:
        await a.run("go")
    assert info.value.kind == "tokens" and info.value.used > 20


async def test_budget_steps() -> None:
    calls = iter([[("add", {"a": 1, "b": 2})]] * 10)
    model = function(lambda m, t: next(calls))
    with pytest.raises(BudgetExceededError) as info:
        await agent(model=model, tools=[add], middleware=[budget(max_steps=2)]).run("go")
    assert (info.value.kind, info.value.limit, info.value.used) == ("steps", 2, 3)
    assert model.calls == 2  # the third step never called the model


async def test_budget_seconds_cancels_in_flight_work(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise

    a = agent(
        model=function(lambda m, t: [("forever", {})]),
        tools=[forever],
        middleware=[budget(max_seconds=2)],
    )
    start = trio.current_time()
    with pytest.raises(BudgetExceededError) as info:
        await a.run("go")
    assert info.value.kind == "seconds" and info.value.limit == 2
    assert trio.current_time() - start == pytest.approx(2)
    assert cancelled == [True]


async def test_budget_in_plan_waves_surfaces_as_budget_error() -> None:
    one = {"description": "d", "tool": "add", "arguments": {"a": 1, "b": 1}, "depends_on": []}
    steps = {"steps": [{"id": str(i), **one} for i in range(3)]}
    a = agent(
        model=function(lambda m, t: steps),
        tools=[add],
        execution=plan(),
        middleware=[budget(max_steps=2)],
    )
    with pytest.raises(BudgetExceededError) as info:
        await a.run("go")
    assert info.value.kind == "steps"


# --- guardrails ------------------------------------------------------------------------


async def test_guardrails_reject_and_transform() -> None:
    def no_secrets(message: Message) -> Any:
        return "mentions a password" if "password" in message.text else None

    a = agent(model=echo(), middleware=[guardrails(check_input=no_secrets)])
    with pytest.raises(
        GuardrailError, match="guardrail rejected the input: mentions a password"
    ) as info:
        await a.run("my password is hunter2")
    assert info.value.stage == "input"
    assert (await a.run("hello")).response.text == "echo: hello"

    async def redact(message: Message) -> Message:
        return Message(role="assistant", content=message.text.replace("hello", "[redacted]"))

    b = agent(model=echo(), middleware=[guardrails(check_output=redact)])
    turn = await b.run("hello")
    assert turn.response.text == "echo: [redacted]"
    assert turn.messages[-1] is turn.response

    c = agent(model=echo(), middleware=[guardrails(check_output=lambda m: False)])
    with pytest.raises(GuardrailError, match="the output: rejected by check"):
        await c.run("x")

    d = agent(
        model=echo(),
        middleware=[guardrails(check_input=lambda m: Message(role="user", content="safe"))],
    )
    assert (await d.run("unsafe")).response.text == "echo: safe"


async def test_guardrails_bad_check_result() -> None:
    a = agent(model=echo(), middleware=[guardrails(check_input=lambda m: 42)])
    with pytest.raises(TypeError, match="guardrail check must return"):
        await a.run("x")
