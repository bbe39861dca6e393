"""A run with nothing to abort it runs its strategy inline (``Agent._execute``).

Against the way a streamed run goes (``_run_strategy`` under the stream's
abort scope): the same turn, or the same error, for a strategy that returns
a turn, one that returns none (the partial turn), one that fails with and
without an ``on_error`` hook, a hook that recovers, one that gives up and one
that returns something other than a turn.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from uamp_agents import Turn, agent
from uamp_agents.context import ExecutionContext
from uamp_agents.providers import function


class _Strategy:
    """An execution strategy that calls the model once, then does ``how``."""

    name = "scripted"

    def __init__(self, how: str) -> None:
        self.how = how

    async def execute(self, context: ExecutionContext) -> Turn:
        response = await context.generate(context.conversation())
        context.state.messages.append(response.message)
        if self.how == "none":
            return None  # type: ignore[return-value]  # (what the run makes a partial turn of)
        if self.how == "fail":
            raise ValueError("the strategy failed")
        return context.make_turn(response.message)


def _recovered(exc: Exception, state: Any) -> Turn:
    return Turn(
        messages=list(state.messages), response=state.messages[-1], stop_reason="recovered", steps=7
    )


_HOOKS: dict[str, Any] = {
    "none": None,
    "recovers": _recovered,
    "gives up": lambda exc, state: None,
    "not a turn": lambda exc, state: "a string",
}


async def _outcome(make: Any, inline: bool) -> tuple[str, Any]:
    try:
        a = make()
        if inline:
            turn = await a.run("hello")
        else:
            turn = await a.stream("hello").drive(_ignore)
    except Exception as exc:  # the error is part of what is compared
        return "error", (type(exc), str(exc))
    return "turn", (turn.response.text, turn.stop_reason, turn.status, turn.steps)


async def _ignore(event: Any) -> None:
    pass


@pytest.mark.parametrize("how", ["turn", "none", "fail"])
@pytest.mark.parametrize("hook", list(_HOOKS))
def test_the_inline_run_is_the_streamed_runs(how: str, hook: str) -> None:
    def make() -> Any:
        hooks = {} if _HOOKS[hook] is None else {"on_error": _HOOKS[hook]}
        return agent(
            model=function(lambda messages, tools: "hi there"),
            execution=_Strategy(how),
            strategy=hooks or None,
        )

    async def main() -> None:
        inline = await _outcome(make, inline=True)
        streamed = await _outcome(make, inline=False)
        assert inline == streamed
        if how == "fail" and hook == "recovers":
            assert inline == ("turn", ("hi there", "recovered", "completed", 7))
        if how == "none":
            assert inline[0] == "turn" and inline[1][1] == "aborted"

    trio.run(main)
