"""The mutable state of one run: a leaf module of plain data (UAP section 5.1).

:class:`ExecutionState` is what strategies, hooks, tools and middleware read
and write during a run; :class:`PlanStep` is one step of the ``plan``
strategy's plan. They are defined here, apart from the execution machinery
in :mod:`uamp_agents.context`, so that every module can import them without
an import cycle. :mod:`uamp_agents.context` re-exports both.
"""

from __future__ import annotations

from typing import Any

import attrs

from uamp_proto.types import Message

__all__ = ["ExecutionState", "PlanStep"]


@attrs.define(kw_only=True, eq=False)
class PlanStep:
    """One step of a plan (section 5.4).

    Attributes:
        id: Step identifier, unique within the plan.
        description: What the step does.
        tool: The tool it uses, if any.
        arguments: Arguments for ``tool`` when the plan gave them.
        depends_on: Ids of the steps that must complete first.
        status: ``"pending"``, ``"in_progress"``, ``"completed"`` or ``"failed"``.
        result: The step's outcome text, once it ran.
    """

    id: str
    description: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    depends_on: list[str] = attrs.field(factory=list)
    status: str = "pending"
    result: str | None = None


@attrs.define(kw_only=True, eq=False)
class ExecutionState:
    """The mutable state of one run (section 5.1).

    Attributes:
        step: The current step number (1-based; 0 before the first step).
        messages: Messages added by this run, starting with the user input.
        metadata: User-defined data (read by stop conditions, written by
            hooks and tools).
        reasoning: ReAct reasoning traces, one per step.
        plan: The plan of the plan() strategy.
        step_id: UUIDv4 of the current step (spec 002 section 3.4).
        tool_executions: The run's tool calls so far
            (:class:`~uamp_agents.turn.ToolExecution`, sub-agent turns
            included): what a step's checkpoint records of its sub-agents.
    """

    step: int = 0
    messages: list[Message] = attrs.field(factory=list)
    metadata: dict[str, Any] = attrs.field(factory=dict)
    reasoning: list[str] | None = None
    plan: list[PlanStep] | None = None
    step_id: str | None = None
    tool_executions: list[Any] = attrs.field(factory=list, repr=False)
