"""A2A tasks, messages and updates on the wire: both JSON-RPC dialects and spec 004's REST form.

:func:`render_task` and :func:`render_update` write a task and a streamed
update in 1.0 (ProtoJSON; stream results wrapped as ``{"task"}``,
``{"statusUpdate"}``, ``{"artifactUpdate"}``) or 0.3 (``kind`` tags,
lower-case states, ``final``). :func:`rest_task` and :func:`rest_events`
write spec 004's REST task and its SSE events (``task.message``,
``task.completed``, ``task.failed`` ...). Parts are
:func:`~uamp_proto.adapters.a2a_parts.render_part`'s.
"""

from __future__ import annotations

from typing import Any

from .. import types as ty
from .a2a_parts import render_part
from .a2a_rpc import Dialect
from .a2a_tasks import A2ATask, Artifact, StoredMessage, TaskState, Update

__all__ = [
    "payment_failed_event",
    "render_message",
    "render_task",
    "render_update",
    "rest_events",
    "rest_task",
    "stream_task",
]

# --- rendering ----------------------------------------------------------------------------------


def render_message(
    message: StoredMessage,
    dialect: Dialect,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
) -> dict[str, Any]:
    """A history or status message on the wire."""
    v1 = dialect is Dialect.V1
    parts = [render_part(i, dialect) for i in message.items]
    parts.extend(render_part(d, dialect, data=True) for d in message.data)
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "role": ("ROLE_AGENT" if message.role == "agent" else "ROLE_USER") if v1 else message.role,
        "parts": parts,
    }
    if not v1:
        out["kind"] = "message"
    if task_id:
        out["taskId"] = task_id
    if context_id:
        out["contextId"] = context_id
    if message.metadata:
        out["metadata"] = message.metadata
    return out


def _render_status(
    state: TaskState,
    timestamp: str | None,
    message: StoredMessage | None,
    dialect: Dialect,
    task_id: str,
    context_id: str,
) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state.v1 if dialect is Dialect.V1 else state.value}
    if message is not None:
        status["message"] = render_message(message, dialect, task_id=task_id, context_id=context_id)
    if timestamp is not None:
        status["timestamp"] = timestamp
    return status


def _render_artifact(artifact: Artifact, dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifactId": artifact.artifact_id,
        "name": artifact.name,
        "parts": [render_part(i, dialect) for i in artifact.items],
    }
    if artifact.description:
        out["description"] = artifact.description
    return out


def render_task(
    task: A2ATask,
    dialect: Dialect,
    *,
    history_length: int | None = None,
    include_artifacts: bool = True,
) -> dict[str, Any]:
    """A task object on the wire.

    Args:
        history_length: Keep only the last N history messages (0: none).
        include_artifacts: Whether to include artifacts.
    """
    task.settle()
    history = task.history
    if history_length is not None:
        history = history[-history_length:] if history_length > 0 else []
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "status": _render_status(
            task.state, task.timestamp, task.status_message, dialect, task.id, task.context_id
        ),
    }
    if dialect is Dialect.V03:
        out["kind"] = "task"
    if history:
        out["history"] = [
            render_message(m, dialect, task_id=task.id, context_id=task.context_id) for m in history
        ]
    if include_artifacts and task.artifacts:
        out["artifacts"] = [_render_artifact(a, dialect) for a in task.artifacts]
    if task.metadata:
        out["metadata"] = task.metadata
    return out


def render_update(update: Update, dialect: Dialect) -> dict[str, Any]:
    """A streamed update as the ``result`` of a stream response."""
    v1 = dialect is Dialect.V1
    if update.kind == "artifact":
        assert update.artifact is not None
        body: dict[str, Any] = {
            "taskId": update.task_id,
            "contextId": update.context_id,
            "artifact": _render_artifact(update.artifact, dialect),
        }
        if update.append or not v1:
            body["append"] = update.append
        if update.last_chunk or not v1:
            body["lastChunk"] = update.last_chunk
        if v1:
            return {"artifactUpdate": body}
        body["kind"] = "artifact-update"
        return body
    assert update.state is not None
    body = {
        "taskId": update.task_id,
        "contextId": update.context_id,
        "status": _render_status(
            update.state,
            update.timestamp,
            update.message,
            dialect,
            update.task_id,
            update.context_id,
        ),
    }
    if update.metadata:
        body["metadata"] = update.metadata
    if v1:
        return {"statusUpdate": body}
    body["kind"] = "status-update"
    body["final"] = update.final
    return body


def stream_task(task: A2ATask, dialect: Dialect) -> dict[str, Any]:
    """The task snapshot that opens a stream, as a stream ``result``."""
    rendered = render_task(task, dialect)
    return {"task": rendered} if dialect is Dialect.V1 else rendered


def _render_rest_part(part: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 part in spec 004's REST spelling (``type`` instead of ``kind``)."""
    out = dict(part)
    out["type"] = out.pop("kind")
    return out


# --- spec 004's REST form ------------------------------------------------------------------------


def rest_task(task: A2ATask) -> dict[str, Any]:
    """``GET /tasks/{id}``: the task in 0.3 form plus the REST ``status`` word."""
    out = render_task(task, Dialect.V03)
    out["state"] = task.state.rest
    if task.error is not None:
        out["error"] = {"code": task.error.code, "message": task.error.message}
    return out


def rest_events(update: Update) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event name, data)`` SSE events of spec 004 for one update.

    ``task.message`` carries each new piece of agent text; finished tasks end
    with ``task.completed``, ``task.failed`` (with ``code`` and ``message``),
    ``task.canceled`` or ``task.input_required`` (with the ``tool_calls``
    the agent wants run).
    """
    if update.kind == "artifact":
        if not update.text:
            return []
        return [
            ("task.message", {"role": "agent", "parts": [{"type": "text", "text": update.text}]})
        ]
    state = update.state
    assert state is not None
    head = {"id": update.task_id, "contextId": update.context_id, "status": state.rest}
    if state is TaskState.WORKING:
        if update.message is None:
            return []
        parts = [_render_rest_part(p) for p in render_message(update.message, Dialect.V03)["parts"]]
        return [("task.update", {**head, "message": {"role": "agent", "parts": parts}})]
    if state is TaskState.COMPLETED:
        signature = (update.metadata or {}).get("signature")
        return [("task.completed", {**head, "signature": signature} if signature else head)]
    if state is TaskState.CANCELED:
        return [("task.canceled", head)]
    if state is TaskState.INPUT_REQUIRED:
        data = update.message.data if update.message is not None else []
        calls = data[0].get("tool_calls", []) if data and isinstance(data[0], dict) else []
        return [("task.input_required", {**head, "tool_calls": calls})]
    if state in (TaskState.FAILED, TaskState.REJECTED):
        code = (update.metadata or {}).get("code", "failed")
        message = update.message.items[0] if update.message and update.message.items else None
        body = {**head, "code": code}
        if isinstance(message, ty.TextContent):
            body["message"] = message.text
        return [("task.failed", body)]
    return []


def payment_failed_event(
    task_id: str,
    context_id: str,
    accepts: list[dict[str, object]],
    details: dict[str, object] | None = None,
) -> dict[str, Any]:
    """Spec 004's ``task.failed`` data for a task refused for want of payment.

    ``details`` (the section 7.2 code of a refused token, the balances) go
    under ``payment``.
    """
    data: dict[str, Any] = {
        "id": task_id,
        "contextId": context_id,
        "status": "failed",
        "code": "payment_required",
        "status_code": 402,
        "accepts": accepts,
    }
    if details:
        data["payment"] = details
    return data
