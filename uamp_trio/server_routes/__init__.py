"""The server's own routes, not a protocol's: health, the OpenAPI document, the playground.

Each module is a ``mount(host)`` function like a transport's, called by the
composition root (:mod:`uamp_trio.app`) only; every route here is public
(an auth gate lets it through) and answers errors in the OpenAI style.
"""

from __future__ import annotations

from ..hosting.router import RouteMeta

__all__ = ["SERVER_ROUTES"]

#: The server's own public routes: no transport registered them.
SERVER_ROUTES = RouteMeta(transport="server", error_style="openai", public=True)
