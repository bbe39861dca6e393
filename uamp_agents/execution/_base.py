"""The strategy interface (UAP section 5.1) and helpers shared by strategies."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from uamp_proto.types import ToolInvocation, ToolOutput

if TYPE_CHECKING:
    from ..context import ExecutionContext
    from ..turn import Turn

__all__ = ["ExecutionStrategy", "StrategyLike", "format_observations"]


@runtime_checkable
class StrategyLike(Protocol):
    """Anything usable as ``execution=``: a ``name`` and an async ``execute``."""

    name: str

    async def execute(self, context: ExecutionContext) -> Turn:
        """Run the agent and return its turn."""
        ...


class ExecutionStrategy(abc.ABC):
    """Base class of execution strategies (section 5.1, 5.5).

    A strategy decides the sequence of steps; the
    :class:`~uamp_agents.context.ExecutionContext` it receives performs them
    (``generate``, ``run_tools``, ``begin_step``/``end_step``, ``emit``,
    ``make_turn``). Streaming needs no separate method: when the run is a
    stream, the context forwards the model's events and the strategy's
    agent-level events to it, so one ``execute`` serves both ``run`` and
    ``stream``.
    """

    name: str = "custom"

    @abc.abstractmethod
    async def execute(self, context: ExecutionContext) -> Turn:
        """Run the agent in ``context`` and return the turn."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


OBSERVATION_FORMATS = ("markdown", "json", "text")


def format_observations(
    calls: Sequence[ToolInvocation], outputs: Sequence[ToolOutput], fmt: str
) -> str:
    """Render tool results as observations: ``markdown``, ``json`` or ``text``.

    Raises:
        ValueError: ``fmt`` is not one of those.
    """
    if fmt == "text":  # (the loop strategy's, every tool round)
        if len(calls) == 1 == len(outputs):
            call, out = calls[0], outputs[0]
            return f"{call.name}{' failed' if out.is_error else ''}: {out.result}"
        return "\n".join(
            f"{c.name}{' failed' if o.is_error else ''}: {o.result}"
            for c, o in zip(calls, outputs, strict=True)
        )
    pairs = list(zip(calls, outputs, strict=True))
    if fmt == "markdown":
        blocks = []
        for call, out in pairs:
            label = " (error)" if out.is_error else ""
            blocks.append(f"### {call.name}{label}\n\n```\n{out.result}\n```")
        return "\n\n".join(blocks)
    if fmt == "json":
        items: list[dict[str, Any]] = [
            {"tool": c.name, "result": o.result, "is_error": bool(o.is_error)} for c, o in pairs
        ]
        return orjson.dumps(items).decode()
    raise ValueError(f"unknown observation format {fmt!r}; use one of {OBSERVATION_FORMATS}")
