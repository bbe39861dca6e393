"""A2A tasks and task updates as plain JSON, and back (what a shared task store keeps).

:class:`~uamp_proto.adapters.a2a.A2ATask` and
:class:`~uamp_proto.adapters.a2a.Update` are the server's own records, not
wire objects: no A2A dialect renders all of a task (the UAMP conversation,
the pending tool calls and the client tools are never shown). A store
shared by several processes (``uamp_trio.stores.a2a_tasks_redis``) keeps
them in this form, so every process reads back exactly the task another
one wrote. UAMP values inside (content items, messages, tool calls, errors)
use the core codec; the rest is mapped field by field.
"""

from __future__ import annotations

from typing import Any

from .. import types as ty
from ..codec import from_dict, unstructure
from .a2a import A2ATask, Artifact, StoredMessage, TaskState, Update

__all__ = ["task_from_json", "task_to_json", "update_from_json", "update_to_json"]


def _items_to_json(items: list[ty.ContentItem]) -> list[Any]:
    return [unstructure(item) for item in items]


def _items_from_json(data: list[Any]) -> list[ty.ContentItem]:
    # Content items are a tagged union: decoded the way a message's are.
    message = from_dict(ty.Message, {"role": "assistant", "content_items": data})
    return list(message.content_items or [])


def _message_to_json(message: StoredMessage | None) -> dict[str, Any] | None:
    if message is None:
        return None
    return {
        "message_id": message.message_id,
        "role": message.role,
        "items": _items_to_json(message.items),
        "data": message.data,
        "metadata": message.metadata,
    }


def _message_from_json(data: dict[str, Any] | None) -> StoredMessage | None:
    if data is None:
        return None
    return StoredMessage(
        message_id=data["message_id"],
        role=data["role"],
        items=_items_from_json(data["items"]),
        data=list(data["data"]),
        metadata=data["metadata"],
    )


def _artifact_to_json(artifact: Artifact | None) -> dict[str, Any] | None:
    if artifact is None:
        return None
    return {
        "artifact_id": artifact.artifact_id,
        "name": artifact.name,
        "items": _items_to_json(artifact.items),
        "description": artifact.description,
    }


def _artifact_from_json(data: dict[str, Any] | None) -> Artifact | None:
    if data is None:
        return None
    return Artifact(
        artifact_id=data["artifact_id"],
        name=data["name"],
        items=_items_from_json(data["items"]),
        description=data["description"],
    )


def task_to_json(task: A2ATask) -> dict[str, Any]:
    """Everything the server keeps of ``task``, as JSON-ready data."""
    return {
        "id": task.id,
        "context_id": task.context_id,
        "agent": task.agent,
        "state": task.state.value,
        "timestamp": task.timestamp,
        "status_message": _message_to_json(task.status_message),
        "history": [_message_to_json(m) for m in task.history],
        "artifacts": [_artifact_to_json(a) for a in task.artifacts],
        "conversation": [unstructure(m) for m in task.conversation],
        "pending_tool_calls": [unstructure(c) for c in task.pending_tool_calls],
        "error": unstructure(task.error) if task.error is not None else None,
        "tools": [unstructure(t) for t in task.tools],
        "metadata": task.metadata,
        "push_configs": task.push_configs,
    }


def task_from_json(data: dict[str, Any]) -> A2ATask:
    """The task :func:`task_to_json` made ``data`` of."""
    history = [_message_from_json(m) for m in data["history"]]
    artifacts = [_artifact_from_json(a) for a in data["artifacts"]]
    return A2ATask(
        id=data["id"],
        context_id=data["context_id"],
        agent=data["agent"],
        state=TaskState(data["state"]),
        timestamp=data["timestamp"],
        status_message=_message_from_json(data["status_message"]),
        history=[m for m in history if m is not None],
        artifacts=[a for a in artifacts if a is not None],
        conversation=[from_dict(ty.Message, m) for m in data["conversation"]],
        pending_tool_calls=[from_dict(ty.ToolInvocation, c) for c in data["pending_tool_calls"]],
        error=from_dict(ty.ErrorInfo, data["error"]) if data["error"] is not None else None,
        tools=[from_dict(ty.ToolDefinition, t) for t in data["tools"]],
        metadata=data["metadata"],
        push_configs=dict(data["push_configs"]),
    )


def update_to_json(update: Update) -> dict[str, Any]:
    """``update`` as JSON-ready data."""
    return {
        "kind": update.kind,
        "task_id": update.task_id,
        "context_id": update.context_id,
        "state": update.state.value if update.state is not None else None,
        "timestamp": update.timestamp,
        "message": _message_to_json(update.message),
        "artifact": _artifact_to_json(update.artifact),
        "append": update.append,
        "last_chunk": update.last_chunk,
        "final": update.final,
        "text": update.text,
        "metadata": update.metadata,
    }


def update_from_json(data: dict[str, Any]) -> Update:
    """The update :func:`update_to_json` made ``data`` of."""
    state = data["state"]
    return Update(
        kind=data["kind"],
        task_id=data["task_id"],
        context_id=data["context_id"],
        state=TaskState(state) if state is not None else None,
        timestamp=data["timestamp"],
        message=_message_from_json(data["message"]),
        artifact=_artifact_from_json(data["artifact"]),
        append=data["append"],
        last_chunk=data["last_chunk"],
        final=data["final"],
        text=data["text"],
        metadata=data["metadata"],
    )
