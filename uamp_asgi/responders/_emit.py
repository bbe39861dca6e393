"""What every framework adapter emits: a few calls that make the right UAMP events."""

from __future__ import annotations

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit

__all__ = ["Events"]


class Events:
    """Turns a framework's stream into UAMP events through ``emit``.

    Text and thinking are deltas; a tool the agent runs itself (server-side)
    shows as a tool-call delta, then its result and ``tool.call.done``; a
    tool the client declared is handed to the client with ``tool.call``
    (after which the agent's ``respond`` returns).
    """

    def __init__(self, emit: Emit) -> None:
        self.emit = emit

    async def text(self, text: str) -> None:
        """A piece of the reply."""
        if text:
            await self.emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))

    async def thinking(self, text: str) -> None:
        """A piece of the agent's reasoning."""
        if text:
            await self.emit(ev.Thinking(content=text, is_delta=True))

    async def server_call(self, call_id: str, name: str, arguments: str) -> None:
        """The agent calls one of its own tools."""
        fragment = ty.ToolCallFragment(id=call_id, name=name, arguments=arguments)
        await self.emit(ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=fragment)))

    async def server_result(self, call_id: str, result: str, *, failed: bool = False) -> None:
        """One of the agent's own tools returned."""
        status = "failed" if failed else "completed"
        fragment = ty.ToolResultFragment(call_id=call_id, result=result, status=status)
        await self.emit(ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=fragment)))
        await self.emit(ev.ToolCallDone(call_id=call_id))

    async def client_call(self, call_id: str, name: str, arguments: str) -> None:
        """Ask the client to run one of the tools it declared."""
        await self.emit(ev.ToolCall(call_id=call_id, name=name, arguments=arguments))

    async def usage(self, input_tokens: int | None, output_tokens: int | None) -> None:
        """Tokens used (added to what was reported before)."""
        if input_tokens is None and output_tokens is None:
            return
        total = (input_tokens or 0) + (output_tokens or 0)
        stats = ty.UsageStats(
            input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=total
        )
        await self.emit(ev.UsageDelta(delta=stats))
