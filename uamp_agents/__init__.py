"""uamp_agents: the agent runtime (UAP spec).

Entry points: :func:`agent` (this package), :func:`session`, :func:`ask`,
:func:`query`, and the classes :class:`Session`, :class:`Checkpoint`,
:class:`ThreadTree`, :class:`ThreadNode`. Strategies live in
:mod:`uamp_agents.execution`, middleware in :mod:`uamp_agents.middleware`,
models in :mod:`uamp_agents.providers`.

Where the runtime sits beside the core and the servers: docs/architecture.md.
"""

from __future__ import annotations

from .agent import Agent, agent
from .checkpoint import Checkpoint
from .communication import ask, query
from .hooks import AgentStrategy, StepResult
from .session import Session, session
from .streaming import AgentStream, AgentStreamEvent, UAPEvent
from .thread import Thread, ThreadNode, ThreadTree
from .tools import Tool, ToolContext, ToolError, tool
from .turn import ToolExecution, Turn

# Every name is imported eagerly: the submodule ``uamp_agents.session`` and the
# function ``session`` share a name, and a lazy import of the submodule would
# replace the function on the package.

__all__ = [
    "Agent",
    "AgentStrategy",
    "AgentStream",
    "AgentStreamEvent",
    "Checkpoint",
    "Session",
    "StepResult",
    "Thread",
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
