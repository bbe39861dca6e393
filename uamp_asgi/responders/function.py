"""Any async generator as an agent: ``async def agent(turn) -> AsyncIterator[str | Event]``.

The function receives the :class:`~uamp_proto.responder.TurnRequest` (the
conversation, the client's tools, the principal ...) and yields the reply:
strings are text, UAMP events (``Thinking``, ``ToolCall``, ``UsageDelta``
...) go out as they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest

from ._emit import Events

__all__ = ["FunctionAgent", "function_agent"]

AgentFunction = Callable[[TurnRequest], AsyncIterator["str | ev.Event"]]


class FunctionAgent:
    """A :class:`~uamp_proto.responder.Responder` around an async generator function."""

    def __init__(self, fn: AgentFunction, *, name: str, description: str = "") -> None:
        self.fn = fn
        self.name = name
        self.description = description

    def capabilities(self) -> ty.Capabilities:
        """Streamed text, client tools."""
        return ty.Capabilities(
            id=self.name,
            provider="function",
            modalities=["text"],
            supports_streaming=True,
            tools=ty.ToolCapabilities(supports_tools=True),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the function, every item it yields as an event."""
        out = Events(emit)
        async for item in self.fn(request):
            if isinstance(item, str):
                await out.text(item)
            else:
                await emit(item)


def function_agent(
    fn: AgentFunction | None = None, *, name: str | None = None, description: str = ""
) -> FunctionAgent:
    """Make ``fn`` an agent named ``name`` (default: the function's name)."""
    if fn is None:
        raise TypeError("function_agent() needs the function")
    return FunctionAgent(
        fn, name=name or fn.__name__, description=description or (fn.__doc__ or "")
    )
