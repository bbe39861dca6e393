"""Route tables and multi-agent hosting (spec 004, "Server Wiring").

A :class:`Router` maps ``(method, path)`` to an HTTP endpoint and ``path`` to
a WebSocket handler. Patterns are literal paths with ``{name}`` segments that
match one path segment (anything but ``/``; dots are ordinary characters, so
``/agents/{agent}/uamp`` matches ``/agents/alice.my-bot.helper/uamp``).

An :class:`App` is a router plus the agents it hosts. Transports mount
themselves with :meth:`App.agent_route` / :meth:`App.agent_websocket`, which
register a sub-path under ``/agents/{agent}`` and, as spec 004 asks for a
single-agent server, the same sub-path at the root. Endpoints find their agent
with :meth:`App.resolve_agent`: the ``{agent}`` segment when present, else
the only hosted agent (or the one a Chat Completions ``model`` names). A
transport is any ``mount(app)`` callable; :func:`create_app` mounts the
default ones.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from uamp_proto.payment import PaymentPolicy, PaymentRequiredError
from uamp_proto.responder import Responder

from .engines.http import Endpoint, HTTPError

if TYPE_CHECKING:
    from uamp_proto.signing import ResponseSigner

    from .engines.websocket import WebSocketRequest

__all__ = [
    "AGENT_PREFIX",
    "App",
    "Route",
    "Router",
    "Transport",
    "WebSocketHandler",
    "WebSocketRoute",
    "create_app",
]

#: Where every agent's transports live (spec 004: ``/agents/{name}/...``).
AGENT_PREFIX = "/agents/{agent}"

#: A WebSocket endpoint: receives the upgrade request, accepts or rejects it.
WebSocketHandler = Callable[["WebSocketRequest"], Awaitable[None]]

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.~-]+$")


def _compile(pattern: str) -> re.Pattern[str]:
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    out, pos = [], 0
    for m in _PARAM.finditer(pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(1)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("^" + "".join(out) + "$")


@attrs.frozen
class Route:
    """One HTTP route."""

    pattern: str
    methods: frozenset[str]
    endpoint: Endpoint
    label: str | None = None
    regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "regex", _compile(self.pattern))


@attrs.frozen
class WebSocketRoute:
    """One WebSocket route."""

    pattern: str
    handler: WebSocketHandler
    label: str | None = None
    regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "regex", _compile(self.pattern))


class Router:
    """HTTP and WebSocket route table; first matching route wins."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        #: WebSocket endpoints, consulted on ``Upgrade: websocket`` requests.
        self.websocket_routes: list[WebSocketRoute] = []

    def add(
        self,
        methods: str | Iterable[str],
        pattern: str,
        endpoint: Endpoint,
        *,
        label: str | None = None,
    ) -> Route:
        """Register ``endpoint`` for ``methods`` (``"POST"`` or a list) at ``pattern``."""
        names = [methods] if isinstance(methods, str) else list(methods)
        route = Route(pattern, frozenset(m.upper() for m in names), endpoint, label)
        self.routes.append(route)
        return route

    def add_websocket(
        self, pattern: str, handler: WebSocketHandler, *, label: str | None = None
    ) -> WebSocketRoute:
        """Register a WebSocket ``handler`` at ``pattern``."""
        route = WebSocketRoute(pattern, handler, label)
        self.websocket_routes.append(route)
        return route

    def resolve(self, method: str, path: str) -> tuple[Endpoint, dict[str, str]]:
        """The endpoint and path parameters for a request.

        Raises:
            HTTPError: 404 when no pattern matches, 405 (with ``Allow``) when
                patterns match but not for this method.
        """
        allowed: set[str] = set()
        for route in self.routes:
            m = route.regex.match(path)
            if m is None:
                continue
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                return route.endpoint, m.groupdict()
            allowed |= route.methods
        if allowed:
            allow = ", ".join(sorted(allowed))
            raise HTTPError(
                405,
                f"Method {method} is not allowed on {path}; use {allow}.",
                code="method_not_allowed",
                headers=[("allow", allow)],
            )
        raise HTTPError(404, f"No endpoint at {path}.", code="not_found")

    def resolve_websocket(self, path: str) -> tuple[WebSocketHandler, dict[str, str]] | None:
        """The WebSocket handler and path parameters for ``path``, if any."""
        for route in self.websocket_routes:
            m = route.regex.match(path)
            if m is not None:
                return route.handler, m.groupdict()
        return None


#: A transport mounts its endpoints on an app.
Transport = Callable[["App"], None]


class App:
    """The agents a server hosts and the routes of their transports."""

    def __init__(
        self, agents: Iterable[Responder] = (), *, payment_policy: PaymentPolicy | None = None
    ) -> None:
        self.router = Router()
        self.agents: dict[str, Responder] = {}
        #: Consulted by every transport before a turn runs (``None``: free).
        #: Transports read it when a request arrives, so it may be set after
        #: mounting.
        self.payment_policy: PaymentPolicy | None = payment_policy
        #: A nursery for work that outlives the request that started it (A2A
        #: tasks). :class:`~uamp_trio.engines.server.Server` sets it while serving and
        #: cancels what is left at the end of its shutdown grace period.
        self.background: trio.Nursery | None = None
        #: Signs Chat Completions responses (spec 004 "Response Signing"):
        #: a :class:`uamp_proto.signing.ResponseSigner`, i.e. a callable
        #: ``sign(response_text, request_bytes) -> str`` with a ``jwks()``
        #: method. ``None`` (the default): responses are not signed and no
        #: JWKS is served. Read per request, so it may be set after mounting.
        self.response_signer: ResponseSigner | None = None
        for agent in agents:
            self.add_agent(agent)

    def payment_required(self, agent: str, token: str | None) -> PaymentRequiredError | None:
        """The error a transport should report before running a turn, or ``None``.

        Every transport asks this one question so that the same agent behaves
        the same whatever protocol its client speaks.
        """
        if self.payment_policy is None:
            return None
        requirements = self.payment_policy.check(agent, token)
        return None if requirements is None else PaymentRequiredError(requirements)

    def add_agent(self, agent: Responder) -> None:
        """Host ``agent`` under ``/agents/{agent.name}/``.

        Raises:
            ValueError: The name is empty, holds a character that is not
                allowed in one path segment, or is taken.
        """
        name = agent.name
        if not _AGENT_NAME.match(name):
            raise ValueError(f"agent name {name!r} must match {_AGENT_NAME.pattern}")
        if name in self.agents:
            raise ValueError(f"an agent named {name!r} is already hosted")
        self.agents[name] = agent

    def mount(self, *transports: Transport) -> None:
        """Let each transport register its routes."""
        for transport in transports:
            transport(self)

    def agent_route(
        self,
        methods: str | Iterable[str],
        subpath: str,
        endpoint: Endpoint,
        *,
        label: str | None = None,
        root: bool = True,
    ) -> None:
        """Serve ``endpoint`` at ``/agents/{agent}<subpath>`` (and at ``<subpath>``).

        Args:
            root: Also answer at the bare ``subpath``; :meth:`resolve_agent`
                then picks the only hosted agent.
        """
        self.router.add(methods, AGENT_PREFIX + subpath, endpoint, label=label)
        if root:
            self.router.add(methods, subpath, endpoint, label=None)

    def agent_websocket(
        self,
        subpath: str,
        handler: WebSocketHandler,
        *,
        label: str | None = None,
        root: bool = True,
    ) -> None:
        """Serve a WebSocket ``handler`` at ``/agents/{agent}<subpath>`` (and ``<subpath>``)."""
        self.router.add_websocket(AGENT_PREFIX + subpath, handler, label=label)
        if root:
            self.router.add_websocket(subpath, handler, label=None)

    def resolve_agent(self, path_params: dict[str, str], *, model: str | None = None) -> Responder:
        """The agent a request addresses.

        Args:
            path_params: The matched route's parameters (``agent`` if present).
            model: A name the request carries (Chat Completions ``model``);
                used at root paths when several agents are hosted.

        Raises:
            HTTPError: 404 ``agent_not_found``.
        """
        name = path_params.get("agent")
        if name is not None:
            agent = self.agents.get(name)
            if agent is None:
                raise HTTPError(
                    404, f"No agent named {name!r} is hosted here.", code="agent_not_found"
                )
            return agent
        if model is not None and model in self.agents:
            return self.agents[model]
        if len(self.agents) == 1:
            return next(iter(self.agents.values()))
        if not self.agents:
            raise HTTPError(404, "This server hosts no agent.", code="agent_not_found")
        names = ", ".join(sorted(self.agents))
        raise HTTPError(
            404,
            f"This server hosts several agents ({names}); address one under /agents/{{name}}/.",
            code="agent_not_found",
        )

    def urls(self, http_base: str, ws_base: str) -> dict[str, list[tuple[str, str]]]:
        """``{agent: [(label, url), ...]}`` for every labelled route, for display."""
        out: dict[str, list[tuple[str, str]]] = {}
        for name in self.agents:
            rows: list[tuple[str, str]] = []
            for route in self.router.routes:
                if route.label and "{agent}" in route.pattern:
                    rows.append((route.label, http_base + route.pattern.replace("{agent}", name)))
            for ws in self.router.websocket_routes:
                if ws.label and "{agent}" in ws.pattern:
                    rows.append((ws.label, ws_base + ws.pattern.replace("{agent}", name)))
            out[name] = rows
        return out


def _default_transports() -> Sequence[Transport]:
    # Every transport a default server mounts. New transports (HTTP+SSE
    # events, A2A, ACP...) add their ``mount`` function here.
    from .transports.a2a import mount as mount_a2a
    from .transports.acp import mount as mount_acp
    from .transports.agui import mount as mount_agui
    from .transports.completions import mount as mount_completions
    from .transports.realtime import mount as mount_realtime
    from .transports.sse_events import mount as mount_sse_events
    from .transports.uamp_ws import mount as mount_uamp_websocket

    return [
        mount_completions,
        mount_uamp_websocket,
        mount_sse_events,
        mount_acp,
        mount_realtime,
        mount_a2a,
        mount_agui,
    ]


def create_app(
    agents: Iterable[Responder],
    transports: Sequence[Transport] | None = None,
    *,
    payment_policy: PaymentPolicy | None = None,
) -> App:
    """An app hosting ``agents`` with ``transports`` (default: all built-in ones)."""
    app = App(agents, payment_policy=payment_policy)
    app.mount(*(_default_transports() if transports is None else transports))
    return app
