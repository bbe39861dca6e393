"""The A2A request envelope: dialects, methods and errors (A2A 1.0 sections 3.6, 5.4, 9, 11.6).

One endpoint serves two JSON-RPC dialects (:class:`Dialect`): the method
name (:data:`METHODS`) or the ``A2A-Version`` header
(:func:`negotiate_version`) says which. :func:`parse_rpc` checks a request
body through :mod:`uamp_proto.jsonrpc`; once the request's id could be read,
what it raises is an :class:`RpcError` that carries the id and the dialect,
so the answer echoes them. :class:`A2AError` is every A2A error, with what
each binding answers it with: the JSON-RPC ``error`` member in either
dialect, the HTTP status and AIP-193 body of HTTP+JSON, the gRPC status
(:data:`BINDING_STATUS`).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs
import orjson

from .. import jsonrpc
from ..jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PAYMENT_REQUIRED,
    JSONRPCError,
)
from ..payment import PaymentRequiredError

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
    "PAYMENT_REQUIRED",
    "PUSH_NOTIFICATION_NOT_SUPPORTED",
    "QUOTA_EXCEEDED",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "UAMP_ERROR_DOMAIN",
    "UNSUPPORTED_OPERATION",
    "VERSION_NOT_SUPPORTED",
    "A2AError",
    "Dialect",
    "RpcCall",
    "RpcError",
    "error_response",
    "negotiate_version",
    "parse_rpc",
    "payment_error",
    "refusal_rest_body",
    "rest_error_body",
    "result_response",
    "task_not_found",
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


# --- the errors every operation may answer -------------------------------------------------------


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
