"""The playground: a chat page for the hosted agents, at ``GET /`` and ``GET /agents/{name}/``.

Theory of operation
-------------------
The page is three static files shipped in the package (``static/``: no build
step, no CDN). The server fills in the names of the hosted agents (and, under
``/agents/{name}/``, the one to open) and the path of the UAMP WebSocket
(``null`` when the app mounts no ``uamp_ws`` transport), as JSON in a
``<script type="application/json">`` element -- data the page reads, never
code it runs, with ``<`` escaped so no name can close the element. The page
then opens one UAMP WebSocket (``/uamp``) and multiplexes a session per pane
over it (docs/playground.md).

Everything here is public, as a login page would be: with authentication
configured the WebSocket still needs a token (the page has a field for it),
so the page shows no agent output to a caller who has none. A strict
``Content-Security-Policy`` keeps the page to its own script and styles.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import orjson

from ..engines.http import HTTPError, Request, Response
from ..hosting.host import Host
from ..hosting.router import AGENT_PREFIX
from . import SERVER_ROUTES

__all__ = ["ASSETS", "mount"]

#: The files served under ``/playground/`` and their media types.
ASSETS = {
    "playground.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}

_PAGE = "playground.html"
_CONFIG_SLOT = "{{config}}"
#: Where the page's links start: ``--root-path`` (checked to need no escaping), or nothing.
_ROOT_SLOT = "{{root}}"

_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-cache"),
]


@cache
def _asset(name: str) -> bytes:
    return files(__package__).joinpath("static", name).read_bytes()


def page(
    agents: list[str], selected: str | None, socket: str | None = "/uamp", root: str = ""
) -> bytes:
    """The playground HTML with its configuration filled in (``root``: ``--root-path``)."""
    path = None if socket is None else root + socket
    config = {"agents": agents, "agent": selected, "socket": path}
    data = orjson.dumps(config).replace(b"<", b"\\u003c")
    html = _asset(_PAGE).replace(_ROOT_SLOT.encode(), root.encode())
    return html.replace(_CONFIG_SLOT.encode(), data)


def _socket_path(host: Host) -> str | None:
    """The multi-agent UAMP WebSocket route (``/uamp``), if the app mounts one."""
    for route in host.router.websocket_routes:
        if route.meta.transport == "uamp_ws" and "{" not in route.pattern:
            return route.pattern
    return None


def mount(host: Host) -> None:
    """Serve the playground on ``host``: ``/``, ``/agents/{name}/`` and ``/playground/{file}``."""

    def html(request: Request, selected: str | None) -> Response:
        body = page(sorted(host.agents), selected, _socket_path(host), request.root_path)
        return Response(
            headers=[("content-type", "text/html; charset=utf-8"), *_HEADERS], body=body
        )

    async def index(request: Request) -> Response:
        """``GET /``: the playground, the agent picker on the first agent."""
        return html(request, None)

    async def agent_page(request: Request) -> Response:
        """``GET /agents/{name}/``: the playground, talking to ``name``."""
        return html(request, host.resolve_agent(request.path_params).name)

    async def agent_redirect(request: Request) -> Response:
        """``GET /agents/{name}``: a redirect to the page's canonical URL (with the slash)."""
        name = host.resolve_agent(request.path_params).name
        return Response(status=308, headers=[("location", f"{request.root_path}/agents/{name}/")])

    async def asset(request: Request) -> Response:
        """``GET /playground/{file}``: the page's script and style sheet."""
        name = request.path_params["file"]
        media = ASSETS.get(name)
        if media is None:
            raise HTTPError(404, f"No playground file named {name!r}.", code="not_found")
        return Response(headers=[("content-type", media), *_HEADERS], body=_asset(name))

    host.router.add("GET", "/", index, meta=SERVER_ROUTES, label="Playground")
    host.router.add("GET", AGENT_PREFIX + "/", agent_page, meta=SERVER_ROUTES, label="Playground")
    host.router.add("GET", AGENT_PREFIX, agent_redirect, meta=SERVER_ROUTES)
    host.router.add("GET", "/playground/{file}", asset, meta=SERVER_ROUTES)
