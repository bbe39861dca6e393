"""A2A's HTTP+JSON binding (A2A 1.0 section 11) on ASGI, over :class:`.a2a_ops.A2AOperations`.

Routes under each agent's A2A URL (``.../a2a``), as ``uamp serve``'s
(:mod:`uamp_trio.transports.a2a.rest`): ``POST /message:send``, ``POST
/message:stream`` (SSE), ``GET /tasks``, ``GET /tasks/{id}``, ``POST
/tasks/{id}:cancel``, ``POST|GET /tasks/{id}:subscribe`` (SSE). Bodies and
answers are the 1.0 ProtoJSON objects, stream events SSE ``data:`` lines of
``StreamResponse`` objects, errors AIP-193 bodies with the specification's
HTTP status. 1.0 only: ``A2A-Version: 0.3`` is ``VersionNotSupportedError``.
``.../tasks/{id}/pushNotificationConfigs[/{configId}]`` create, list, get
and delete push-notification configs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from uamp_proto.adapters.a2a import A2AError, Dialect
from uamp_proto.adapters.a2a_params import (
    check_rest_version,
    rest_body,
    rest_push_call,
    rest_query,
)
from uamp_proto.responder import Responder
from uamp_proto.sse import encode_json
from uamp_stores.health import StoreUnavailable

from ..app import Host
from ..http import JsonReply, Reply, Request
from .a2a_ops import A2AOperations, sse, unavailable

__all__ = ["mount"]

_Handler = Callable[[Responder, Request], Awaitable[Reply]]


def _body(request: Request) -> dict[str, Any]:
    return rest_body(request.headers.get("content-type"), request.body)


def _frame(result: dict[str, Any]) -> bytes:
    return encode_json(orjson.dumps(result))


def mount(host: Host, ops: A2AOperations) -> None:
    """Register the HTTP+JSON routes of ``ops`` on ``host``."""
    v1 = Dialect.V1

    def route(method: str, subpath: str, handler: _Handler) -> None:
        async def endpoint(request: Request) -> Reply:
            agent = host.resolve_agent(request.path_params)
            try:
                check_rest_version(request.headers.get("a2a-version"))
                return await handler(agent, request)
            except A2AError as exc:
                return JsonReply(exc.rest_body(), exc.http_status)
            except StoreUnavailable as down:  # the task store (Redis) does not answer now
                refused = unavailable(down)
                return JsonReply(refused.rest_body(), refused.http_status)

        host.route(method, "/a2a" + subpath, endpoint, style="a2a_rest", background=True)

    def task_id(request: Request) -> dict[str, Any]:
        return {"id": request.path_params["task_id"]}

    async def send(agent: Responder, request: Request) -> Reply:
        result, after = await ops.send(agent, request, _body(request), v1)
        return JsonReply(result, after=after)

    async def stream(agent: Responder, request: Request) -> Reply:
        produce, never_ran = await ops.stream(agent, request, _body(request), v1)
        return sse(produce, _frame, never_ran, detach=True)

    async def list_tasks(agent: Responder, request: Request) -> Reply:
        query = rest_query(request.query)
        return JsonReply(await ops.list_tasks(agent, request.principal, query))

    async def get(agent: Responder, request: Request) -> Reply:
        params = {**rest_query(request.query), **task_id(request)}
        return JsonReply(await ops.get(request.principal, params, v1))

    async def cancel(agent: Responder, request: Request) -> Reply:
        params = {**_body(request), **task_id(request)}
        return JsonReply(await ops.cancel(request.principal, params, v1, request.background))

    async def subscribe(agent: Responder, request: Request) -> Reply:
        produce, never_ran = await ops.subscribe(request.principal, task_id(request), v1)
        return sse(produce, _frame, never_ran)

    def push(op: str) -> _Handler:
        async def handler(agent: Responder, request: Request) -> Reply:
            source = _body(request) if op == "set" else rest_query(request.query)
            ids = request.path_params
            method, params = rest_push_call(op, source, ids["task_id"], ids.get("config_id"))
            return JsonReply(await ops.push_config(request.principal, method, params, v1))

        return handler

    route("POST", "/message:send", send)
    route("POST", "/message:stream", stream)
    route("GET", "/tasks", list_tasks)
    route("POST", "/tasks/{task_id}:cancel", cancel)
    route("POST", "/tasks/{task_id}:subscribe", subscribe)
    route("GET", "/tasks/{task_id}:subscribe", subscribe)
    configs = "/tasks/{task_id}/pushNotificationConfigs"
    route("POST", configs, push("set"))
    route("GET", configs, push("list"))
    route("GET", configs + "/{config_id}", push("get"))
    route("DELETE", configs + "/{config_id}", push("delete"))
    route("GET", "/tasks/{task_id}", get)

    async def extended_card(agent: Responder, request: Request) -> Reply:
        return JsonReply(ops.extended_card(agent, request))

    route("GET", "/extendedAgentCard", extended_card)
