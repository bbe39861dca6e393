"""OAuth 2.0 protected resource metadata (RFC 9728), as MCP's authorization asks.

A route that is a protected resource (``RouteMeta.protected_resource``; the
MCP endpoint) tells a client that presents no valid token where to learn how
to get one: its 401 carries ``WWW-Authenticate: Bearer ...,
resource_metadata="<url>"`` (RFC 9728 section 5.1), and that URL --
``/.well-known/oauth-protected-resource`` followed by the resource's path
(section 3.1) -- answers a JSON document naming the resource and the
authorization servers whose tokens it accepts: the issuers the server's
authenticator is configured with (``--auth-issuer``).
"""

from __future__ import annotations

import re
from typing import Any

from ..engines.http import Request
from .auth import Authenticator

__all__ = ["WELL_KNOWN", "issuers", "metadata_document", "metadata_url", "origin"]

#: RFC 9728 section 3: the well-known path prefix of the metadata.
WELL_KNOWN = "/.well-known/oauth-protected-resource"

#: A host (name, IPv4 or bracketed IPv6) and port: nothing that could break a quoted header value.
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d+)?$|^\[[0-9A-Fa-f:.]+\](:\d+)?$")


def origin(request: Request) -> str:
    """``scheme://host[:port]`` as the client addressed the server (its ``Host``)."""
    host = request.headers.get("host") or request.headers.get(":authority") or ""
    if not _HOST.match(host):
        host = "localhost"
    return f"{request.scheme}://{host}"


def metadata_url(request: Request) -> str:
    """Where the metadata of the resource ``request`` addressed is served.

    Below a ``--root-path`` prefix the well-known path follows the prefix
    (``/prefix/.well-known/...``) rather than the host as RFC 9728 section 3.1
    builds it: that is where a proxy publishing only ``/prefix`` reaches
    this server, and clients follow this URL as given.
    """
    return origin(request) + request.root_path + WELL_KNOWN + request.path


def issuers(authenticator: Authenticator | None) -> list[str]:
    """The token issuers ``authenticator`` accepts (JWT ``iss``), in order, once each."""
    found: list[str] = []
    stack: list[Any] = [authenticator]
    while stack:
        current = stack.pop(0)
        if current is None:
            continue
        issuer = getattr(current, "issuer", None)
        if isinstance(issuer, str) and issuer and issuer not in found:
            found.append(issuer)
        stack.extend(getattr(current, "authenticators", ()))
    return found


def metadata_document(resource: str, authorization_servers: list[str]) -> dict[str, Any]:
    """The RFC 9728 metadata of ``resource`` (bearer tokens in the header only)."""
    doc: dict[str, Any] = {"resource": resource, "bearer_methods_supported": ["header"]}
    if authorization_servers:
        doc["authorization_servers"] = authorization_servers
    return doc
