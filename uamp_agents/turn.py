"""The result of one agent run: :class:`Turn`.

A turn is what ``Agent.run`` returns and what ``AgentStream.turn`` resolves
to. It holds the uamp_proto messages the run added to the conversation (used
as they are, never wrapped: UAP section 2.1), the final assistant message,
the usage summed over every model call, and the parsed structured output.
"""

from __future__ import annotations

from typing import Any

import attrs

from uamp_proto import _fastinit
from uamp_proto.ids import random_uuid4
from uamp_proto.interrupts import Interrupt
from uamp_proto.types import Message, ToolInvocation, ToolOutput, UsageCost, UsageStats

__all__ = ["ToolExecution", "Turn", "add_usage"]


def _uuid4() -> str:
    return random_uuid4()


def _sum(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def _sum_f(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)


def add_usage(a: UsageStats, b: UsageStats | None) -> UsageStats:
    """Return the field-wise sum of two usage records (absent + absent = absent).

    ``total_tokens`` is the sum of the totals when either side reports one,
    else the sum of input and output tokens when those are known.
    """
    if b is None:
        return a
    if (
        a.input_tokens is None
        and a.output_tokens is None
        and a.total_tokens is None
        and a.cached_tokens is None
        and a.cost is None
        and a.audio is None
    ):
        # Nothing yet (a run's first model call): what _add comes to, without
        # its calls (a differential test holds the two together) -- ``b``
        # itself when that is what it comes to (integer counts with a total,
        # no unknown keys), with no record built.
        inp, out, cached, total = b.input_tokens, b.output_tokens, b.cached_tokens, b.total_tokens
        if (
            type(total) is int
            and (inp is None or type(inp) is int)
            and (out is None or type(out) is int)
            and (cached is None or type(cached) is int)
            and not b.unknown
        ):
            return b
        total = _total(b)
        return UsageStats(
            input_tokens=None if inp is None else 0 + inp,
            output_tokens=None if out is None else 0 + out,
            total_tokens=None if total is None else 0 + total,
            cached_tokens=None if cached is None else 0 + cached,
            cost=b.cost,
            audio=b.audio,
        )
    return _add(a, b)


def _add(a: UsageStats, b: UsageStats) -> UsageStats:
    """The field-wise sum of two usage records (see :func:`add_usage`)."""
    if a.cost is None and b.cost is None and a.audio is None and b.audio is None:
        # Token counts alone (the usual sum): the same numbers in one record
        # built positionally (a differential test holds this to _add_all).
        return _token_usage(
            _sum(a.input_tokens, b.input_tokens),
            _sum(a.output_tokens, b.output_tokens),
            _sum(_total(a), _total(b)),
            _sum(a.cached_tokens, b.cached_tokens),
        )
    return _add_all(a, b)


def _add_all(a: UsageStats, b: UsageStats) -> UsageStats:
    """:func:`_add` with costs and audio."""
    cost: UsageCost | None = a.cost
    if b.cost is not None:
        if cost is None:
            cost = b.cost
        else:
            cost = UsageCost(
                input_cost=_sum_f(cost.input_cost, b.cost.input_cost),
                output_cost=_sum_f(cost.output_cost, b.cost.output_cost),
                total_cost=_sum_f(cost.total_cost, b.cost.total_cost),
                currency=cost.currency or b.cost.currency,
            )
    inp = _sum(a.input_tokens, b.input_tokens)
    out = _sum(a.output_tokens, b.output_tokens)
    total = _sum(_total(a), _total(b))
    return UsageStats(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=total,
        cached_tokens=_sum(a.cached_tokens, b.cached_tokens),
        cost=cost,
        audio=a.audio or b.audio,
    )


#: ``UsageStats(input_tokens=..., output_tokens=..., total_tokens=..., cached_tokens=...)``.
_token_usage = _fastinit.maker(
    UsageStats, ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
)


def _total(u: UsageStats) -> int | None:
    if u.total_tokens is not None:
        return u.total_tokens
    if u.input_tokens is None and u.output_tokens is None:
        return None
    return (u.input_tokens or 0) + (u.output_tokens or 0)


@attrs.define(kw_only=True)
class ToolExecution:
    """One tool (or sub-agent) call made during a run, with its outcome.

    Attributes:
        call: The invocation the model asked for.
        output: What the tool returned (``is_error`` set on failure).
        step: The step number in which it ran.
        duration: Seconds the call took (trio clock).
        child_turns: Turns of the sub-agents the call ran (one for a
            sub-agent tool); each has ``agent_id`` and ``parent_turn_id``.
    """

    call: ToolInvocation
    output: ToolOutput
    step: int
    duration: float = 0.0
    child_turns: list[Turn] = attrs.field(factory=list)


@attrs.define(kw_only=True)
class Turn:
    """What one agent run produced.

    Attributes:
        messages: The messages this turn added to the conversation, in
            order: the user input message first, then every assistant and
            tool message. ``history + turn.messages`` is the new history.
        response: The final assistant message (``turn.response.text``).
        usage: Token usage summed over every model call of the run
            (sub-agent usage included).
        data: The parsed structured output when the agent has a
            ``structure``, else ``None``.
        steps: How many steps the execution strategy took.
        id: UUIDv4 of this turn.
        agent_id: The id of the agent that produced it.
        parent_turn_id: The id of the turn of the parent agent when this run
            was a sub-agent call (UAP section 8.4).
        tool_executions: Every tool call of the run, in call order.
        status: ``"completed"``, or ``"aborted"`` when the run was cancelled
            and this is its partial result.
        stop_reason: Why the run ended: ``"end_turn"`` (the model answered),
            ``"stop_condition"``, ``"max_steps"``, ``"aborted"``,
            ``"recovered"`` (an ``on_error`` hook or middleware supplied the
            turn), ``"client_tool"`` (the model called a deferred tool) or
            ``"interrupted"`` (a person's answer is awaited, see ``interrupts``).
        parent_agent_id: The id of the parent agent for a sub-agent run.
        metadata: The strategy's ``state.metadata`` at the end of the run.
        pending_tool_calls: Calls of deferred tools (see
            :func:`~uamp_agents.tools.deferred_tool`) the run stopped at:
            they wait for results from whoever runs those tools.
        interrupts: The interrupts a suspended run stopped at
            (``stop_reason == "interrupted"``): resume with
            ``Agent.run(history + turn.messages, resume=True, answers={key: answer})``.
    """

    messages: list[Message]
    response: Message
    usage: UsageStats = attrs.field(factory=UsageStats)
    data: Any = None
    steps: int = 0
    id: str = attrs.field(factory=_uuid4)
    agent_id: str | None = None
    parent_turn_id: str | None = None
    tool_executions: list[ToolExecution] = attrs.field(factory=list)
    status: str = "completed"
    stop_reason: str = "end_turn"
    parent_agent_id: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    pending_tool_calls: list[ToolInvocation] = attrs.field(factory=list)
    interrupts: list[Interrupt] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        """The final response text (``response.text``)."""
        return self.response.text
