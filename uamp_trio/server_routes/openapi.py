"""``GET /openapi.json``: an OpenAPI 3.1 description of every HTTP route the server mounts.

Theory of operation
-------------------
The document is built from the route table itself on each request, so it
lists exactly what is mounted -- a transport left out of ``create_app`` is
left out here too. Each route is looked up in :data:`OPERATIONS` by method
and *subpath* (the pattern without ``/agents/{agent}``: a transport mounts
the same endpoint under each agent and at the root). A route the table does
not know (a custom transport's) is still listed, with a generic description
and ``x-uamp-undocumented: true``. WebSocket routes cannot be described in
OpenAPI; they are listed under the top-level ``x-uamp-websockets``.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any, Final

import attrs

from ..engines.http import Request, Response, json_response
from ..hosting.host import Host
from ..hosting.router import AGENT_PREFIX
from . import SERVER_ROUTES

__all__ = ["OPERATIONS", "Operation", "document", "mount"]

_JSON = "application/json"
_SSE = "text/event-stream"
_GRPC = "application/grpc"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


@attrs.frozen
class Operation:
    """How one route is described.

    Attributes:
        tag: The group it is listed under (``Chat Completions``, ``A2A``...).
        summary: One line.
        request: The request body schema's name in ``components``, if any.
        response: The 200 body's schema name.
        media: The 200 body's media types.
        errors: The schema of error responses (``OpenAIError``, or ``None``
            for routes that answer errors inside a 200, as JSON-RPC does).
        status: The success status (``200``; a redirect's ``308`` has no body).
    """

    tag: str
    summary: str
    request: str | None = None
    response: str = "Object"
    media: tuple[str, ...] = (_JSON,)
    errors: str | None = "OpenAIError"
    status: str = "200"


#: Every built-in route by ``(method, subpath)``.
OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/chat/completions"): Operation(
        "Chat Completions",
        "Run one turn; JSON, or server-sent chunks with stream: true",
        "ChatCompletionRequest",
        "ChatCompletion",
        (_JSON, _SSE),
    ),
    ("POST", "/responses"): Operation(
        "Responses",
        "Run one turn (OpenAI Responses API); JSON, or server-sent events with stream: true",
        "ResponseRequest",
        "Response",
        (_JSON, _SSE),
    ),
    ("GET", "/responses/{response_id}"): Operation(
        "Responses",
        "A stored response; with stream=true a background response's events (starting_after)",
        None,
        "Response",
        (_JSON, _SSE),
    ),
    ("DELETE", "/responses/{response_id}"): Operation("Responses", "Delete a stored response"),
    ("GET", "/responses/{response_id}/input_items"): Operation(
        "Responses", "A stored response's input items (after, limit, order)"
    ),
    ("POST", "/responses/{response_id}/cancel"): Operation(
        "Responses", "Cancel a background response", None, "Response"
    ),
    ("GET", "/models"): Operation("Models", "List the models (one per agent)", None, "ModelList"),
    ("GET", "/models/{model_id}"): Operation("Models", "Retrieve one model", None, "Model"),
    ("GET", "/capabilities"): Operation("Capabilities", "The agent's UAMP capabilities"),
    ("POST", "/events"): Operation(
        "UAMP HTTP+SSE", "Send one UAMP event or an array of them", "UampEvents", errors="UampError"
    ),
    ("GET", "/events/stream"): Operation(
        "UAMP HTTP+SSE", "The session's outgoing UAMP events", media=(_SSE,), errors="UampError"
    ),
    ("POST", "/acp"): Operation(
        "ACP",
        "Agent Client Protocol over JSON-RPC 2.0",
        "JSONRPCRequest",
        "JSONRPCResponse",
        errors=None,
    ),
    ("POST", "/mcp"): Operation(
        "MCP",
        "Model Context Protocol (Streamable HTTP): one JSON-RPC message; JSON, or SSE",
        "JSONRPCRequest",
        "JSONRPCResponse",
        (_JSON, _SSE),
        errors=None,
    ),
    ("GET", "/mcp"): Operation(
        "MCP", "The MCP session's stream of server messages", media=(_SSE,), errors=None
    ),
    ("DELETE", "/mcp"): Operation("MCP", "End the MCP session", errors=None),
    **{
        ("GET", "/.well-known/oauth-protected-resource" + path): Operation(
            "MCP", "OAuth protected resource metadata (RFC 9728)"
        )
        for path in ("", "/mcp", "/agents/{agent}/mcp")
    },
    ("GET", "/.well-known/agent-card.json"): Operation("A2A", "The A2A agent card"),
    ("GET", "/.well-known/agent.json"): Operation("A2A", "The A2A agent card (older path)"),
    ("POST", "/a2a"): Operation(
        "A2A",
        "A2A over JSON-RPC 2.0 (message/send, message/stream, tasks/*)",
        "JSONRPCRequest",
        "JSONRPCResponse",
        (_JSON, _SSE),
        errors=None,
    ),
    ("POST", "/a2a/"): Operation(
        "A2A",
        "A2A over JSON-RPC 2.0 (the card's URL with a trailing slash)",
        "JSONRPCRequest",
        "JSONRPCResponse",
        (_JSON, _SSE),
        errors=None,
    ),
    ("POST", "/a2a/message:send"): Operation("A2A", "A2A HTTP+JSON: SendMessage", "Object"),
    ("POST", "/a2a/message:stream"): Operation(
        "A2A", "A2A HTTP+JSON: SendStreamingMessage", "Object", media=(_SSE,)
    ),
    ("GET", "/a2a/tasks"): Operation("A2A", "A2A HTTP+JSON: ListTasks"),
    ("GET", "/a2a/tasks/{task_id}"): Operation("A2A", "A2A HTTP+JSON: GetTask"),
    ("POST", "/a2a/tasks/{task_id}:cancel"): Operation("A2A", "A2A HTTP+JSON: CancelTask"),
    ("POST", "/a2a/tasks/{task_id}:subscribe"): Operation(
        "A2A", "A2A HTTP+JSON: SubscribeToTask", media=(_SSE,)
    ),
    ("GET", "/a2a/tasks/{task_id}:subscribe"): Operation(
        "A2A", "A2A HTTP+JSON: SubscribeToTask", media=(_SSE,)
    ),
    ("POST", "/a2a/tasks/{task_id}/pushNotificationConfigs"): Operation(
        "A2A", "A2A HTTP+JSON: create a push-notification config", "Object"
    ),
    ("GET", "/a2a/tasks/{task_id}/pushNotificationConfigs"): Operation(
        "A2A", "A2A HTTP+JSON: list push-notification configs"
    ),
    ("GET", "/a2a/tasks/{task_id}/pushNotificationConfigs/{config_id}"): Operation(
        "A2A", "A2A HTTP+JSON: get a push-notification config"
    ),
    ("DELETE", "/a2a/tasks/{task_id}/pushNotificationConfigs/{config_id}"): Operation(
        "A2A", "A2A HTTP+JSON: delete a push-notification config"
    ),
    ("GET", "/a2a/extendedAgentCard"): Operation("A2A", "A2A HTTP+JSON: the extended card"),
    ("POST", "/tasks"): Operation("A2A", "Create a task (A2A REST)", "Object"),
    ("GET", "/tasks/{task_id}"): Operation("A2A", "Read a task (A2A REST)"),
    ("DELETE", "/tasks/{task_id}"): Operation("A2A", "Cancel a task (A2A REST)"),
    ("POST", "/agui"): Operation("AG-UI", "One AG-UI agent run", "Object", media=(_SSE,)),
    ("POST", "/ai-sdk"): Operation(
        "Vercel AI SDK", "One chat answer as a UI message stream", "Object", media=(_SSE,)
    ),
    ("GET", "/ai-sdk/{chat_id}/stream"): Operation(
        "Vercel AI SDK",
        "Resume the chat's answer from its start; 204 when none runs",
        media=(_SSE,),
    ),
    ("GET", "/.well-known/jwks.json"): Operation(
        "Signatures", "The public keys of response signatures and envelopes", response="JWKS"
    ),
    ("GET", "/.well-known/agent-manifest.json"): Operation(
        "Envelopes (spec 003)",
        "The agent's manifest, a JWS signed with the envelope key",
        response="Text",
        media=("application/manifest+jws",),
        errors="Envelope",
    ),
    ("GET", "/.well-known/agent-hub.json"): Operation(
        "Envelopes (spec 003)", "Every agent's signed manifest and the trust anchors"
    ),
    ("POST", "/messages"): Operation(
        "Envelopes (spec 003)",
        "Send one signed envelope; 202 with the stream in Location (a request with an "
        "anthropic-version or x-api-key header is the Anthropic Messages API instead)",
        "Envelope",
        errors="Envelope",
        status="202",
    ),
    ("POST", "/messages/count_tokens"): Operation(
        "Anthropic Messages",
        "The input's token count (Anthropic's count_tokens)",
        "Object",
        errors="AnthropicError",
    ),
    ("GET", "/stream/{id}"): Operation(
        "Envelopes (spec 003)",
        "The exchange's delta frames as server-sent events",
        media=(_SSE,),
        errors="Envelope",
    ),
    ("POST", "/stream/{id}"): Operation(
        "Envelopes (spec 003)",
        "Acknowledge delta frames (a progress frame); 204",
        "Delta",
        errors="Envelope",
        status="204",
    ),
    ("POST", "/uamp.v1.Agent/Send"): Operation(
        "Envelopes (spec 003)",
        "gRPC (HTTP/2, application/grpc): one uamp.v1.Envelope, a stream of uamp.v1.Delta; "
        "the status in the grpc-status trailer",
        media=(_GRPC,),
        errors=None,
    ),
    ("POST", "/uamp.v1.Agent/Session"): Operation(
        "Envelopes (spec 003)",
        "gRPC (HTTP/2, application/grpc): envelopes and acks in, delta frames out, both "
        "streamed; the status in the grpc-status trailer",
        media=(_GRPC,),
        errors=None,
    ),
    ("GET", "/healthz"): Operation("Health", "Liveness: the process serves HTTP", None, "Health"),
    ("GET", "/readyz"): Operation(
        "Health", "Readiness: serving, with agents hosted (else 503)", None, "Ready"
    ),
    ("GET", "/openapi.json"): Operation("Health", "This document"),
    ("GET", "/version"): Operation("Health", "The installed uamp release"),
    ("GET", "/docs"): Operation("Health", "This document as a page", media=("text/html",)),
    ("GET", "/docs/{file}"): Operation(
        "Health", "The script and style sheet of /docs", media=("text/javascript", "text/css")
    ),
    ("GET", "/metrics"): Operation(
        "Health", "Metrics in the Prometheus text format", response="Text", media=("text/plain",)
    ),
    ("GET", "/"): Operation("Playground", "The playground page", media=("text/html",)),
    ("POST", "/api/payments/tokens/{id}/topup"): Operation(
        "Payments",
        "The ledger's operator adds {amount} to a payment token (spec 004); 404 for anyone else",
    ),
    ("GET", ""): Operation("Playground", "A redirect to the playground page", status="308"),
    ("GET", "/playground/{file}"): Operation(
        "Playground",
        "The playground's script and style sheet",
        media=("text/javascript", "text/css"),
    ),
}

_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
_STRING: dict[str, Any] = {"type": "string"}
_NULLABLE: dict[str, Any] = {"type": ["string", "null"]}


def _object(*required: str, **properties: Any) -> dict[str, Any]:
    """A JSON Schema object with ``required`` keys among ``properties``."""
    return {"type": "object", "required": list(required), "properties": properties}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


#: The schemas the operations name (loose where the protocol's own spec is the reference).
SCHEMAS: dict[str, Any] = {
    "Object": _OBJECT,
    "Text": _STRING,
    "OpenAIError": _object(
        "error",
        error=_object(
            "message", "type", "code", message=_STRING, type=_STRING, param=_NULLABLE,
            code=_NULLABLE,
        ),
    ),
    "AnthropicError": _object(
        "type", "error", type={"const": "error"}, error=_object("type", "message")
    ),
    "UampError": _object("type", "error", type={"const": "session.error"}, error=_OBJECT),
    "UampEvents": {"oneOf": [_object("type", type=_STRING), _array(_object("type"))]},
    "ChatCompletionRequest": _object(
        "messages",
        model=_STRING,
        messages=_array(_OBJECT),
        stream={"type": "boolean"},
        tools=_array(_OBJECT),
    ),
    "ChatCompletion": _object(
        "id", "object", "choices",
        id=_STRING, object={"const": "chat.completion"}, choices=_array(_OBJECT), usage=_OBJECT,
    ),
    "ResponseRequest": _object(
        "model",
        model=_STRING, input={}, instructions=_STRING, tools=_array(_OBJECT),
        stream={"type": "boolean"}, background={"type": "boolean"}, store={"type": "boolean"},
        previous_response_id=_STRING,
    ),
    "Response": _object(
        "id", "object", "status", "output",
        id=_STRING, object={"const": "response"}, status=_STRING, output=_array(_OBJECT),
        usage=_OBJECT,
    ),
    "Model": _object(
        "id", "object", "created", "owned_by",
        id=_STRING, object={"const": "model"}, created={"type": "integer"}, owned_by=_STRING,
    ),
    "ModelList": _object("object", "data", object={"const": "list"}, data=_array(_ref("Model"))),
    "JSONRPCRequest": _object(
        "jsonrpc", "method", jsonrpc={"const": "2.0"}, method=_STRING, id={}
    ),
    "JSONRPCResponse": _object(
        "jsonrpc", jsonrpc={"const": "2.0"}, result={}, error=_OBJECT, id={}
    ),
    "JWKS": _object("keys", keys={"type": "array"}),
    "Envelope": _object(
        "id", "ts", "from", "to", "intent", "body", "sig", intent=_STRING, body=_OBJECT
    ),
    "Delta": _object("delta_seq", "stream_id", "ts", "type", delta_seq={"type": "integer"}),
    "Health": _object("status", status={"const": "ok"}),
    "Ready": _object(
        "status",
        status={"enum": ["ready", "not_ready"]},
        agents=_array(_STRING),
        reason=_STRING,
    ),
}  # fmt: skip

#: How a route nobody described is listed.
#: A2A's gRPC binding (``lf.a2a.v1.A2AService``): one route per rpc, bodies in gRPC framing.
OPERATIONS.update(
    {
        ("POST", f"/lf.a2a.v1.A2AService/{rpc}"): Operation(
            "A2A", f"A2A gRPC: {rpc}", media=("application/grpc",), errors=None
        )
        for rpc in (
            "SendMessage",
            "SendStreamingMessage",
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SubscribeToTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
            "GetExtendedAgentCard",
        )
    }
)

UNDOCUMENTED = Operation("Other", "A route this document has no description for")


def subpath(pattern: str) -> str:
    """``pattern`` without the agent prefix and a leading ``/v1`` (both are aliases)."""
    rest = pattern.removeprefix(AGENT_PREFIX) if pattern != "/" else pattern
    return rest.removeprefix("/v1") if rest.startswith("/v1/") else rest


def _operation_id(method: str, pattern: str) -> str:
    words = [re.sub(r"\W+", "_", w).strip("_") for w in pattern.split("/") if w]
    if pattern.endswith("/"):
        words.append("index")
    return "_".join([method.lower(), *words])


_STATUS_NOTES: Final = {
    "202": "Accepted: the stream is at the Location header",
    "204": "Acknowledged",
    "308": "Moved: see the Location header",
}


def _describe(method: str, pattern: str, op: Operation) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{(\w+)\}", pattern)
    ]
    out: dict[str, Any] = {
        "tags": [op.tag],
        "summary": op.summary,
        "operationId": _operation_id(method, pattern),
        "responses": {
            op.status: {
                "description": "OK",
                "content": {media: {"schema": _ref(op.response)} for media in op.media},
            }
            if op.status == "200"
            else {"description": _STATUS_NOTES[op.status]}
        },
    }
    if params:
        out["parameters"] = params
    if op.request is not None:
        out["requestBody"] = {
            "required": True,
            "content": {_JSON: {"schema": _ref(op.request)}},
        }
    if op.errors is not None:
        out["responses"]["default"] = {
            "description": "An error",
            "content": {_JSON: {"schema": _ref(op.errors)}},
        }
    if op is UNDOCUMENTED:
        out["x-uamp-undocumented"] = True
    return out


def document(host: Host, root_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of every HTTP route of ``host``.

    ``root_path`` (``--root-path``) becomes the document's server: the paths
    are relative to it.
    """
    paths: dict[str, dict[str, Any]] = {}
    for route in host.router.routes:
        for method in sorted(route.methods):
            op = OPERATIONS.get((method, subpath(route.pattern)), UNDOCUMENTED)
            paths.setdefault(route.pattern, {})[method.lower()] = _describe(
                method, route.pattern, op
            )
    try:
        version = importlib.metadata.version("uamp")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a bare tree
        version = "0"
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "uamp server",
            "version": version,
            "description": "Every HTTP route this server mounts; agents are addressed "
            "under /agents/{agent}, and at the root when one agent is hosted.",
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
        "x-uamp-websockets": [
            {"path": ws.pattern, "transport": ws.meta.transport}
            for ws in host.router.websocket_routes
        ],
    }
    if root_path:
        doc["servers"] = [{"url": root_path}]
    return doc


def mount(host: Host) -> None:
    """Serve ``GET /openapi.json`` on ``host``."""

    async def openapi(request: Request) -> Response:
        """``GET /openapi.json``: the document of the routes mounted now."""
        return json_response(document(host, request.root_path))

    host.router.add("GET", "/openapi.json", openapi, meta=SERVER_ROUTES)
