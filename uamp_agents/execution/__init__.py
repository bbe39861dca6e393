"""Execution strategies (UAP section 5): :func:`loop`, :func:`react`, :func:`plan`.

Custom strategies subclass :class:`ExecutionStrategy` (or are any object
with a ``name`` and an async ``execute(context)``).
"""

from __future__ import annotations

from ._base import ExecutionStrategy, StrategyLike, format_observations
from ._loop import LoopStrategy, loop
from ._plan import DEFAULT_PLAN_SCHEMA, PlanError, PlanStrategy, plan
from ._react import ReactStrategy, react

__all__ = [
    "DEFAULT_PLAN_SCHEMA",
    "ExecutionStrategy",
    "LoopStrategy",
    "PlanError",
    "PlanStrategy",
    "ReactStrategy",
    "StrategyLike",
    "format_observations",
    "loop",
    "plan",
    "react",
]
