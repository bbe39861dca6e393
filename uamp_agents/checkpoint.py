"""Checkpoints: snapshots of a session's recoverable state (UAP sections 6.4, 13.3).

A :class:`Checkpoint` is immutable. Its :class:`CheckpointState` holds the
whole conversation at the checkpoint (the active node's history, oldest
first), the step counter and the strategy's metadata, which is enough to
bring a session back to that point even if the thread tree has grown since
(:meth:`uamp_agents.session.Session.restore`). ``sub_agent_states`` holds the
SessionJSON of every sub-agent conversation known at that point (UAP
section 6.5 rule 1).

SessionJSON validation (:func:`validate_session_json`) lives here too, not in
:mod:`uamp_agents.session`: a checkpoint's sub-agent states are SessionJSON
and a SessionJSON holds checkpoints, so the two validators call each other
and share one module. The session module builds on both.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from uamp_proto.principal import Principal
from uamp_proto.types import Message

from .serialization import (
    Reader,
    SerializationError,
    check_version,
    extra_keys,
    message_to_json,
    new_id,
    now_iso,
)
from .thread import Thread, ThreadTree

__all__ = ["PLAN_STATUSES", "Checkpoint", "CheckpointState", "SessionData", "validate_session_json"]

#: The values of ``PlanStepJSON.status`` (UAP section 13.4).
PLAN_STATUSES: Final = frozenset({"pending", "in_progress", "completed", "failed"})

_STATE_KEYS = frozenset({"step", "messages", "metadata", "reasoning", "plan"})
_PLAN_STEP_KEYS = frozenset({"id", "description", "tool", "dependsOn", "status"})
_CHECKPOINT_KEYS = frozenset(
    {
        "id",
        "sessionId",
        "timestamp",
        "step",
        "threadId",
        "state",
        "subAgentStates",
        "metadata",
        "owner",
        "queryThreads",
    }
)


def owner_json(owner: Principal | None) -> dict[str, str] | None:
    """The JSON form of an owning principal: ``{"scheme", "id"}`` (``None``: unowned)."""
    return None if owner is None else {"scheme": owner.scheme, "id": owner.id}


def read_owner(reader: Reader, key: str = "owner") -> Principal | None:
    """The owning principal stored under ``key`` (an extension of UAP 13.1/13.3), if any.

    Raises:
        SerializationError: It is not ``{"scheme": str, "id": str}``.
    """
    if reader.data.get(key) is None:
        return None
    owner = reader.obj(key)
    return Principal(id=owner.string("id"), scheme=owner.string("scheme"))


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
        owner: The principal the session runs for (``owner`` key, an
            extension of CheckpointJSON), or ``None``.
        query_threads: The session's query threads at the checkpoint (UAP
            9.2; ``queryThreads`` key, an extension of CheckpointJSON), by
            thread id; ``None`` for a checkpoint written without them.
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
    owner: Principal | None = None
    query_threads: dict[str, Thread] | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The CheckpointJSON form (UAP section 13.3)."""
        owned = {} if self.owner is None else {"owner": owner_json(self.owner)}
        queries = (
            {}
            if self.query_threads is None
            else {"queryThreads": {tid: t.to_json() for tid, t in self.query_threads.items()}}
        )
        return {
            **self.extra,
            **owned,
            **queries,
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
            owner=read_owner(reader),
            query_threads=_query_threads(reader),
            extra=extra_keys(reader.data, _CHECKPOINT_KEYS),
        )


_SESSION_KEYS = frozenset(
    {
        "version",
        "id",
        "agentId",
        "createdAt",
        "updatedAt",
        "threadTree",
        "checkpoints",
        "metadata",
        "step",
        "subAgentStates",
        "queryThreads",
        "owner",
    }
)


# --- SessionJSON validation ---------------------------------------------------


@attrs.frozen(kw_only=True)
class SessionData:
    """A validated SessionJSON value, taken apart.

    Attributes:
        version: The ``version`` it was written with.
        id: Session id.
        agent_id: Id of the agent it was made with.
        created_at: ISO 8601 creation time.
        updated_at: ISO 8601 time of the last change.
        thread_tree: The thread tree.
        checkpoints: Every checkpoint, oldest first.
        metadata: Session metadata.
        step: The step counter (``step`` key, else the last checkpoint's).
        sub_agent_states: Sub-agent SessionJSON by sub-session id.
        query_threads: Query threads (UAP section 9.2) by thread id.
        extra: Unknown keys, written back on save.
        owner: The principal the session runs for (``owner``), or ``None``.
    """

    version: str
    id: str
    agent_id: str
    created_at: str
    updated_at: str
    thread_tree: ThreadTree
    checkpoints: list[Checkpoint]
    metadata: dict[str, Any]
    step: int
    sub_agent_states: dict[str, dict[str, Any]]
    query_threads: dict[str, Thread]
    extra: dict[str, Any]
    owner: Principal | None = None


def _query_threads(reader: Reader) -> dict[str, Thread] | None:
    """The ``queryThreads`` map of a SessionJSON or CheckpointJSON (``None``: absent)."""
    if reader.data.get("queryThreads") is None:
        return None
    query_threads: dict[str, Thread] = {}
    for item_path, key, value in reader.obj("queryThreads").entries():
        thread = Thread.from_json(value, item_path)
        if thread.id != key:
            raise SerializationError(
                f"{item_path}.id", f"query thread {thread.id!r} is stored under {key!r}"
            )
        query_threads[key] = thread
    return query_threads


def validate_session_json(data: Any, path: str = "") -> SessionData:
    """Validate a SessionJSON value (UAP section 13.1) and take it apart.

    The version is checked first; then every field, the thread tree's
    structure, each checkpoint (whose ``sessionId`` must be this session and
    whose ``threadId`` must be a node of the tree) and each sub-agent state
    (itself a SessionJSON).

    Raises:
        SerializationError: Naming the path of the first problem.
    """
    reader = Reader(data, path)
    version = check_version(reader.raw("version"), reader.at("version"))
    session_id = reader.uuid4("id")
    owner = read_owner(reader)
    agent_id = reader.string("agentId")
    created_at = reader.timestamp("createdAt")
    updated_at = reader.timestamp("updatedAt")
    tree = ThreadTree.from_json(reader.raw("threadTree"), reader.at("threadTree"))
    checkpoints: list[Checkpoint] = []
    seen: set[str] = set()
    for item_path, item in reader.array("checkpoints"):
        checkpoint = Checkpoint.from_json(item, item_path)
        if checkpoint.id in seen:
            raise SerializationError(
                f"{item_path}.id", f"duplicate checkpoint id {checkpoint.id!r}"
            )
        seen.add(checkpoint.id)
        if checkpoint.session_id != session_id:
            raise SerializationError(
                f"{item_path}.sessionId",
                f"checkpoint of session {checkpoint.session_id!r} in session {session_id!r}",
            )
        if checkpoint.owner is not None and checkpoint.owner.key != getattr(owner, "key", None):
            raise SerializationError(
                f"{item_path}.owner", "checkpoint of another owner than its session's"
            )
        if checkpoint.thread_id not in tree.nodes:
            raise SerializationError(
                f"{item_path}.threadId", f"no thread node with id {checkpoint.thread_id!r}"
            )
        checkpoints.append(checkpoint)
    sub_agent_states: dict[str, dict[str, Any]] = {}
    if reader.data.get("subAgentStates") is not None:
        for item_path, key, value in reader.obj("subAgentStates").entries():
            validate_session_json(value, item_path)
            sub_agent_states[key] = value
    query_threads = _query_threads(reader) or {}
    step = reader.integer("step") if "step" in reader.data else None
    if step is None:
        step = max((c.step for c in checkpoints), default=0)
    return SessionData(
        version=version,
        id=session_id,
        agent_id=agent_id,
        created_at=created_at,
        updated_at=updated_at,
        thread_tree=tree,
        checkpoints=checkpoints,
        metadata=reader.opt_map("metadata"),
        step=step,
        sub_agent_states=sub_agent_states,
        query_threads=query_threads,
        extra=extra_keys(reader.data, _SESSION_KEYS),
        owner=owner,
    )
