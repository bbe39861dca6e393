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
:func:`serve_uamp_websocket` runs the connection as a few tasks in one
nursery (``shared/STYLE.md`` section 5):

* the **reader** reads the socket, lets the framing engine
  (:mod:`uamp_trio.engines.ws_frames`) cut it into messages, and feeds each to the
  :class:`~uamp_trio.hosting.sessions.SessionHost`, which never waits; response
  tasks run in the same nursery under a cancel scope each;
* the **writer** takes everything ready in the host's outbox (plus pongs and
  close frames the engine owes), frames it and writes it with one
  ``send_all``: coalescing is the main lever on throughput, since each trio
  ``send_all`` costs about as much as framing ten small messages;
* the **keeper** sends a WebSocket ping when nothing has arrived for
  ``keepalive_interval``, drops a peer that still sends nothing for as long
  again, and closes (``session.end`` reason ``timeout`` for every session,
  then close code 1001) a connection that sent no UAMP message and ran no
  response for ``idle_timeout``.

A message larger than ``max_message_size`` closes the socket with 1009.
Malformed JSON or a bad event gets ``session.error`` from the core and the
connection stays open.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import trio

from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Responder

from ..engines.http import HTTPError
from ..engines.ws_frames import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    EngineName,
    FrameEngine,
    WebSocketClosed,
    make_engine,
)
from ..hosting.middleware import reject_upgrade
from ..hosting.router import RouteMeta
from ..hosting.sessions import Outbox, OutboxClosed, Overloaded, SessionHost, SessionLimits

if TYPE_CHECKING:
    from ..engines.websocket import WebSocketRequest
    from ..hosting.host import Host

__all__ = [
    "FrameHost",
    "UampWebSocketConfig",
    "UampWebSocketEndpoint",
    "mount",
    "serve_host",
    "serve_uamp_websocket",
]

#: What middleware knows of these routes: UAMP ``session.error`` refusals.
ROUTES = RouteMeta(transport="uamp_ws", error_style="uamp")

log = logging.getLogger("uamp_trio.uamp_ws")

#: Bytes asked of the socket per read.
READ_SIZE: Final = 65536
#: The WebSocket subprotocol names accepted when a client offers one.
SUBPROTOCOLS: Final = ("uamp", "uamp.v1")
#: How long closing waits for the writer to flush the close frame.
CLOSE_GRACE: Final = 2.0


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
            max_message_size=pending.max_message_size, send_timeout=pending.send_timeout
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
    app.router.add_websocket("/ws", endpoint, meta=ROUTES)


class _Connection:
    """The tasks of one UAMP WebSocket connection."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: FrameEngine,
        host: FrameHost,
        limits: SessionLimits,
    ) -> None:
        self.stream = stream
        self.engine = engine
        self.host = host
        self.limits = limits
        self.last_received = trio.current_time()
        self.writer_done = trio.Event()
        self.scope: trio.CancelScope | None = None
        self.closing: tuple[int, str] | None = None

    def shut(self, code: int, reason: str) -> None:
        """Close once what is queued is written: the writer sends the close frame last."""
        if self.closing is None:
            self.closing = (code, reason)
        self.host.outbox.close()

    async def reader(self, initial: bytes) -> None:
        engine, host, stream = self.engine, self.host, self.stream
        data = initial
        try:
            while True:
                if data:
                    for message in engine.feed(data):
                        host.feed(message)
                    self.last_received = trio.current_time()
                    if engine.owes:  # pongs and close replies
                        host.outbox.poke()
                try:
                    data = bytes(await stream.receive_some(READ_SIZE))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    engine.feed(b"")  # raises WebSocketClosed
        except WebSocketClosed as closed:
            log.debug("UAMP WebSocket closed: %s", closed)
            host.close_all(notify=False)
            host.outbox.close()
        except Overloaded as exc:
            log.info("dropping a UAMP WebSocket peer: %s", exc)
            self.shut(CLOSE_POLICY_VIOLATION, "too many unread replies")

    async def writer(self) -> None:
        engine, outbox = self.engine, self.host.outbox
        try:
            while True:
                try:
                    batch = await outbox.take()
                except OutboxClosed:
                    if self.closing is not None:
                        engine.close(*self.closing)
                    tail = engine.take()
                    if tail:
                        await self._send(tail)
                    return
                batch = await outbox.take_more(batch)
                if engine.closed is None:
                    text = engine.text
                    for message in batch:
                        text(message)
                data = engine.take()
                if data:
                    await self._send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.host.outbox.close()
        finally:
            self.writer_done.set()
            if self.scope is not None:
                # Nothing more will be written: give the peer a moment to answer
                # the close frame, then end the connection.
                self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_GRACE)

    async def _send(self, data: bytes) -> None:
        """Write ``data``; a peer that leaves it unread for ``send_timeout`` is dropped."""
        with trio.move_on_after(self.limits.send_timeout) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            log.info(
                "UAMP WebSocket peer not reading for %.0fs; dropping it", self.limits.send_timeout
            )
            if self.scope is not None:
                self.scope.cancel()
            raise trio.ClosedResourceError("peer not reading")

    async def keeper(self) -> None:
        limits, host = self.limits, self.host
        interval = limits.keepalive_interval
        pinged_at: float | None = None
        while True:
            now = trio.current_time()
            quiet = now - self.last_received
            if pinged_at is not None and self.last_received >= pinged_at:
                pinged_at = None  # the peer answered (or sent something)
            if pinged_at is not None and now - pinged_at >= interval:
                log.info("UAMP WebSocket peer silent for %.0fs; dropping it", quiet)
                self.shut(CLOSE_INTERNAL_ERROR, "keepalive timeout")
                return
            if pinged_at is None and quiet >= interval:
                self.engine.ping(b"uamp")
                host.outbox.poke()
                pinged_at = now
            idle_since = host.last_activity
            if not host.busy and now - idle_since >= limits.idle_timeout:
                host.close_all("timeout", notify=True)
                self.shut(CLOSE_GOING_AWAY, "idle timeout")
                return
            next_at = min(
                (pinged_at + interval) if pinged_at is not None else self.last_received + interval,
                idle_since + limits.idle_timeout if not host.busy else now + interval,
            )
            await trio.sleep_until(max(next_at, now + 0.001))


class FrameHost(Protocol):
    """What :func:`serve_host` drives: a :class:`SessionHost`, or anything shaped like one.

    The reader hands it every message (:meth:`feed`, never waiting), the
    writer drains its :attr:`outbox`, and the keeper reads :attr:`busy` and
    :attr:`last_activity` to close an idle connection.
    """

    outbox: Outbox
    last_activity: float

    @property
    def busy(self) -> bool:
        """Whether work is running (an idle connection is not closed meanwhile)."""
        ...

    def feed(self, message: bytes | str) -> object:
        """Take one incoming message; never waits."""
        ...

    def close_all(self, reason: str | None = None, *, notify: bool = True) -> None:
        """End everything the connection carries."""
        ...


async def serve_host(
    stream: trio.abc.Stream,
    make_host: Callable[[trio.Nursery], FrameHost],
    frames: FrameEngine,
    *,
    initial_data: bytes = b"",
    limits: SessionLimits | None = None,
) -> None:
    """Run the reader, writer and keeper of one WebSocket around a host until it closes.

    ``make_host`` builds the host in the connection's nursery (where its
    work runs); ``frames`` is a framing engine of the right side (a daemon
    dials out, so its engine is a client's).
    """
    limits = limits or SessionLimits()
    async with trio.open_nursery() as nursery:
        host = make_host(nursery)
        conn = _Connection(stream, frames, host, limits)
        conn.scope = nursery.cancel_scope
        nursery.start_soon(conn.writer)
        nursery.start_soon(conn.keeper)
        await conn.reader(initial_data)
        host.close_all(notify=False)
        conn.shut(CLOSE_NORMAL, "")
        with trio.move_on_after(CLOSE_GRACE):
            await conn.writer_done.wait()
        nursery.cancel_scope.cancel()
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await trio.aclose_forcefully(stream)


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

    await serve_host(stream, make_host, frames, initial_data=initial_data, limits=limits)
