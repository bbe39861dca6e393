"""Every exception the agent runtime raises, in one leaf module.

:class:`AgentsError` is the root of them all and derives from
:class:`uamp_proto.errors.UampError`, so ``except UampError`` catches every
error of the three packages. This module imports nothing of ``uamp_agents``:
any module may import it without creating an import cycle. The classes are
also re-exported where they are raised (``uamp_agents.tools.ToolError``,
``uamp_agents.providers.ProviderError`` ...), so either name works.

The tree::

    UampError
    └── AgentsError
        ├── AgentRuntimeError          a run cannot go on
        │   ├── NoModelError
        │   ├── StructuredOutputError
        │   ├── SubAgentDepthError
        │   ├── PlanError
        │   ├── BudgetExceededError
        │   └── GuardrailError
        ├── ToolError                  a tool call failed (becomes an error result)
        ├── SchemaError (TypeError)    a type hint has no JSON Schema form
        ├── ProviderError              a model call failed
        ├── SerializationError (ValueError)  bad SessionJSON and friends
        ├── UnknownNodeError (LookupError)   no such thread node
        ├── SessionBusyError (RuntimeError)  a session already runs
        └── PersistenceError           a store failed
"""

from __future__ import annotations

import attrs

from uamp_proto.errors import UampError

__all__ = [
    "AgentRuntimeError",
    "AgentsError",
    "BudgetExceededError",
    "GuardrailError",
    "NoModelError",
    "PersistenceError",
    "PlanError",
    "ProviderError",
    "SchemaError",
    "SerializationError",
    "SessionBusyError",
    "StructuredOutputError",
    "SubAgentDepthError",
    "ToolError",
    "UnknownNodeError",
]


class AgentsError(UampError):
    """Root of every exception ``uamp_agents`` defines."""


# --- runs -----------------------------------------------------------------------


class AgentRuntimeError(AgentsError):
    """Base of the agent runtime's own errors: the run cannot go on."""


class NoModelError(AgentRuntimeError):
    """The agent has no model and no parent run to inherit one from."""


class StructuredOutputError(AgentRuntimeError):
    """The model's final answer is not JSON matching the agent's ``structure``.

    Attributes:
        problems: What is wrong, one entry per problem (with JSON paths).
        text: The text the model returned.
    """

    def __init__(self, problems: list[str], text: str) -> None:
        super().__init__("structured output does not match the schema: " + "; ".join(problems))
        self.problems = problems
        self.text = text


class SubAgentDepthError(AgentRuntimeError):
    """Sub-agents are nested deeper than allowed (UAP section 16.1)."""


class PlanError(AgentRuntimeError):
    """The model's plan is unusable (not JSON, wrong shape, bad dependencies)."""


class BudgetExceededError(AgentRuntimeError):
    """A :func:`~uamp_agents.middleware.budget` limit was exceeded.

    Attributes:
        kind: ``"tokens"``, ``"steps"`` or ``"seconds"``.
        limit: The configured limit.
        used: How much was used when the run was stopped.
    """

    def __init__(self, kind: str, limit: float, used: float) -> None:
        super().__init__(f"budget exceeded: {used:g} {kind} used, the limit is {limit:g}")
        self.kind = kind
        self.limit = limit
        self.used = used


class GuardrailError(AgentRuntimeError):
    """A :func:`~uamp_agents.middleware.guardrails` check rejected the input or the output.

    Attributes:
        stage: ``"input"`` or ``"output"``.
        reason: Why it was rejected.
    """

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"guardrail rejected the {stage}: {reason}")
        self.stage = stage
        self.reason = reason


# --- tools ----------------------------------------------------------------------


class ToolError(AgentsError):
    """Raise it from a tool to report a failure with exactly this message."""


class SchemaError(AgentsError, TypeError):
    """A type hint has no JSON Schema equivalent."""


# --- models -----------------------------------------------------------------------


@attrs.define(auto_exc=True)
class ProviderError(AgentsError):
    """A provider call failed.

    Attributes:
        status: The HTTP status, when there was one.
        retry_after: Seconds the provider asked us to wait, if it did.
        retryable: Whether trying again may succeed (429, 5xx, cut stream).
    """

    message: str
    status: int | None = attrs.field(default=None, kw_only=True)
    retry_after: float | None = attrs.field(default=None, kw_only=True)
    retryable: bool = attrs.field(default=False, kw_only=True)


# --- sessions, threads, stores ------------------------------------------------------


class SerializationError(AgentsError, ValueError):
    """Serialized UAP data that is malformed or of an unsupported version.

    Attributes:
        path: Where the problem is, as a JSON path from the document root
            (``"threadTree.nodes[1].parentId"``; ``""`` for the root itself).
        reason: What is wrong there.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        where = path or "<root>"
        super().__init__(f"{where}: {reason}")


class UnknownNodeError(AgentsError, LookupError):
    """A thread node id that is not in the tree."""

    def __init__(self, node_id: str) -> None:
        super().__init__(f"no thread node with id {node_id!r}")
        self.node_id = node_id


class SessionBusyError(AgentsError, RuntimeError):
    """A run was started on a session while another run of it is going on."""


class PersistenceError(AgentsError):
    """A store could not save, load, list or delete a session.

    Attributes:
        session_id: The session concerned, when there is one.
    """

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
