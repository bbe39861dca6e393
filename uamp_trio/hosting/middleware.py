"""The middleware type and the one error renderer every refusal goes through.

Theory of operation
-------------------
The composition root (:class:`uamp_trio.App`) runs its middleware around
every HTTP endpoint and every WebSocket handler of every transport. A
middleware is an async callable ``middleware(call, call_next)``: it sees a
:class:`Call` -- the request (for a WebSocket, the upgrade request, with the
pending :class:`~uamp_trio.engines.websocket.WebSocketRequest` beside it) and
the :class:`~uamp_trio.hosting.router.RouteMeta` of the route it matched --
and either passes it on (``return await call_next(call)``, which returns the
endpoint's response, or ``None`` for a WebSocket once its handler is done) or
refuses it by raising :class:`Refusal`. The root answers a refusal in the
route's own style (:func:`render_error`): an OpenAI error object on
Completions, Realtime, AG-UI and A2A REST routes, a JSON-RPC error on A2A
JSON-RPC and ACP, a UAMP ``session.error`` on the UAMP routes, a gRPC status
on gRPC routes, Anthropic's error object (503 answered 529) on the
Anthropic Messages routes; a WebSocket
upgrade is refused with that body before the handshake.

Authentication, rate limits and request logging are middleware; the
transports know nothing of them. See docs/architecture.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson

from uamp_proto import grpc as grpc_wire
from uamp_proto.adapters import a2a
from uamp_proto.adapters import anthropic as anthropic_wire

from ..engines.http import JSON_HEADERS, HTTPError, Request, Response, StreamingResponse, error_body
from ..engines.websocket import WebSocketRequest
from .agents import SPEC_SESSION_CODES
from .router import ErrorStyle, RouteMeta

__all__ = [
    "JSONRPC_REFUSED",
    "Call",
    "Middleware",
    "Next",
    "Refusal",
    "Reply",
    "reject_upgrade",
    "render_error",
]

#: The JSON-RPC error code of a refusal that names none (the implementation-
#: defined server error range; ACP uses it for "authentication required").
JSONRPC_REFUSED = -32000


@attrs.define(slots=True)
class Call:
    """One request on its way to its endpoint or WebSocket handler.

    Attributes:
        request: The HTTP request (for a WebSocket: the upgrade request), with
            ``path_params`` filled.
        route: The matched route's metadata.
        websocket: The pending upgrade for a WebSocket route, else ``None``.
        pattern: The matched route's path pattern (``/agents/{agent}/uamp``).
    """

    request: Request
    route: RouteMeta
    websocket: WebSocketRequest | None = None
    pattern: str = ""


#: What the rest of the chain returns: the endpoint's response, or ``None``
#: for a WebSocket whose handler has returned.
Reply = Response | StreamingResponse | None

#: The rest of the chain, as seen by one middleware.
Next = Callable[[Call], Awaitable[Reply]]

#: One layer around every endpoint: ``await middleware(call, call_next)``.
Middleware = Callable[[Call, Next], Awaitable[Reply]]


class Refusal(HTTPError):
    """Raised by a middleware to refuse a call; answered in the route's error style.

    Args:
        status: HTTP status (``401``, ``403``, ``429``...).
        message: A sentence a person can act on.
        code: Machine-readable code (``"unauthorized"``...).
        headers: Extra response headers (``WWW-Authenticate``, ``Retry-After``...).
        rpc_code: The JSON-RPC error code on JSON-RPC routes
            (default :data:`JSONRPC_REFUSED`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: list[tuple[str, str]] | None = None,
        rpc_code: int = JSONRPC_REFUSED,
    ) -> None:
        super().__init__(status, message, code=code, headers=headers)
        self.rpc_code = rpc_code


def _error_object(style: ErrorStyle, exc: HTTPError, rpc_code: int) -> dict[str, Any]:
    if style == "jsonrpc":
        data = {"status": exc.status, "code": exc.code}
        error = {"code": rpc_code, "message": exc.message, "data": data}
        return {"jsonrpc": "2.0", "id": None, "error": error}
    if style == "uamp":
        return _session_error(exc)
    if style == "a2a_rest":
        status = grpc_wire.status_for_http(exc.status).name
        return a2a.refusal_rest_body(exc.status, status, exc.message, exc.code or "refused")
    return error_body(exc.message, code=exc.code, type=exc.type, param=exc.param)


#: UAMP 6.3's ``session.error`` codes for the HTTP statuses that mean them;
#: the transport's own code goes along as ``details.reason``.
SESSION_ERROR_CODES: dict[int, str] = {
    401: "unauthorized",
    408: "timeout",
    429: "rate_limited",
    504: "timeout",
}


def _session_error(exc: HTTPError) -> dict[str, Any]:
    """A refusal as the ``session.error`` event UAMP clients read (spec codes, a UUID id)."""
    code = SESSION_ERROR_CODES.get(exc.status) or SPEC_SESSION_CODES.get(exc.code or "", exc.code)
    error: dict[str, Any] = {"code": code, "message": exc.message}
    if code != exc.code and exc.code:
        error["details"] = {"reason": exc.code}
    return {"type": "session.error", "event_id": str(uuid.uuid4()), "error": error}


def render_error(style: ErrorStyle, exc: HTTPError) -> Response:
    """The response for ``exc`` in ``style`` (status and headers from ``exc``).

    In the ``grpc`` style: a trailers-only answer (HTTP 200) whose
    ``grpc-status`` stands for ``exc.status`` (:func:`uamp_proto.grpc.status_for_http`).
    """
    if style == "grpc":
        status = grpc_wire.status_trailers(grpc_wire.status_for_http(exc.status), exc.message)
        headers = [("content-type", grpc_wire.CONTENT_TYPE), *status, *exc.headers]
        return Response(status=200, headers=headers)
    if style == "anthropic":
        code = anthropic_wire.error_status(exc.status)
        error = anthropic_wire.error_body(exc.message, anthropic_wire.error_type_for(code))
        return Response(
            status=code, headers=[*JSON_HEADERS, *exc.headers], body=orjson.dumps(error)
        )
    rpc_code = exc.rpc_code if isinstance(exc, Refusal) else JSONRPC_REFUSED
    body = orjson.dumps(_error_object(style, exc, rpc_code))
    return Response(status=exc.status, headers=[*JSON_HEADERS, *exc.headers], body=body)


async def reject_upgrade(pending: WebSocketRequest, style: ErrorStyle, exc: HTTPError) -> None:
    """Refuse the WebSocket upgrade ``pending`` with ``exc`` rendered in ``style``."""
    refused = render_error(style, exc)
    await pending.reject(refused.status, refused.body, refused.headers)
