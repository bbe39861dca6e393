"""Where a tracer sees the runtime's model and tool calls (no tracing library here).

The runtime opens :func:`model_span` around every model call and
:func:`tool_span` around every tool call. With no tracer installed both
return one shared do-nothing object, so an untraced run pays a function call
each. A tracer (``uamp serve --otel`` installs
:class:`uamp_trio.observe.tracing.Tracing`'s) is any object with the
:class:`RunTracer` methods; it is process-wide, like the OpenTelemetry
tracer provider it usually wraps, and the spans it opens nest under the
span current in the calling task (the agent run's).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = [
    "NO_SPAN",
    "CallSpan",
    "RunTracer",
    "model_span",
    "set_tracer",
    "tool_span",
    "tracing_off",
]


class CallSpan(Protocol):
    """What the runtime tells the span of one call about its outcome."""

    def set(self, key: str, value: Any) -> None:
        """Record one attribute (skipped when ``value`` is ``None``)."""


class RunTracer(Protocol):
    """Opens the spans of model and tool calls."""

    def model_call(self, agent: str, provider: str, model: str) -> AbstractContextManager[CallSpan]:
        """A span around one call of ``provider``'s ``model`` by ``agent``."""
        ...

    def tool_call(self, agent: str, tool: str, call_id: str) -> AbstractContextManager[CallSpan]:
        """A span around one run of ``tool`` by ``agent``."""
        ...


class _Nothing:
    """The span of an untraced call: a context manager that records nothing."""

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Any) -> None:
        """Nothing to record."""


_NOTHING = _Nothing()
#: The span every untraced call gets (a caller may skip recording into it).
NO_SPAN: CallSpan = _NOTHING
_tracer: RunTracer | None = None


def set_tracer(tracer: RunTracer | None) -> None:
    """Install ``tracer`` for every run of this process (``None``: stop tracing)."""
    global _tracer
    _tracer = tracer


def tracing_off() -> bool:
    """Whether no tracer is installed."""
    return _tracer is None


def model_span(agent: str, provider: Any) -> AbstractContextManager[CallSpan]:
    """The span of one call of ``provider`` (a :class:`~uamp_agents.providers.Provider`)."""
    if _tracer is None:
        return _NOTHING
    return _tracer.model_call(agent, str(provider.name), str(provider.model))


def tool_span(agent: str, tool: str, call_id: str) -> AbstractContextManager[CallSpan]:
    """The span of one tool call."""
    if _tracer is None:
        return _NOTHING
    return _tracer.tool_call(agent, tool, call_id)
