"""The authentication gate: one middleware in front of every transport.

Theory of operation
-------------------
The composition root installs :class:`AuthGate` (outermost) when
authentication is configured (``App(authenticator=...)``). For every call it

1. lets public routes through untouched (agent cards, JWKS);
2. takes the bearer token: the ``Authorization: Bearer`` header on every
   route, on a WebSocket upgrade also ``?token=`` (browsers cannot set
   headers on a WebSocket), and on a route that names a ``key_header``
   (Anthropic's ``x-api-key``) that header when there is no bearer;
3. asks the :class:`~uamp_trio.trust.auth.Authenticator` for the principal
   and stores it on ``request.principal``, where transports read it and put
   it on every ``TurnRequest``; or refuses with a
   :class:`~uamp_trio.hosting.middleware.Refusal`: ``401``,
   ``WWW-Authenticate: Bearer ...`` and the route's own error body. The
   endpoint (and so the agent) never runs for a refused call.

Three exceptions to "no token, no entry":

* ``allow_anonymous``: a call without any credential goes in as
  :data:`~uamp_proto.principal.ANONYMOUS`. A credential that *is* presented
  must still be valid: an ``Authorization`` header that holds no bearer
  token (``Basic ...``, a bare ``Bearer``, ``Token ...``) is refused like a
  bad token, with or without ``allow_anonymous``.
* A UAMP WebSocket upgrade (``uamp_ws`` routes) without a token is accepted
  as :data:`SESSION_AUTH`: the connection itself grants nothing, and every
  multiplexed ``session.create`` must carry its own ``token`` (spec 000
  section 10.3), verified by :class:`~uamp_trio.hosting.sessions.SessionHost`.
* A spec 003 binding (a route whose ``RouteMeta.envelope`` is set) goes in
  as :data:`SESSION_AUTH` whatever it presents: every envelope carries its
  own capability token and signature, which the envelope service checks
  (:mod:`uamp_trio.trust.envelopes`), and the stream endpoints present the
  capability token itself as their bearer token.

Nothing here logs a token: a refusal is logged with the route, the path and
the authenticator's reason, all of which are token-free.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

from uamp_proto.principal import ANONYMOUS
from uamp_proto.resource import challenge

from ..hosting.middleware import Call, Next, Refusal, Reply
from .auth import SESSION_AUTH, Authenticator, AuthError, bearer_token
from .resource import metadata_url

__all__ = ["SESSION_AUTH_TRANSPORTS", "AuthGate", "refusal"]

log = logging.getLogger("uamp_trio.auth")

#: Transports whose upgrades may defer authentication to their sessions.
SESSION_AUTH_TRANSPORTS = frozenset({"uamp_ws"})


def refusal(exc: AuthError, resource_metadata: str | None = None) -> Refusal:
    """The 401 refusal for ``exc`` (``WWW-Authenticate`` per RFC 6750).

    ``resource_metadata``: the URL of the route's RFC 9728 metadata, named
    in the challenge (section 5.1).
    """
    value = challenge(exc.www_authenticate, resource_metadata)
    return Refusal(401, exc.message, code=exc.code, headers=[("www-authenticate", value)])


def _query_token(query: str) -> str | None:
    for name, value in parse_qsl(query, keep_blank_values=False):
        if name == "token":
            return value
    return None


class AuthGate:
    """The authentication middleware (see the module docstring).

    Args:
        authenticator: Turns a bearer token into a principal.
        allow_anonymous: Let calls without any token in as ``anonymous``.
    """

    def __init__(self, authenticator: Authenticator, *, allow_anonymous: bool = False) -> None:
        self.authenticator = authenticator
        self.allow_anonymous = allow_anonymous

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        """Authenticate ``call`` and pass it on, or refuse it."""
        route = call.route
        if route.public:
            return await call_next(call)
        if route.envelope:
            call.request.principal = SESSION_AUTH
            return await call_next(call)
        request = call.request
        websocket = call.websocket is not None
        query = _query_token(request.query) if websocket and request.query else None
        authorization = request.headers.get("authorization")
        token = bearer_token(authorization, query)
        if token is None and route.key_header is not None:
            token = request.headers.get(route.key_header) or None
        if token is None and authorization is not None:
            # A credential was presented (Basic, a bare Bearer, another
            # scheme): it fails, and is refused as any failing one is --
            # never taken for the absence of one.
            exc = AuthError("the Authorization header holds no bearer token")
            log.info("refused %s %s (%s): %s", request.method, request.path, route.transport, exc)
            raise refusal(exc)
        if token is None:
            if self.allow_anonymous:
                request.principal = ANONYMOUS
                return await call_next(call)
            if websocket and route.transport in SESSION_AUTH_TRANSPORTS:
                request.principal = SESSION_AUTH
                return await call_next(call)
        try:
            request.principal = await self.authenticator.authenticate(token)
        except AuthError as exc:
            log.info("refused %s %s (%s): %s", request.method, request.path, route.transport, exc)
            metadata = metadata_url(request) if route.protected_resource else None
            raise refusal(exc, metadata) from None
        return await call_next(call)
