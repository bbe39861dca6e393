"""``GET /healthz`` (liveness) and ``GET /readyz`` (readiness), for load balancers and containers.

* ``/healthz`` answers ``200 {"status": "ok"}`` as long as the process serves
  HTTP at all: a failing liveness probe means "restart me".
* ``/readyz`` answers ``200 {"status": "ready", "agents": [...]}`` when the
  server is serving (its background nursery is open), is not shutting down
  (requests on open connections are still served during the grace period)
  and hosts at least one agent, else ``503 {"status": "not_ready", "reason": ...}``: a failing
  readiness probe means "send traffic elsewhere for now".

Both are public (no token needed) and tell nothing but the agent names, which
the agent cards publish anyway.
"""

from __future__ import annotations

from ..engines.http import Request, Response, json_response
from ..hosting.host import Host
from . import SERVER_ROUTES

__all__ = ["mount"]


def mount(host: Host) -> None:
    """Serve ``/healthz`` and ``/readyz`` on ``host``."""

    async def healthz(request: Request) -> Response:
        """``GET /healthz``: the process is alive."""
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """``GET /readyz``: the server is serving and hosts agents."""
        agents = list(host.agents)
        if host.background is None:
            reason = "the server is not serving (starting or stopped)"
        elif host.draining:
            reason = "the server is shutting down"
        elif not agents:
            reason = "no agent is hosted"
        else:
            return json_response({"status": "ready", "agents": agents})
        return json_response({"status": "not_ready", "reason": reason}, 503)

    host.router.add("GET", "/healthz", healthz, meta=SERVER_ROUTES)
    host.router.add("GET", "/readyz", readyz, meta=SERVER_ROUTES)
