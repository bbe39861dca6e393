"""Cross-origin resource sharing (the Fetch standard's CORS protocol) for every HTTP route.

Theory of operation
-------------------
A browser page served from another origin (another scheme, host or port)
may call the server only when the server says so. For a "non-simple"
request -- a JSON POST, an ``Authorization`` header -- it first sends a
*preflight*: ``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``
(and ``Access-Control-Request-Headers``); the real request follows only if
the answer allows that origin, method and those headers. Every answer the
page may read must then carry ``Access-Control-Allow-Origin``.

:class:`CorsPolicy` makes those decisions; the server applies it in one
place, :meth:`Server.dispatch <uamp_trio.engines.server.Server.dispatch>`,
which every HTTP response of every engine (HTTP/1.1, HTTP/2, HTTP/3) passes
through -- before routing, since a preflight is an ``OPTIONS`` no route
serves, and around it, so that errors (401, 404, 429) reach the page
readable too. WebSocket upgrades do not pass there: browsers do not apply
CORS to WebSockets (a handshake carries ``Origin``, and the server's
authentication is what guards it).

* Off by default (``ServerConfig.allowed_origins`` empty): nothing is added,
  and an ``OPTIONS`` is answered by the routes as before (``405``).
* An allowed origin (or ``*``) gets ``Access-Control-Allow-Origin`` naming it
  (the literal ``*`` only when every origin is allowed and credentials are
  not), ``Access-Control-Expose-Headers`` with the headers clients read
  (:data:`EXPOSED`) and, with credentials, ``Access-Control-Allow-Credentials``.
* A refused origin gets no ``Access-Control-*`` header; its preflight is
  answered ``403``. The request itself is still served (CORS is the
  browser's rule, not an access control: authentication is).
* Every answer to a request with ``Origin`` carries ``Vary: Origin``, so a
  cache never hands one origin's answer to another.

Same-origin pages (the playground) send no preflight and need none of this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from .http import Request, Response

__all__ = ["DEFAULT_METHODS", "EXPOSED", "MAX_AGE", "CorsPolicy"]

#: The methods a preflight may ask for when none are configured.
DEFAULT_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
#: Response headers a page may read: a created stream's place, the payment
#: balance, the MCP and HTTP+SSE session ids, the response signature, a retry hint.
EXPOSED: Final = (
    "Location",
    "X-UAMP-Payment-Balance",
    "Mcp-Session-Id",
    "X-Session-ID",
    "X-UAMP-Signature",
    "Retry-After",
    "WWW-Authenticate",
)
#: How long a browser may keep a preflight's answer (seconds).
MAX_AGE: Final = 600


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(v.strip() for v in values if v.strip())


@attrs.frozen
class CorsPolicy:
    """Which other origins may call the server, and how.

    Attributes:
        origins: Allowed origins (``scheme://host[:port]``, as browsers send
            them), or ``*`` for every origin.
        methods: Methods a preflight may ask for (``*``: any).
        headers: Request headers a preflight may ask for (``*``: any).
        credentials: Whether pages may send cookies and HTTP auth
            (``Access-Control-Allow-Credentials``).
    """

    origins: tuple[str, ...]
    methods: tuple[str, ...] = DEFAULT_METHODS
    headers: tuple[str, ...] = ("*",)
    credentials: bool = False

    @classmethod
    def of(
        cls,
        origins: Iterable[str],
        methods: Iterable[str] = (),
        headers: Iterable[str] = (),
        credentials: bool = False,
    ) -> CorsPolicy | None:
        """The policy for these settings, ``None`` when no origin is allowed (CORS off).

        Raises:
            ValueError: an origin is not ``*`` nor ``scheme://host[:port]``.
        """
        allowed = _names(origins)
        if not allowed:
            return None
        for origin in allowed:
            if origin != "*" and ("://" not in origin or origin.endswith("/")):
                raise ValueError(
                    f"allowed origin {origin!r} must be '*' or scheme://host[:port] "
                    "(no path, no trailing slash)"
                )
        return cls(
            origins=allowed,
            methods=tuple(m.upper() for m in _names(methods)) or DEFAULT_METHODS,
            headers=_names(headers) or ("*",),
            credentials=credentials,
        )

    def allows(self, origin: str) -> bool:
        """Whether ``origin`` may call."""
        return "*" in self.origins or origin in self.origins

    def _origin_headers(self, origin: str) -> list[tuple[str, str]]:
        wildcard = "*" in self.origins and not self.credentials
        out = [("access-control-allow-origin", "*" if wildcard else origin)]
        if self.credentials:
            out.append(("access-control-allow-credentials", "true"))
        return out

    def response_headers(self, origin: str) -> list[tuple[str, str]]:
        """The headers to add to an answer to a request from ``origin``."""
        if not self.allows(origin):
            return [("vary", "Origin")]
        return [
            *self._origin_headers(origin),
            ("access-control-expose-headers", ", ".join(EXPOSED)),
            ("vary", "Origin"),
        ]

    @staticmethod
    def is_preflight(request: Request) -> bool:
        """Whether ``request`` is a CORS preflight (not a plain ``OPTIONS``)."""
        headers = request.headers
        return (
            request.method == "OPTIONS"
            and headers.get("origin") is not None
            and headers.get("access-control-request-method") is not None
        )

    def preflight(self, request: Request) -> Response:
        """The answer to a preflight: ``204`` allowing it, or ``403``."""
        origin = request.headers.get("origin") or ""
        method = (request.headers.get("access-control-request-method") or "").strip().upper()
        asked = _names((request.headers.get("access-control-request-headers") or "").split(","))
        vary = ("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
        allowed_method = "*" in self.methods or method in self.methods
        allowed_headers = "*" in self.headers or all(
            h.lower() in {x.lower() for x in self.headers} for h in asked
        )
        if not (self.allows(origin) and allowed_method and allowed_headers):
            return Response(status=403, headers=[vary, ("content-length", "0")])
        headers = [
            *self._origin_headers(origin),
            (
                "access-control-allow-methods",
                method if "*" in self.methods else ", ".join(self.methods),
            ),
            ("access-control-max-age", str(MAX_AGE)),
            vary,
        ]
        if asked:
            # A literal "*" does not cover Authorization (and nothing with
            # credentials): name what was asked for.
            headers.append(("access-control-allow-headers", ", ".join(asked)))
        return Response(status=204, headers=headers)
