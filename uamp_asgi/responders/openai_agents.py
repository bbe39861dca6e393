"""An OpenAI Agents SDK ``Agent`` as a UAMP responder (extra ``uamp[openai-agents]``).

One UAMP turn is one ``Runner.run_streamed(agent, input=items)``:

* the conversation becomes Responses input items (messages, the assistant's
  ``function_call`` items and their ``function_call_output``);
* the tools the *client* declared join a clone of the agent as function tools
  it stops at (``StopAtTools``): when the model calls one, the run ends and
  the call goes to the client as ``tool.call``; its result comes back as a
  ``role="tool"`` message of the next turn, i.e. a ``function_call_output``
  item;
* the agent's own tools run inside the SDK; each shows as a tool-call delta,
  then its result;
* output text and reasoning stream as deltas; the run's usage ends the turn.

The SDK runs on asyncio only: serve this responder from an asyncio server.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool, Runner
from agents.agent import StopAtTools

from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from ._emit import Events

__all__ = ["OpenAIAgentsAgent", "input_items"]

_TEXT_DELTA = "response.output_text.delta"
_THINKING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


def input_items(messages: list[ty.Message], instructions: str | None = None) -> list[Any]:
    """UAMP messages as Responses input items."""
    items: list[Any] = []
    if instructions:
        items.append({"role": "system", "content": instructions})
    for message in messages:
        role = message.role
        if role == "tool":
            call_id = message.tool_call_id or ""
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": message.text}
            )
        elif role == "assistant":
            if message.text:
                items.append({"role": "assistant", "content": message.text})
            for call in message.tool_calls or ():
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                )
        else:
            kind = "system" if role in ("system", "developer") else "user"
            items.append({"role": kind, "content": message.text})
    return items


async def _never_run(context: Any, arguments: str) -> str:
    return ""  # the run stops at a client tool before its output is used


class OpenAIAgentsAgent:
    """A :class:`~uamp_proto.responder.Responder` around an OpenAI Agents SDK ``Agent``.

    Args:
        agent: The agent (its model, tools, handoffs as built).
        name: The name it is served under (default: the agent's ``name``).
        description: For agent cards (default: the agent's ``handoff_description``).
        context: Passed to every run as ``context``.
        max_turns: The most model calls one UAMP turn may make.
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        description: str = "",
        context: Any = None,
        max_turns: int = 10,
    ) -> None:
        self.agent = agent
        self.name = name or agent.name
        self.description = description or (agent.handoff_description or "")
        self.context = context
        self.max_turns = max_turns

    def capabilities(self) -> ty.Capabilities:
        """Streamed text and reasoning, client tools."""
        return ty.Capabilities(
            id=self.name,
            provider="openai-agents",
            modalities=["text"],
            supports_streaming=True,
            supports_thinking=True,
            tools=ty.ToolCapabilities(supports_tools=True),
        )

    def _with_client_tools(self, request: TurnRequest) -> Agent[Any]:
        if not request.tools:
            return self.agent
        client = [
            FunctionTool(
                name=t.function.name,
                description=t.function.description or "",
                params_json_schema=t.function.parameters or {"type": "object", "properties": {}},
                on_invoke_tool=_never_run,
                strict_json_schema=False,
            )
            for t in request.tools
        ]
        names = [t.name for t in client]
        return self.agent.clone(
            tools=[*self.agent.tools, *client],
            tool_use_behavior=StopAtTools(stop_at_tool_names=names),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """One run of the agent; see the module docstring."""
        agent = self._with_client_tools(request)
        client_tools = {t.function.name for t in request.tools}
        out = Events(emit)
        result = Runner.run_streamed(
            agent,
            input=input_items(request.messages, request.instructions),
            context=self.context,
            max_turns=self.max_turns,
        )
        asked: list[Any] = []
        async for streamed in result.stream_events():
            event: Any = streamed  # the SDK's union of event types, read by duck typing
            kind = event.type
            if kind == "raw_response_event":
                data = event.data
                if data.type == _TEXT_DELTA:
                    await out.text(data.delta)
                elif data.type in _THINKING_DELTAS:
                    await out.thinking(data.delta)
            elif kind == "run_item_stream_event":
                item = event.item
                if event.name == "tool_called":
                    raw = item.raw_item
                    name = getattr(raw, "name", "")
                    if name in client_tools:
                        asked.append(raw)
                    else:
                        await out.server_call(raw.call_id, name, raw.arguments)
                elif event.name == "tool_output":
                    raw = item.raw_item
                    call_id = raw["call_id"] if isinstance(raw, dict) else raw.call_id
                    if not any(a.call_id == call_id for a in asked):
                        await out.server_result(call_id, str(item.output))
        usage = result.context_wrapper.usage
        await out.usage(usage.input_tokens, usage.output_tokens)
        for raw in asked:
            await out.client_call(raw.call_id, raw.name, raw.arguments)
