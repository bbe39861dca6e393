"""The route table: ``(method, path)`` to an HTTP endpoint, ``path`` to a WebSocket handler.

Patterns are literal paths with ``{name}`` segments that match one path
segment (anything but ``/``; dots are ordinary characters, so
``/agents/{agent}/uamp`` matches ``/agents/alice.my-bot.helper/uamp``).

Every route carries a :class:`RouteMeta`: which transport registered it, the
error style its clients understand (``openai``, ``jsonrpc`` or ``uamp``) and
whether it is public (an agent card, a JWKS). The composition root
(:mod:`uamp_trio.app`) reads it to run its middleware and to answer a refusal
in the route's own style. The table is filled by the root and the transports
it mounts; it imports no transport (see docs/architecture.md).

Routes may share a method and path when all but one carry a ``when``
predicate over the request's headers (its head, so the choice is made
before the body is read and before any middleware runs): a route with a
predicate is tried first, and the one without takes what none accepts. The Anthropic
Messages API and spec 003's envelope binding share ``POST /v1/messages``
this way, told apart by ``Content-Type`` and ``anthropic-version``.

A bare :class:`Router` is also something the server can serve
(:class:`~uamp_trio.engines.server.Dispatcher`): it resolves and calls, with
no middleware.

Matching tries only the routes that can match the path's shape: the table
is indexed by each pattern's first segment (a literal, or any segment when
it holds a ``{name}``) and its number of ``/`` (a ``{name}`` matches no
``/``, so a path matches only patterns with as many), each bucket keeping
the table's order, so the first route that matches is the one a walk of
the whole table finds, and a 405 names the same methods. A serve-everything
app has a hundred routes; a request tries one or two. The index is rebuilt
after the table changes (:class:`_RouteList` notices every change to the
list). A first segment with a line feed in it walks the whole table: a
regex's ``$`` also matches before a final line feed, which the index would
not see.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from uamp_proto.paths import compile_pattern

from ..engines.http import Endpoint, Headers, HTTPError, Request
from ..engines.websocket import WebSocketHandler

__all__ = [
    "AGENT_PREFIX",
    "ErrorStyle",
    "Route",
    "RouteMeta",
    "RouteWhen",
    "Router",
    "WebSocketHandler",
    "WebSocketRoute",
]

#: Where every agent's transports live (spec 004: ``/agents/{name}/...``).
AGENT_PREFIX = "/agents/{agent}"

#: How a route's clients expect an error: the OpenAI error object
#: (``{"error": {"message", "type", "param", "code"}}``), a JSON-RPC 2.0 error
#: response, a UAMP ``session.error`` event, a gRPC status (trailers-only), or
#: a signed spec 003 ``error`` envelope (rendered by the root, which holds the
#: envelope key).
ErrorStyle = Literal["openai", "jsonrpc", "uamp", "grpc", "envelope", "a2a_rest", "anthropic"]

#: A route's extra condition on the request head (see the module docstring).
RouteWhen = Callable[[Headers], bool]


@attrs.frozen
class RouteMeta:
    """What middleware knows of a route.

    Attributes:
        transport: The transport that registered it (``"completions"``, ``"a2a"``...).
        error_style: How a refusal on this route is rendered.
        public: Served to anyone (agent cards, JWKS): a gate lets it through.
        stream_body: The endpoint reads the request body while it arrives
            (``request.body_stream``; HTTP/2 and HTTP/3), as gRPC streams do.
        tls13: Over TLS, only TLS 1.3 connections are served (spec 003
            section 6.1); the root refuses older ones with 403 even when the
            server accepts them for other routes (``--tls-min 1.2``).
        max_body: Largest request body this route takes, bytes; a larger
            declared ``Content-Length`` is refused with 413 from the head,
            before the body is read (``None``: the server's ``max_body_size``).
        envelope: A spec 003 binding: each envelope carries its own
            credential (``cap_token``, ``sig``), which the envelope service
            checks, so the gate lets the call through without a bearer token.
        key_header: A header this route's clients may carry their token in
            instead of ``Authorization: Bearer`` (Anthropic's ``x-api-key``).
        protected_resource: An OAuth protected resource (RFC 9728; MCP's
            authorization): the gate's 401 names its metadata URL in
            ``WWW-Authenticate`` (``resource_metadata=...``).
    """

    transport: str = ""
    error_style: ErrorStyle = "openai"
    public: bool = False
    stream_body: bool = False
    tls13: bool = False
    envelope: bool = False
    max_body: int | None = None
    key_header: str | None = None
    protected_resource: bool = False


#: The metadata of a route registered without any.
DEFAULT_META = RouteMeta()


@attrs.frozen
class _Pattern:
    """A route's path pattern and its regex, compiled once."""

    pattern: str
    regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "regex", compile_pattern(self.pattern))


@attrs.frozen
class Route(_Pattern):
    """One HTTP route."""

    methods: frozenset[str]
    endpoint: Endpoint
    label: str | None = None
    meta: RouteMeta = DEFAULT_META
    #: Matched only when this holds for the request's headers (``None``: always).
    when: RouteWhen | None = None


@attrs.frozen
class WebSocketRoute(_Pattern):
    """One WebSocket route."""

    handler: WebSocketHandler
    label: str | None = None
    meta: RouteMeta = DEFAULT_META


def _shape(pattern: str) -> tuple[str | None, int]:
    """The literal first segment of ``pattern`` (``None``: it holds a ``{name}``) and its ``/``s."""
    segment = pattern[1:].partition("/")[0]
    return (None if "{" in segment else segment), pattern.count("/")


class _RouteList(list[Route]):
    """The route table: a list that tells its owner whenever it changes."""

    __slots__ = ("changed",)

    def __init__(self, changed: Callable[[], None]) -> None:
        super().__init__()
        self.changed = changed


def _notifying(method: Callable[..., Any]) -> Callable[..., Any]:
    """``list``'s ``method``, then the list's ``changed()``."""

    def call(self: _RouteList, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        self.changed()
        return result

    call.__name__ = method.__name__
    return call


for _name in (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "clear",
    "extend",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
):
    setattr(_RouteList, _name, _notifying(getattr(list, _name)))
del _name


class Router:
    """HTTP and WebSocket route table; first matching route wins."""

    def __init__(self) -> None:
        self._routes = _RouteList(self._drop_index)
        #: Routes by the first segment and the ``/`` count of the paths they
        #: can match (see the module docstring); built on the first match
        #: after a change.
        self._index: dict[tuple[str, int], list[Route]] | None = None
        #: By ``/`` count, the routes whose first segment is a ``{name}``:
        #: the bucket of a path whose first segment no pattern names.
        self._any_segment: dict[int, list[Route]] = {}
        #: WebSocket endpoints, consulted on ``Upgrade: websocket`` requests.
        self.websocket_routes: list[WebSocketRoute] = []

    @property
    def routes(self) -> list[Route]:
        """The HTTP routes in the order they are tried."""
        return self._routes

    @routes.setter
    def routes(self, routes: Iterable[Route]) -> None:
        self._routes[:] = routes

    def _drop_index(self) -> None:
        self._index = None

    def _build_index(self) -> dict[tuple[str, int], list[Route]]:
        shapes = [(_shape(route.pattern), route) for route in self._routes]
        index: dict[tuple[str, int], list[Route]] = {}
        for (segment, slashes), _ in shapes:
            if segment is not None:
                index[segment, slashes] = [
                    r for (s, n), r in shapes if n == slashes and s in (segment, None)
                ]
        self._any_segment = {}
        for (segment, slashes), route in shapes:
            if segment is None:
                self._any_segment.setdefault(slashes, []).append(route)
        self._index = index
        return index

    def add(
        self,
        methods: str | Iterable[str],
        pattern: str,
        endpoint: Endpoint,
        *,
        label: str | None = None,
        meta: RouteMeta = DEFAULT_META,
        when: RouteWhen | None = None,
    ) -> Route:
        """Register ``endpoint`` for ``methods`` (``"POST"`` or a list) at ``pattern``.

        ``when``: match only requests whose headers it accepts. Such a route
        goes before a route without one at the same pattern, whichever was
        added first, so that the unconditional one takes only the rest.
        """
        names = [methods] if isinstance(methods, str) else list(methods)
        route = Route(pattern, frozenset(m.upper() for m in names), endpoint, label, meta, when)
        at = len(self.routes)
        if when is not None:
            taken = route.methods
            for i, other in enumerate(self.routes):
                if other.pattern == pattern and other.when is None and other.methods & taken:
                    at = i
                    break
        self.routes.insert(at, route)
        return route

    def add_websocket(
        self,
        pattern: str,
        handler: WebSocketHandler,
        *,
        label: str | None = None,
        meta: RouteMeta = DEFAULT_META,
    ) -> WebSocketRoute:
        """Register a WebSocket ``handler`` at ``pattern``."""
        route = WebSocketRoute(pattern, handler, label, meta)
        self.websocket_routes.append(route)
        return route

    def match(
        self, method: str, path: str, headers: Headers | None = None
    ) -> tuple[Route, dict[str, str]]:
        """The route and path parameters for a request.

        A route with a ``when`` is skipped unless ``headers`` are given and
        it accepts them.

        Raises:
            HTTPError: 404 when no pattern matches, 405 (with ``Allow``) when
                patterns match but not for this method.
        """
        # Only the routes that can match the path's shape, in table order
        # (see the module docstring).
        index = self._index
        if index is None:
            index = self._build_index()
        segment = path[1:].partition("/")[0]
        if "\n" in segment:
            candidates: Sequence[Route] = self._routes
        else:
            slashes = path.count("/")
            found = index.get((segment, slashes))
            candidates = found if found is not None else self._any_segment.get(slashes, ())
        allowed: set[str] = set()
        for route in candidates:
            m = route.regex.match(path)
            if m is None:
                continue
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                when = route.when
                if when is not None and (headers is None or not when(headers)):
                    continue
                return route, m.groupdict()
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

    def match_websocket(self, path: str) -> tuple[WebSocketRoute, dict[str, str]] | None:
        """The WebSocket route and path parameters for ``path``, if any."""
        for route in self.websocket_routes:
            m = route.regex.match(path)
            if m is not None:
                return route, m.groupdict()
        return None

    def resolve(self, method: str, path: str) -> tuple[Endpoint, dict[str, str]]:
        """The endpoint and path parameters for a request (see :meth:`match`)."""
        route, params = self.match(method, path)
        return route.endpoint, params

    def resolve_websocket(self, path: str) -> tuple[WebSocketHandler, dict[str, str]] | None:
        """The WebSocket handler and path parameters for ``path``, if any."""
        found = self.match_websocket(path)
        return None if found is None else (found[0].handler, found[1])

    # --- served bare (engines.server.Dispatcher) ---------------------------------

    def endpoint_for(self, request: Request) -> Endpoint:
        """The endpoint for ``request``; fills ``request.path_params``."""
        route, request.path_params = self.match(request.method, request.path, request.headers)
        return route.endpoint

    def websocket_handler_for(self, request: Request) -> WebSocketHandler | None:
        """The WebSocket handler for ``request``, if any; fills ``request.path_params``."""
        found = self.match_websocket(request.path)
        if found is None:
            return None
        request.path_params = found[1]
        return found[0].handler
