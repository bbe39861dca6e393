"""A2A request parameters: strict reading of what the operations take (A2A 1.0 section 3.2).

Each reader takes the decoded ``params`` object of one operation (the same
object whatever binding carried it: a JSON-RPC ``params``, an HTTP+JSON body
or query, a gRPC message as ProtoJSON) and either returns what it means or
raises :class:`~uamp_proto.adapters.a2a.A2AError` ``INVALID_PARAMS``
naming the field, as the proto marks fields required and typed:

* :func:`task_id_param`, :func:`opt_int` (``historyLength`` ...) and
  :func:`parse_tools` (client tools in ``metadata.tools``), which several
  operations read;
* :func:`send_configuration` -- ``SendMessageConfiguration``;
* :func:`parse_list_params` -- ``ListTasksRequest`` (filters, page size and
  token, ``historyLength``, ``statusTimestampAfter``);
* the push-notification config readers and writers (1.0
  ``TaskPushNotificationConfig``; 0.3 ``{taskId, pushNotificationConfig}``),
  normalised to one dict ``{id, url, token?, authentication?}``;
* :func:`turn_context` -- what of the A2A request reaches the agent
  (``TurnRequest.metadata["a2a"]``).

Page tokens are opaque to clients; here they are ``o`` and an offset.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import attrs
import orjson

from .. import jsonbounds
from .. import types as ty
from ..ids import IdSource
from . import _tools
from .a2a_parts import A2AMessage, opt_str
from .a2a_render import render_task
from .a2a_rpc import (
    CONTENT_TYPE_NOT_SUPPORTED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    TASK_NOT_FOUND,
    VERSION_NOT_SUPPORTED,
    A2AError,
    Dialect,
    negotiate_version,
)
from .a2a_tasks import A2ATask, TaskState

__all__ = [
    "PUSH_METHODS",
    "REST_PUSH_METHODS",
    "ListQuery",
    "blocking",
    "camel_keys",
    "check_content_type",
    "check_rest_version",
    "config_id",
    "find_config",
    "inline_push_config",
    "list_page",
    "opt_int",
    "page_token",
    "parse_config",
    "parse_list_params",
    "parse_timestamp",
    "parse_tools",
    "render_config",
    "rest_body",
    "rest_push_call",
    "rest_query",
    "send_configuration",
    "task_id_of",
    "task_id_param",
    "turn_context",
]

#: The push-notification config methods of both dialects -> operation.
PUSH_METHODS: dict[str, str] = {
    "CreateTaskPushNotificationConfig": "set",
    "GetTaskPushNotificationConfig": "get",
    "ListTaskPushNotificationConfigs": "list",
    "DeleteTaskPushNotificationConfig": "delete",
    "tasks/pushNotificationConfig/set": "set",
    "tasks/pushNotificationConfig/get": "get",
    "tasks/pushNotificationConfig/list": "list",
    "tasks/pushNotificationConfig/delete": "delete",
}

#: The HTTP+JSON binding's push-config routes (A2A 1.0 section 11): operation -> method.
REST_PUSH_METHODS: dict[str, str] = {
    "set": "CreateTaskPushNotificationConfig",
    "get": "GetTaskPushNotificationConfig",
    "list": "ListTaskPushNotificationConfigs",
    "delete": "DeleteTaskPushNotificationConfig",
}


def rest_push_call(
    op: str, source: Mapping[str, Any], task_id: str, config_id: str | None
) -> tuple[str, dict[str, Any]]:
    """The 1.0 method and params of an HTTP+JSON push-config request.

    ``source``: the body of a create, the query of the others; the task
    (and config) ids come from the path.
    """
    params = {**source, "taskId": task_id}
    if config_id is not None:
        params["id"] = config_id
    return REST_PUSH_METHODS[op], params


#: The largest page ``ListTasks`` serves, and the page it serves unasked.
MAX_PAGE = 100
DEFAULT_PAGE = 50


def _invalid(message: str) -> A2AError:
    return A2AError(INVALID_PARAMS, message)


def _opt_bool(obj: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value in ("true", "false"):  # a query string
        return value == "true"
    if not isinstance(value, bool):
        raise _invalid(f"'{where}{key}' must be a boolean.")
    return value


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_timestamp(value: object, field: str) -> float:
    """An RFC 3339 timestamp (what ProtoJSON writes a ``Timestamp`` as), as UTC seconds.

    Raises:
        A2AError: ``INVALID_PARAMS`` naming ``field``.
    """
    m = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise _invalid(f"'{field}' must be an RFC 3339 timestamp (2025-11-09T10:30:00Z).")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        raise _invalid(f"'{field}' is not a valid date and time.")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = m.group(8)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds + float(m.group(7) or 0)


def send_configuration(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params.configuration`` checked (``{}`` when absent).

    Raises:
        A2AError: ``INVALID_PARAMS`` naming the field.
    """
    config = params.get("configuration")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise _invalid("'configuration' must be an object.")
    modes = config.get("acceptedOutputModes")
    if modes is not None and (
        not isinstance(modes, list) or not all(isinstance(m, str) for m in modes)
    ):
        raise _invalid("'configuration.acceptedOutputModes' must be an array of strings.")
    for key in ("returnImmediately", "blocking"):
        _opt_bool(config, key, "configuration.")
    try:
        opt_int(config, "historyLength")
    except A2AError:
        raise _invalid("'configuration.historyLength' must be an integer >= 0.") from None
    return config


def blocking(params: Mapping[str, Any], dialect: Dialect) -> bool:
    """Whether a send waits for the task to finish (the default in both dialects).

    1.0 asks not to with ``configuration.returnImmediately: true``, 0.3 with
    ``configuration.blocking: false``.
    """
    config = params.get("configuration")
    if not isinstance(config, dict):
        return True
    if dialect is Dialect.V1:
        return config.get("returnImmediately") is not True
    return config.get("blocking") is not False


@attrs.frozen
class ListQuery:
    """A checked ``ListTasks`` request."""

    context_id: str | None = None
    status: TaskState | None = None
    page_size: int = DEFAULT_PAGE
    offset: int = 0
    history_length: int | None = None
    after: float | None = None
    include_artifacts: bool = False

    def matches(self, task: A2ATask) -> bool:
        """Whether ``task`` passes the filters."""
        if self.context_id is not None and task.context_id != self.context_id:
            return False
        if self.status is not None and task.state is not self.status:
            return False
        if self.after is not None:
            if task.timestamp is None:
                return False
            return parse_timestamp(task.timestamp, "timestamp") >= self.after
        return True


_STATES: dict[str, TaskState] = {}
for _member in TaskState:
    _STATES[_member.v1] = _member
    _STATES[_member.value] = _member
    _STATES[_member.value.replace("-", "_")] = _member
#: ProtoJSON may write an enum as its number.
_STATE_NUMBERS = {
    1: TaskState.SUBMITTED,
    2: TaskState.WORKING,
    3: TaskState.COMPLETED,
    4: TaskState.FAILED,
    5: TaskState.CANCELED,
    6: TaskState.INPUT_REQUIRED,
    7: TaskState.REJECTED,
    8: TaskState.AUTH_REQUIRED,
}


def _state(value: object) -> TaskState | None:
    if value in (None, "", "TASK_STATE_UNSPECIFIED", 0, "0"):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value in _STATE_NUMBERS:
        return _STATE_NUMBERS[value]
    if isinstance(value, str) and value in _STATES:
        return _STATES[value]
    raise _invalid(f"'status' {value!r} is not a task state (TASK_STATE_WORKING ...).")


def list_page(tasks: list[A2ATask], query: ListQuery) -> dict[str, Any]:
    """The ``ListTasks`` result: the page of ``tasks`` (newest first, filtered) ``query`` asks for.

    Raises:
        A2AError: ``INVALID_PARAMS`` for a page token past the end.
    """
    start = query.offset
    if start > len(tasks):
        raise _invalid("'pageToken' is not a token this server issued.")
    page = tasks[start : start + query.page_size]
    more = start + query.page_size < len(tasks)
    return {
        "tasks": [
            render_task(
                t,
                Dialect.V1,
                history_length=query.history_length,
                include_artifacts=query.include_artifacts,
            )
            for t in page
        ],
        "nextPageToken": page_token(start + query.page_size) if more else "",
        "pageSize": query.page_size,
        "totalSize": len(tasks),
    }


def page_token(offset: int) -> str:
    """The token of the page that starts at ``offset``."""
    return f"o{offset}"


def parse_list_params(params: Mapping[str, Any]) -> ListQuery:
    """A ``ListTasks`` request, checked.

    Raises:
        A2AError: ``INVALID_PARAMS`` naming the field.
    """
    size = params.get("pageSize")
    if size is None or size in (0, "0"):
        page_size = DEFAULT_PAGE
    else:
        try:
            page_size = opt_int(params, "pageSize", minimum=1) or DEFAULT_PAGE
        except A2AError:
            raise _invalid(f"'pageSize' must be an integer from 1 to {MAX_PAGE}.") from None
        if page_size > MAX_PAGE:
            raise _invalid(f"'pageSize' must be an integer from 1 to {MAX_PAGE}.")
    token = params.get("pageToken") or ""
    offset = 0
    if token:
        if not isinstance(token, str) or not token.startswith("o") or not token[1:].isdigit():
            raise _invalid("'pageToken' is not a token this server issued.")
        offset = int(token[1:])
    try:
        history = opt_int(params, "historyLength")
    except A2AError:
        raise _invalid("'historyLength' must be an integer >= 0.") from None
    after_value = params.get("statusTimestampAfter")
    after = (
        None if after_value in (None, "") else parse_timestamp(after_value, "statusTimestampAfter")
    )
    return ListQuery(
        context_id=opt_str(params, "contextId", ""),
        status=_state(params.get("status")),
        page_size=page_size,
        offset=offset,
        history_length=history,
        after=after,
        include_artifacts=bool(_opt_bool(params, "includeArtifacts", "")),
    )


# --- params several operations read ------------------------------------------------------


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


# --- push-notification configs ------------------------------------------------------------


def task_id_of(params: Mapping[str, Any], op: str, dialect: Dialect) -> str:
    """The task a push-config call names.

    Raises:
        A2AError: ``INVALID_PARAMS`` when it is missing.
    """
    key = "taskId" if dialect is Dialect.V1 or op == "set" else "id"
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise _invalid(f"'{key}' (the task id) is required and must be a string.")
    return value


def _read_config(spec: Mapping[str, Any], where: str, ids: IdSource) -> dict[str, Any]:
    url = spec.get("url")
    if not isinstance(url, str) or not url:
        raise _invalid(f"'{where}url' is required and must be a string.")
    if not url.startswith(("http://", "https://")):
        raise _invalid(f"'{where}url' must be an http:// or https:// URL.")
    config: dict[str, Any] = {"id": opt_str(spec, "id", where) or ids("push"), "url": url}
    token = opt_str(spec, "token", where)
    if token is not None:
        config["token"] = token
    auth = spec.get("authentication")
    if auth is not None:
        if not isinstance(auth, dict):
            raise _invalid(f"'{where}authentication' must be an object.")
        scheme = auth.get("scheme")
        if scheme is None and isinstance(auth.get("schemes"), list) and auth["schemes"]:
            scheme = auth["schemes"][0]  # 0.3: a list of schemes
        if not isinstance(scheme, str) or not scheme:
            raise _invalid(f"'{where}authentication.scheme' is required and must be a string.")
        config["authentication"] = {"scheme": scheme}
        credentials = opt_str(auth, "credentials", f"{where}authentication.")
        if credentials is not None:
            config["authentication"]["credentials"] = credentials
    return config


def parse_config(params: Mapping[str, Any], dialect: Dialect, ids: IdSource) -> dict[str, Any]:
    """The config a set call carries, normalised (an ``id`` is made when none is given).

    Raises:
        A2AError: ``INVALID_PARAMS`` naming the field.
    """
    if dialect is Dialect.V1:
        return _read_config(params, "", ids)
    spec = params.get("pushNotificationConfig")
    if not isinstance(spec, dict):
        raise _invalid("'pushNotificationConfig' is required and must be an object.")
    return _read_config(spec, "pushNotificationConfig.", ids)


def inline_push_config(
    configuration: Mapping[str, Any], dialect: Dialect, ids: IdSource
) -> dict[str, Any] | None:
    """The push config a send's ``configuration`` carries, if any."""
    key = "taskPushNotificationConfig" if dialect is Dialect.V1 else "pushNotificationConfig"
    spec = configuration.get(key)
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise _invalid(f"'configuration.{key}' must be an object.")
    return _read_config(spec, f"configuration.{key}.", ids)


def config_id(params: Mapping[str, Any], dialect: Dialect) -> str:
    """The config id a get/delete call names.

    Raises:
        A2AError: ``INVALID_PARAMS`` when it is missing.
    """
    key = "id" if dialect is Dialect.V1 else "pushNotificationConfigId"
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise _invalid(f"'{key}' (the config id) is required and must be a string.")
    return value


def find_config(task: A2ATask, params: Mapping[str, Any], dialect: Dialect) -> dict[str, Any]:
    """The config of ``task`` a get/delete call names.

    Raises:
        A2AError: ``INVALID_PARAMS`` without an id; ``TASK_NOT_FOUND`` (HTTP
            404) for an id the task does not have.
    """
    unnamed = dialect is Dialect.V03 and not params.get("pushNotificationConfigId")
    if unnamed and len(task.push_configs) == 1:  # 0.3 let a task's only config go unnamed
        return next(iter(task.push_configs.values()))
    wanted = config_id(params, dialect)
    config = task.push_configs.get(wanted)
    if config is None:
        raise A2AError(
            TASK_NOT_FOUND, f"Task {task.id!r} has no push-notification config {wanted!r}."
        )
    return config


#: Members whose values are the client's own JSON, never proto fields.
_OPAQUE = frozenset({"metadata", "data", "params"})


def _camel(key: str) -> str:
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def camel_keys(value: Any) -> Any:
    """``value`` with proto field names (``task_id``) as their JSON names (``taskId``).

    ProtoJSON readers accept both spellings; the operations read the JSON
    names. The client's own data (``metadata``, data parts, extension
    ``params``) is left as it is.
    """
    if isinstance(value, dict):
        return {
            (_camel(k) if isinstance(k, str) else k): (v if k in _OPAQUE else camel_keys(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


def render_config(task_id: str, config: Mapping[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A config on the wire (1.0 ``TaskPushNotificationConfig``, or 0.3's wrapper)."""
    if dialect is Dialect.V1:
        return {"taskId": task_id, **config}
    spec = {k: v for k, v in config.items() if k != "authentication"}
    auth = config.get("authentication")
    if auth is not None:
        spec["authentication"] = {"schemes": [auth["scheme"]]}
        if "credentials" in auth:
            spec["authentication"]["credentials"] = auth["credentials"]
    return {"taskId": task_id, "pushNotificationConfig": spec}


# --- what reaches the agent ------------------------------------------------------------------


def turn_context(
    task: A2ATask,
    message: A2AMessage,
    request_metadata: Mapping[str, Any] | None,
    extensions: frozenset[str],
) -> dict[str, Any]:
    """``TurnRequest.metadata["a2a"]``: the A2A identity and metadata of the turn.

    ``taskId``, ``contextId``, ``messageId``, the message's ``metadata``,
    ``referenceTaskIds`` and ``extensions``, the request's ``metadata``
    (``requestMetadata``) and the extensions the client activated
    (``activeExtensions``).
    """
    out: dict[str, Any] = {
        "taskId": task.id,
        "contextId": task.context_id,
        "messageId": message.message_id,
    }
    if message.metadata:
        out["metadata"] = dict(message.metadata)
    if request_metadata:
        out["requestMetadata"] = dict(request_metadata)
    if message.reference_task_ids:
        out["referenceTaskIds"] = list(message.reference_task_ids)
    if message.extensions:
        out["extensions"] = list(message.extensions)
    if extensions:
        out["activeExtensions"] = sorted(extensions)
    return out


# --- the HTTP+JSON binding's requests -------------------------------------------------------


def check_content_type(content_type: str | None) -> None:
    """Refuse a body declared as other than JSON (``ContentTypeNotSupportedError``).

    A request without a ``Content-Type`` is read as JSON (lenient).
    """
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/json" and not declared.endswith("+json"):
        raise A2AError(
            CONTENT_TYPE_NOT_SUPPORTED,
            f"Content-Type {declared} is not supported: send application/json.",
        )


def check_rest_version(header: str | None) -> None:
    """Refuse an ``A2A-Version`` of 0.3: the HTTP+JSON binding speaks 1.0 only."""
    if negotiate_version(header) is Dialect.V03:
        raise A2AError(
            VERSION_NOT_SUPPORTED,
            "This HTTP+JSON interface speaks A2A 1.0; use JSON-RPC for 0.3.",
            data={"requestedVersion": "0.3", "supportedVersions": "1.0"},
        )


def rest_body(content_type: str | None, raw: bytes) -> dict[str, Any]:
    """An HTTP+JSON request body as camelCase params (``{}`` when empty).

    Raises:
        A2AError: not JSON by its type; not JSON, or more values than
            :mod:`uamp_proto.jsonbounds` lets through (parse error); not an object.
    """
    check_content_type(content_type)
    if not raw:
        return {}
    try:
        jsonbounds.check(raw)
        body = orjson.loads(raw)
    except (jsonbounds.TooManyValues, orjson.JSONDecodeError):
        raise A2AError(PARSE_ERROR, "The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise A2AError(INVALID_REQUEST, "The body must be a JSON object.")
    out: dict[str, Any] = camel_keys(body)
    return out


def rest_query(query: str) -> dict[str, Any]:
    """A query string as camelCase params (a repeated key: the list of its values)."""
    out: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        out[key] = values[0] if len(values) == 1 else values
    camel: dict[str, Any] = camel_keys(out)
    return camel
