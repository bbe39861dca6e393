"""Middleware (UAP section 10): the onion around a run.

A middleware is any object with a ``name`` and any of these optional
methods, each sync or async:

* ``before(context)`` -- runs in list order before the run; may return a
  modified :class:`MiddlewareContext` that is passed downstream;
* ``after(context, turn)`` -- runs in reverse order; returns the turn;
* ``on_error(context, error)`` -- runs in reverse order when the run (or an
  inner middleware) raises; returning a turn recovers, ``None`` propagates;
* ``on_event(context, event)`` -- sees every agent-level event of the run
  (step starts and ends, tool calls ...) as it happens; a uamp extension
  used by :func:`logging` to log steps and tool calls.

Subclass :class:`Middleware` or write any object of that shape. This module
provides :func:`logging` (section 10.3), :func:`budget` and
:func:`guardrails` (section 10.4).
"""

from __future__ import annotations

import logging as _stdlib_logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from uamp_proto.types import Message

from .context import Check
from .errors import BudgetExceededError, GuardrailError
from .hooks import maybe_await
from .state import ExecutionState
from .streaming import UAPEvent
from .turn import Turn

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "BudgetExceededError",
    "GuardrailError",
    "Middleware",
    "MiddlewareContext",
    "budget",
    "guardrails",
    "logging",
    "run_pipeline",
]


@attrs.define(kw_only=True, eq=False)
class MiddlewareContext:
    """What middleware sees of a run (section 10.1).

    Attributes:
        agent: The agent.
        input: The user input (a middleware may replace it); ``None`` for a
            run that resumes a conversation without new input.
        history: The conversation history (a middleware may replace it).
        metadata: Request metadata, shared by the middleware of one run
            and handed to the execution as the initial ``state.metadata``.
        session: The session the run belongs to, if any.
        checks: Functions called with ``(state, usage)`` at every step
            start and after every model and tool call; raising stops the run.
        deadline: A trio-clock deadline for the run (``None``: no limit).
    """

    agent: Agent
    input: Message | None
    history: list[Message]
    metadata: dict[str, Any] = attrs.field(factory=dict)
    session: Any = None
    checks: list[Check] = attrs.field(factory=list)
    deadline: float | None = None


class Middleware:
    """Convenience base class: every hook is a no-op."""

    name = "middleware"

    async def before(self, context: MiddlewareContext) -> MiddlewareContext | None:
        """Called before the run, in list order."""
        return None

    async def after(self, context: MiddlewareContext, turn: Turn) -> Turn:
        """Called after the run, in reverse order."""
        return turn

    async def on_error(self, context: MiddlewareContext, error: Exception) -> Turn | None:
        """Called when the run fails, in reverse order; a turn recovers."""
        return None

    async def on_event(self, context: MiddlewareContext, event: UAPEvent) -> None:
        """Called for every agent-level event of the run."""
        return None


Core = Callable[[MiddlewareContext], Awaitable[Turn]]


async def run_pipeline(middleware: Sequence[Any], context: MiddlewareContext, core: Core) -> Turn:
    """Run ``core`` inside the middleware onion (section 10.2).

    Raises:
        TypeError: An ``after`` hook returned something that is not a Turn.
    """

    if not middleware:  # the common agent: no onion to build
        return await core(context)

    async def layer(index: int, ctx: MiddlewareContext) -> Turn:
        if index == len(middleware):
            return await core(ctx)
        mw = middleware[index]
        before = getattr(mw, "before", None)
        if before is not None:
            changed = await maybe_await(before(ctx))
            if changed is not None:
                ctx = changed
        try:
            turn = await layer(index + 1, ctx)
        except Exception as exc:
            handler = getattr(mw, "on_error", None)
            recovered = None if handler is None else await maybe_await(handler(ctx, exc))
            if recovered is None:
                raise
            if not isinstance(recovered, Turn):
                raise TypeError(
                    f"{_name(mw)}.on_error must return a Turn or None, "
                    f"not {type(recovered).__name__}"
                ) from exc
            return recovered
        after = getattr(mw, "after", None)
        if after is not None:
            turn = await maybe_await(after(ctx, turn))
            if not isinstance(turn, Turn):
                raise TypeError(f"{_name(mw)}.after must return a Turn, not {type(turn).__name__}")
        return turn

    return await layer(0, context)


def _name(mw: Any) -> str:
    return str(getattr(mw, "name", type(mw).__name__))


# --- logging (section 10.3) -------------------------------------------------

_LEVELS = {
    "debug": _stdlib_logging.DEBUG,
    "info": _stdlib_logging.INFO,
    "warn": _stdlib_logging.WARNING,
    "warning": _stdlib_logging.WARNING,
    "error": _stdlib_logging.ERROR,
}


class _Logging(Middleware):
    name = "logging"

    def __init__(
        self,
        level: str | int,
        logger: _stdlib_logging.Logger | Callable[[str], Any] | str | None,
        include_messages: bool,
        include_timing: bool,
    ) -> None:
        if isinstance(level, str):
            if level.lower() not in _LEVELS:
                raise ValueError(f"unknown log level {level!r}; use one of {sorted(_LEVELS)}")
            level = _LEVELS[level.lower()]
        self.level = level
        if logger is None or isinstance(logger, str):
            logger = _stdlib_logging.getLogger(logger or "uamp_agents")
        self.logger = logger
        self.include_messages = include_messages
        self.include_timing = include_timing
        self._key = f"logging:{id(self)}"

    def _log(self, level: int, message: str, exc: BaseException | None = None) -> None:
        if level < self.level:
            return
        if isinstance(self.logger, _stdlib_logging.Logger):
            self.logger.log(level, message, exc_info=exc)
        else:
            self.logger(f"[{_stdlib_logging.getLevelName(level)}] {message}")

    async def before(self, context: MiddlewareContext) -> None:
        context.metadata[self._key] = trio.current_time()
        self._log(_stdlib_logging.INFO, f"Agent {context.agent.id} starting execution")
        if context.input is not None:
            self._log(_stdlib_logging.DEBUG, f"Input: {context.input.text!r}")
        if self.include_messages:
            for m in context.history:
                self._log(_stdlib_logging.INFO, f"History {m.role}: {m.text!r}")

    def _elapsed(self, context: MiddlewareContext) -> str:
        started = context.metadata.get(self._key)
        if not self.include_timing or started is None:
            return ""
        return f" in {trio.current_time() - started:.2f}s"

    async def after(self, context: MiddlewareContext, turn: Turn) -> Turn:
        tokens = turn.usage.total_tokens
        usage = f" ({tokens} tokens)" if tokens is not None else ""
        self._log(
            _stdlib_logging.INFO,
            f"Agent {context.agent.id} completed{self._elapsed(context)}{usage}, "
            f"{turn.steps} step(s), {turn.status}",
        )
        if self.include_messages:
            for m in turn.messages[1:]:
                self._log(_stdlib_logging.INFO, f"Output {m.role}: {m.text!r}")
        return turn

    async def on_error(self, context: MiddlewareContext, error: Exception) -> None:
        self._log(
            _stdlib_logging.ERROR,
            f"Agent {context.agent.id} failed{self._elapsed(context)}: "
            f"{type(error).__name__}: {error}",
        )
        self._log(_stdlib_logging.DEBUG, "Error details", exc=error)

    async def on_event(self, context: MiddlewareContext, event: UAPEvent) -> None:
        if event.type == "step_start":
            self._log(_stdlib_logging.DEBUG, f"Agent {event.agent_id} step {event.step} started")
        elif event.type == "step_end":
            tokens = getattr(event.data.get("usage"), "total_tokens", None)
            usage = f" ({tokens} tokens)" if tokens is not None else ""
            self._log(
                _stdlib_logging.DEBUG, f"Agent {event.agent_id} step {event.step} completed{usage}"
            )
        elif event.type == "action":
            for call in event.data.get("tool_calls", ()):
                self._log(_stdlib_logging.INFO, f"Tool call: {call.name}({call.arguments})")
        elif event.type == "observation":
            for result in event.data.get("results", ()):
                status = "error" if result.is_error else "ok"
                self._log(_stdlib_logging.DEBUG, f"Tool result ({status}): {result.result[:200]!r}")


def logging(
    level: str | int = "info",
    logger: _stdlib_logging.Logger | Callable[[str], Any] | str | None = None,
    include_messages: bool = False,
    include_timing: bool = True,
) -> Middleware:
    """Log runs through the stdlib ``logging`` module (section 10.3).

    Args:
        level: The lowest level logged: ``"debug"``, ``"info"``, ``"warn"``,
            ``"error"`` (or a ``logging`` level number).
        logger: A ``logging.Logger``, a logger name, or a function taking
            one line of text (then lines read ``"[INFO] ..."``). Default:
            the ``uamp_agents`` logger.
        include_messages: Also log the history and every output message
            (they may hold sensitive data, section 16.3).
        include_timing: Log how long the run took (trio clock).

    Raises:
        ValueError: ``level`` is not a known level name.
    """
    return _Logging(level, logger, include_messages, include_timing)


# --- budget (section 10.4) --------------------------------------------------


def _total_tokens(usage: Any) -> int:
    if usage.total_tokens is not None:
        return int(usage.total_tokens)
    return int((usage.input_tokens or 0) + (usage.output_tokens or 0))


class _Budget(Middleware):
    name = "budget"

    def __init__(self, max_tokens: int | None, max_steps: int | None, max_seconds: float | None):
        for label, value in (
            ("max_tokens", max_tokens),
            ("max_steps", max_steps),
            ("max_seconds", max_seconds),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"{label} must be positive, got {value}")
        self.max_tokens = max_tokens
        self.max_steps = max_steps
        self.max_seconds = max_seconds

    def _check(self, state: ExecutionState, usage: Any) -> None:
        if self.max_steps is not None and state.step > self.max_steps:
            raise BudgetExceededError("steps", self.max_steps, state.step)
        if self.max_tokens is not None:
            used = _total_tokens(usage)
            if used > self.max_tokens:
                raise BudgetExceededError("tokens", self.max_tokens, used)

    async def before(self, context: MiddlewareContext) -> None:
        context.checks.append(self._check)
        if self.max_seconds is not None:
            deadline = trio.current_time() + self.max_seconds
            if context.deadline is None or deadline < context.deadline:
                context.deadline = deadline
            context.metadata.setdefault("budget_max_seconds", self.max_seconds)


def budget(
    max_tokens: int | None = None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
) -> Middleware:
    """Stop a run that uses too much (section 10.4).

    Raises :class:`BudgetExceededError` from the run when the total tokens
    (sub-agents included) pass ``max_tokens``, when a step past
    ``max_steps`` would start, or when ``max_seconds`` (trio clock) have
    passed -- the time limit cancels whatever is in flight.

    Raises:
        ValueError: A limit is zero or negative.
    """
    return _Budget(max_tokens, max_steps, max_seconds)


# --- guardrails (section 10.4) ----------------------------------------------

#: A check: return None/True to pass, False or a reason string to reject,
#: or a Message to use instead (transform).
Check_ = Callable[[Message], Any]


class _Guardrails(Middleware):
    name = "guardrails"

    def __init__(self, check_input: Check_ | None, check_output: Check_ | None) -> None:
        self.check_input = check_input
        self.check_output = check_output

    @staticmethod
    async def _verdict(stage: str, check: Check_, message: Message) -> Message:
        verdict = await maybe_await(check(message))
        if verdict is None or verdict is True:
            return message
        if verdict is False:
            raise GuardrailError(stage, "rejected by check")
        if isinstance(verdict, str):
            raise GuardrailError(stage, verdict)
        if isinstance(verdict, Message):
            return verdict
        raise TypeError(
            f"a guardrail check must return None, a bool, a reason string or a Message, "
            f"not {type(verdict).__name__}"
        )

    async def before(self, context: MiddlewareContext) -> MiddlewareContext | None:
        if self.check_input is None or context.input is None:
            return None
        replaced = await self._verdict("input", self.check_input, context.input)
        if replaced is context.input:
            return None
        return attrs.evolve(context, input=replaced)

    async def after(self, context: MiddlewareContext, turn: Turn) -> Turn:
        if self.check_output is None:
            return turn
        replaced = await self._verdict("output", self.check_output, turn.response)
        if replaced is turn.response:
            return turn
        messages = list(turn.messages)
        for i in range(len(messages) - 1, -1, -1):
            if messages[i] is turn.response:
                messages[i] = replaced
                break
        return attrs.evolve(turn, response=replaced, messages=messages)


def guardrails(
    check_input: Check_ | None = None,
    check_output: Check_ | None = None,
) -> Middleware:
    """Check (and optionally rewrite) the input and the final response.

    Each check gets the message (sync or async) and returns ``None`` or
    ``True`` to pass it, ``False`` or a reason string to reject it (the run
    raises :class:`GuardrailError`), or a replacement :class:`Message`.
    Put it first in the list (section 16.3).
    """
    return _Guardrails(check_input, check_output)
