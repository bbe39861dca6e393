"""The plan() strategy (UAP section 5.4): plan, execute in dependency order, replan.

Theory of operation. Step 1 asks the model for a plan through structured
output (``plan_schema``); the plan is validated (unique ids, known
dependencies, no cycles, at most ``max_plan_steps`` steps) and stored in
``state.plan``. Execution proceeds in waves: every pending step whose
dependencies have completed runs, the steps of one wave concurrently in a
trio nursery, each as its own numbered step with the usual hooks and events.
A step that names a tool and gives its arguments calls the tool directly; any
other step is carried out by the model (with the agent's tools). A step
fails when its direct tool call returns an error or when it raises; then, if
``allow_replan``, the model is asked for a new plan for the remaining work
(completed steps are kept), up to ``max_replans`` times; otherwise steps that
depend on a failed step are marked failed too. The last step asks the model
for the final answer from the step results (with the agent's ``structure``,
if any).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import trio

from uamp_proto.types import Message, ResponseFormat, ToolInvocation

from .._schema import validate
from ..context import ExecutionContext, tool_message
from ..errors import PlanError
from ..middleware import BudgetExceededError
from ..state import PlanStep
from ..turn import Turn
from ._base import ExecutionStrategy, format_observations

__all__ = ["DEFAULT_PLAN_SCHEMA", "PlanError", "PlanStrategy", "plan"]

#: The default structured-output schema of a plan.
DEFAULT_PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "description": {"type": "string"},
                    "tool": {"type": ["string", "null"]},
                    "arguments": {"type": ["object", "null"]},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "description", "depends_on"],
            },
        }
    },
    "required": ["steps"],
}

_PLAN_PROMPT = """\
Make a plan to complete the request above, of at most {max_steps} steps.
Available tools:
{tools}
Answer with JSON only, matching the schema: an object with "steps", each step having a
unique "id", a "description", optionally a "tool" and its "arguments" (a JSON object), and
"depends_on" (the ids of the steps that must finish first)."""

_REPLAN_PROMPT = """\
The plan failed. Current plan status:
{status}
Failure: {failure}
Make a new plan for the remaining work (completed steps are kept; do not repeat them)."""

_STEP_PROMPT = "Carry out this step of the plan: {description}{tool}{deps}"

_FINAL_PROMPT = """\
The plan has been executed. Step results:
{status}
Now give the final answer to the original request."""


class PlanStrategy(ExecutionStrategy):
    """See :func:`plan`."""

    name = "plan"

    def __init__(
        self,
        max_plan_steps: int = 10,
        allow_replan: bool = True,
        plan_schema: dict[str, Any] | None = None,
        max_replans: int = 2,
        max_step_iterations: int = 5,
    ) -> None:
        if max_plan_steps < 1:
            raise ValueError(f"max_plan_steps must be at least 1, got {max_plan_steps}")
        if max_replans < 0 or max_step_iterations < 1:
            raise ValueError("max_replans must be >= 0 and max_step_iterations >= 1")
        self.max_plan_steps = max_plan_steps
        self.allow_replan = allow_replan
        self.plan_schema = plan_schema or DEFAULT_PLAN_SCHEMA
        self.max_replans = max_replans
        self.max_step_iterations = max_step_iterations

    # --- planning ---------------------------------------------------------------

    async def _make_plan(self, context: ExecutionContext, failure: str | None) -> bool:
        """Run one planning step; update ``state.plan``; return the stop verdict."""
        step = await context.begin_step({"phase": "plan"})
        tools = "\n".join(f"- {t.name}: {t.description}" for t in context.tools) or "- (none)"
        text = _PLAN_PROMPT.format(max_steps=self.max_plan_steps, tools=tools)
        old = context.state.plan or []
        if failure is not None:
            text += "\n\n" + _REPLAN_PROMPT.format(status=_status(old), failure=failure)
        response = await context.generate(
            context.conversation(Message(role="user", content=text)),
            tools=[],
            response_format=ResponseFormat(
                type="json_schema", json_schema={"name": "plan", "schema": self.plan_schema}
            ),
            step=step,
        )
        completed = [s for s in old if s.status == "completed"]
        new_steps = self._parse(response.message.text, {s.id for s in completed})
        context.state.plan = completed + new_steps
        return await context.end_step(
            step, response.message, messages=[], data={"phase": "plan", "plan": context.state.plan}
        )

    def _parse(self, text: str, done_ids: set[str]) -> list[PlanStep]:
        try:
            value = orjson.loads(_unfence(text))
        except orjson.JSONDecodeError as exc:
            raise PlanError(f"the plan is not valid JSON: {exc}") from None
        problems = validate(value, self.plan_schema)
        if problems:
            raise PlanError("the plan does not match the plan schema: " + "; ".join(problems))
        raw = value.get("steps") if isinstance(value, dict) else value
        if not isinstance(raw, list):
            raise PlanError("the plan has no list of steps")
        steps: list[PlanStep] = []
        for item in raw:
            if not isinstance(item, dict) or "id" not in item:
                raise PlanError(f"plan step without an id: {item!r}")
            sid = str(item["id"])
            if sid in done_ids:
                continue
            args = item.get("arguments")
            steps.append(
                PlanStep(
                    id=sid,
                    description=str(item.get("description", "")),
                    tool=item.get("tool") or None,
                    arguments=args if isinstance(args, dict) else None,
                    depends_on=[
                        str(d) for d in item.get("depends_on", item.get("dependsOn")) or []
                    ],
                )
            )
        if len(steps) > self.max_plan_steps:
            raise PlanError(
                f"the plan has {len(steps)} steps; at most {self.max_plan_steps} allowed"
            )
        return _topological(steps, done_ids)

    # --- execution --------------------------------------------------------------

    async def execute(self, context: ExecutionContext) -> Turn:
        """Plan, execute the plan in dependency order, then answer."""
        if await self._make_plan(context, None):
            return context.make_turn(context.last_assistant(), stop_reason="stop_condition")
        replans = 0
        while True:
            assert context.state.plan is not None
            plan_steps = context.state.plan
            status = {s.id: s.status for s in plan_steps}
            ready = [
                s
                for s in plan_steps
                if s.status == "pending" and all(status.get(d) == "completed" for d in s.depends_on)
            ]
            if not ready:
                break
            stop = await self._run_wave(context, ready)
            for ps in plan_steps:
                if ps.status == "in_progress":  # cancelled by the stop condition
                    ps.status = "pending"
            if stop:
                return context.make_turn(context.last_assistant(), stop_reason="stop_condition")
            failures = [ps for ps in ready if ps.status == "failed"]
            if failures:
                if self.allow_replan and replans < self.max_replans:
                    replans += 1
                    failure = "; ".join(f"step {s.id}: {s.result}" for s in failures)
                    if await self._make_plan(context, failure):
                        return context.make_turn(
                            context.last_assistant(), stop_reason="stop_condition"
                        )
                    continue
                _fail_dependents(plan_steps)
        return await self._final(context)

    async def _run_wave(self, context: ExecutionContext, ready: list[PlanStep]) -> bool:
        """Run independent steps concurrently; return whether to stop."""
        stop = False

        async def run_one(ps: PlanStep, cancel: trio.CancelScope) -> None:
            nonlocal stop
            if await self._run_step(context, ps):
                stop = True
                cancel.cancel()

        try:
            async with trio.open_nursery() as nursery:
                for ps in ready:
                    nursery.start_soon(run_one, ps, nursery.cancel_scope)
        except ExceptionGroup as group:
            # A hook or a budget check failed inside a wave: raise our error from the group.
            leaves = _leaves(group)
            budget = next((e for e in leaves if isinstance(e, BudgetExceededError)), None)
            if budget is not None:
                raise BudgetExceededError(budget.kind, budget.limit, budget.used) from group
            raise PlanError(f"a plan step failed: {leaves[0]!r}") from group
        return stop

    async def _run_step(self, context: ExecutionContext, ps: PlanStep) -> bool:
        """Execute one plan step as one numbered step; return the stop verdict."""
        ps.status = "in_progress"
        step = await context.begin_step({"phase": "execute", "plan_step": ps.id})
        messages: list[Message] = []
        try:
            if ps.tool is not None and ps.arguments is not None:
                failed = await self._direct(context, ps, step, messages)
            else:
                failed = await self._delegate(context, ps, step, messages)
        except Exception as exc:
            failed = True
            ps.result = f"{type(exc).__name__}: {exc}"
        ps.status = "failed" if failed else "completed"
        context.state.messages.extend(messages)
        last = next(
            (m for m in reversed(messages) if m.role == "assistant"),
            Message(role="assistant", content=ps.result or ""),
        )
        return await context.end_step(
            step,
            last,
            messages=messages,
            data={"phase": "execute", "plan_step": ps.id, "status": ps.status},
        )

    async def _direct(
        self, context: ExecutionContext, ps: PlanStep, step: int, messages: list[Message]
    ) -> bool:
        assert ps.tool is not None
        call = ToolInvocation(
            id=f"plan_{ps.id}_{uuid.uuid4().hex[:8]}",
            name=ps.tool,
            arguments=orjson.dumps(ps.arguments or {}).decode(),
        )
        messages.append(Message(role="assistant", tool_calls=[call]))
        await context.emit("action", {"tool_calls": [call], "plan_step": ps.id}, step=step)
        outputs = await context.run_tools([call], step=step, record=False)
        messages.append(tool_message(call, outputs[0]))
        await context.emit(
            "observation",
            {"results": outputs, "text": format_observations([call], outputs, "text")},
            step=step,
        )
        ps.result = outputs[0].result
        return bool(outputs[0].is_error)

    async def _delegate(
        self, context: ExecutionContext, ps: PlanStep, step: int, messages: list[Message]
    ) -> bool:
        plan_steps = context.state.plan or []
        deps = [s for s in plan_steps if s.id in ps.depends_on]
        dep_text = "".join(f"\nResult of step {d.id}: {d.result}" for d in deps)
        tool_text = f" (use the tool {ps.tool})" if ps.tool else ""
        prompt = Message(
            role="user",
            content=_STEP_PROMPT.format(description=ps.description, tool=tool_text, deps=dep_text),
        )
        tools = None
        if ps.tool is not None and context.tool(ps.tool) is not None:
            tools = [t for t in context.tools if t.name == ps.tool]
        for _ in range(self.max_step_iterations):
            response = await context.generate(
                context.conversation(prompt, *messages), tools=tools, step=step
            )
            message = response.message
            messages.append(message)
            calls = list(message.tool_calls or [])
            if not calls:
                ps.result = message.text
                return False
            await context.emit("action", {"tool_calls": calls, "plan_step": ps.id}, step=step)
            outputs = await context.run_tools(calls, step=step, record=False)
            messages.extend(tool_message(c, o) for c, o in zip(calls, outputs, strict=True))
            await context.emit(
                "observation",
                {"results": outputs, "text": format_observations(calls, outputs, "text")},
                step=step,
            )
        ps.result = f"no result after {self.max_step_iterations} model calls"
        return True

    async def _final(self, context: ExecutionContext) -> Turn:
        step = await context.begin_step({"phase": "answer"})
        prompt = Message(
            role="user", content=_FINAL_PROMPT.format(status=_status(context.state.plan or []))
        )
        response = await context.generate(
            context.conversation(prompt),
            tools=[],
            response_format=context.response_format(),
            step=step,
        )
        message = response.message
        context.state.messages.append(message)
        data = context.parse_structured(message.text) if context.structure is not None else None
        await context.end_step(step, message, data={"phase": "answer"})
        return context.make_turn(message, data=data)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _status(steps: list[PlanStep]) -> str:
    if not steps:
        return "(no steps)"
    return "\n".join(
        f"- [{s.status}] {s.id}: {s.description}" + (f" -> {s.result}" if s.result else "")
        for s in steps
    )


def _unfence(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return body


def _topological(steps: list[PlanStep], done_ids: set[str]) -> list[PlanStep]:
    """Order steps so each follows its dependencies.

    Raises:
        PlanError: Duplicate ids, unknown dependencies or a cycle.
    """
    by_id: dict[str, PlanStep] = {}
    for s in steps:
        if s.id in by_id:
            raise PlanError(f"the plan has two steps with id {s.id!r}")
        by_id[s.id] = s
    for s in steps:
        for d in s.depends_on:
            if d not in by_id and d not in done_ids:
                raise PlanError(f"step {s.id!r} depends on unknown step {d!r}")
    ordered: list[PlanStep] = []
    placed: set[str] = set(done_ids)
    remaining = list(steps)
    while remaining:
        wave = [s for s in remaining if all(d in placed for d in s.depends_on)]
        if not wave:
            cycle = ", ".join(s.id for s in remaining)
            raise PlanError(f"the plan's dependencies form a cycle among: {cycle}")
        ordered.extend(wave)
        placed.update(s.id for s in wave)
        remaining = [s for s in remaining if s.id not in placed]
    return ordered


def _fail_dependents(steps: list[PlanStep]) -> None:
    failed = {s.id for s in steps if s.status == "failed"}
    changed = True
    while changed:
        changed = False
        for s in steps:
            if s.status == "pending" and any(d in failed for d in s.depends_on):
                s.status = "failed"
                s.result = "skipped: a step it depends on failed"
                failed.add(s.id)
                changed = True


def plan(
    max_plan_steps: int = 10,
    allow_replan: bool = True,
    plan_schema: dict[str, Any] | None = None,
    *,
    max_replans: int = 2,
    max_step_iterations: int = 5,
) -> ExecutionStrategy:
    """Plan-then-execute (section 5.4). See the module docstring for the flow.

    Args:
        max_plan_steps: Maximum steps in a plan (a longer plan is a
            :class:`PlanError`).
        allow_replan: Ask for a new plan when a step fails.
        plan_schema: The JSON Schema the plan must match (default:
            :data:`DEFAULT_PLAN_SCHEMA`; a custom schema must still yield
            ``steps`` with ``id``, ``description``, optional ``tool`` and
            ``arguments``, and ``depends_on`` or ``dependsOn``).
        max_replans: How many times one run may replan.
        max_step_iterations: Model calls allowed for one model-executed step.

    Raises:
        ValueError: A limit is out of range.
    """
    return PlanStrategy(max_plan_steps, allow_replan, plan_schema, max_replans, max_step_iterations)
