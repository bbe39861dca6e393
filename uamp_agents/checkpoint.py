"""Checkpoints: snapshots of a session's recoverable state (UAP sections 6.4, 13.3).

A :class:`Checkpoint` is immutable. Its :class:`CheckpointState` holds the
whole conversation at the checkpoint (the active node's history, oldest
first), the step counter and the strategy's metadata, which is enough to
bring a session back to that point even if the thread tree has grown since
(:meth:`uamp_agents.session.Session.restore`). ``sub_agent_states`` holds the
SessionJSON of every sub-agent conversation known at that point (UAP
section 6.5 rule 1).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from uamp_proto.types import Message

from .serialization import (
    Reader,
    SerializationError,
    extra_keys,
    message_to_json,
    new_id,
    now_iso,
)

__all__ = ["PLAN_STATUSES", "Checkpoint", "CheckpointState"]

#: The values of ``PlanStepJSON.status`` (UAP section 13.4).
PLAN_STATUSES: Final = frozenset({"pending", "in_progress", "completed", "failed"})

_STATE_KEYS = frozenset({"step", "messages", "metadata", "reasoning", "plan"})
_PLAN_STEP_KEYS = frozenset({"id", "description", "tool", "dependsOn", "status"})
_CHECKPOINT_KEYS = frozenset(
    {"id", "sessionId", "timestamp", "step", "threadId", "state", "subAgentStates", "metadata"}
)


@attrs.frozen(kw_only=True)
class CheckpointState:
    """The execution state saved in a checkpoint (ExecutionStateJSON, 13.4).

    Attributes:
        step: The step number reached.
        messages: The conversation at the checkpoint, oldest first.
        metadata: The strategy's user-defined metadata.
        reasoning: Reasoning traces, for strategies that keep them.
        plan: The plan as PlanStepJSON objects, for plan strategies.
        extra: Unknown ExecutionStateJSON keys, written back on save.
    """

    step: int
    messages: list[Message] = attrs.field(factory=list)
    metadata: dict[str, Any] = attrs.field(factory=dict)
    reasoning: list[str] | None = None
    plan: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The ExecutionStateJSON form."""
        out: dict[str, Any] = {
            **self.extra,
            "step": self.step,
            "messages": [message_to_json(m) for m in self.messages],
            "metadata": dict(self.metadata),
        }
        if self.reasoning is not None:
            out["reasoning"] = list(self.reasoning)
        if self.plan is not None:
            out["plan"] = [dict(p) for p in self.plan]
        return out

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> CheckpointState:
        """Read an ExecutionStateJSON value.

        Raises:
            SerializationError: Naming the path of the first problem.
        """
        reader = Reader(data, path)
        if "metadata" not in reader.data:
            raise SerializationError(reader.at("metadata"), "is required")
        plan: list[dict[str, Any]] | None = None
        if reader.data.get("plan") is not None:
            plan = [_plan_step(item, item_path) for item_path, item in reader.array("plan")]
        return cls(
            step=reader.integer("step"),
            messages=reader.messages("messages"),
            metadata=reader.opt_map("metadata"),
            reasoning=reader.opt_str_list("reasoning"),
            plan=plan,
            extra=extra_keys(reader.data, _STATE_KEYS),
        )


def _plan_step(data: Any, path: str) -> dict[str, Any]:
    reader = Reader(data, path)
    reader.string("id")
    reader.string("description")
    reader.opt_str("tool")
    if reader.opt_str_list("dependsOn") is None:
        raise SerializationError(reader.at("dependsOn"), "is required")
    status = reader.string("status")
    if status not in PLAN_STATUSES:
        raise SerializationError(
            reader.at("status"),
            f"must be one of {', '.join(sorted(PLAN_STATUSES))}, got {status!r}",
        )
    return dict(reader.data)


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A snapshot of a session at one point (UAP section 6.4).

    Attributes:
        id: Checkpoint id (UUIDv4).
        session_id: The session it belongs to.
        timestamp: When it was made (ISO 8601, UTC).
        step: The session's step counter at the checkpoint.
        thread_id: The id of the thread node that was current.
        state: The execution state: conversation, step, metadata.
        sub_agent_states: SessionJSON of each sub-agent conversation, by that
            sub-session's id.
        metadata: Checkpoint metadata (``"reason"``: ``"step"``, ``"turn"``
            or ``"manual"``; ``"turnId"`` when made during a turn).
        extra: Unknown CheckpointJSON keys, written back on save.
    """

    session_id: str
    step: int
    thread_id: str
    state: CheckpointState
    id: str = attrs.field(factory=new_id)
    timestamp: str = attrs.field(factory=now_iso)
    sub_agent_states: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    metadata: dict[str, Any] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The CheckpointJSON form (UAP section 13.3)."""
        return {
            **self.extra,
            "id": self.id,
            "sessionId": self.session_id,
            "timestamp": self.timestamp,
            "step": self.step,
            "threadId": self.thread_id,
            "state": self.state.to_json(),
            "subAgentStates": dict(self.sub_agent_states),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> Checkpoint:
        """Read and validate a CheckpointJSON value.

        Each entry of ``subAgentStates`` must itself be a valid SessionJSON.

        Raises:
            SerializationError: Naming the path of the first problem.
        """
        # Imported here: a sub-agent state is a SessionJSON, and the session
        # module imports this one.
        from .session import validate_session_json

        reader = Reader(data, path)
        sub_agent_states: dict[str, dict[str, Any]] = {}
        if reader.data.get("subAgentStates") is not None:
            states = reader.obj("subAgentStates")
            for item_path, key, value in states.entries():
                validate_session_json(value, item_path)
                sub_agent_states[key] = value
        return cls(
            id=reader.uuid4("id"),
            session_id=reader.uuid4("sessionId"),
            timestamp=reader.timestamp("timestamp"),
            step=reader.integer("step"),
            thread_id=reader.uuid4("threadId"),
            state=CheckpointState.from_json(reader.raw("state"), reader.at("state")),
            sub_agent_states=sub_agent_states,
            metadata=reader.opt_map("metadata"),
            extra=extra_keys(reader.data, _CHECKPOINT_KEYS),
        )
