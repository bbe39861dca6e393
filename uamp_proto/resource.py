"""OAuth 2.0 protected resource metadata (RFC 9728), as MCP's authorization asks.

A route that is a protected resource (the MCP endpoint) tells a client that
presents no valid token where to learn how to get one: its 401 carries
``WWW-Authenticate: Bearer ..., resource_metadata="<url>"`` (RFC 9728
section 5.1, :func:`challenge`), and that URL -- ``/.well-known/oauth-protected-resource``
followed by the resource's path (section 3.1) -- answers a JSON document
naming the resource and the authorization servers whose tokens it accepts
(:func:`metadata_document`): the issuers the server's authenticator is
configured with (:func:`issuers`). Both servers serve it from here
(``uamp serve``'s :mod:`uamp_trio.trust.resource`, ``uamp_asgi``'s MCP transport).
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["WELL_KNOWN", "challenge", "issuers", "metadata_document", "origin_of"]

#: RFC 9728 section 3: the well-known path prefix of the metadata.
WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"

#: A host (name, IPv4 or bracketed IPv6) and port: nothing that could break a quoted header value.
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d+)?$|^\[[0-9A-Fa-f:.]+\](:\d+)?$")


def origin_of(scheme: str, host: str | None) -> str:
    """``scheme://host[:port]`` as the client addressed the server (its ``Host``).

    A ``Host`` that is not a plain host and port is taken for ``localhost``:
    the origin goes into a quoted header value and into JSON.
    """
    host = host or ""
    if not _HOST.match(host):
        host = "localhost"
    return f"{scheme}://{host}"


def challenge(base: str, metadata_url: str | None) -> str:
    """A 401's ``WWW-Authenticate`` value, naming the resource's metadata when it has one."""
    if metadata_url is None:
        return base
    return f'{base}, resource_metadata="{metadata_url}"'


def issuers(authenticator: object) -> list[str]:
    """The token issuers ``authenticator`` accepts (JWT ``iss``), in order, once each.

    An authenticator names its issuer in ``issuer``; one made of several
    lists them in ``authenticators``.
    """
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
