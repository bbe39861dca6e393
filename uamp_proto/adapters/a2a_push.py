"""A task's A2A push-notification configs: the set/get/list/delete calls and their bounds.

Both servers (``uamp serve``'s A2A transport and ``uamp_asgi``) answer the
config calls here -- 1.0's ``CreateTaskPushNotificationConfig``,
``GetTaskPushNotificationConfig``, ``ListTaskPushNotificationConfigs``,
``DeleteTaskPushNotificationConfig`` and 0.3's
``tasks/pushNotificationConfig/*`` (:data:`~.a2a_params.PUSH_METHODS`) --
and check a config a send carries inline the same way. A config is refused
when its JSON is larger than :attr:`PushLimits.max_config_bytes` or its
target is one the server does not deliver to (the caller's
``check_target``, the SSRF guard of its webhook client); a task holds at
most :attr:`PushLimits.max_configs`. Pure: the caller stores the task when a
call changed it, and delivers the updates with its own I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import orjson

from ..ids import IdSource
from . import a2a_params
from .a2a_rpc import INVALID_PARAMS, QUOTA_EXCEEDED, A2AError, Dialect
from .a2a_tasks import A2ATask

__all__ = [
    "MAX_CONFIGS",
    "MAX_CONFIG_BYTES",
    "PushLimits",
    "check_config",
    "config_call",
    "make_room",
]

#: Push-notification configs one task may hold, unless configured otherwise.
MAX_CONFIGS: Final = 10
#: Largest config (as JSON, bytes), unless configured otherwise.
MAX_CONFIG_BYTES: Final = 16 * 1024

#: Refuses a webhook URL the server will not deliver to (raises ``A2AError``).
CheckTarget = Callable[[str], None]


@attrs.frozen
class PushLimits:
    """How many configs a task holds, and how large one may be."""

    max_configs: int = MAX_CONFIGS
    max_config_bytes: int = MAX_CONFIG_BYTES


def check_config(config: Mapping[str, Any], limits: PushLimits, check_target: CheckTarget) -> None:
    """Refuse a config over ``limits.max_config_bytes`` or with a target not delivered to.

    Raises:
        A2AError: ``INVALID_PARAMS`` (400, gRPC ``INVALID_ARGUMENT``).
    """
    limit = limits.max_config_bytes
    if len(orjson.dumps(config)) > limit:
        raise A2AError(
            INVALID_PARAMS,
            f"The push-notification config is too large (at most {limit} bytes as JSON).",
            data={"limit": limit},
        )
    check_target(config["url"])


def make_room(task: A2ATask, config: Mapping[str, Any], limits: PushLimits) -> None:
    """Refuse a new config on a task holding ``limits.max_configs`` already.

    Replacing a config the task has (the same ``id``) is always allowed.

    Raises:
        A2AError: ``QUOTA_EXCEEDED`` (HTTP 429, gRPC ``RESOURCE_EXHAUSTED``).
    """
    limit = limits.max_configs
    if config["id"] not in task.push_configs and len(task.push_configs) >= limit:
        raise A2AError(
            QUOTA_EXCEEDED,
            f"Task {task.id} has {limit} push-notification configs, the most it may "
            "hold; delete one first.",
            data={"status": 429, "code": "too_many_push_configs", "limit": limit},
            http_status=429,
        )


def config_call(
    task: A2ATask,
    op: str,
    params: Mapping[str, Any],
    dialect: Dialect,
    *,
    ids: IdSource,
    limits: PushLimits,
    check_target: CheckTarget,
) -> tuple[Any, bool]:
    """Answer one config call (``op``: set, get, list, delete) on ``task``.

    Returns the call's ``result`` and whether ``task.push_configs`` changed
    (the caller stores it then).

    Raises:
        A2AError: A bad or refused config, or an id the task does not have.
    """
    if op == "set":
        config = a2a_params.parse_config(params, dialect, ids)
        check_config(config, limits, check_target)
        make_room(task, config, limits)
        task.push_configs[config["id"]] = config
        return a2a_params.render_config(task.id, config, dialect), True
    if op == "get":
        config = a2a_params.find_config(task, params, dialect)
        return a2a_params.render_config(task.id, config, dialect), False
    if op == "list":
        rendered = [
            a2a_params.render_config(task.id, c, dialect) for c in task.push_configs.values()
        ]
        if dialect is Dialect.V1:
            return {"configs": rendered, "nextPageToken": ""}, False
        return rendered, False
    # Deleting twice is not an error (the config is gone either way).
    gone = task.push_configs.pop(a2a_params.config_id(params, dialect), None)
    return ({} if dialect is Dialect.V1 else None), gone is not None
