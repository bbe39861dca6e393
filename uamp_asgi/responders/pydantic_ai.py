"""A pydantic-ai ``Agent`` as a UAMP responder (extra ``uamp[pydantic-ai]``).

One UAMP turn is one ``agent.run_stream_events(...)``:

* the conversation before the new input becomes pydantic-ai's
  ``message_history`` (user and system prompts, the assistant's text and tool
  calls, tool returns);
* the tools the *client* declared join the run as an ``ExternalToolset``,
  and ``DeferredToolRequests`` is added to the output types: when the model
  calls one, the run ends with those calls, which go to the client as
  ``tool.call`` events. The client's results come back as the trailing
  ``role="tool"`` messages of the next turn and resume the run as
  ``DeferredToolResults``;
* the agent's own tools run inside pydantic-ai; each shows as a tool-call
  delta, then its result;
* text and thinking stream as deltas; the run's usage ends the turn.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai import messages as pm
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from ._emit import Events

__all__ = ["PydanticAIAgent", "model_history"]


def _call_names(messages: list[ty.Message]) -> dict[str, str]:
    return {c.id: c.name for m in messages for c in m.tool_calls or ()}


def model_history(messages: list[ty.Message]) -> list[pm.ModelMessage]:
    """UAMP messages as pydantic-ai's message history."""
    names = _call_names(messages)
    out: list[pm.ModelMessage] = []
    for message in messages:
        role = message.role
        if role in ("system", "developer"):
            out.append(pm.ModelRequest(parts=[pm.SystemPromptPart(content=message.text)]))
        elif role == "user":
            out.append(pm.ModelRequest(parts=[pm.UserPromptPart(content=message.text)]))
        elif role == "tool":
            call_id = message.tool_call_id or ""
            part = pm.ToolReturnPart(
                tool_name=names.get(call_id, "tool"), content=message.text, tool_call_id=call_id
            )
            last = out[-1] if out else None
            if isinstance(last, pm.ModelRequest) and all(
                isinstance(p, pm.ToolReturnPart) for p in last.parts
            ):
                last.parts = [*last.parts, part]
            else:
                out.append(pm.ModelRequest(parts=[part]))
        elif role == "assistant":
            parts: list[Any] = []
            if message.text:
                parts.append(pm.TextPart(content=message.text))
            for call in message.tool_calls or ():
                parts.append(
                    pm.ToolCallPart(tool_name=call.name, args=call.arguments, tool_call_id=call.id)
                )
            if parts:
                out.append(pm.ModelResponse(parts=parts))
    return out


class PydanticAIAgent:
    """A :class:`~uamp_proto.responder.Responder` around a pydantic-ai ``Agent``.

    Args:
        agent: The pydantic-ai agent (its model, tools and instructions as built).
        name: The name it is served under (default: the agent's ``name``).
        description: For agent cards (default: none).
        deps: Passed to every run as ``deps``.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        description: str = "",
        deps: Any = None,
    ) -> None:
        self.agent = agent
        self.name = name or agent.name or "pydantic-ai"
        self.description = description
        self.deps = deps

    def capabilities(self) -> ty.Capabilities:
        """Streamed text and thinking, client tools."""
        return ty.Capabilities(
            id=self.name,
            provider="pydantic-ai",
            modalities=["text"],
            supports_streaming=True,
            supports_thinking=True,
            tools=ty.ToolCapabilities(supports_tools=True),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """One run of the agent; see the module docstring."""
        messages = list(request.messages)
        results: dict[str, Any] = {}
        while messages and messages[-1].role == "tool":
            done = messages.pop()
            results[done.tool_call_id or ""] = done.text
        prompt: str | None = None
        if not results and messages and messages[-1].role == "user":
            prompt = messages.pop().text
        history = model_history(messages)
        client_tools = {t.function.name for t in request.tools}
        toolsets = []
        output_type: Any = None
        if request.tools:
            defs = [
                ToolDefinition(
                    name=t.function.name,
                    description=t.function.description,
                    parameters_json_schema=t.function.parameters or {"type": "object"},
                )
                for t in request.tools
            ]
            toolsets.append(ExternalToolset(defs))
            output_type = [self.agent.output_type, DeferredToolRequests]
        out = Events(emit)
        async with self.agent.run_stream_events(
            prompt,
            message_history=history or None,
            deferred_tool_results=DeferredToolResults(calls=results) if results else None,
            output_type=output_type,
            toolsets=toolsets or None,
            instructions=request.instructions,
            deps=self.deps,
        ) as events:
            async for event in events:
                await self._feed(event, out, client_tools)

    async def _feed(self, event: Any, out: Events, client_tools: set[str]) -> None:
        if isinstance(event, pm.PartStartEvent):
            part = event.part
            if isinstance(part, pm.TextPart):
                await out.text(part.content)
            elif isinstance(part, pm.ThinkingPart):
                await out.thinking(part.content)
        elif isinstance(event, pm.PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, pm.TextPartDelta):
                await out.text(delta.content_delta)
            elif isinstance(delta, pm.ThinkingPartDelta) and delta.content_delta:
                await out.thinking(delta.content_delta)
        elif isinstance(event, pm.FunctionToolCallEvent):
            call = event.part
            if call.tool_name not in client_tools:
                await out.server_call(call.tool_call_id, call.tool_name, call.args_as_json_str())
        elif isinstance(event, pm.FunctionToolResultEvent):
            result = event.part
            if result.tool_name not in client_tools:
                await out.server_result(result.tool_call_id, result.model_response_str())
        elif getattr(event, "event_kind", None) == "agent_run_result":
            run = event.result
            usage = run.usage  # a property (a method before pydantic-ai 2)
            if not hasattr(usage, "input_tokens"):
                usage = usage()
            await out.usage(usage.input_tokens, usage.output_tokens)
            if isinstance(run.output, DeferredToolRequests):
                for call in run.output.calls:
                    await out.client_call(
                        call.tool_call_id, call.tool_name, call.args_as_json_str()
                    )
