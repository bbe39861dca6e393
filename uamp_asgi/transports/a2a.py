"""Google A2A on ASGI: the agent card, JSON-RPC (1.0 and 0.3), and the HTTP+JSON binding.

Endpoints, as ``uamp serve``'s (:mod:`uamp_trio.transports.a2a`):
``GET .../.well-known/agent-card.json`` (public) and ``POST .../a2a`` with
``SendMessage`` / ``message/send``, ``SendStreamingMessage`` /
``message/stream`` (SSE), ``GetTask``, ``CancelTask``, ``ListTasks`` and
``SubscribeToTask`` / ``tasks/resubscribe`` and the push-notification
config methods; the HTTP+JSON routes are
:mod:`.a2a_rest`'s, the operations behind both :mod:`.a2a_ops`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from uamp_proto.adapters import a2a, a2a_params
from uamp_proto.adapters.a2a import A2AError, Dialect
from uamp_proto.sse import encode_json
from uamp_stores.health import StoreUnavailable

from ..app import Host
from ..http import JsonReply, Reply, Request
from . import a2a_rest
from .a2a_ops import A2AOperations, sse, unavailable

__all__ = ["mount"]


def _rpc_frame(request_id: Any) -> Callable[[dict[str, Any]], bytes]:
    def frame(result: dict[str, Any]) -> bytes:
        return encode_json(orjson.dumps(a2a.result_response(request_id, result)))

    return frame


def mount(host: Host) -> None:
    """Register the agent card, the JSON-RPC endpoint and the HTTP+JSON binding."""
    ops = A2AOperations(host)

    async def rpc(request: Request) -> Reply:
        agent = host.resolve_agent(request.path_params)
        try:
            wanted = a2a.negotiate_version(request.headers.get("a2a-version"))
            call = a2a.parse_rpc(request.body)
        except a2a.RpcError as exc:
            return JsonReply(a2a.error_response(exc.request_id, exc, exc.dialect))
        except A2AError as exc:
            return JsonReply(a2a.error_response(None, exc))
        try:
            if wanted is Dialect.V1 and call.dialect is Dialect.V03:
                raise A2AError(a2a.METHOD_NOT_FOUND, f"{call.method} is an A2A 0.3 method.")
            params = call.params
            dialect = call.dialect
            if dialect is Dialect.V1:
                params = a2a_params.camel_keys(params)
            op, principal = call.operation, request.principal

            def answer(result: Any) -> JsonReply:
                return JsonReply(a2a.result_response(call.id, result))

            if op == "send":
                result, after = await ops.send(agent, request, params, dialect)
                return JsonReply(a2a.result_response(call.id, result), after=after)
            if op == "stream":
                produce, never_ran = await ops.stream(agent, request, params, dialect)
                return sse(produce, _rpc_frame(call.id), never_ran, detach=True)
            if op == "subscribe":
                produce, never_ran = await ops.subscribe(principal, params, dialect)
                return sse(produce, _rpc_frame(call.id), never_ran)
            if op == "get":
                return answer(await ops.get(principal, params, dialect))
            if op == "cancel":
                return answer(await ops.cancel(principal, params, dialect, request.background))
            if op == "list":
                return answer(await ops.list_tasks(agent, principal, params))
            if op == "push":
                return answer(await ops.push_config(principal, call.method, params, dialect))
            if op == "extended_card":
                return answer(ops.extended_card(agent, request))
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"{call.method} is served by `uamp serve`, not the ASGI app.",
            )
        except A2AError as exc:
            return JsonReply(a2a.error_response(call.id, exc, call.dialect))
        except StoreUnavailable as down:  # the task store (Redis) does not answer now
            return JsonReply(a2a.error_response(call.id, unavailable(down), call.dialect))

    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        host.route("GET", path, ops.agent_card, public=True)
    host.route("POST", "/a2a", rpc, style="jsonrpc", background=True)
    host.route("POST", "/a2a/", rpc, style="jsonrpc", background=True)
    a2a_rest.mount(host, ops)
