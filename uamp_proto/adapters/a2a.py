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
"""

from __future__ import annotations

import enum
import io
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import orjson

from .. import events as ev
from .. import jsonrpc
from .. import types as ty
from ..codec import DecodeError, from_dict, unstructure
from ..errors import LocalProtocolError
from ..ids import IdSource
from ..interrupts import Interrupt
from ..jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PAYMENT_REQUIRED,
    JSONRPCError,
)
from ..outcome import ResponseOutcome
from ..payment import PaymentRequiredError
from . import _tools
from ._media import media_item

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

# --- A2A error codes (A2A "Error Handling"; the JSON-RPC ones come from uamp_proto.jsonrpc) ---

TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENDED_CARD_NOT_CONFIGURED = -32007
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009
#: A principal over a quota (its tasks, a task's push configs): a server-defined
#: code of JSON-RPC's -32000..-32099 range; 429 in its ``data`` and on REST.
QUOTA_EXCEEDED = -32029

#: The ``google.rpc.ErrorInfo`` reason a 1.0 error carries, by code.
_REASONS = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOTIFICATION_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
    INVALID_AGENT_RESPONSE: "INVALID_AGENT_RESPONSE",
    EXTENDED_CARD_NOT_CONFIGURED: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    EXTENSION_SUPPORT_REQUIRED: "EXTENSION_SUPPORT_REQUIRED",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
    PAYMENT_REQUIRED: "PAYMENT_REQUIRED",
}

#: Each error code's HTTP status and gRPC status name (A2A 1.0 section 5.4;
#: the JSON-RPC codes as gRPC's own HTTP mapping pairs them).
BINDING_STATUS: dict[int, tuple[int, str]] = {
    PARSE_ERROR: (400, "INVALID_ARGUMENT"),
    INVALID_REQUEST: (400, "INVALID_ARGUMENT"),
    METHOD_NOT_FOUND: (404, "UNIMPLEMENTED"),
    INVALID_PARAMS: (400, "INVALID_ARGUMENT"),
    INTERNAL_ERROR: (500, "INTERNAL"),
    TASK_NOT_FOUND: (404, "NOT_FOUND"),
    TASK_NOT_CANCELABLE: (409, "FAILED_PRECONDITION"),
    PUSH_NOTIFICATION_NOT_SUPPORTED: (400, "UNIMPLEMENTED"),
    UNSUPPORTED_OPERATION: (400, "UNIMPLEMENTED"),
    CONTENT_TYPE_NOT_SUPPORTED: (415, "INVALID_ARGUMENT"),
    INVALID_AGENT_RESPONSE: (502, "INTERNAL"),
    EXTENDED_CARD_NOT_CONFIGURED: (400, "FAILED_PRECONDITION"),
    EXTENSION_SUPPORT_REQUIRED: (400, "FAILED_PRECONDITION"),
    VERSION_NOT_SUPPORTED: (400, "UNIMPLEMENTED"),
    PAYMENT_REQUIRED: (402, "FAILED_PRECONDITION"),
}
_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
_ERROR_DOMAIN = "a2a-protocol.org"
#: The ``ErrorInfo`` domain of refusals that are uamp's, not A2A's.
UAMP_ERROR_DOMAIN = "uamp.dev"


class Dialect(enum.Enum):
    """The JSON-RPC dialect of one request."""

    V1 = "1.0"
    V03 = "0.3"


def negotiate_version(header: str | None) -> Dialect | None:
    """The protocol version an ``A2A-Version`` header asks for (A2A 1.0 section 3.6).

    ``None`` when the header is absent or empty: the specification says to
    assume 0.3, and uamp then lets the method name (JSON-RPC) or the path
    choose, since 0.3 defined no header at all. Only ``Major.Minor``
    counts (``1.0.2`` is 1.0).

    Raises:
        A2AError: :data:`VERSION_NOT_SUPPORTED` for any other version.
    """
    value = (header or "").strip()
    if not value:
        return None
    parts = value.split(".")
    if len(parts) >= 2 and all(p.isdigit() for p in parts):
        major_minor = f"{int(parts[0])}.{int(parts[1])}"
        for dialect in Dialect:
            if dialect.value == major_minor:
                return dialect
    raise A2AError(
        VERSION_NOT_SUPPORTED,
        f"A2A-Version {value!r} is not supported; this agent speaks 1.0 and 0.3.",
        data={"requestedVersion": value, "supportedVersions": "1.0,0.3"},
    )


#: Every method served: name -> (dialect, operation).
METHODS: dict[str, tuple[Dialect, str]] = {
    "SendMessage": (Dialect.V1, "send"),
    "SendStreamingMessage": (Dialect.V1, "stream"),
    "GetTask": (Dialect.V1, "get"),
    "CancelTask": (Dialect.V1, "cancel"),
    "ListTasks": (Dialect.V1, "list"),
    "SubscribeToTask": (Dialect.V1, "subscribe"),
    "CreateTaskPushNotificationConfig": (Dialect.V1, "push"),
    "GetTaskPushNotificationConfig": (Dialect.V1, "push"),
    "ListTaskPushNotificationConfigs": (Dialect.V1, "push"),
    "DeleteTaskPushNotificationConfig": (Dialect.V1, "push"),
    "GetExtendedAgentCard": (Dialect.V1, "extended_card"),
    "message/send": (Dialect.V03, "send"),
    "message/stream": (Dialect.V03, "stream"),
    "tasks/get": (Dialect.V03, "get"),
    "tasks/cancel": (Dialect.V03, "cancel"),
    "tasks/resubscribe": (Dialect.V03, "subscribe"),
    "tasks/pushNotificationConfig/set": (Dialect.V03, "push"),
    "tasks/pushNotificationConfig/get": (Dialect.V03, "push"),
    "tasks/pushNotificationConfig/list": (Dialect.V03, "push"),
    "tasks/pushNotificationConfig/delete": (Dialect.V03, "push"),
    "agent/getAuthenticatedExtendedCard": (Dialect.V03, "extended_card"),
}


def rest_error_body(
    http_status: int, status: str, message: str, info: dict[str, Any]
) -> dict[str, Any]:
    """An AIP-193 error body (A2A 1.0 section 11.6) with one ``ErrorInfo`` detail."""
    return {"error": {"code": http_status, "status": status, "message": message, "details": [info]}}


def refusal_rest_body(http_status: int, status: str, message: str, reason: str) -> dict[str, Any]:
    """The HTTP+JSON body for a refusal made before any A2A operation ran (auth, limits).

    Its ``ErrorInfo`` names uamp's refusal code (upper-cased) in uamp's domain,
    since it is no A2A error.
    """
    info = {"@type": _ERROR_INFO_TYPE, "reason": reason.upper(), "domain": UAMP_ERROR_DOMAIN}
    return rest_error_body(http_status, status, message, {**info, "metadata": {}})


class A2AError(JSONRPCError):
    """An A2A/JSON-RPC error, with what to answer in either dialect and over REST.

    Attributes:
        code: The JSON-RPC error code (:data:`TASK_NOT_FOUND` ...).
        message: A sentence a person can act on.
        data: Extra JSON data (for ``payment_required``: ``status_code`` and
            ``accepts``).
        http_status: The status the REST form answers with.
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(code, message, data)
        self.http_status = (
            http_status if http_status is not None else BINDING_STATUS.get(code, (400, ""))[0]
        )

    @property
    def grpc_status(self) -> str:
        """The gRPC status name this error is answered with (section 5.4)."""
        if self.http_status == 429:
            return "RESOURCE_EXHAUSTED"
        if self.http_status == 503:
            return "UNAVAILABLE"
        return BINDING_STATUS.get(self.code, (0, "UNKNOWN"))[1]

    @property
    def reason(self) -> str:
        """The ``google.rpc.ErrorInfo`` reason (``TASK_NOT_FOUND`` ...)."""
        return _REASONS.get(self.code, "UNKNOWN_ERROR")

    def error_info(self) -> dict[str, Any]:
        """The ``google.rpc.ErrorInfo`` detail (metadata values JSON-encoded when not strings)."""
        metadata = {
            k: v if isinstance(v, str) else orjson.dumps(v).decode()
            for k, v in (self.data or {}).items()
        }
        return {
            "@type": _ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": _ERROR_DOMAIN,
            "metadata": metadata,
        }

    def rest_body(self) -> dict[str, Any]:
        """The HTTP+JSON error body (AIP-193; A2A 1.0 section 11.6)."""
        return rest_error_body(self.http_status, self.grpc_status, self.message, self.error_info())

    def error_object(self, dialect: Dialect = Dialect.V1) -> dict[str, Any]:
        """The JSON-RPC ``error`` member.

        1.0 puts a ``google.rpc.ErrorInfo`` list in ``data`` (as a2a-sdk
        does; ``metadata`` holds our ``data`` with JSON-encoded values,
        since ErrorInfo metadata is a string map) followed by the raw
        ``data`` object; 0.3 puts ``data`` as it is.
        """
        out = super().error_object()
        if dialect is Dialect.V1:
            details: list[dict[str, Any]] = [self.error_info()]
            if self.data:
                details.append({"@type": "type.uamp.dev/uamp.ErrorData", **self.data})
            out["data"] = details
        return out


def _invalid(message: str) -> A2AError:
    return A2AError(INVALID_PARAMS, message)


def error_response(
    request_id: str | int | None, error: A2AError, dialect: Dialect = Dialect.V1
) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    return jsonrpc.to_object(
        jsonrpc.ErrorResponse(id=request_id, error=error.error_object(dialect))
    )


def result_response(request_id: str | int | None, result: Any) -> dict[str, Any]:
    """A JSON-RPC success response object."""
    return jsonrpc.to_object(jsonrpc.response(request_id, result))


# --- the task state machine ----------------------------------------------------------------


class TaskState(enum.Enum):
    """A task's lifecycle state; values are the 0.3 wire spellings."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"
    REJECTED = "rejected"
    AUTH_REQUIRED = "auth-required"

    @property
    def v1(self) -> str:
        """The 1.0 (ProtoJSON enum) spelling: ``TASK_STATE_INPUT_REQUIRED`` ..."""
        return "TASK_STATE_" + self.name

    @property
    def rest(self) -> str:
        """The spelling of spec 004's REST events (``running`` for working)."""
        return "running" if self is TaskState.WORKING else self.value

    @property
    def is_terminal(self) -> bool:
        """Whether no further transition is possible."""
        return self in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        """Whether the task waits for the client (``input-required``/``auth-required``)."""
        return self in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED}
)

_STATE_BY_NAME: dict[str, TaskState] = {}
for _state in TaskState:
    _STATE_BY_NAME[_state.value] = _state
    _STATE_BY_NAME[_state.v1] = _state


class Trigger(enum.Enum):
    """What moves a task from one state to the next."""

    START = "start"  #: the agent's turn begins
    REQUIRE_INPUT = "require_input"  #: the turn ended asking for input (or client tool results)
    REQUIRE_AUTH = "require_auth"  #: the turn ended asking for authorization
    RESUME = "resume"  #: a new message continues a paused task
    COMPLETE = "complete"  #: the turn ended with ``response.done``
    FAIL = "fail"  #: the turn ended with ``response.error`` (or never started)
    CANCEL = "cancel"  #: the client cancelled
    REJECT = "reject"  #: the server or the agent refused the task


#: ``{state: {trigger: new state}}``; a missing key is an illegal move.
TRANSITIONS: dict[TaskState, dict[Trigger, TaskState]] = {
    TaskState.SUBMITTED: {
        Trigger.START: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
        Trigger.REJECT: TaskState.REJECTED,
    },
    TaskState.WORKING: {
        Trigger.REQUIRE_INPUT: TaskState.INPUT_REQUIRED,
        Trigger.REQUIRE_AUTH: TaskState.AUTH_REQUIRED,
        Trigger.REJECT: TaskState.REJECTED,
        Trigger.COMPLETE: TaskState.COMPLETED,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
    TaskState.INPUT_REQUIRED: {
        Trigger.RESUME: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
    TaskState.AUTH_REQUIRED: {
        Trigger.RESUME: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
}


def transition(state: TaskState, trigger: Trigger) -> TaskState:
    """The state after ``trigger``.

    Raises:
        A2AError: :data:`TASK_NOT_CANCELABLE` when cancelling a finished task;
            :data:`UNSUPPORTED_OPERATION` when resuming a task that is not
            paused.
        LocalProtocolError: any other move the table does not list.
    """
    new = TRANSITIONS.get(state, {}).get(trigger)
    if new is not None:
        return new
    if trigger is Trigger.CANCEL:
        raise A2AError(
            TASK_NOT_CANCELABLE,
            f"The task is {state.value} and can no longer be canceled.",
            http_status=409,
        )
    if trigger is Trigger.RESUME:
        raise A2AError(
            UNSUPPORTED_OPERATION,
            f"The task is {state.value}; only a task that is input-required can take "
            "another message.",
            http_status=409,
        )
    raise LocalProtocolError(
        f"task cannot go from {state.value} on {trigger.value}", code="invalid_task_transition"
    )


# --- messages and parts ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class A2AMessage:
    """One A2A message, parsed.

    Attributes:
        message_id: The sender's id for it.
        role: ``"user"`` or ``"agent"``.
        items: Its parts as UAMP content items (data parts become text
            holding their JSON).
        data: The payloads of its data parts, in order (tool results travel
            here).
        context_id: The conversation it belongs to, if given.
        task_id: The task it continues, if given.
        metadata: Its metadata object.
    """

    message_id: str
    role: str
    items: list[ty.ContentItem]
    data: list[Any] = attrs.field(factory=list)
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    reference_task_ids: list[str] = attrs.field(factory=list)
    extensions: list[str] = attrs.field(factory=list)
    media_types: list[str] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        """The text of its text parts, joined by newlines."""
        return "\n".join(i.text for i in self.items if isinstance(i, ty.TextContent))

    def to_uamp(self) -> ty.Message:
        """The UAMP conversation message (agent messages become ``assistant``)."""
        role = "assistant" if self.role == "agent" else "user"
        if all(isinstance(i, ty.TextContent) for i in self.items):
            return ty.Message(role=role, content=self.text)
        return ty.Message(role=role, content_items=list(self.items))


def opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    """An optional string member (``""`` counts as absent), ``where`` prefixing its name.

    Raises:
        A2AError: :data:`INVALID_PARAMS` naming the field.
    """
    value = obj.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        field = f"{where}.{key}" if where and not where.endswith(".") else f"{where}{key}"
        raise _invalid(f"'{field}' must be a string.")
    return value


def _media_item(media: ty.Media, media_type: str | None, filename: str | None) -> ty.ContentItem:
    # A2A parts carry no kind of their own: the MIME type's major part says it.
    kind = (media_type or "").split("/", 1)[0]
    return media_item(kind, media, media_type, filename or "file")


def _parse_part(part: object, where: str) -> tuple[ty.ContentItem | None, Any]:
    """One part (either dialect, or spec 004's ``type`` form) -> (item, data payload)."""
    if not isinstance(part, dict):
        raise _invalid(f"'{where}' must be an object.")
    kind = part.get("kind", part.get("type"))
    if kind is None:  # 1.0: exactly one content member
        members = [k for k in ("text", "raw", "url", "data") if k in part]
        if len(members) > 1:
            raise _invalid(f"'{where}' has {' and '.join(members)}: a part holds exactly one.")
        media_type = opt_str(part, "mediaType", where)
        filename = opt_str(part, "filename", where)
        if isinstance(part.get("text"), str):
            return ty.TextContent(text=part["text"]), None
        if isinstance(part.get("raw"), str):
            return _media_item(part["raw"], media_type, filename), None
        if isinstance(part.get("url"), str):
            return _media_item(ty.MediaURL(url=part["url"]), media_type, filename), None
        if "data" in part:
            data = part["data"]
            return ty.TextContent(text=orjson.dumps(data).decode()), data
        raise _invalid(f"'{where}' has no content: expected text, raw, url or data.")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise _invalid(f"'{where}.text' must be a string.")
        return ty.TextContent(text=text), None
    if kind == "file":
        spec = part.get("file")
        if not isinstance(spec, dict):
            raise _invalid(f"'{where}.file' must be an object.")
        media_type = opt_str(spec, "mimeType", f"{where}.file")
        name = opt_str(spec, "name", f"{where}.file")
        if isinstance(spec.get("bytes"), str):
            return _media_item(spec["bytes"], media_type, name), None
        if isinstance(spec.get("uri"), str):
            return _media_item(ty.MediaURL(url=spec["uri"]), media_type, name), None
        raise _invalid(f"'{where}.file' needs 'bytes' or 'uri'.")
    if kind == "data":
        if "data" not in part:
            raise _invalid(f"'{where}.data' is required.")
        data = part["data"]
        return ty.TextContent(text=orjson.dumps(data).decode()), data
    raise _invalid(f"'{where}.kind' must be 'text', 'file' or 'data', got {kind!r}.")


_ROLES = {"user": "user", "ROLE_USER": "user", "agent": "agent", "ROLE_AGENT": "agent"}


def parse_message(obj: object, *, where: str = "message", message_id: str = "") -> A2AMessage:
    """Validate an A2A message of either dialect.

    Args:
        obj: The decoded ``message`` object.
        where: Its path, for error messages.
        message_id: The id to use when the message carries none (spec 004's
            REST form does not require one).

    Raises:
        A2AError: :data:`INVALID_PARAMS` naming the offending field.
    """
    if not isinstance(obj, dict):
        raise _invalid(f"'{where}' must be an object.")
    role = _ROLES.get(str(obj.get("role", "")))
    if role is None:
        raise _invalid(f"'{where}.role' must be 'user' or 'agent' (ROLE_USER or ROLE_AGENT).")
    parts = obj.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _invalid(f"'{where}.parts' must be a non-empty array.")
    items: list[ty.ContentItem] = []
    data: list[Any] = []
    media_types: list[str] = []
    for i, part in enumerate(parts):
        item, payload = _parse_part(part, f"{where}.parts[{i}]")
        if item is not None:
            items.append(item)
        if payload is not None:
            data.append(payload)
        media_type = _part_media_type(part)
        if media_type:
            media_types.append(media_type)
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _invalid(f"'{where}.metadata' must be an object.")
    mid = opt_str(obj, "messageId", where) or message_id
    if not mid:
        raise _invalid(f"'{where}.messageId' is required.")
    return A2AMessage(
        message_id=mid,
        role=role,
        items=items,
        data=data,
        context_id=opt_str(obj, "contextId", where),
        task_id=opt_str(obj, "taskId", where),
        metadata=metadata,
        reference_task_ids=_str_list(obj, "referenceTaskIds", where),
        extensions=_str_list(obj, "extensions", where),
        media_types=media_types,
    )


def _part_media_type(part: dict[str, Any]) -> str | None:
    """The media type a part declares (1.0 ``mediaType``, 0.3 ``file.mimeType``)."""
    value = part.get("mediaType")
    spec = part.get("file")
    if value is None and isinstance(spec, dict):
        value = spec.get("mimeType")
    return value if isinstance(value, str) and value else None


def accepts_media(modes: list[str], media_type: str) -> bool:
    """Whether ``media_type`` matches one of ``modes`` (``image/*`` and ``*/*`` wildcards)."""
    wanted = media_type.split(";", 1)[0].strip().lower()
    major = wanted.split("/", 1)[0]
    for mode in modes:
        mode = mode.lower()
        if mode in (wanted, "*/*") or (mode.endswith("/*") and mode[:-2] == major):
            return True
    return False


def _str_list(obj: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"'{where}.{key}' must be an array of strings.")
    return list(value)


def data_entries(data: list[Any], wrapper: str, key: str) -> list[dict[str, Any]]:
    """The answer objects in a message's data parts: those with ``key``.

    A data part is one such object, a list of them, or ``{wrapper: [...]}``.
    """
    flat: list[Any] = []
    for payload in data:
        if isinstance(payload, dict) and isinstance(payload.get(wrapper), list):
            flat.extend(payload[wrapper])
        elif isinstance(payload, list):
            flat.extend(payload)
        else:
            flat.append(payload)
    return [entry for entry in flat if isinstance(entry, dict) and key in entry]


def parse_tool_results(message: A2AMessage, pending: list[ty.ToolInvocation]) -> list[ty.Message]:
    """The ``role="tool"`` messages a resuming message answers ``pending`` with.

    A data part ``{"call_id": ..., "result": ...}`` (or a list of them, or
    ``{"tool_results": [...]}``) answers the call it names; otherwise, with
    exactly one call pending, the message's text is its result.

    Raises:
        A2AError: :data:`INVALID_PARAMS` when a pending call is left
            unanswered or a result names no pending call.
    """
    wanted = {call.id for call in pending}
    results: dict[str, str] = {}
    for entry in data_entries(message.data, "tool_results", "call_id"):
        call_id = entry["call_id"]
        if call_id not in wanted:
            raise _invalid(f"Tool result for {call_id!r} answers no pending tool call.")
        result = entry.get("result", "")
        results[call_id] = result if isinstance(result, str) else orjson.dumps(result).decode()
    if not results and len(pending) == 1:
        results[pending[0].id] = message.text
    missing = [call.id for call in pending if call.id not in results]
    if missing:
        raise _invalid(
            "The task is waiting for tool results; send a data part "
            '{"call_id": ..., "result": ...} for ' + ", ".join(missing) + "."
        )
    return [ty.Message(role="tool", tool_call_id=cid, content=results[cid]) for cid in results]


def _media_fields(media: ty.Media) -> tuple[str | None, str | None]:
    """(base64, url) of a media field."""
    return (None, media.url) if isinstance(media, ty.MediaURL) else (media, None)


def _item_media(item: ty.ContentItem) -> tuple[ty.Media, str, str | None] | None:
    if isinstance(item, ty.ImageContent):
        return item.image, f"image/{item.format or 'png'}", None
    if isinstance(item, ty.AudioContent):
        return item.audio, f"audio/{item.format or 'wav'}", None
    if isinstance(item, ty.VideoContent):
        return item.video, f"video/{item.format or 'mp4'}", None
    if isinstance(item, ty.FileContent):
        return item.file, item.mime_type, item.filename
    return None


def render_part(
    item: ty.ContentItem | Any, dialect: Dialect, *, data: bool = False
) -> dict[str, Any]:
    """One part on the wire.

    Args:
        item: A content item, or (with ``data=True``) any JSON value for a
            data part.
        dialect: Which dialect to write.
        data: Write ``item`` as a data part.
    """
    v1 = dialect is Dialect.V1
    if data:
        return {"data": item} if v1 else {"kind": "data", "data": item}
    if isinstance(item, ty.TextContent):
        return {"text": item.text} if v1 else {"kind": "text", "text": item.text}
    if isinstance(item, ty.UnknownContent) and item.type == "data":
        value = item.raw.get("data")
        return {"data": value} if v1 else {"kind": "data", "data": value}
    media = _item_media(item)
    if media is None:  # tool calls, results, thinking...: their JSON as data
        value = unstructure(item)
        return {"data": value} if v1 else {"kind": "data", "data": value}
    content, media_type, filename = media
    raw, url = _media_fields(content)
    if v1:
        out: dict[str, Any] = {"raw": raw} if raw is not None else {"url": url}
        out["mediaType"] = media_type
        if filename:
            out["filename"] = filename
        return out
    spec: dict[str, Any] = {"bytes": raw} if raw is not None else {"uri": url}
    spec["mimeType"] = media_type
    if filename:
        spec["name"] = filename
    return {"kind": "file", "file": spec}


def _render_rest_part(part: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 part in spec 004's REST spelling (``type`` instead of ``kind``)."""
    out = dict(part)
    out["type"] = out.pop("kind")
    return out


# --- tasks -------------------------------------------------------------------------------------


@attrs.define(kw_only=True)
class StoredMessage:
    """A message kept in a task's history (dialect-neutral)."""

    message_id: str
    role: str  # "user" | "agent"
    items: list[ty.ContentItem]
    data: list[Any] = attrs.field(factory=list)
    metadata: dict[str, Any] | None = None


def stored_message(message: A2AMessage) -> StoredMessage:
    """A received message as a task's history keeps it."""
    return StoredMessage(
        message_id=message.message_id,
        role=message.role,
        items=list(message.items),
        data=list(message.data),
        metadata=message.metadata,
    )


@attrs.define(kw_only=True)
class Artifact:
    """An artifact of a task: accumulated output of one kind."""

    artifact_id: str
    name: str
    items: list[ty.ContentItem] = attrs.field(factory=list)
    description: str | None = None


@attrs.define(kw_only=True)
class A2ATask:
    """One task as the store keeps it.

    Attributes:
        id: The task id.
        context_id: Its conversation id.
        agent: The agent that runs it.
        state: The current :class:`TaskState`.
        timestamp: RFC 3339 time of the last state change.
        status_message: The message attached to the current status.
        history: User and agent messages, in order.
        artifacts: Output artifacts.
        conversation: The UAMP conversation so far (for resuming and for
            later tasks in the same context).
        pending_tool_calls: Client tool calls an ``input-required`` task waits on.
        pending_interrupts: The interrupts (a tool call to approve, a
            question) an ``input-required`` task waits on while its turn is
            paused (:mod:`uamp_proto.adapters.a2a_human`).
        error: The error of a failed task.
        tools: Client tools declared for the task (``metadata.tools``).
        push_configs: Its push-notification configs by id (1.0
            ``TaskPushNotificationConfig`` fields: ``id``, ``url``,
            ``token``, ``authentication``).
    """

    id: str
    context_id: str
    agent: str
    state: TaskState = TaskState.SUBMITTED
    timestamp: str | None = None
    status_message: StoredMessage | None = None
    history: list[StoredMessage] = attrs.field(factory=list)
    artifacts: list[Artifact] = attrs.field(factory=list)
    conversation: list[ty.Message] = attrs.field(factory=list)
    pending_tool_calls: list[ty.ToolInvocation] = attrs.field(factory=list)
    pending_interrupts: list[Interrupt] = attrs.field(factory=list)
    error: ty.ErrorInfo | None = None
    tools: list[ty.ToolDefinition] = attrs.field(factory=list)
    metadata: dict[str, Any] | None = None
    push_configs: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: A turn that streams text it has not put into its text artifact yet.
    _unsettled: TaskRun | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def settle(self) -> None:
        """Put the text a running turn streamed into its text artifact: before reading artifacts.

        :func:`render_task` and :func:`~uamp_proto.adapters.a2a_records.task_to_json`
        do it (see :meth:`TaskRun.grower`).
        """
        run = self._unsettled
        if run is not None:
            run.settle()

    def move(self, trigger: Trigger, timestamp: str | None = None) -> TaskState:
        """Apply ``trigger`` (see :func:`transition`) and stamp the time."""
        self.state = transition(self.state, trigger)
        self.timestamp = timestamp
        return self.state


# --- UAMP events -> task updates ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Update:
    """One change of a task to tell subscribers about.

    ``kind`` is ``"status"`` (state and optional message; ``final`` when the
    task finished or paused) or ``"artifact"`` (``artifact`` holds only the
    new parts; ``append`` when they extend an artifact sent before).
    ``text`` is the new text for the REST form's ``task.message`` event.
    """

    kind: str
    task_id: str
    context_id: str
    state: TaskState | None = None
    timestamp: str | None = None
    message: StoredMessage | None = None
    artifact: Artifact | None = None
    append: bool = False
    last_chunk: bool = False
    final: bool = False
    text: str | None = None
    metadata: dict[str, Any] | None = None


#: The extension (``A2A-Extensions``) under which a client asks to see UAMP's
#: own progress events (thinking, tool activity) as ``data`` parts of
#: ``working`` status messages; without it they stay inside the server.
UAMP_EVENTS_EXTENSION = "https://uamp.dev/extensions/events/v1"

#: :class:`~uamp_proto.responder.ResponderError` codes that end a turn in a
#: state other than ``failed``: the agent pauses for input or authorization,
#: or refuses the task.
PAUSE_CODES: dict[str, Trigger] = {
    "input_required": Trigger.REQUIRE_INPUT,
    "auth_required": Trigger.REQUIRE_AUTH,
    "rejected": Trigger.REJECT,
}

#: The error of a task whose server process stopped in the middle of its turn
#: (a shared task store ends it ``failed`` on a surviving process).
RUNNER_LOST = ty.ErrorInfo(
    code="interrupted", message="The server running this task stopped before the task finished."
)


def data_item(value: Any) -> ty.UnknownContent:
    """A UAMP content item holding structured JSON: ``{"type": "data", "data": value}``.

    It is A2A's data part on the wire (UAMP keeps unknown item types verbatim).
    """
    return ty.UnknownContent(raw={"type": "data", "data": value})


def artifact_delta(
    items: list[ty.ContentItem],
    *,
    artifact_id: str | None = None,
    name: str | None = None,
    description: str | None = None,
    append: bool = False,
    last_chunk: bool = False,
) -> ev.ResponseDelta:
    """The UAMP event by which an agent adds (a chunk of) an artifact to its task.

    A ``response.delta`` of type ``artifact`` whose ``content`` is a list of
    UAMP content items (text, file -- bytes or URL --, :func:`data_item`).
    ``append`` adds the parts to the artifact sent before under the same id;
    ``last_chunk`` says it is complete.
    """
    raw: dict[str, Any] = {
        "type": "artifact",
        "content": [unstructure(i) for i in items],
        "append": append,
        "last_chunk": last_chunk,
    }
    for key, value in (("artifact_id", artifact_id), ("name", name), ("description", description)):
        if value is not None:
            raw[key] = value
    return ev.ResponseDelta(delta=ty.DeltaUnknown(raw=raw))


def message_delta(items: list[ty.ContentItem]) -> ev.ResponseDelta:
    """The UAMP event by which an agent answers with a message instead of a task.

    Only as the turn's first output: the send answers with this message and
    no task is kept.
    """
    raw = {"type": "message", "content": [unstructure(i) for i in items]}
    return ev.ResponseDelta(delta=ty.DeltaUnknown(raw=raw))


def _content(raw: dict[str, Any]) -> list[ty.ContentItem]:
    """The content items of an ``artifact``/``message`` delta (invalid ones are dropped)."""
    items = raw.get("content")
    if not isinstance(items, list):
        return []
    try:
        message = from_dict(ty.Message, {"role": "assistant", "content_items": items})
    except DecodeError:
        return []
    return list(message.content_items or [])


#: Stores the text of a :class:`~uamp_proto.types.TextContent`, frozen as it
#: is (its slot's own setter; see :meth:`TaskRun.grow`).
_set_text = vars(ty.TextContent)["text"].__set__


class TaskRun:
    """Turns one UAMP response's events into updates of an :class:`A2ATask`.

    Feed every event of the turn to :meth:`feed` (an ``interrupt.request``
    to :meth:`ask_human`, an ``interrupt.resolved`` to
    :meth:`human_answered`); then call exactly one of :meth:`complete`,
    :meth:`require_input`, :meth:`pause`, :meth:`fail` or :meth:`cancel`. What maps to what:

    * the turn's first output announces ``working`` (an agent that only
      finishes never shows it) -- unless that output is a
      :func:`message_delta`: then the turn is a direct reply
      (:attr:`reply`) and no task update is made;
    * text deltas grow one text artifact (``<response id>-text``), each
      chunk sent as it comes (``append`` from the second on); when the turn
      ends an empty text chunk carries ``lastChunk: true``, so a client
      that concatenates the chunks has the answer exactly once;
    * :func:`artifact_delta` events are artifact updates as the agent wrote them;
    * ``progress`` with a message, and a tool's progress text, are
      ``working`` status updates whose agent message is that text;
    * thinking, tool calls and results stay inside unless the client
      activated :data:`UAMP_EVENTS_EXTENSION` (then: a data part
      ``{"uamp": <event>}``);
    * the final text becomes an agent message in the history and the final
      status.

    Args:
        task: The task being worked on (already ``working``).
        ids: Makes message ids.
        uamp_events: Whether the client activated :data:`UAMP_EVENTS_EXTENSION`.
    """

    def __init__(self, task: A2ATask, ids: IdSource, *, uamp_events: bool = False) -> None:
        self.task = task
        self._ids = ids
        self._uamp_events = uamp_events
        self._text: Artifact | None = None
        #: The text artifact's one item: the turn's text so far, grown in place
        #: (:meth:`grow`); its list, to see whether an artifact delta replaced it.
        self._item: ty.TextContent | None = None
        self._items: list[ty.ContentItem] = []
        #: What :meth:`grower` took that is not in the item yet (:meth:`settle`).
        self._pending: io.StringIO | None = None
        self._sent_text = False
        self._started = False
        #: The agent's direct reply, when it answered with a message.
        self.reply: StoredMessage | None = None

    def _status(
        self,
        message: StoredMessage | None = None,
        *,
        final: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Update:
        task = self.task
        return Update(
            kind="status",
            task_id=task.id,
            context_id=task.context_id,
            state=task.state,
            timestamp=task.timestamp,
            message=message,
            final=final,
            metadata=metadata,
        )

    def status(self) -> Update:
        """The update announcing the task's current state (e.g. ``working``)."""
        return self._status(self.task.status_message)

    def _start(self) -> list[Update]:
        if self._started:
            return []
        self._started = True
        return [self.status()]

    def _say(self, text: str) -> Update:
        message = StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[ty.TextContent(text=text)]
        )
        return self._status(message)

    def _note(self, event: ev.Event) -> list[Update]:
        if not self._uamp_events:
            return []
        body = unstructure(event)
        for key in ("event_id", "session_id", "response_id", "timestamp"):
            body.pop(key, None)
        message = StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[], data=[{"uamp": body}]
        )
        return [
            *self._start(),
            self._status(message, metadata={UAMP_EVENTS_EXTENSION: {"event": event.type}}),
        ]

    def feed(self, event: ev.Event) -> list[Update]:
        """The updates one UAMP event causes (often none)."""
        if self.reply is not None:
            return []  # a direct reply ends what the task shows
        kind = type(event)
        if kind is ev.ResponseDelta:
            assert isinstance(event, ev.ResponseDelta)
            delta = event.delta
            if isinstance(delta, ty.DeltaText):
                return self._text_delta(delta.text, event.response_id or "response")
            if isinstance(delta, ty.DeltaToolProgress):
                text = delta.tool_progress.text
                return [*self._start(), self._say(text)] if text else []
            if isinstance(delta, ty.DeltaUnknown):
                return self._intent(delta.raw, event.response_id or "response")
            if isinstance(delta, ty.DeltaToolCall | ty.DeltaToolResult):
                return self._note(event)
            return []
        if kind is ev.Progress:
            assert isinstance(event, ev.Progress)
            if event.stage == "ack":
                return []
            if event.message:
                return [*self._start(), self._say(event.message)]
            return self._note(event)
        if kind in (ev.Thinking, ev.ToolCallDone):
            return self._note(event)
        return []

    def _intent(self, raw: dict[str, Any], response_id: str) -> list[Update]:
        kind = raw.get("type")
        if kind == "message" and not self._started:
            self.reply = StoredMessage(
                message_id=self._ids("msg"), role="agent", items=_content(raw)
            )
            return []
        if kind != "artifact":
            return []
        items = _content(raw)
        if not items:
            return []
        task = self.task
        artifact_id = raw.get("artifact_id")
        if not isinstance(artifact_id, str) or not artifact_id:
            artifact_id = f"{response_id}-artifact-{len(task.artifacts) + 1}"
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        description = raw.get("description")
        append = raw.get("append") is True
        kept = next((a for a in task.artifacts if a.artifact_id == artifact_id), None)
        if kept is None:
            kept = Artifact(
                artifact_id=artifact_id,
                name=name or "",
                description=description if isinstance(description, str) else None,
            )
            task.artifacts.append(kept)
        if kept is self._text:
            self.settle()  # the text streamed so far, then this
        if append:
            kept.items.extend(items)
        else:
            kept.items = list(items)
        if kept is self._text:  # the next text delta makes the text its one item again
            self._items = []
        chunk = Artifact(
            artifact_id=artifact_id,
            name=kept.name,
            items=items,
            description=kept.description,
        )
        update = Update(
            kind="artifact",
            task_id=task.id,
            context_id=task.context_id,
            artifact=chunk,
            append=append,
            last_chunk=raw.get("last_chunk") is True,
        )
        return [*self._start(), update]

    def _text_delta(self, text: str, response_id: str) -> list[Update]:
        if not text:
            return []
        task = self.task
        out = self._start()
        if self._text is None:
            self._text = Artifact(artifact_id=f"{response_id}-text", name="response")
            task.artifacts.append(self._text)
            self._item = ty.TextContent(text="")
        self.grow(text)
        out.append(self._text_chunk(text, last=False))
        return out

    @property
    def _said(self) -> str:
        """The turn's text so far."""
        self.settle()
        return "" if self._item is None else self._item.text

    def more_text(self, text: str) -> Update | None:
        """``feed`` of a text delta that only continues the text artifact, else ``None``.

        The streamed hot path: when the turn has started, its text artifact
        is open and ``text`` is not empty, the one update :meth:`feed` would
        give (the same text artifact grown in place, the same chunk);
        otherwise ``None`` and nothing changes (call :meth:`feed`).
        """
        return self._text_chunk(text, last=False) if self.grow(text) else None

    def grow(self, text: str) -> bool:
        """:meth:`more_text` for a caller that needs no update: the task changes alike.

        ``True`` when the text artifact grew by ``text`` (the update
        :meth:`more_text` would give is the text chunk of the artifact's
        next shape, ``append`` and not ``lastChunk``); ``False`` when
        ``more_text`` would give ``None``, and nothing changed.
        """
        if self._item is None or not text or self.reply is not None:
            return False  # (the item is there once the first text chunk is made)
        self.settle()  # what the grower took comes first
        self._extend(text)
        return True

    def grower(self) -> Callable[[str], object]:
        """:meth:`grow` for a streamed chunk's hot path: ``write`` of a text buffer.

        Only for a caller that knows :meth:`more_text` would give a chunk
        for any text now (the turn's first text chunk went out, it answered
        with no message) and passes non-empty texts. The texts wait in the
        buffer (compact, grown in place) and join the text artifact when the
        task is read (:meth:`A2ATask.settle`) or the run goes on: one C call
        per chunk instead of a method.
        """
        if self._pending is None:
            self._pending = io.StringIO()
        self.task._unsettled = self
        return self._pending.write

    def settle(self) -> None:
        """Put the texts :meth:`grower` took into the text artifact."""
        pending = self._pending
        if pending is not None and pending.tell():
            text = pending.getvalue()
            pending.seek(0)
            pending.truncate()
            self._extend(text)

    def _extend(self, text: str) -> None:
        """The text artifact's one item grows by ``text``, in place.

        The item is this run's own (made with the artifact; readers of the
        task render it at once and keep nothing), so it is changed where it
        is rather than made anew for each delta. Every other reference to
        the text is dropped first, so that CPython extends the string in
        place: a join of all the parts on every delta was quadratic in the
        turn's length.
        """
        item, artifact = self._item, self._text
        assert item is not None and artifact is not None
        said = item.text
        _set_text(item, "")
        said += text
        _set_text(item, said)
        if artifact.items is not self._items:
            # (an artifact delta of the agent's, under the text's id, changed it)
            artifact.items = self._items = [item]

    def _text_chunk(self, text: str, *, last: bool) -> Update:
        assert self._text is not None
        task = self.task
        append = self._sent_text
        self._sent_text = True
        return Update(
            kind="artifact",
            task_id=task.id,
            context_id=task.context_id,
            artifact=Artifact(
                artifact_id=self._text.artifact_id,
                name=self._text.name,
                items=[ty.TextContent(text=text)],
            ),
            append=append,
            last_chunk=last,
            text=text,
        )

    def _close_text(self) -> list[Update]:
        """The closing chunk of the text artifact: empty text, ``lastChunk``."""
        self.settle()
        if self.task._unsettled is self:
            self.task._unsettled = None
        if not self._sent_text:
            return []
        return [self._text_chunk("", last=True)]

    def _answer(self, text: str) -> StoredMessage | None:
        if not text:
            return None
        return StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[ty.TextContent(text=text)]
        )

    def end(self, outcome: ResponseOutcome, timestamp: str | None) -> list[Update]:
        """The updates that end the task's turn, however it ended (:meth:`complete` ...)."""
        output = outcome.tracker.messages()
        if outcome.status == "completed":
            return self.complete(output, timestamp)
        if outcome.status == "requires_action":
            return self.require_input(output, outcome.pending_tool_calls, timestamp)
        if outcome.status == "cancelled":
            return self.cancel(timestamp)
        error = outcome.error
        if error is not None and error.code in PAUSE_CODES:
            return self.pause(PAUSE_CODES[error.code], error.message, output, timestamp)
        failed = error or ty.ErrorInfo(code="internal_error", message="The agent failed.")
        return self.fail(failed, timestamp)

    def complete(self, output: list[ty.Message], timestamp: str | None) -> list[Update]:
        """The turn ended with ``response.done``; ``output`` is what it said."""
        task = self.task
        task.conversation.extend(output)
        if self.reply is not None:
            return []
        answer = self._answer(self._said)
        if answer is not None:
            task.history.append(answer)
        task.pending_tool_calls = []
        task.move(Trigger.COMPLETE, timestamp)
        task.status_message = answer
        return [*self._close_text(), self._status(answer, final=True)]

    def require_input(
        self, output: list[ty.Message], calls: list[ty.ToolInvocation], timestamp: str | None
    ) -> list[Update]:
        """The turn asked the client to run ``calls`` (client tools): pause."""
        task = self.task
        task.conversation.extend(output)
        task.pending_tool_calls = list(calls)
        names = ", ".join(c.name for c in calls)
        request = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[
                ty.TextContent(
                    text=f"The agent needs the result of {names}: reply with a data part "
                    '{"call_id": ..., "result": ...} per call.'
                )
            ],
            data=[
                {
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
                    ]
                }
            ],
        )
        text = self._said
        answer = self._answer(text)
        if answer is not None:
            task.history.append(answer)
        task.history.append(request)
        task.move(Trigger.REQUIRE_INPUT, timestamp)
        task.status_message = request
        return [*self._close_text(), self._status(request, final=True)]

    def pause(
        self, trigger: Trigger, text: str, output: list[ty.Message], timestamp: str | None
    ) -> list[Update]:
        """The agent ended its turn asking for input or authorization, or refusing the task.

        ``trigger`` is one of :data:`PAUSE_CODES`' values; ``text`` (the
        agent's question or reason) becomes the status message and, for a
        pause, the assistant's last word in the conversation the next
        message resumes.
        """
        task = self.task
        said = self._said
        if said:
            task.conversation.extend(output)
        message = self._answer(text or said)
        if message is not None:
            task.history.append(message)
            if trigger is not Trigger.REJECT:
                task.conversation.append(ty.Message(role="assistant", content=text or said))
        task.move(trigger, timestamp)
        task.status_message = message
        return [*self._close_text(), self._status(message, final=True)]

    def ask_human(
        self, ask: Interrupt, message: tuple[str, dict[str, Any]], timestamp: str | None
    ) -> list[Update]:
        """The paused turn asks a person (``interrupt.request``): ``input-required``.

        ``message`` is the status message's text and data payload for every
        interrupt pending (:func:`uamp_proto.adapters.a2a_human.interrupt_message`):
        a second ask while the task waits replaces the status message. The
        update is ``final``: the task waits for a message on it.
        """
        task = self.task
        if all(a.id != ask.id for a in task.pending_interrupts):
            task.pending_interrupts.append(ask)
        text, data = message
        request = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[ty.TextContent(text=text)],
            data=[data],
        )
        out = self._start()
        if task.state is TaskState.INPUT_REQUIRED:
            task.timestamp = timestamp
        else:
            task.move(Trigger.REQUIRE_INPUT, timestamp)
        task.history.append(request)
        task.status_message = request
        return [*out, self._status(request, final=True)]

    def human_answered(self, interrupt_id: str, timestamp: str | None) -> list[Update]:
        """An interrupt was resolved (from any transport): back to ``working`` when none is left."""
        task = self.task
        task.pending_interrupts = [a for a in task.pending_interrupts if a.id != interrupt_id]
        if task.pending_interrupts or task.state is not TaskState.INPUT_REQUIRED:
            return []
        task.move(Trigger.RESUME, timestamp)
        task.status_message = None
        return [self._status()]

    def fail(self, error: ty.ErrorInfo, timestamp: str | None) -> list[Update]:
        """The turn failed with ``error``."""
        task = self.task
        task.error = error
        message = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[ty.TextContent(text=error.message)],
            metadata={"code": error.code},
        )
        task.move(Trigger.FAIL, timestamp)
        task.status_message = message
        return [
            *self._close_text(),
            self._status(message, final=True, metadata={"code": error.code}),
        ]

    def cancel(self, timestamp: str | None) -> list[Update]:
        """The turn was cancelled."""
        task = self.task
        if task.state is not TaskState.CANCELED:
            task.move(Trigger.CANCEL, timestamp)
        task.status_message = None
        return [*self._close_text(), self._status(final=True)]


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


# --- JSON-RPC envelope ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RpcCall:
    """A validated JSON-RPC request.

    Attributes:
        id: The request id (``None`` for a notification).
        method: The method name.
        dialect: Which dialect the method belongs to.
        operation: ``send``, ``stream``, ``get``, ``cancel``, ``list``,
            ``subscribe``, ``push`` or ``extended_card``.
        params: The params object (``{}`` when absent).
    """

    id: str | int | None
    method: str
    dialect: Dialect
    operation: str
    params: dict[str, Any]


def parse_rpc(body: bytes) -> RpcCall:
    """Validate a JSON-RPC 2.0 request body (through :mod:`uamp_proto.jsonrpc`).

    A call without an id, or with ``"id": null``, is served and answered
    with ``id: null``.

    Raises:
        A2AError: :data:`PARSE_ERROR` (not JSON), :data:`INVALID_REQUEST`
            (not a request object; batches are not supported),
            :data:`METHOD_NOT_FOUND`, :data:`INVALID_PARAMS` (params not an
            object). Raised as :class:`RpcError` (with the request id and
            dialect) once the id could be read, so the reply can echo it.
    """
    try:
        batch = jsonrpc.decode(body, null_id=True, params_code=INVALID_PARAMS)
    except JSONRPCError as exc:
        raise A2AError(exc.code, exc.message) from None
    if batch.is_batch:
        raise A2AError(
            INVALID_REQUEST, "The request must be one JSON-RPC request object, not a batch."
        )
    msg = batch.items[0]
    if isinstance(msg, jsonrpc.Invalid):
        entry = METHODS.get(msg.method) if msg.method is not None else None
        if msg.method is not None and entry is None:
            raise _with_id(A2AError(METHOD_NOT_FOUND, f"Method not found: {msg.method}"), msg.id)
        dialect = entry[0] if entry is not None else Dialect.V1
        raise _with_id(A2AError(msg.error.code, msg.error.message), msg.id, dialect)
    if isinstance(msg, jsonrpc.Response | jsonrpc.ErrorResponse):
        raise _with_id(A2AError(INVALID_REQUEST, "'method' must be a non-empty string."), msg.id)
    rid = msg.id if isinstance(msg, jsonrpc.Request) else None
    entry = METHODS.get(msg.method)
    if entry is None:
        raise _with_id(A2AError(METHOD_NOT_FOUND, f"Method not found: {msg.method}"), rid)
    params = {} if msg.params is None else msg.params
    if not isinstance(params, dict):
        raise _with_id(A2AError(INVALID_PARAMS, "'params' must be an object."), rid, entry[0])
    return RpcCall(id=rid, method=msg.method, dialect=entry[0], operation=entry[1], params=params)


class RpcError(A2AError):
    """An :class:`A2AError` raised while the request id and dialect were known."""

    def __init__(self, error: A2AError, request_id: str | int | None, dialect: Dialect) -> None:
        super().__init__(error.code, error.message, data=error.data, http_status=error.http_status)
        self.request_id = request_id
        self.dialect = dialect


def _with_id(error: A2AError, rid: str | int | None, dialect: Dialect = Dialect.V1) -> RpcError:
    return RpcError(error, rid, dialect)


# --- params helpers -------------------------------------------------------------------------------


def opt_int(params: Mapping[str, Any], key: str, *, minimum: int = 0) -> int | None:
    """An optional integer param (1.0 ProtoJSON may send int64 as a string).

    Raises:
        A2AError: :data:`INVALID_PARAMS`.
    """
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _invalid(f"'{key}' must be an integer >= {minimum}.")
    return value


def task_id_param(params: Mapping[str, Any]) -> str:
    """The ``id`` param of get/cancel/subscribe.

    Raises:
        A2AError: :data:`INVALID_PARAMS` when missing or not a string.
    """
    value = params.get("id")
    if not isinstance(value, str) or not value:
        raise _invalid("'id' (the task id) is required and must be a string.")
    return value


def parse_tools(metadata: object) -> list[ty.ToolDefinition]:
    """Client tools declared in request metadata (``{"tools": [...]}``, OpenAI form).

    Raises:
        A2AError: :data:`INVALID_PARAMS` for a malformed tool.
    """
    if not isinstance(metadata, dict):
        return []
    try:
        return _tools.parse_tools(metadata.get("tools"), "metadata.tools")
    except _tools.ToolFormError as exc:
        raise _invalid(exc.message) from None


def task_not_found(task_id: str) -> A2AError:
    """The one answer for a task id the caller may not see (absent, evicted or not theirs)."""
    return A2AError(TASK_NOT_FOUND, f"Task {task_id!r} was not found.", http_status=404)


def payment_error(error: PaymentRequiredError) -> A2AError:
    """JSON-RPC ``-32402`` (HTTP 402) with what is accepted and why the token was refused."""
    return A2AError(
        PAYMENT_REQUIRED,
        "Payment required: retry with an X-PAYMENT header.",
        data={"status_code": 402, "accepts": error.accepts(), **error.details()},
        http_status=402,
    )
