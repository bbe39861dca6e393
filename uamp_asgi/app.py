"""The ASGI application: routes, the authentication gate, dispatch.

Paths are those of ``uamp serve``: every agent's transports under
``/agents/{name}/...`` and, when one agent is hosted, also at the root. The
app routes on the path *below where it is mounted*, with or without a
leading ``/agents``: standalone, ``/agents/bot/chat/completions`` reaches
``bot``; mounted in FastAPI with ``app.mount("/agents", uamp_app)`` the same
URL arrives as ``/bot/chat/completions`` and reaches it too.

Each transport module has a ``mount(host)`` that registers its endpoints on
the :class:`Host` (HTTP endpoints take a :class:`~uamp_asgi.http.Request` and
return a :class:`~uamp_asgi.http.Reply`; WebSocket handlers take a
:class:`~uamp_asgi.websocket.WebSocket`). Before an endpoint runs the gate
turns the caller's token into a principal (401 when the configured
authenticator refuses it; public routes let anyone through).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import attrs

from uamp_proto import grpc as grpc_wire
from uamp_proto.adapters import a2a
from uamp_proto.adapters.completions import error_object, payment_error
from uamp_proto.busy import BusyLimits, parse_policy
from uamp_proto.errors import UampError
from uamp_proto.history import SessionHistories
from uamp_proto.jose import JWKS
from uamp_proto.paths import compile_pattern
from uamp_proto.payment import (
    PAYMENT_ATTEMPTS_PER_MINUTE,
    Charge,
    PaymentRequiredError,
    open_charge,
    pricing_of,
)
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.ratelimit import SlidingWindow
from uamp_proto.resource import WELL_KNOWN, challenge, origin_of
from uamp_proto.responder import Responder
from uamp_stores.busy import ConversationGate

from .config import Config
from .http import (
    TRANSPORT,
    HTTPError,
    JsonReply,
    Receive,
    Reply,
    Request,
    Scope,
    Send,
    StreamReply,
    read_body,
    scope_headers,
    send_reply,
)
from .turns import TurnOptions
from .websocket import Closed, WebSocket

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["Endpoint", "Host", "UampASGI", "app"]

Endpoint = Callable[[Request], Awaitable[Reply]]
WebSocketHandler = Callable[[WebSocket], Awaitable[None]]
#: How a route's clients expect an error (an OpenAI error object or JSON-RPC).
ErrorStyle = Literal["openai", "jsonrpc", "anthropic", "a2a_rest"]


#: A route's extra condition on the request's headers (a path two transports share).
When = Callable[[dict[str, str]], bool]


@attrs.frozen
class _Route:
    methods: frozenset[str]
    regex: re.Pattern[str]
    endpoint: Endpoint
    style: ErrorStyle
    public: bool
    when: When | None = None
    #: The transport that mounted it (the metrics' label).
    transport: str = "app"
    #: The request gets a task group for work that outlives its answer.
    background: bool = False
    #: An OAuth protected resource (RFC 9728): its 401 names its metadata.
    protected: bool = False


class Host:
    """The agents served, their routes, and what transports share (config, charges)."""

    def __init__(self, agents: Iterable[Responder], config: Config) -> None:
        self.config = config
        #: What every turn of the app runs on, built once from ``config``
        #: (the output bound): transports start turns through it.
        self.turns = TurnOptions(max_output_bytes=config.max_response_output_bytes)
        self.metrics: Metrics | None = None
        if config.metrics:
            from .metrics import Metrics

            self.metrics = Metrics()
        #: The session event logs (``Config.event_log``), shared by the UAMP transports.
        self.event_log = config.event_log
        #: The A2A tasks (``Config.a2a_tasks``).
        self.a2a_tasks = config.a2a_tasks
        #: Where the stores' loops run while the app's lifespan runs (else detached).
        self.background: anyio.abc.TaskGroup | None = None
        self.agents: dict[str, Responder] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise ValueError(f"two agents are named {agent.name!r}")
            self.agents[agent.name] = (
                agent if self.metrics is None else self.metrics.wrap_agent(agent)
            )
        self._routes: list[_Route] = []
        self._sockets: list[tuple[re.Pattern[str], WebSocketHandler, str]] = []
        #: The transport whose routes are being mounted.
        self.mounting = "app"
        #: Payment tokens each principal presents on UAMP sessions (as ``uamp serve``).
        self.payment_attempts = SlidingWindow(PAYMENT_ATTEMPTS_PER_MINUTE)
        #: What each principal's live UAMP sessions keep of their conversations,
        #: over all connections (``Config.max_history_bytes_per_principal``).
        self.uamp_histories = SessionHistories(config.max_history_bytes_per_principal)
        #: The busy-conversation gate (docs/busy.md), as ``uamp serve``'s.
        self.conversations = ConversationGate(
            BusyLimits(
                per_conversation=config.busy_max_queued,
                per_principal=config.busy_max_queued_per_principal,
            ),
            parse_policy(config.on_busy),
        )

    # --- what transports call --------------------------------------------------

    def route(
        self,
        methods: str | Iterable[str],
        subpath: str,
        endpoint: Endpoint,
        *,
        style: ErrorStyle = "openai",
        public: bool = False,
        when: When | None = None,
        background: bool = False,
        protected: bool = False,
    ) -> None:
        """Serve ``endpoint`` at ``<agent>/<subpath>`` and at the root.

        ``when``: only for requests whose headers it accepts; such a route is
        tried before the routes without one. ``background``: the request
        carries a task group (:attr:`Request.background`) whose tasks may
        outlive the answer; the request ends when they do. ``protected``: an
        OAuth protected resource, whose 401 names its metadata (RFC 9728).
        """
        names = frozenset([methods] if isinstance(methods, str) else methods)
        route = _Route(
            names,
            compile_pattern(subpath),
            endpoint,
            style,
            public,
            when,
            self.mounting,
            background,
            protected,
        )
        if when is None:
            self._routes.append(route)
        else:
            self._routes.insert(0, route)

    def websocket(self, subpath: str, handler: WebSocketHandler) -> None:
        """Serve a WebSocket ``handler`` at ``<agent>/<subpath>`` and at the root."""
        self._sockets.append((compile_pattern(subpath), handler, self.mounting))

    def resolve_agent(self, params: dict[str, str], *, model: str | None = None) -> Responder:
        """The agent a request addresses (its path, else ``model``, else the only one).

        Raises:
            HTTPError: 404 ``agent_not_found``.
        """
        name = params.get("agent")
        if name is None and model is not None and model in self.agents:
            name = model
        if name is None and len(self.agents) == 1:
            name = next(iter(self.agents))
        agent = self.agents.get(name) if name is not None else None
        if agent is None:
            raise HTTPError(404, "No such agent is hosted here.", code="agent_not_found")
        return agent

    async def open_charge(
        self, agent: Responder, token: str | None, response_id: str, principal: Principal
    ) -> Charge | None:
        """Hold the price of one response of ``agent`` (``None``: free).

        Raises:
            PaymentRequiredError: The response may not run until paid.
        """
        charge = await open_charge(
            self.config.payment_policy,
            agent.name,
            token,
            response_id,
            pricing_of(agent),
            principal=principal.id,
        )
        if charge is not None and self.metrics is not None:
            charge = self.metrics.wrap_charge(charge, agent.name)
        return charge

    # --- dispatch ----------------------------------------------------------------

    def split(self, path: str) -> tuple[dict[str, str], str]:
        """``({"agent": name} or {}, subpath)`` of a path below the mount point."""
        if path.startswith("/agents/"):
            name, _, sub = path[len("/agents/") :].partition("/")
            if name:
                return {"agent": name}, "/" + sub
        name, _, sub = path[1:].partition("/")
        if name in self.agents:
            return {"agent": name}, "/" + sub
        return {}, path

    def match(
        self, method: str, subpath: str, headers: dict[str, str] | None = None
    ) -> tuple[_Route, dict[str, str]]:
        """The route of ``method subpath`` and its parameters.

        Raises:
            HTTPError: 404, or 405 when only other methods are served there.
        """
        allowed: set[str] = set()
        for route in self._routes:
            m = route.regex.match(subpath)
            if m is None:
                continue
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                if route.when is not None and (headers is None or not route.when(headers)):
                    continue
                return route, m.groupdict()
            allowed |= route.methods
        if allowed:
            allow = ", ".join(sorted(allowed))
            raise HTTPError(
                405, f"Use {allow} here.", code="method_not_allowed", headers=[("allow", allow)]
            )
        raise HTTPError(404, f"No endpoint at {subpath}.", code="not_found")

    def unknown_agent(self, method: str, path: str) -> HTTPError | None:
        """The 404 of a path that would be an endpoint of an agent not hosted here."""
        name, _, sub = path[1:].partition("/")
        if name in self.agents or not sub:
            return None
        try:
            self.match(method, "/" + sub)
        except HTTPError:
            return None
        return HTTPError(404, f"No agent named {name!r} is hosted here.", code="agent_not_found")

    def match_websocket(self, subpath: str) -> tuple[WebSocketHandler, dict[str, str], str] | None:
        """The WebSocket handler at ``subpath``, its parameters and transport, if any."""
        for regex, handler, transport in self._sockets:
            m = regex.match(subpath)
            if m is not None:
                return handler, m.groupdict(), transport
        return None

    async def authenticate(
        self, headers: dict[str, str], query_token: str | None = None
    ) -> Principal:
        """The caller's principal.

        Raises:
            HTTPError: 401 when the authenticator refuses the caller.
        """
        auth = self.config.authenticator
        if auth is None:
            return ANONYMOUS
        token = query_token
        value = headers.get("authorization", "")
        if value[:7].lower() == "bearer ":
            token = value[7:].strip()
        elif "x-api-key" in headers:
            token = headers["x-api-key"]
        try:
            return await auth.authenticate(token)
        except UampError as exc:
            # RFC 6750's challenge as the authenticator words it (uamp serve's).
            asked = getattr(exc, "www_authenticate", None)
            raise HTTPError(
                401,
                str(exc) or "authentication required",
                code="unauthorized",
                headers=[("www-authenticate", asked if isinstance(asked, str) else "Bearer")],
            ) from None


def protected_refusal(refused: HTTPError, request: Request) -> HTTPError:
    """A protected resource's 401, its challenge naming the resource's metadata (RFC 9728)."""
    host = request.headers.get("host") or request.headers.get(":authority")
    below = request.full_path.removeprefix(request.root_path)
    url = origin_of(request.scheme, host) + request.root_path + WELL_KNOWN + below
    base = next((v for k, v in refused.headers if k == "www-authenticate"), "Bearer")
    others = [(k, v) for k, v in refused.headers if k != "www-authenticate"]
    headers = [*others, ("www-authenticate", challenge(base, url))]
    return HTTPError(refused.status, refused.message, code=refused.code, headers=headers)


def _relative_path(scope: Scope) -> str:
    path: str = scope.get("path", "/")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path


def _refusal(style: ErrorStyle, error: HTTPError) -> JsonReply:
    if style == "jsonrpc":
        body: Any = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001 if error.status == 401 else -32600, "message": error.message},
        }
        return JsonReply(body, error.status, error.headers)
    if style == "a2a_rest":
        status = grpc_wire.status_for_http(error.status).name
        body = a2a.refusal_rest_body(error.status, status, error.message, error.code or "refused")
        return JsonReply(body, error.status, error.headers)
    if style == "anthropic":
        kind = "authentication_error" if error.status == 401 else "invalid_request_error"
        body = {"type": "error", "error": {"type": kind, "message": error.message}}
        return JsonReply(body, error.status, error.headers)
    kind = "server_error" if error.status >= 500 else "invalid_request_error"
    return JsonReply(
        error_object(error.message, code=error.code, type=kind), error.status, error.headers
    )


class UampASGI:
    """The ASGI application :func:`app` returns."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            message = await receive()
            if message["type"] != "lifespan.startup":
                return
            async with self.lifespan():
                await send({"type": "lifespan.startup.complete"})
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
            await send({"type": "lifespan.shutdown.complete"})

    @contextlib.asynccontextmanager
    async def lifespan(self, parent: object = None) -> AsyncIterator[None]:
        """Run the stores' loops for as long as the block (the server's lifespan) runs.

        An ASGI server runs it for the app it serves; an app this one is
        mounted in runs it in its own (``FastAPI(lifespan=uamp_app.lifespan)``),
        since Starlette runs no mounted app's lifespan. Without it the loops
        start at the first session, detached. At the end what the event log
        queues is written.
        """
        host = self.host
        async with anyio.create_task_group() as group:
            host.background = group
            host.event_log.ensure_running(group)
            host.a2a_tasks.ensure_running(group)  # a shared store's listener
            try:
                yield
            finally:
                host.background = None
                group.cancel_scope.cancel()  # the flusher writes what is queued first

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = self.host
        method: str = scope["method"]
        headers = scope_headers(scope)
        params, sub = host.split(_relative_path(scope))
        began = time.perf_counter()
        try:
            try:
                route, found = host.match(method, sub, headers)
            except HTTPError as missing:
                unknown = None if params else host.unknown_agent(method, sub)
                raise unknown or missing from None
        except HTTPError as error:
            reply = _refusal("openai", error)
            await self._send(reply, "app", error.code, params, method, began, send, receive)
            return
        TRANSPORT.set(route.transport)
        request = Request(
            method=method,
            path=sub,
            headers=headers,
            query=scope.get("query_string", b"").decode("latin-1"),
            path_params={**params, **found},
            full_path=scope.get("root_path", "") + _relative_path(scope),
            scheme=scope.get("scheme", "http"),
            root_path=scope.get("root_path", ""),
        )
        if not route.background:
            await self._answer(route, request, receive, send, began)
            return
        # Work the request starts that may outlive its answer (webhook
        # deliveries) runs here; the request ends once it is done.
        async with anyio.create_task_group() as background:
            request.background = background
            await self._answer(route, request, receive, send, began)

    async def _answer(
        self, route: _Route, request: Request, receive: Receive, send: Send, began: float
    ) -> None:
        host, code = self.host, None
        try:
            if not route.public:
                try:
                    request.principal = await host.authenticate(request.headers)
                except HTTPError as refused:
                    if not route.protected:
                        raise
                    raise protected_refusal(refused, request) from None
            request.body = await read_body(receive, request.headers, host.config.max_body_size)
            reply = await route.endpoint(request)
        except HTTPError as error:
            reply, code = _refusal(route.style, error), error.code
        except PaymentRequiredError as unpaid:
            # The pre-flight 402 every HTTP transport of ``uamp serve`` answers with.
            reply = JsonReply(payment_error(unpaid.accepts(), unpaid.details()), 402)
            code = unpaid.code
        params = request.path_params
        await self._send(reply, route.transport, code, params, request.method, began, send, receive)

    async def _send(
        self,
        reply: Reply,
        transport: str,
        code: str | None,
        params: dict[str, str],
        method: str,
        began: float,
        send: Send,
        receive: Receive,
    ) -> None:
        metrics = self.host.metrics
        if metrics is None:
            await send_reply(reply, send, receive, head_only=method == "HEAD")
            return
        streamed = isinstance(reply, StreamReply)
        if streamed:
            metrics.open_streams.labels(transport).inc()
        try:
            await send_reply(reply, send, receive, head_only=method == "HEAD")
        finally:
            if streamed:
                metrics.open_streams.labels(transport).dec()
            agent = metrics.agent_label(params.get("agent"))
            metrics.finished(transport, agent, reply.status, time.perf_counter() - began, code)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = self.host
        params, sub = host.split(_relative_path(scope))
        found = host.match_websocket(sub)
        first = await receive()  # websocket.connect
        if first["type"] != "websocket.connect" or found is None:
            await send({"type": "websocket.close", "code": 1008})
            return
        handler, more, transport = found
        headers = scope_headers(scope)
        metrics = host.metrics
        agent = metrics.agent_label(params.get("agent")) if metrics is not None else "-"
        began = time.perf_counter()
        try:
            principal = await host.authenticate(headers)
        except HTTPError as refused:
            await send({"type": "websocket.close", "code": 1008})
            if metrics is not None:
                seconds = time.perf_counter() - began
                metrics.finished(transport, agent, 401, seconds, refused.code)
            return
        TRANSPORT.set(transport)
        socket = WebSocket(
            scope,
            receive,
            send,
            {**params, **more},
            principal,
            headers,
            host.config.websocket_max_message_size,
            host.config.websocket_send_timeout,
        )
        if metrics is None:
            await _guarded(handler, socket)
            return
        metrics.open_streams.labels(transport).inc()
        try:
            await _guarded(handler, socket)
        finally:
            metrics.open_streams.labels(transport).dec()
            metrics.finished(transport, agent, 101, time.perf_counter() - began, None)


async def _guarded(handler: WebSocketHandler, socket: WebSocket) -> None:
    """Run ``handler`` with its socket's watch beside it (a peer that does not read is dropped)."""
    if socket.send_timeout == math.inf:
        await _handled(handler, socket)
        return
    async with anyio.create_task_group() as group:
        group.start_soon(socket.watch, group.cancel_scope)
        await _handled(handler, socket)
        group.cancel_scope.cancel()  # the watch ends with the handler


async def _handled(handler: WebSocketHandler, socket: WebSocket) -> None:
    """Run ``handler``; a peer that went away meanwhile (``Closed``) is no error."""
    with contextlib.suppress(Closed):
        await handler(socket)


def app(agents: Responder | Iterable[Responder], *, config: Config | None = None) -> UampASGI:
    """An ASGI application serving ``agents`` over every transport ``config`` names.

    Mount it (``fastapi_app.mount("/agents", uamp_asgi.app(agent))``) or
    serve it alone (``uvicorn module:app``).
    """
    from . import transports

    listed: list[Responder] = [agents] if isinstance(agents, Responder) else list(agents)
    host = Host(listed, config or Config())
    for name in host.config.transports:
        host.mounting = name
        transports.mount(name, host)
    host.mounting = "app"

    async def jwks(request: Request) -> Reply:
        """``GET [.../]/.well-known/jwks.json``: the public keys of the response
        signer and of the A2A card key, in that order (as ``uamp serve``'s)."""
        if "agent" in request.path_params:
            host.resolve_agent(request.path_params)
        config = host.config
        keys = [
            key
            for owner in (config.response_signer, config.a2a_card_key)
            if owner is not None
            for key in owner.jwks().keys
        ]
        if not keys:
            raise HTTPError(404, "Nothing is signed here; no JWKS.", code="not_found")
        return JsonReply(JWKS(keys).to_dict())

    host.route("GET", "/.well-known/jwks.json", jwks, public=True)

    metrics = host.metrics
    if metrics is not None:

        async def serve_metrics(request: Request) -> Reply:
            """``GET /metrics``: the counters in the Prometheus text format."""
            if "agent" in request.path_params:
                raise HTTPError(404, "The metrics are at /metrics.", code="not_found")
            body, content_type = metrics.render()
            return JsonReply(body, content_type=content_type)

        host.mounting = "metrics"
        host.route("GET", "/metrics", serve_metrics)
        host.mounting = "app"
    return UampASGI(host)
