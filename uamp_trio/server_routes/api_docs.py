"""``GET /docs``: the OpenAPI document as a page a person can read.

Three static files shipped in the package (``static/docs.*``: no build step,
no CDN): the page's script fetches ``/openapi.json`` (the server's own
document, :mod:`.openapi`) and lists every operation by tag, with its
parameters, request body and responses, and a filter on paths. Everything
the document holds is written as text, never parsed as HTML; a strict
``Content-Security-Policy`` keeps the page to its own script and style
sheet. Public, like ``/openapi.json``.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from ..engines.http import HTTPError, Request, Response
from ..hosting.host import Host
from . import SERVER_ROUTES

__all__ = ["ASSETS", "mount"]

#: The files served under ``/docs/`` and their media types.
ASSETS = {
    "docs.js": "text/javascript; charset=utf-8",
    "docs.css": "text/css; charset=utf-8",
}

_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-cache"),
]


@cache
def _asset(name: str) -> bytes:
    return files(__package__).joinpath("static", name).read_bytes()


def mount(host: Host) -> None:
    """Serve ``/docs`` and its two files on ``host``."""

    async def page(request: Request) -> Response:
        """``GET /docs``: the page."""
        headers = [("content-type", "text/html; charset=utf-8"), *_HEADERS]
        return Response(headers=headers, body=_asset("docs.html"))

    async def asset(request: Request) -> Response:
        """``GET /docs/{file}``: the page's script and style sheet."""
        name = request.path_params["file"]
        media = ASSETS.get(name)
        if media is None:
            raise HTTPError(404, f"No docs file named {name!r}.", code="not_found")
        return Response(headers=[("content-type", media), *_HEADERS], body=_asset(name))

    host.router.add("GET", "/docs", page, meta=SERVER_ROUTES, label="API docs")
    host.router.add("GET", "/docs/{file}", asset, meta=SERVER_ROUTES)
