"""Native UAMP over WebSocket (UAMP section 13.1, spec 004 "UAMP WebSocket Transport").

Endpoints (mounted by :func:`mount`):

* ``/agents/{name}/uamp`` -- sessions talk to agent ``name`` (a different
  ``session.create.agent`` is refused with ``session.error``
  ``agent_not_found``); an unknown ``name`` refuses the upgrade with 404;
* ``/uamp`` and ``/ws`` -- multi-agent: ``session.create.agent`` selects the
  agent of each session (optional when one agent is hosted).

Theory of operation
-------------------
One JSON event per text message, several sessions per socket (section 10).
Once the HTTP server has handed the upgrade over and the ``101`` is written,
:func:`serve_uamp_websocket` runs the connection's reader, writer and keeper
(:func:`uamp_trio.hosting.ws_connection.serve_host`) around a
:class:`~uamp_trio.hosting.sessions.SessionHost`, which never waits; response
tasks run in the same nursery under a cancel scope each.

A message larger than ``max_message_size`` closes the socket with 1009.
Malformed JSON or a bad event gets ``session.error`` from the core and the
connection stays open.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import trio

from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Responder

from ..engines.http import HTTPError
from ..engines.ws_frames import EngineName, make_engine
from ..hosting.middleware import reject_upgrade
from ..hosting.router import RouteMeta
from ..hosting.sessions import SessionHost, SessionLimits
from ..hosting.ws_connection import SUBPROTOCOLS, serve_host

if TYPE_CHECKING:
    from ..engines.websocket import WebSocketRequest
    from ..hosting.host import Host

__all__ = ["UampWebSocketConfig", "UampWebSocketEndpoint", "mount", "serve_uamp_websocket"]

#: What middleware knows of these routes: UAMP ``session.error`` refusals.
ROUTES = RouteMeta(transport="uamp_ws", error_style="uamp")

log = logging.getLogger("uamp_trio.uamp_ws")


@attrs.frozen(kw_only=True)
class UampWebSocketConfig:
    """Options of the UAMP WebSocket endpoint.

    Attributes:
        limits: Per-connection limits; ``None`` takes :class:`SessionLimits`
            defaults with ``max_message_size`` from the server's
            ``websocket_max_message_size``.
        engine: The framing engine (``"websockets"`` or ``"wsproto"``);
            ``None`` is :data:`uamp_trio.engines.ws_frames.DEFAULT_ENGINE`.
    """

    limits: SessionLimits | None = None
    engine: EngineName | None = None


class UampWebSocketEndpoint:
    """The WebSocket handler of ``/agents/{name}/uamp``, ``/uamp`` and ``/ws``.

    Args:
        app: The app whose agents are served.
        config: Endpoint options.
    """

    def __init__(self, app: Host, config: UampWebSocketConfig | None = None) -> None:
        self.app = app
        self.config = config or UampWebSocketConfig()

    async def __call__(self, pending: WebSocketRequest) -> None:
        """Accept the upgrade and serve UAMP on it until it closes."""
        name = pending.request.path_params.get("agent")
        fixed: Responder | None = None
        if name is not None:
            try:
                fixed = self.app.resolve_agent(pending.request.path_params)
            except HTTPError as missing:
                await reject_upgrade(pending, ROUTES.error_style, missing)
                return
        offered = pending.subprotocols
        chosen = next((p for p in SUBPROTOCOLS if p in offered), None)
        await pending.accept(subprotocol=chosen)
        await self.serve(pending, fixed)

    async def serve(
        self, pending: WebSocketRequest, fixed: Responder | None, initial_data: bytes | None = None
    ) -> None:
        """Serve UAMP on an accepted upgrade (``initial_data``: bytes already read past it)."""
        limits = self.config.limits or SessionLimits(
            max_message_size=pending.max_message_size,
            send_timeout=pending.send_timeout,
            outbox_size=pending.max_queued_events,
            session_outbox_size=pending.max_session_queued_events,
            max_response_output_bytes=self.app.turns.max_output_bytes,
        )
        await serve_uamp_websocket(
            pending.stream,
            self.app.agents,
            fixed,
            initial_data=pending.initial_data if initial_data is None else initial_data,
            limits=limits,
            engine=self.config.engine,
            app=self.app,
            principal=pending.request.principal,
        )


def mount(app: Host, config: UampWebSocketConfig | None = None) -> None:
    """Serve native UAMP over WebSocket on ``app`` (see the module docstring)."""
    endpoint = UampWebSocketEndpoint(app, config)
    app.agent_websocket("/uamp", endpoint, label="UAMP WebSocket", meta=ROUTES)
    app.router.add_websocket("/ws", endpoint, label="UAMP WebSocket (any agent)", meta=ROUTES)


async def serve_uamp_websocket(
    stream: trio.abc.Stream,
    agents: Mapping[str, Responder],
    agent: Responder | None = None,
    *,
    initial_data: bytes = b"",
    limits: SessionLimits | None = None,
    engine: EngineName | None = None,
    app: Host | None = None,
    principal: Principal = ANONYMOUS,
) -> None:
    """Serve UAMP on an open WebSocket (after the ``101``) until it closes.

    Args:
        stream: The connection's byte stream.
        agents: Agents reachable by ``session.create.agent``.
        agent: The endpoint's own agent, or ``None`` for a multi-agent endpoint.
        initial_data: Bytes already read past the upgrade request.
        limits: Connection limits.
        engine: WebSocket framing engine.
        app: The app served, for its payment policy and response signer
            (``None``: free and unsigned).
        principal: Who the connection acts for (the upgrade's principal).
    """
    limits = limits or SessionLimits()
    frames = make_engine(client=False, max_message_size=limits.max_message_size, engine=engine)

    def make_host(nursery: trio.Nursery) -> SessionHost:
        return SessionHost(
            nursery,
            agents,
            agent,
            limits=limits,
            transport="uamp-websocket",
            app=app,
            principal=principal,
        )

    drain = app.drain_started if app is not None else None
    await serve_host(
        stream, make_host, frames, initial_data=initial_data, limits=limits, drain=drain
    )
