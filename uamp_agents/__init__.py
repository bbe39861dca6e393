"""uamp_agents: the agent runtime (UAP spec).

Entry points: :func:`agent` (this package), :func:`session`, :func:`ask`,
:func:`query`, and the classes :class:`Session`, :class:`Checkpoint`,
:class:`ThreadTree`, :class:`ThreadNode`. Strategies live in
:mod:`uamp_agents.execution`, middleware in :mod:`uamp_agents.middleware`,
models in :mod:`uamp_agents.providers`.

The session, thread and communication names are imported on first use, so
the package imports without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .agent import Agent, agent
from .hooks import AgentStrategy, StepResult
from .streaming import AgentStream, AgentStreamEvent, UAPEvent
from .tools import Tool, ToolContext, ToolError, tool
from .turn import ToolExecution, Turn

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .communication import ask, query
    from .session import Session, session
    from .thread import ThreadNode, ThreadTree

__all__ = [
    "Agent",
    "AgentStrategy",
    "AgentStream",
    "AgentStreamEvent",
    "Checkpoint",
    "Session",
    "StepResult",
    "ThreadNode",
    "ThreadTree",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolExecution",
    "Turn",
    "UAPEvent",
    "agent",
    "ask",
    "query",
    "session",
    "tool",
]

# Names provided by the sessions modules, resolved lazily (name -> module).
_LAZY = {
    "session": "session",
    "Session": "session",
    "ThreadTree": "thread",
    "ThreadNode": "thread",
    "Checkpoint": "checkpoint",
    "ask": "communication",
    "query": "communication",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f".{module_name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module_name}":
            raise
        raise AttributeError(
            f"{__name__}.{name} is not available: module {__name__}.{module_name} is missing"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value
