"""``GET /healthz`` (liveness), ``GET /readyz`` (readiness) and ``GET /version``.

For load balancers, containers and deploy scripts:

* ``/healthz`` answers ``200 {"status": "ok"}`` as long as the process serves
  HTTP at all: a failing liveness probe means "restart me".
* ``/readyz`` answers ``200 {"status": "ready", "agents": [...]}`` when the
  server is serving (its background nursery is open), is not shutting down
  (requests on open connections are still served during the grace period),
  hosts at least one agent and every store it uses answers (a store shared
  with other processes, such as Redis, may not), else
  ``503 {"status": "not_ready", "reason": ...}`` -- with ``"stores"``, the
  names of the stores that do not answer, when that is the reason: a
  failing readiness probe means "send traffic elsewhere for now". The stores
  are pinged at most once per :data:`STORE_CHECK_EVERY` seconds, however often
  the probe comes; a store whose background loop fails counts at once.

* ``/version`` answers ``200 {"name": "uamp", "version": ...}``: which
  release is deployed (vLLM and others answer the same route).

All are public (no token needed) and tell nothing but the agent names, which
the agent cards publish anyway, and the roles of stores that are down (the
log names where they are and the error).
"""

from __future__ import annotations

from typing import Any

import trio

from uamp import __version__

from ..engines.http import Request, Response, json_response
from ..hosting.host import Host
from . import SERVER_ROUTES

__all__ = ["STORE_CHECK_EVERY", "mount"]

#: Seconds a readiness answer about the stores is reused.
STORE_CHECK_EVERY = 1.0


def mount(host: Host) -> None:
    """Serve ``/healthz`` and ``/readyz`` on ``host``."""
    checked: list[Any] = [-STORE_CHECK_EVERY, {}]  # when, and what was down then

    async def stores_down() -> list[str]:
        now = trio.current_time()
        if now - checked[0] >= STORE_CHECK_EVERY:
            checked[0] = now
            checked[1] = await host.stores.unreachable()
        # A failing loop counts at once; the pings are reused for a moment.
        return sorted({*host.stores.failing(), *checked[1]})

    async def healthz(request: Request) -> Response:
        """``GET /healthz``: the process is alive."""
        return json_response({"status": "ok"})

    async def version(request: Request) -> Response:
        """``GET /version``: the installed uamp release."""
        return json_response({"name": "uamp", "version": __version__})

    async def readyz(request: Request) -> Response:
        """``GET /readyz``: the server is serving and hosts agents (a relay: may host none yet)."""
        agents = list(host.agents)
        if host.background is None:
            reason = "the server is not serving (starting or stopped)"
        elif host.draining:
            reason = "the server is shutting down"
        elif not agents and not host.ready_without_agents:
            reason = "no agent is hosted"
        elif down := await stores_down():
            reason = "a store does not answer: " + ", ".join(down)
            body = {"status": "not_ready", "reason": reason, "stores": down}
            return json_response(body, 503)
        else:
            return json_response({"status": "ready", "agents": agents})
        return json_response({"status": "not_ready", "reason": reason}, 503)

    host.router.add("GET", "/healthz", healthz, meta=SERVER_ROUTES)
    host.router.add("GET", "/readyz", readyz, meta=SERVER_ROUTES)
    host.router.add("GET", "/version", version, meta=SERVER_ROUTES)
