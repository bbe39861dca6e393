"""A2A's HTTP+JSON (REST) binding (A2A 1.0 section 11), over the operations of the A2A transport.

Routes, under each agent's A2A base URL (``/agents/{name}/a2a``, and
``/a2a`` for a single agent) -- the ``HTTP+JSON`` entry of the card's
``supportedInterfaces``:

=========================================================  ==============================
``POST /message:send``                                     ``SendMessage``
``POST /message:stream``                                   ``SendStreamingMessage`` (SSE)
``GET /tasks``                                             ``ListTasks`` (query parameters)
``GET /tasks/{id}``                                        ``GetTask`` (``?historyLength``)
``POST /tasks/{id}:cancel``                                ``CancelTask``
``POST /tasks/{id}:subscribe``                             ``SubscribeToTask`` (SSE)
``POST /tasks/{id}/pushNotificationConfigs``               create a push config
``GET /tasks/{id}/pushNotificationConfigs[/{configId}]``   list / get
``DELETE /tasks/{id}/pushNotificationConfigs/{configId}``  delete
``GET /extendedAgentCard``                                 ``GetExtendedAgentCard``
=========================================================  ==============================

Bodies and answers are the 1.0 ProtoJSON objects, stream events are SSE
``data:`` lines of ``StreamResponse`` objects, and errors are AIP-193
bodies (``{"error": {"code", "status", "message", "details":
[ErrorInfo]}}``) with the HTTP status of the specification's table
(:data:`uamp_proto.adapters.a2a.BINDING_STATUS`). This interface speaks
1.0 only: ``A2A-Version: 0.3`` is ``VersionNotSupportedError``, and a
request without the header is read as 1.0 (0.3 had different REST paths).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from uamp_proto.adapters.a2a import A2AError, Dialect
from uamp_proto.adapters.a2a_params import (
    check_rest_version,
    rest_body,
    rest_push_call,
    rest_query,
)

from ...engines.http import Request, Response, StreamingResponse, json_response
from ...hosting.router import RouteMeta
from .call import Call

if TYPE_CHECKING:
    from ...hosting.host import Host
    from .service import A2ATransport

__all__ = ["mount"]

#: Refusals by middleware on these routes (auth, body limits, concurrency)
#: use the same AIP-193 body as the A2A errors of the operations.
ROUTES = RouteMeta(transport="a2a", error_style="a2a_rest")

_Handler = Callable[["Call", Request], Awaitable[Response | StreamingResponse]]


def _body(request: Request) -> dict[str, Any]:
    return rest_body(request.headers.get("content-type"), request.body)


def mount(app: Host, transport: A2ATransport) -> None:
    """Register the HTTP+JSON routes of ``transport`` on ``app``."""

    def route(method: str, subpath: str, handler: _Handler, label: str | None = None) -> None:
        async def endpoint(request: Request) -> Response | StreamingResponse:
            agent = app.resolve_agent(request.path_params)
            try:
                check_rest_version(request.headers.get("a2a-version"))
                return await handler(Call(agent, request, Dialect.V1), request)
            except A2AError as exc:
                return json_response(exc.rest_body(), exc.http_status)

        app.agent_route(method, "/a2a" + subpath, endpoint, label=label, meta=ROUTES)

    t = transport

    async def send(call: Call, request: Request) -> Response:
        return json_response(await t.send(call, _body(request)))

    async def stream(call: Call, request: Request) -> StreamingResponse:
        return (await t.stream(call, _body(request))).sse(lambda result: result)

    async def list_tasks(call: Call, request: Request) -> Response:
        return json_response(await t.list_tasks(call, rest_query(request.query)))

    async def get(call: Call, request: Request) -> Response:
        params = {**rest_query(request.query), "id": request.path_params["task_id"]}
        return json_response(await t.get(call, params))

    async def cancel(call: Call, request: Request) -> Response:
        params = {**_body(request), "id": request.path_params["task_id"]}
        return json_response(await t.cancel(call, params))

    async def subscribe(call: Call, request: Request) -> StreamingResponse:
        opened = await t.subscribe(call, {"id": request.path_params["task_id"]})
        return opened.sse(lambda result: result)

    def push(op: str) -> _Handler:
        async def handler(call: Call, request: Request) -> Response:
            source = _body(request) if op == "set" else rest_query(request.query)
            ids = request.path_params
            method, params = rest_push_call(op, source, ids["task_id"], ids.get("config_id"))
            return json_response(await t.push_config(call, method, params))

        return handler

    async def extended_card(call: Call, request: Request) -> Response:
        return json_response(t.extended_card(call))

    route("POST", "/message:send", send, label="A2A HTTP+JSON")
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
    route("GET", "/extendedAgentCard", extended_card)
