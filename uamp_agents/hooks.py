"""Agent strategy hooks (UAP section 11): :class:`AgentStrategy`.

Every hook is optional and may be a plain function or a coroutine function;
coroutines are awaited before execution proceeds (section 11.6 rule 5).
The execution strategies call them in the order of section 11.4::

    on_step_start(step, state)
      on_reason(step, reasoning)        # react() only
      on_act(step, tool_calls)          # react() only
      on_observe(step, results)         # react() only
    on_step_end(step, StepResult)
    stop_condition(state) -> bool       # after every step
    ...
    on_complete(turn)

``on_error(error, state)`` runs when the strategy raises: returning a
:class:`~uamp_agents.turn.Turn` completes the run with it, returning
``None`` lets the error propagate.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import attrs

from .state import ExecutionState

if TYPE_CHECKING:
    from .turn import Turn

__all__ = ["AgentStrategy", "StepResult", "maybe_await"]

Hook = Callable[..., Any]


#: Values that are never awaitable: told apart by their type alone
#: (``inspect.isawaitable`` asks an ABC, a tenth of a hook call).
_PLAIN: frozenset[type] = frozenset({type(None), str, bool, int, float, list, dict, tuple})


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable, else return it unchanged."""
    kind = type(value)
    if kind is CoroutineType:
        return await value
    if kind in _PLAIN or not inspect.isawaitable(value):
        return value
    return await value


@attrs.frozen(kw_only=True)
class StepResult:
    """What ``on_step_end`` receives (section 11.2).

    Attributes:
        turn: A turn covering this step alone (its messages, its usage).
        state: The execution state after the step.
    """

    turn: Turn
    state: ExecutionState


@attrs.define(kw_only=True)
class AgentStrategy:
    """Lifecycle hooks of an agent (UAP section 11.1). All optional."""

    stop_condition: Hook | None = None
    on_step_start: Hook | None = None
    on_reason: Hook | None = None
    on_act: Hook | None = None
    on_observe: Hook | None = None
    on_step_end: Hook | None = None
    on_complete: Hook | None = None
    on_error: Hook | None = None

    @classmethod
    def coerce(cls, value: AgentStrategy | dict[str, Any] | None) -> AgentStrategy:
        """Accept an :class:`AgentStrategy`, a dict of hooks, or ``None``.

        Raises:
            TypeError: A dict names a hook that does not exist.
        """
        if value is None:
            return cls()
        if isinstance(value, AgentStrategy):
            return value
        if isinstance(value, dict):
            known = {f.name for f in attrs.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise TypeError(f"unknown strategy hook(s) {unknown}; known hooks: {sorted(known)}")
            return cls(**value)
        raise TypeError(f"strategy must be an AgentStrategy or a dict, not {type(value).__name__}")

    async def call(self, hook: str, *args: Any) -> Any:
        """Call the hook named ``hook`` with ``args`` (awaiting it) if it is set."""
        fn = getattr(self, hook)
        if fn is None:
            return None
        return await maybe_await(fn(*args))
