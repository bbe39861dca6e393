"""The composition root: :class:`App` and :func:`create_app` (spec 004, "Server Wiring").

An :class:`App` is the :class:`~uamp_trio.hosting.host.Host` the server
serves: the hosted agents, the route table, the shared services (payment
policy, response signer, background nursery), the shared state (the
:class:`~uamp_trio.stores.Stores`: A2A tasks, ACP sessions, the tracker of
HTTP+SSE sessions) and the middleware chain. The app creates that state once,
from its arguments; a transport builds none of its own but takes the store it
needs from the host it is mounted on. The app is the only module that imports
the transports: :func:`create_app` mounts the built-in ones, each a plain
``mount(host)`` function that knows nothing of the others. The routes of the
server itself, not of a transport, are mounted here: ``GET
/.well-known/jwks.json`` (and ``/agents/{name}/.well-known/jwks.json``), the
public keys of response signatures, whichever transports are mounted (404
while the app has no :attr:`~Host.response_signer`); ``GET /healthz`` and
``/readyz``, ``GET /openapi.json`` and the playground (``GET /``,
``/agents/{name}/``), each from :mod:`uamp_trio.server_routes`. Arrows point
down only: ``cli -> app -> transports -> hosting -> engines -> uamp_proto``
(see docs/architecture.md).

Theory of operation
-------------------
The server's engines turn bytes into a :class:`~uamp_trio.engines.http.Request`
and ask the app for its endpoint (:meth:`App.endpoint_for`) or, for a
WebSocket upgrade, its handler (:meth:`App.websocket_handler_for`). The app
matches the route table; with no middleware it hands back the route's own
endpoint (no extra call on the hot path), else a wrapper that runs the call
through every middleware in order (:mod:`uamp_trio.hosting.middleware`)
and answers a :class:`~uamp_trio.hosting.middleware.Refusal` in the route's
error style -- for a WebSocket, by rejecting the upgrade with that body -- at
the layer that raised it, so the layers outside see it as a reply.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypedDict, Unpack

from uamp_proto.grpc import is_grpc_content_type
from uamp_proto.jose import JWK, JWKS
from uamp_proto.payment import PaymentPolicy
from uamp_proto.responder import Responder
from uamp_proto.signing import JWKS_PATH
from uamp_stores.event_log_redis import RedisEventLog

from . import grpc
from .engines.http import Endpoint, HTTPError, Request, Response, StreamingResponse, json_response
from .engines.websocket import WebSocketHandler, WebSocketRequest
from .envelope.keys import EnvelopeKey
from .envelope.service import EnvelopeLimits, EnvelopeService, refused_for
from .hosting.host import Host, Transport
from .hosting.middleware import (
    Call,
    Middleware,
    Next,
    Refusal,
    Reply,
    render_error,
)
from .hosting.proxy_headers import ProxyHeaders
from .hosting.root_path import check_root_path, enter
from .hosting.router import AGENT_PREFIX, ErrorStyle, Route, RouteMeta, Router, WebSocketRoute
from .observe.logs import AccessLog
from .observe.metrics import METRICS_PATH, Metrics
from .observe.requests import Listener, Observe
from .relay import platform as relay_platform
from .server_routes import SERVER_ROUTES, api_docs, health, openapi, payments, playground
from .stores import Stores
from .transports import (
    a2a,
    acp,
    agui,
    ai_sdk,
    anthropic,
    completions,
    envelope_grpc,
    envelopes,
    mcp,
    realtime,
    responses,
    sse_events,
    uamp_ws,
)
from .trust.auth import Authenticator
from .trust.envelopes import EnvelopeTrust
from .trust.gate import AuthGate

if TYPE_CHECKING:  # the otel extra is optional: only a tracing app imports it
    from .observe.tracing import Tracing

__all__ = [
    "AGENT_PREFIX",
    "App",
    "AppOptions",
    "Router",
    "Stores",
    "Transport",
    "create_app",
    "default_transports",
]

#: The TLS version the routes of spec 003 require (section 6.1).
TLS13 = "TLSv1.3"

#: ``GET /metrics``: behind authentication when the server has it (a scraper
#: sends a token like any client).
METRICS_ROUTES = RouteMeta(transport="metrics", error_style="openai")
#: Routes matched after every transport's (:meth:`App.mount`).
_LAST = frozenset({"server", "metrics"})


class App(Host):
    """The agents a server hosts, the routes of their transports and the middleware around them.

    Args:
        agents: The agents to host (``/agents/{name}/...``).
        payment_policy: Asked by every transport before a turn runs.
        middleware: Run in order around every endpoint and WebSocket handler
            of every transport (see :mod:`uamp_trio.hosting.middleware`).
        authenticator: Authenticate every call: an
            :class:`~uamp_trio.trust.gate.AuthGate` goes first in the chain
            (see docs/security.md). ``None``: everyone is ``anonymous``.
        allow_anonymous: With an authenticator, let calls that present no
            token in as ``anonymous`` (a token presented must still be valid).
        stores: The state the transports share (A2A tasks, ACP sessions,
            HTTP+SSE sessions); ``None``: new empty in-memory stores.
        access_log: Log one line per request (:class:`~uamp_trio.observe.logs.AccessLog`).
        metrics: Count requests, runs and charges and serve them at ``GET
            /metrics`` (``True`` for a new :class:`~uamp_trio.observe.metrics.Metrics`).
        tracing: Trace requests, agent runs, model and tool calls
            (:class:`~uamp_trio.observe.tracing.Tracing`).
        envelope_key: The server's spec 003 envelope key (signs error
            envelopes and manifests; published in the JWKS); ``None``: an
            ephemeral one (:attr:`EnvelopeKey.ephemeral`).
        envelope_limits: The envelope service's limits (``--max-concurrent``...).
        trust_jwks: Peers whose envelope keys are trusted without a
            capability token (``--trust-jwks``).
        base_urls: The server's public URLs (capability token audiences).
        proxy_headers: Believe a trusted reverse proxy's X-Forwarded-* headers
            (:class:`~uamp_trio.hosting.proxy_headers.ProxyHeaders`), first in the chain.
        root_path: The path prefix a reverse proxy publishes the server under
            (``--root-path``, :mod:`~uamp_trio.hosting.root_path`): stripped
            from requests that carry it, put before every URL given out.

    With none of the last three the app observes nothing and costs nothing more.
    """

    def __init__(
        self,
        agents: Iterable[Responder] = (),
        *,
        payment_policy: PaymentPolicy | None = None,
        middleware: Iterable[Middleware] = (),
        authenticator: Authenticator | None = None,
        allow_anonymous: bool = False,
        stores: Stores | None = None,
        access_log: bool = False,
        metrics: Metrics | bool = False,
        tracing: Tracing | None = None,
        envelope_key: EnvelopeKey | None = None,
        envelope_limits: EnvelopeLimits | None = None,
        trust_jwks: JWKS | None = None,
        base_urls: Sequence[str] = (),
        proxy_headers: ProxyHeaders | None = None,
        root_path: str = "",
    ) -> None:
        #: The prefix before every path (``""``: none); see :mod:`~uamp_trio.hosting.root_path`.
        self.root_path = check_root_path(root_path)
        #: The counters behind ``GET /metrics``, or ``None``.
        self.metrics: Metrics | None = Metrics() if metrics is True else (metrics or None)
        #: The tracer (:class:`~uamp_trio.observe.tracing.Tracing`), or ``None``.
        self.tracing = tracing
        listeners: list[Listener] = []
        if access_log:
            listeners.append(AccessLog())
        if self.metrics is not None:
            listeners.append(self.metrics)
        #: The request observer, first in the chain; ``None`` when nothing observes.
        self.observe = Observe(listeners) if listeners else None
        super().__init__(
            agents,
            payment_policy=payment_policy,
            stores=stores if stores is not None else Stores(),
        )
        self.authenticator = authenticator
        limits = envelope_limits or EnvelopeLimits()
        trust = EnvelopeTrust(
            authenticator,
            trusted=trust_jwks,
            max_remembered=limits.replay_memory,
            per_principal=limits.replay_per_principal,
        )
        self.envelopes = EnvelopeService(
            self,
            envelope_key or EnvelopeKey.ephemeral_key(),
            trust=trust,
            limits=limits,
            base_urls=base_urls,
        )
        #: Daemons' agents, when the app is a relay (:func:`create_app` ``relay=``).
        self.relay: relay_platform.Relay | None = None
        #: The middleware chain, outermost first; read per request.
        self.middleware: list[Middleware] = list(middleware)
        if authenticator is not None:
            self.middleware.insert(0, AuthGate(authenticator, allow_anonymous=allow_anonymous))
        if tracing is not None:
            self.middleware.insert(0, tracing.middleware)
        if self.observe is not None:
            self.middleware.insert(0, self.observe)
            self.observe.render_refusal = self.render_error
        if proxy_headers is not None:  # before the observer: the log shows the real client
            self.middleware.insert(0, proxy_headers)
        self.agent_route("GET", JWKS_PATH, self.jwks, meta=SERVER_ROUTES)
        self.mount(health.mount, openapi.mount, api_docs.mount, playground.mount, payments.mount)
        if self.metrics is not None:
            self.router.add(
                "GET", METRICS_PATH, self.metrics.endpoint, label="Metrics", meta=METRICS_ROUTES
            )
            self.session_hosts = weakref.WeakSet()
            self.metrics.watch_sessions(self.session_hosts)
            self.on_charge = self.metrics.wrap_charge

    def add_agent(self, agent: Responder) -> None:
        """Host ``agent``; observed (metrics, traces) when the app observes."""
        if self.metrics is not None:
            agent = self.metrics.wrap_agent(agent)
        if self.tracing is not None:
            agent = self.tracing.wrap_agent(agent)
        super().add_agent(agent)

    @property
    def serves_envelopes(self) -> bool:
        """Whether a spec 003 binding is mounted (its key is then published)."""
        return any(route.meta.envelope for route in self.router.routes)

    async def jwks(self, request: Request) -> Response:
        """``GET [/agents/{name}]/.well-known/jwks.json``: the server's public keys.

        The response signer's key (when responses are signed) and the
        envelope key (when a spec 003 binding is mounted), in that order.
        One key set for the whole server; under ``/agents/{name}`` an unknown
        agent is a 404.
        """
        if "agent" in request.path_params:
            self.resolve_agent(request.path_params)
        keys: list[JWK] = []
        if self.response_signer is not None:
            keys.extend(self.response_signer.jwks().keys)
        if self.envelopes is not None and (self.serves_envelopes or self.envelopes.key_in_use):
            keys.extend(self.envelopes.key.jwks().keys)
        if not keys:
            raise HTTPError(
                404, "This server does not sign responses; it publishes no JWKS.", code="not_found"
            )
        return json_response(JWKS(keys).to_dict())

    def render_error(self, style: ErrorStyle, exc: HTTPError) -> Response:
        """``exc`` in ``style``; a signed ``error`` envelope on spec 003 routes."""
        if style == "envelope" and self.envelopes is not None:
            reply = envelopes.error_response(self.envelopes, refused_for(exc))
            kept = [
                (k, v) for k, v in exc.headers if k.lower() not in ("content-type", "retry-after")
            ]
            reply.headers.extend(kept)
            return reply
        return render_error(style, exc)

    def mount(self, *transports: Transport) -> None:
        """Let each transport register its routes; the server's own and ``/metrics`` stay last.

        The route table is matched in order, and the transports' routes are
        the hot path: a completion request should not first be tried
        against ``/healthz``, the playground and the JWKS. No server route
        shares a path with a transport's, so the order changes no answer.
        """
        super().mount(*transports)
        self.router.routes.sort(key=lambda route: route.meta.transport in _LAST)

    # --- engines.server.Dispatcher -------------------------------------------------

    def endpoint_for(self, request: Request) -> Endpoint:
        """The endpoint for ``request`` behind the middleware chain; fills ``path_params``.

        Raises:
            HTTPError: 404 or 405 from the route table.
        """
        began = 0.0 if self.observe is None else time.perf_counter()
        if self.root_path:
            enter(request, self.root_path)
        try:
            route, request.path_params = self.router.match(
                request.method, request.path, request.headers
            )
        except HTTPError as exc:
            if is_grpc_content_type(request.headers.get("content-type")):
                return grpc.unimplemented  # gRPC's answer to a method nobody serves
            if self.observe is not None:
                self.observe.unmatched(request, exc, began)
            raise
        if route.meta.tls13 and request.tls is not None and request.tls.version != TLS13:
            return functools.partial(self._refuse_old_tls, route)
        middleware = self.middleware
        if not middleware:
            return route.endpoint
        if len(middleware) == 1 and middleware[0] is self.observe:  # (uamp serve's default)
            # No chain, no Call: the observer awaits the endpoint itself, its
            # start the time read before routing (the observer answers a
            # refusal as _run would, via render_refusal).
            # (an HTTP endpoint's reply is never None; no cast() call per request)
            return functools.partial(  # type: ignore[return-value]
                self.observe.around, route.endpoint, route.meta, began
            )
        return functools.partial(self._through_http, route)

    def _old_tls(self, route: Route | WebSocketRoute, request: Request) -> Response:
        """The refusal of a spec 003 route reached over TLS older than 1.3 (``--tls-min 1.2``)."""
        version = request.tls.version if request.tls is not None else None
        exc = HTTPError(
            403,
            f"This endpoint is served over TLS 1.3 only; the connection is {version}.",
            code="tls13_required",
        )
        return self.render_error(route.meta.error_style, exc)

    async def _refuse_old_tls(self, route: Route, request: Request) -> Response:
        return self._old_tls(route, request)

    async def _refuse_old_tls_upgrade(
        self, route: WebSocketRoute, pending: WebSocketRequest
    ) -> None:
        refused = self._old_tls(route, pending.request)
        await pending.reject(refused.status, refused.body, refused.headers)

    def streams_body(self, request: Request) -> bool:
        """Whether ``request`` (its head) goes to a route that reads its body while it arrives."""
        if self.root_path:
            enter(request, self.root_path)
        try:
            route, _ = self.router.match(request.method, request.path, request.headers)
        except HTTPError:
            return False
        return route.meta.stream_body

    def body_limit(self, request: Request) -> int | None:
        """The ``max_body`` of ``request``'s route (its head only), or ``None``."""
        if self.root_path:
            enter(request, self.root_path)
        try:
            route, _ = self.router.match(request.method, request.path, request.headers)
        except HTTPError:
            return None
        return route.meta.max_body

    def smallest_body_limit(self) -> int | None:
        """The smallest ``max_body`` of any route: below it no head needs :meth:`body_limit`."""
        limits = [r.meta.max_body for r in self.router.routes if r.meta.max_body is not None]
        return min(limits, default=None)

    def websocket_handler_for(self, request: Request) -> WebSocketHandler | None:
        """The handler for a WebSocket upgrade behind the middleware chain, or ``None``."""
        if self.root_path:
            enter(request, self.root_path)
        found = self.router.match_websocket(request.path)
        if found is None:
            return None
        route, request.path_params = found
        if route.meta.tls13 and request.tls is not None and request.tls.version != TLS13:
            return functools.partial(self._refuse_old_tls_upgrade, route)
        if not self.middleware:
            return route.handler
        return functools.partial(self._through_websocket, route)

    def render_refusal(self, request: Request, exc: HTTPError) -> Response:
        """``exc`` in the error style of ``request``'s route (the engine's own refusals)."""
        if self.root_path:
            enter(request, self.root_path)
        try:
            route, _ = self.router.match(request.method, request.path, request.headers)
        except HTTPError:
            found = self.router.match_websocket(request.path)
            if found is None:
                return exc.to_response()
            return self.render_error(found[0].meta.error_style, exc)
        return self.render_error(route.meta.error_style, exc)

    # --- the chain ------------------------------------------------------------------

    async def _through_http(self, route: Route, request: Request) -> Response | StreamingResponse:
        async def endpoint(call: Call) -> Reply:
            return await route.endpoint(call.request)

        reply = await self._run(Call(request, route.meta, pattern=route.pattern), 0, endpoint)
        assert reply is not None, "a middleware returned no response for an HTTP call"
        return reply

    async def _through_websocket(self, route: WebSocketRoute, pending: WebSocketRequest) -> None:
        async def handler(call: Call) -> Reply:
            assert call.websocket is not None
            await route.handler(call.websocket)
            return None

        await self._run(Call(pending.request, route.meta, pending, route.pattern), 0, handler)

    async def _run(self, call: Call, index: int, innermost: Next) -> Reply:
        """Run ``call`` through the middleware from ``index`` on, then ``innermost``.

        A :class:`Refusal` becomes its reply at the layer that raised it, so
        the layers outside see the refusal as a response (a WebSocket upgrade
        is rejected, and they see ``None``).
        """
        if index == len(self.middleware):
            return await innermost(call)

        async def call_next(passed: Call) -> Reply:
            return await self._run(passed, index + 1, innermost)

        try:
            return await self.middleware[index](call, call_next)
        except Refusal as exc:
            pending = call.websocket
            refused = self.render_error(call.route.error_style, exc)
            if pending is None:
                return refused
            if pending.answered:
                raise
            await pending.reject(refused.status, refused.body, refused.headers)
            return None


def default_transports() -> Sequence[Transport]:
    """Every transport a default server mounts, in mounting order."""
    return [
        completions.mount,
        responses.mount,
        uamp_ws.mount,
        sse_events.mount,
        acp.mount,
        realtime.mount,
        a2a.mount,
        agui.mount,
        envelopes.mount,
        envelope_grpc.mount,
        anthropic.mount,
        mcp.mount,
        ai_sdk.mount,
    ]


class AppOptions(TypedDict, total=False):
    """The keyword options of :class:`App`, which :func:`create_app` passes on."""

    payment_policy: PaymentPolicy | None
    middleware: Iterable[Middleware]
    authenticator: Authenticator | None
    allow_anonymous: bool
    stores: Stores | None
    access_log: bool
    metrics: Metrics | bool
    tracing: Tracing | None
    envelope_key: EnvelopeKey | None
    envelope_limits: EnvelopeLimits | None
    trust_jwks: JWKS | None
    base_urls: Sequence[str]
    proxy_headers: ProxyHeaders | None
    root_path: str


def create_app(
    agents: Iterable[Responder],
    transports: Sequence[Transport] | None = None,
    *,
    relay: bool | relay_platform.RelayLimits = False,
    **options: Unpack[AppOptions],
) -> App:
    """An app hosting ``agents`` with ``transports`` (default: all built-in ones).

    ``options`` are :class:`App`'s (``payment_policy``, ``middleware``,
    ``authenticator``, ``allow_anonymous``, ``stores``, ``access_log``,
    ``metrics``, ``tracing``). ``relay`` (``True``
    or the per-daemon limits) also makes the app a relay that daemons dial
    into (docs/relay.md); its :class:`~uamp_trio.relay.platform.Relay` is
    ``app.relay``.
    """
    app = App(agents, **options)
    app.mount(*(default_transports() if transports is None else transports))
    if relay is not False:
        clients = uamp_ws.UampWebSocketEndpoint(app)

        async def serve_client(pending: WebSocketRequest, data: bytes) -> None:
            await clients.serve(pending, None, initial_data=data)

        app.relay = relay_platform.mount(app, serve_client, None if relay is True else relay)
        app.ready_without_agents = True
        store = app.stores.event_log
        if isinstance(store, RedisEventLog):  # several relay processes (docs/relay.md)
            from .relay.shared import SharedRoutes

            app.services.append(SharedRoutes(app.relay, store).run)
    return app
