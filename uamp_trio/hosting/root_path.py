"""``uamp serve --root-path /prefix``: served below a path prefix, as uvicorn's ``--root-path``.

A reverse proxy publishes the server at ``https://example.com/prefix/...``.
Most proxies strip the prefix before forwarding (the request arrives as
``/agents/demo/...``); some forward the path whole. Either way the app
routes the path without the prefix (:func:`enter` strips it when it is
there) and remembers the prefix on the request (``Request.root_path``), so
that every URL it hands a client -- the playground's links and WebSocket,
``Location`` headers, agent cards, the hub's manifest paths, the OpenAPI
document's server, protected resource metadata -- points back through the
proxy.
"""

from __future__ import annotations

import re

from ..engines.http import Request

__all__ = ["check_root_path", "enter"]

# Path segments of unreserved and a few sub-delimiter characters: nothing that
# needs escaping in an HTML attribute, a header value or a JSON string.
_ROOT = re.compile(r"^(/[A-Za-z0-9._~!$()*+,;=:@%-]+)+$")


def check_root_path(value: str) -> str:
    """``value`` as a prefix (``""``, or ``/a/b`` without a trailing slash).

    Raises:
        ValueError: Not a path of plain segments (one line, naming the flag).
    """
    root = value.rstrip("/")
    if root and not _ROOT.match(root):
        raise ValueError(
            f"--root-path: {value!r} is not a path such as /api or /agents-proxy/v1 "
            "(it starts with '/' and has no quotes, spaces, '?', '#', '&' or '<')"
        )
    return root


def enter(request: Request, root: str) -> None:
    """Note ``root`` on ``request`` and strip it from its path when the path starts with it.

    Done once per request (the engines ask the app about a request's head
    before they dispatch it): a request whose ``root_path`` is set is left
    alone.
    """
    if request.root_path:
        return
    request.root_path = root
    path = request.path
    if path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        request.path = path[len(root) :] or "/"
