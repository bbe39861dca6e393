"""A2A tasks and task updates as plain JSON, and back (what a shared task store keeps).

:class:`~uamp_proto.adapters.a2a.A2ATask` and
:class:`~uamp_proto.adapters.a2a.Update` are the server's own records, not
wire objects: no A2A dialect renders all of a task (the UAMP conversation,
the pending tool calls and the client tools are never shown). A store
shared by several processes (``uamp_stores.a2a_tasks_redis``) keeps
them in this form, so every process reads back exactly the task another
one wrote. UAMP values inside (content items, messages, tool calls, errors)
use the core codec; the rest is mapped field by field.

While a turn streams text, rewriting the whole task for each chunk would
cost the task's size per chunk: :func:`text_appends` says when a batch of
updates only grows text artifacts (what :meth:`TaskRun.more_text
<uamp_proto.adapters.a2a.TaskRun.more_text>` makes), so a store keeps the
chunks beside the task, and :func:`grow_text` applies them when it is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import attrs

from .. import types as ty
from ..codec import from_dict, unstructure
from ..interrupts import Interrupt
from .a2a_tasks import A2ATask, Artifact, StoredMessage, TaskState, Update

__all__ = [
    "grow_text",
    "task_from_json",
    "task_to_json",
    "text_appends",
    "update_from_json",
    "update_to_json",
]

_Record = TypeVar("_Record", StoredMessage, Artifact)


def _items_to_json(items: list[ty.ContentItem]) -> list[Any]:
    return [unstructure(item) for item in items]


def _items_from_json(data: list[Any]) -> list[ty.ContentItem]:
    # Content items are a tagged union: decoded the way a message's are.
    message = from_dict(ty.Message, {"role": "assistant", "content_items": data})
    return list(message.content_items or [])


def _record_to_json(record: StoredMessage | Artifact | None) -> dict[str, Any] | None:
    """A history message or an artifact: its fields, its content items through the codec."""
    if record is None:
        return None
    return {**attrs.asdict(record, recurse=False), "items": _items_to_json(record.items)}


def _record_from_json(cls: type[_Record], data: dict[str, Any] | None) -> _Record | None:
    """The message or artifact :func:`_record_to_json` made ``data`` of."""
    if data is None:
        return None
    return cls(**{**data, "items": _items_from_json(data["items"])})


def task_to_json(task: A2ATask) -> dict[str, Any]:
    """Everything the server keeps of ``task``, as JSON-ready data."""
    task.settle()
    return {
        "id": task.id,
        "context_id": task.context_id,
        "agent": task.agent,
        "state": task.state.value,
        "timestamp": task.timestamp,
        "status_message": _record_to_json(task.status_message),
        "history": [_record_to_json(m) for m in task.history],
        "artifacts": [_record_to_json(a) for a in task.artifacts],
        "conversation": [unstructure(m) for m in task.conversation],
        "pending_tool_calls": [unstructure(c) for c in task.pending_tool_calls],
        "pending_interrupts": [attrs.asdict(i) for i in task.pending_interrupts],
        "error": unstructure(task.error) if task.error is not None else None,
        "tools": [unstructure(t) for t in task.tools],
        "metadata": task.metadata,
        "push_configs": task.push_configs,
    }


def task_from_json(data: dict[str, Any]) -> A2ATask:
    """The task :func:`task_to_json` made ``data`` of."""
    history = [_record_from_json(StoredMessage, m) for m in data["history"]]
    artifacts = [_record_from_json(Artifact, a) for a in data["artifacts"]]
    return A2ATask(
        id=data["id"],
        context_id=data["context_id"],
        agent=data["agent"],
        state=TaskState(data["state"]),
        timestamp=data["timestamp"],
        status_message=_record_from_json(StoredMessage, data["status_message"]),
        history=[m for m in history if m is not None],
        artifacts=[a for a in artifacts if a is not None],
        conversation=[from_dict(ty.Message, m) for m in data["conversation"]],
        pending_tool_calls=[from_dict(ty.ToolInvocation, c) for c in data["pending_tool_calls"]],
        pending_interrupts=[Interrupt(**i) for i in data.get("pending_interrupts", [])],
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
        "message": _record_to_json(update.message),
        "artifact": _record_to_json(update.artifact),
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
        message=_record_from_json(StoredMessage, data["message"]),
        artifact=_record_from_json(Artifact, data["artifact"]),
        append=data["append"],
        last_chunk=data["last_chunk"],
        final=data["final"],
        text=data["text"],
        metadata=data["metadata"],
    )


def text_appends(updates: list[Update]) -> list[tuple[str, str]] | None:
    """``(artifact id, text)`` of each update when all only grow a text artifact, else ``None``.

    Such an update is a text chunk of a turn's text artifact after its first
    (``append``, its ``text`` set, not the last chunk): its task changed in
    nothing but that artifact's one text item, grown by ``text``. An empty
    batch, or one with any other update, is ``None`` (write the whole task).
    """
    if not updates:
        return None
    out: list[tuple[str, str]] = []
    for update in updates:
        artifact = update.artifact
        if (
            update.kind != "artifact"
            or not update.append
            or update.last_chunk
            or update.text is None
            or artifact is None
        ):
            return None
        out.append((artifact.artifact_id, update.text))
    return out


def grow_text(task: A2ATask, appends: Iterable[tuple[str, str]]) -> A2ATask:
    """``task`` with each ``(artifact id, text)`` of :func:`text_appends` applied, in order.

    The artifact's text is one item, grown as the turn grew it; an append to
    an artifact the task does not hold is ignored.
    """
    by_id = {artifact.artifact_id: artifact for artifact in task.artifacts}
    grown: dict[str, list[str]] = {}
    for artifact_id, text in appends:
        if artifact_id in by_id:
            grown.setdefault(artifact_id, []).append(text)
    for artifact_id, parts in grown.items():
        artifact = by_id[artifact_id]
        said = "".join(i.text for i in artifact.items if isinstance(i, ty.TextContent))
        artifact.items = [ty.TextContent(text=said + "".join(parts))]
    return task
