"""The loop() strategy (UAP section 5.2): call the model, run its tools, repeat."""

from __future__ import annotations

from uamp_proto.types import Message

from ..context import ExecutionContext, StructuredOutputError
from ..turn import Turn
from ._base import ExecutionStrategy, format_observations

__all__ = ["LoopStrategy", "loop"]

_REPAIR = (
    "Your answer did not match the required JSON schema: {problems}. "
    "Reply again with only a JSON value that matches the schema."
)


class LoopStrategy(ExecutionStrategy):
    """See :func:`loop`."""

    name = "loop"

    def __init__(self, max_iterations: int = 10, structure_retries: int = 1) -> None:
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        if structure_retries < 0:
            raise ValueError(f"structure_retries must not be negative, got {structure_retries}")
        self.max_iterations = max_iterations
        self.structure_retries = structure_retries

    async def execute(self, context: ExecutionContext) -> Turn:
        """Run the tool loop; each model call is one step."""
        rounds = 0
        retries = self.structure_retries
        while True:
            step = await context.begin_step()
            response = await context.generate(
                context.conversation(), response_format=context.response_format()
            )
            message = response.message
            context.state.messages.append(message)
            calls = list(message.tool_calls or [])
            if calls:
                await context.emit("action", {"tool_calls": calls})
                local, outputs, deferred = await context.run_and_defer(calls)
                if local:
                    await context.emit(
                        "observation",
                        {"results": outputs, "text": format_observations(local, outputs, "text")},
                    )
                rounds += 1
                stop = await context.end_step(step, message)
                if context.suspended:
                    return context.make_turn(message, stop_reason="interrupted")
                if deferred:
                    return context.make_turn(message, stop_reason="client_tool")
                if stop:
                    return context.make_turn(message, stop_reason="stop_condition")
                if rounds >= self.max_iterations:
                    return context.make_turn(message, stop_reason="max_steps")
                continue
            data = None
            if context.structure is not None:
                try:
                    data = context.parse_structured(message.text)
                except StructuredOutputError as exc:
                    if retries == 0:
                        raise
                    retries -= 1
                    repair = _REPAIR.format(problems="; ".join(exc.problems))
                    context.state.messages.append(Message(role="user", content=repair))
                    if await context.end_step(step, message):
                        raise
                    continue
            await context.end_step(step, message)
            return context.make_turn(message, data=data)


def loop(max_iterations: int = 10, *, structure_retries: int = 1) -> ExecutionStrategy:
    """The default strategy: a plain tool loop (section 5.2).

    Sends the conversation to the model; if it asks for tools, runs them
    (concurrently) and loops; stops when the model answers without tool
    calls, when ``stop_condition`` says so, after ``max_iterations``
    rounds of tool execution (``turn.stop_reason == "max_steps"``), or when
    the model called a deferred tool (``"client_tool"``; the step's other
    calls are run first).

    Args:
        max_iterations: Maximum tool execution rounds.
        structure_retries: With structured output, how many times the model
            is asked again after an answer that does not match the schema.

    Raises:
        ValueError: ``max_iterations`` < 1 or ``structure_retries`` < 0.
    """
    return LoopStrategy(max_iterations, structure_retries)
