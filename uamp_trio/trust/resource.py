"""OAuth 2.0 protected resource metadata (RFC 9728) on ``uamp serve``'s requests.

The rules are :mod:`uamp_proto.resource`'s (shared with ``uamp_asgi``): a
protected resource's 401 names its metadata's URL, which answers a document
naming the configured token issuers. This module applies them to this
server's :class:`~uamp_trio.engines.http.Request`.
"""

from __future__ import annotations

from uamp_proto.resource import WELL_KNOWN, issuers, metadata_document, origin_of

from ..engines.http import Request

__all__ = ["WELL_KNOWN", "issuers", "metadata_document", "metadata_url", "origin"]


def origin(request: Request) -> str:
    """``scheme://host[:port]`` as the client addressed the server (its ``Host``)."""
    headers = request.headers
    return origin_of(request.scheme, headers.get("host") or headers.get(":authority"))


def metadata_url(request: Request) -> str:
    """Where the metadata of the resource ``request`` addressed is served.

    Below a ``--root-path`` prefix the well-known path follows the prefix
    (``/prefix/.well-known/...``) rather than the host as RFC 9728 section 3.1
    builds it: that is where a proxy publishing only ``/prefix`` reaches
    this server, and clients follow this URL as given.
    """
    return origin(request) + request.root_path + WELL_KNOWN + request.path
