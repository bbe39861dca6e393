"""The react() strategy (UAP section 5.3): reason, act, observe."""

from __future__ import annotations

from uamp_proto.types import Message, ToolInvocation

from ..context import ExecutionContext
from ..turn import Turn
from ._base import OBSERVATION_FORMATS, ExecutionStrategy, format_observations

__all__ = ["DEFAULT_ACTION_PROMPT", "DEFAULT_REASONING_PROMPT", "ReactStrategy", "react"]

DEFAULT_REASONING_PROMPT = "Think about what to do next. What is your reasoning?"
DEFAULT_ACTION_PROMPT = (
    "Based on your reasoning, take action using the available tools, "
    "or give your final answer if no action is needed."
)


class ReactStrategy(ExecutionStrategy):
    """See :func:`react`."""

    name = "react"

    def __init__(
        self,
        max_steps: int = 10,
        reasoning_prompt: str = DEFAULT_REASONING_PROMPT,
        observation_format: str = "markdown",
        action_prompt: str = DEFAULT_ACTION_PROMPT,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if observation_format not in OBSERVATION_FORMATS:
            raise ValueError(
                f"unknown observation format {observation_format!r}; "
                f"use one of {OBSERVATION_FORMATS}"
            )
        self.max_steps = max_steps
        self.reasoning_prompt = reasoning_prompt
        self.observation_format = observation_format
        self.action_prompt = action_prompt

    async def execute(self, context: ExecutionContext) -> Turn:
        """Run reason/act/observe cycles; each cycle is one step."""
        state = context.state
        if state.reasoning is None:
            state.reasoning = []
        observations: str | None = None
        for _ in range(self.max_steps):
            step = await context.begin_step()
            # Reason: a transient prompt; the reasoning is kept in state.reasoning.
            prompt_text = self.reasoning_prompt
            if observations is not None:
                prompt_text = f"Observations:\n\n{observations}\n\n{self.reasoning_prompt}"
            prompt = Message(role="user", content=prompt_text)
            thought = await context.generate(context.conversation(prompt), tools=[], thinking=True)
            reasoning = thought.message.text or (thought.thinking or "")
            state.reasoning.append(reasoning)
            await context.strategy.call("on_reason", step, reasoning)
            await context.emit("reasoning", {"text": reasoning})
            # Act: the reasoning leads into the action request.
            acted = await context.generate(
                context.conversation(
                    prompt,
                    Message(role="assistant", content=reasoning),
                    Message(role="user", content=self.action_prompt),
                ),
                response_format=context.response_format(),
            )
            message = acted.message
            state.messages.append(message)
            calls = list(message.tool_calls or [])
            deferred: list[ToolInvocation] = []
            if calls:
                await context.strategy.call("on_act", step, calls)
                await context.emit("action", {"tool_calls": calls})
                local, outputs, deferred = await context.run_and_defer(calls)
                # Observe
                observations = format_observations(local, outputs, self.observation_format)
                await context.strategy.call("on_observe", step, outputs)
                if local:
                    await context.emit("observation", {"results": outputs, "text": observations})
            stop = await context.end_step(step, message)
            if context.suspended:
                return context.make_turn(message, stop_reason="interrupted")
            if deferred:
                return context.make_turn(message, stop_reason="client_tool")
            if not calls:
                data = None
                if context.structure is not None:
                    data = context.parse_structured(message.text)
                return context.make_turn(message, data=data)
            if stop:
                return context.make_turn(message, stop_reason="stop_condition")
        return context.make_turn(context.last_assistant(), stop_reason="max_steps")


def react(
    max_steps: int = 10,
    reasoning_prompt: str = DEFAULT_REASONING_PROMPT,
    observation_format: str = "markdown",
    *,
    action_prompt: str = DEFAULT_ACTION_PROMPT,
) -> ExecutionStrategy:
    """Reason-act-observe cycles (section 5.3).

    Each step asks the model for its reasoning (recorded in
    ``state.reasoning``, passed to ``on_reason``, streamed as a
    ``reasoning`` event), then for an action given that reasoning; tool calls
    are executed (``on_act``) and their results formatted as observations
    (``on_observe``) that open the next step's reasoning prompt. Stops when
    the model acts without tools, when ``stop_condition`` says so, or after
    ``max_steps`` cycles. The reasoning and action prompts are not added to
    the conversation; the action messages and tool results are.

    Args:
        max_steps: Maximum reason-act-observe cycles.
        reasoning_prompt: The prompt of the reasoning phase.
        observation_format: ``"markdown"``, ``"json"`` or ``"text"``.
        action_prompt: The prompt of the action phase.

    Raises:
        ValueError: ``max_steps`` < 1 or an unknown observation format.
    """
    return ReactStrategy(max_steps, reasoning_prompt, observation_format, action_prompt)
