"""Google A2A <-> UAMP, sans-IO (UAMP sections 1.3 and 9.2; spec 004 "A2A Transport").

Theory of operation
-------------------
A2A models work as *tasks*. A client sends a message; the server creates a
task (``submitted``), runs the agent (``working``) and ends the task
``completed``, ``failed`` or ``canceled``, or pauses it ``input-required``
when the agent needs something only the client can give (here: the result
of a client-side tool). A message that names the task (``taskId``) resumes
a paused task. The legal moves are the table :data:`TRANSITIONS`; anything
else raises (cancelling a finished task raises the A2A error "task not
cancelable").

Two JSON-RPC dialects exist and a2a-sdk speaks both:

* **1.0** (:attr:`Dialect.V1`): methods ``SendMessage``,
  ``SendStreamingMessage``, ``GetTask``, ``CancelTask``, ``ListTasks``,
  ``SubscribeToTask``; objects are ProtoJSON (camelCase, enums as
  ``TASK_STATE_COMPLETED`` / ``ROLE_AGENT``, parts as one-of members
  ``{"text"}``, ``{"raw", "mediaType"}``, ``{"url"}``, ``{"data"}``);
  stream results are wrapped (``{"task"}``, ``{"statusUpdate"}``,
  ``{"artifactUpdate"}``, ``{"message"}``).
* **0.3** (:attr:`Dialect.V03`): methods ``message/send``,
  ``message/stream``, ``tasks/get``, ``tasks/cancel``,
  ``tasks/resubscribe``; objects carry a ``kind`` tag, states are
  lower-case (``input-required``), parts are ``{"kind": "text"|"file"|"data"}``
  and status updates carry ``final``.

The same endpoint serves both; the method name decides the dialect.

Input goes through :func:`parse_rpc` (envelope) and :func:`parse_message`
(an A2A message into UAMP content items). The agent's UAMP events go through
:class:`TaskRun`, which updates the stored :class:`A2ATask` (history,
artifacts, state) and returns :class:`Update` objects; :func:`render_update`
and :func:`render_task` write them in either dialect, and
:func:`rest_events` in the SSE form of spec 004 (``task.started``,
``task.message``, ``task.completed``, ``task.failed`` ...). Nothing here
reads a clock or makes ids: timestamps (RFC 3339 strings) and an id source
are passed in. Keeping tasks is the server's job
(:mod:`uamp_stores.a2a_tasks`); this module only maps them.

Where each part lives (every name is importable from here):

* :mod:`~uamp_proto.adapters.a2a_rpc` -- dialects, version negotiation, the
  method table, the JSON-RPC envelope, errors and their binding statuses;
* :mod:`~uamp_proto.adapters.a2a_tasks` -- the state table and the task
  records (:class:`A2ATask`, :class:`Update`);
* :mod:`~uamp_proto.adapters.a2a_parts` -- messages and parts <-> UAMP
  content items;
* :mod:`~uamp_proto.adapters.a2a_run` -- :class:`TaskRun`, UAMP events ->
  task updates;
* :mod:`~uamp_proto.adapters.a2a_render` -- tasks and updates on the wire,
  in both dialects and spec 004's REST form;
* :mod:`~uamp_proto.adapters.a2a_params` -- strict reading of each
  operation's params.
"""

from __future__ import annotations

from ..jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PAYMENT_REQUIRED,
)
from .a2a_params import opt_int, parse_tools, task_id_param
from .a2a_parts import (
    A2AMessage,
    accepts_media,
    data_entries,
    opt_str,
    parse_message,
    parse_tool_results,
    render_part,
)
from .a2a_render import (
    payment_failed_event,
    render_message,
    render_task,
    render_update,
    rest_events,
    rest_task,
    stream_task,
)
from .a2a_rpc import (
    BINDING_STATUS,
    CONTENT_TYPE_NOT_SUPPORTED,
    EXTENDED_CARD_NOT_CONFIGURED,
    EXTENSION_SUPPORT_REQUIRED,
    INVALID_AGENT_RESPONSE,
    METHODS,
    PUSH_NOTIFICATION_NOT_SUPPORTED,
    QUOTA_EXCEEDED,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    VERSION_NOT_SUPPORTED,
    A2AError,
    Dialect,
    RpcCall,
    RpcError,
    error_response,
    negotiate_version,
    parse_rpc,
    payment_error,
    result_response,
    task_not_found,
)
from .a2a_rpc import UAMP_ERROR_DOMAIN as UAMP_ERROR_DOMAIN
from .a2a_rpc import refusal_rest_body as refusal_rest_body
from .a2a_rpc import rest_error_body as rest_error_body
from .a2a_run import (
    PAUSE_CODES,
    RUNNER_LOST,
    UAMP_EVENTS_EXTENSION,
    TaskRun,
    artifact_delta,
    data_item,
    message_delta,
)
from .a2a_tasks import (
    TERMINAL_STATES,
    TRANSITIONS,
    A2ATask,
    Artifact,
    StoredMessage,
    TaskState,
    Trigger,
    Update,
    stored_message,
    transition,
)

__all__ = [
    "BINDING_STATUS",
    "CONTENT_TYPE_NOT_SUPPORTED",
    "EXTENDED_CARD_NOT_CONFIGURED",
    "EXTENSION_SUPPORT_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_AGENT_RESPONSE",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHODS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PAUSE_CODES",
    "PAYMENT_REQUIRED",
    "PUSH_NOTIFICATION_NOT_SUPPORTED",
    "QUOTA_EXCEEDED",
    "RUNNER_LOST",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "UAMP_EVENTS_EXTENSION",
    "UNSUPPORTED_OPERATION",
    "VERSION_NOT_SUPPORTED",
    "A2AError",
    "A2AMessage",
    "A2ATask",
    "Artifact",
    "Dialect",
    "RpcCall",
    "RpcError",
    "StoredMessage",
    "TaskRun",
    "TaskState",
    "Trigger",
    "Update",
    "accepts_media",
    "artifact_delta",
    "data_entries",
    "data_item",
    "error_response",
    "message_delta",
    "negotiate_version",
    "opt_int",
    "opt_str",
    "parse_message",
    "parse_rpc",
    "parse_tool_results",
    "parse_tools",
    "payment_error",
    "payment_failed_event",
    "render_message",
    "render_part",
    "render_task",
    "render_update",
    "rest_events",
    "rest_task",
    "result_response",
    "stored_message",
    "stream_task",
    "task_id_param",
    "task_not_found",
    "transition",
]
