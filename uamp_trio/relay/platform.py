"""The relay side: daemons dial in, register agents, and every transport serves them.

Theory of operation
-------------------
``uamp serve --relay`` mounts :func:`mount`: the UAMP WebSocket at ``/ws``
becomes a :class:`RelayEndpoint` and ``/agents/connect`` is added (always a
daemon). On ``/ws`` the first message decides what the connection is
(docs/relay.md, "client or daemon"): a ``session.create`` naming an agent
that is neither hosted here nor connected now, or flagged
``extensions.relay_register`` (``uamp connect`` sends it), makes it a *daemon*; anything
else makes it an ordinary UAMP client, served by the UAMP WebSocket endpoint
with the bytes read so far.

A daemon connection is a :class:`DaemonLink`, run by the same reader, writer
and keeper as a UAMP client connection (:func:`uamp_trio.hosting.ws_connection.serve_host`).
Each ``session.create`` on it registers one agent: a :class:`RemoteAgent`
goes into the app's agent registry, so to every transport it is one more
:class:`~uamp_proto.responder.Responder`. Its ``respond`` sends the turn to
the daemon as one ``input.text`` under a fresh interaction-scoped session id
(:func:`uamp_proto.relay.turn_input`: the whole conversation, the client's
tools), then emits what the daemon answers under that id until
``response.done``, ``response.error`` or ``response.cancelled``. The
caller's payment token never goes to the daemon: the relay settles the turn
with it, and the daemon hears only that the turn is paid (``paid``). A
``payment.required`` of the daemon's is a mid-stream top-up: the client's
transport holds the turn until the client paid the relay, and the daemon
gets a receipt for the amount as ``payment.submit``. A cancel
from the client (the turn's task cancelled) becomes ``response.cancel``, and
every turn ends with ``session.end`` so the daemon forgets its id.

The reader never waits on a client: events from the daemon are queued on
their turn. Once half of :attr:`RelayLimits.max_queued_events` wait (a client
reads slower than its agent writes), the reader stops reading the daemon's
socket until a quarter or less wait: TCP pushes back on the daemon, whose
agents' ``emit`` then waits, and memory stays bounded. A client that stops
reading altogether is dropped by its own transport's send timeout, which
ends its turn and frees its events. Should the limit itself be reached all
the same, the turn that overflows fails with ``overloaded`` and is cancelled
on the daemon. When the socket ends, every turn in flight fails with ``agent_offline`` and the
daemon's agents stay registered but offline (the registry answers 503
``agent_offline``) until a daemon registers them again.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import orjson
import trio

from uamp_proto import codec
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import DecodeError
from uamp_proto.principal import Principal
from uamp_proto.relay import REGISTER, daemon_event, for_daemon, receipt, turn_input
from uamp_proto.responder import Emit, ResponderError, TurnRequest

from ..engines.http import Request, Response, json_response
from ..engines.ws_frames import WebSocketClosed, make_engine
from ..hosting.agents import AGENT_OFFLINE, unwrapped
from ..hosting.outbox import Outbox, Overloaded
from ..hosting.router import RouteMeta, WebSocketRoute
from ..hosting.sessions import SessionLimits
from ..hosting.ws_connection import SUBPROTOCOLS, serve_host
from ..trust.auth import SESSION_AUTH, AuthError, is_loopback
from ..trust.registration import bound_to

if TYPE_CHECKING:
    from ..engines.websocket import WebSocketRequest
    from ..hosting.host import Host

__all__ = [
    "DaemonLink",
    "Link",
    "Relay",
    "RelayEndpoint",
    "RelayLimits",
    "RemoteAgent",
    "Shared",
    "mount",
]

log = logging.getLogger("uamp_trio.relay")

#: The relay's WebSocket routes: refused in UAMP's style, and (like the UAMP
#: WebSocket) an upgrade without a token defers to each ``session.create``'s.
UAMP_ROUTES = RouteMeta(transport="uamp_ws", error_style="uamp")
#: Serves a UAMP client on an accepted upgrade, given the bytes read past it.
ClientHandler = Callable[["WebSocketRequest", bytes], Awaitable[None]]
#: ``GET /agents`` speaks the OpenAI error style.
LIST_ROUTES = RouteMeta(transport="relay", error_style="openai")
#: How long ``/ws`` waits for the first message before it decides nothing.
FIRST_MESSAGE_TIMEOUT: Final = 30.0
_READ_SIZE: Final = 65536
#: Server events a daemon may send under a turn's id that are no part of its response.
_NOT_OF_A_RESPONSE: Final = (
    ev.ResponseCreated,
    ev.SessionCreated,
    ev.SessionUpdated,
    ev.SessionEnd,
    ev.CapabilitiesEvent,
    ev.Pong,
)


@attrs.frozen(kw_only=True)
class RelayLimits:
    """Per-daemon limits of a relay.

    Attributes:
        max_agents: Agents one daemon connection may register.
        max_sessions: Turns in flight on one daemon at once; one more is
            refused with ``too_many_sessions`` (503 on HTTP transports).
        max_queued_events: Events from one daemon waiting for their clients;
            the turn that overflows fails with ``overloaded``.
    """

    max_agents: int = 1024
    max_sessions: int = 256
    max_queued_events: int = 4096

    def __attrs_post_init__(self) -> None:
        for name in ("max_agents", "max_sessions", "max_queued_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _error(session_id: str | None, code: str, message: str) -> ev.SessionErrorEvent:
    return ev.SessionErrorEvent(
        session_id=session_id, error=ty.ErrorInfo(code=code, message=message)
    )


class Link(Protocol):
    """What serves a connected agent's turns: its daemon's socket here, or another relay process."""

    async def run_turn(self, request: TurnRequest, emit: Emit) -> None:
        """Run ``request``; its events go to ``emit``."""


class Shared(Protocol):
    """The routes this relay shares with other relay processes (:mod:`.shared`)."""

    def publish(self, name: str, agent: RemoteAgent) -> None:
        """A daemon here serves ``name`` now (or declared new capabilities); never waits."""

    def withdraw(self, name: str) -> None:
        """No daemon here serves ``name`` any more; never waits."""

    def replace(self, name: str, link: Link) -> None:
        """A daemon here took ``name`` over from ``link`` (another process); never waits."""


class RemoteAgent:
    """An agent a daemon registered: to every transport, just another Responder.

    Args:
        name: The name it registered under.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        #: What serves it now: its daemon's connection, or another relay
        #: process that has it (``None``: offline).
        self.link: Link | None = None
        #: Its registration's session id on that connection.
        self.registration: str | None = None
        #: What the daemon declared (a ``capabilities`` event), if anything.
        self.declared: ty.Capabilities | None = None

    @property
    def name(self) -> str:
        """The registered name."""
        return self._name

    @property
    def online(self) -> bool:
        """Whether a daemon serves it now."""
        return self.link is not None

    def capabilities(self) -> ty.Capabilities:
        """What the daemon declared, else text streaming with client tools."""
        if self.declared is not None:
            return self.declared
        return ty.Capabilities(
            id=self._name,
            provider="uamp-relay",
            modalities=["text"],
            supports_streaming=True,
            tools=ty.ToolCapabilities(supports_tools=True),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the turn on the daemon (see the module docstring)."""
        link = self.link
        if isinstance(link, DaemonLink) and link.expired(self.registration):
            assert self.registration is not None
            link.end_expired(self.registration)  # before its timer noticed
            link = self.link
        if link is None:
            raise ResponderError(
                AGENT_OFFLINE, f"Agent {self._name!r} is offline: its daemon is not connected."
            )
        await link.run_turn(request, emit)


class _Turn:
    """Events of one turn, queued by the reader for the turn's task."""

    __slots__ = ("events", "failure", "lot", "sid")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.events: deque[ev.Event] = deque()
        self.lot = trio.lowlevel.ParkingLot()
        self.failure: ResponderError | None = None

    def fail(self, error: ResponderError) -> None:
        if self.failure is None:
            self.failure = error
        self.lot.unpark_all()


class DaemonLink:
    """One daemon's connection on the relay (a :class:`~uamp_trio.hosting.ws_connection.FrameHost`).

    Args:
        relay: The relay it registers agents with.
        nursery: The connection's nursery (registrations being verified run there).
        principal: Who the upgrade authenticated (``SESSION_AUTH``: nobody yet).
        loopback: Whether the peer is on this machine.
        limits: The connection's UAMP limits (outbox sizes).
    """

    def __init__(
        self,
        relay: Relay,
        nursery: trio.Nursery,
        principal: Principal,
        loopback: bool,
        limits: SessionLimits,
    ) -> None:
        self.relay = relay
        self.outbox = Outbox(limits.outbox_size, limits.max_owed)
        self.last_activity = trio.current_time()
        self.closed = False
        self._nursery = nursery
        self._principal = principal
        self._loopback = loopback
        #: Registration session id -> the agent it registered.
        self.registered: dict[str, RemoteAgent] = {}
        #: Registration session id -> who registered it, while its credential holds.
        self._registrants: dict[str, Principal] = {}
        self._turns: dict[str, _Turn] = {}
        self._queued = 0
        limit = relay.limits.max_queued_events
        self._high_water = max(1, limit // 2)
        self._low_water = limit // 4
        self._drain = trio.lowlevel.ParkingLot()

    @property
    def backlogged(self) -> bool:
        """Half of :attr:`RelayLimits.max_queued_events` wait: stop reading the daemon."""
        return self._queued >= self._high_water

    async def drained(self) -> None:
        """Return once a quarter of the queue limit or less waits (or the link ended)."""
        while self._queued > self._low_water and not self.closed:
            await self._drain.park()

    def _taken(self, count: int) -> None:
        self._queued -= count
        if self._drain and self._queued <= self._low_water:
            self._drain.unpark_all()

    @property
    def busy(self) -> bool:
        """A daemon with agents registered is never idle-closed (its pings keep it honest)."""
        return bool(self.registered) or bool(self._turns)

    # --- the reader's side (never waits) --------------------------------------------

    def feed(self, message: bytes | str) -> None:
        """Take one message from the daemon."""
        self.last_activity = trio.current_time()
        try:
            obj = orjson.loads(message)
        except orjson.JSONDecodeError as exc:
            self._owe(_error(None, "invalid_json", f"not JSON: {exc}"))
            return
        if type(obj) is not dict or type(obj.get("type")) is not str:
            return  # a broadcast copy or junk: never an event to act on
        sid = obj.get("session_id")
        turn = self._turns.get(sid) if type(sid) is str else None
        if turn is not None:
            if obj["type"] == "response.created":
                return  # the client's own response announces itself
            # Read without the daemon's ids: the relay's turn stamps its own
            # (one decode per event and no copy on the hot path).
            del obj["session_id"]
            obj.pop("event_id", None)
            obj.pop("response_id", None)
        try:
            event = daemon_event(obj)
        except DecodeError as exc:
            if turn is not None:
                log.info("relay: dropping a daemon event it cannot read: %s", exc)
            else:
                self._owe(_error(sid if type(sid) is str else None, "invalid_event", str(exc)))
            return
        if turn is not None:
            if isinstance(event, ev.Event):
                self._queue(turn, event)
            return
        if isinstance(event, ev.Ping):
            self._owe(ev.Pong())
        elif isinstance(event, ev.SessionCreate):
            self._register(event)
        elif isinstance(event, ev.CapabilitiesEvent):
            agent = self.registered.get(sid) if type(sid) is str else None
            if agent is not None:
                agent.declared = event.capabilities
                if self.relay.shared is not None and agent.link is self:
                    self.relay.shared.publish(agent.name, agent)
        elif isinstance(event, ev.SessionEnd) and type(sid) is str and sid in self.registered:
            self._registrants.pop(sid, None)
            self.relay.unlink_one(self, sid)
        elif isinstance(event, ev.SessionUpdate) and type(sid) is str and sid in self.registered:
            self._nursery.start_soon(self._refresh, sid, event.token)

    def _queue(self, turn: _Turn, event: ev.Event) -> None:
        if self._queued >= self.relay.limits.max_queued_events:
            turn.fail(
                ResponderError(
                    "overloaded", "The relay queued too many events of this agent's daemon."
                )
            )
            return
        turn.events.append(event)
        self._queued += 1
        if turn.lot:
            turn.lot.unpark_all()

    def close_all(self, reason: str | None = None, *, notify: bool = True) -> None:
        """The socket ended: every turn fails with ``agent_offline``, the agents go offline."""
        if self.closed:
            return
        self.closed = True
        lost = ResponderError(AGENT_OFFLINE, "The agent's daemon disconnected.")
        for turn in self._turns.values():
            turn.fail(lost)
        self._drain.unpark_all()
        self.relay.unlink(self)

    def _owe(self, event: ev.Event) -> None:
        self.outbox.put_owed(codec.encode(event))

    def send(self, event: ev.Event) -> None:
        """Queue ``event`` for the daemon (never waits).

        Raises:
            ResponderError: ``agent_offline`` when the daemon is gone or does
                not read what it is sent.
        """
        if self.closed or self.outbox.closed:
            raise ResponderError(AGENT_OFFLINE, "The agent's daemon disconnected.")
        try:
            self._owe(event)
        except Overloaded:
            raise ResponderError(
                AGENT_OFFLINE, "The agent's daemon is not reading what it is sent."
            ) from None

    # --- registration -----------------------------------------------------------------

    def _register(self, create: ev.SessionCreate) -> None:
        sid = create.session_id or _new_id("reg_")
        name = create.agent
        if not name:
            self._owe(_error(sid, "agent_required", "name the agent in session.create"))
            return
        if len(self.registered) >= self.relay.limits.max_agents:
            self._owe(
                _error(
                    sid,
                    "too_many_sessions",
                    f"one daemon may register at most {self.relay.limits.max_agents} agents",
                )
            )
            return
        auth = self.relay.app.authenticator
        if auth is None:
            if not self._loopback:
                self._owe(
                    _error(
                        sid,
                        "forbidden",
                        "this relay has no authentication: it accepts registrations from "
                        "this machine only",
                    )
                )
                return
            self._admit(sid, name, self._principal)
            return
        self._nursery.start_soon(self._verify, sid, name, create.token)

    async def _verify(self, sid: str, name: str, token: str | None) -> None:
        principal = self._principal
        auth = self.relay.app.authenticator
        assert auth is not None
        if token is not None:
            try:
                principal = await auth.authenticate(token)
            except AuthError as exc:
                log.info("relay: refused a registration of %r: %s", name, exc.message)
                self._owe_safely(_error(sid, "unauthorized", exc.message))
                return
        if principal is SESSION_AUTH or not bound_to(principal, name):
            log.info("relay: refused a registration of %r: credential not bound to it", name)
            self._owe_safely(
                _error(
                    sid,
                    "forbidden",
                    f"this credential may not register agent {name!r}: it needs a token bound "
                    "to that agent (an agent_id or agent_name claim, or an agent:NAME API key)",
                )
            )
            return
        self._admit(sid, name, principal)

    def _owe_safely(self, event: ev.Event) -> None:
        try:
            self._owe(event)
        except Overloaded:
            self.outbox.close()

    def _admit(self, sid: str, name: str, principal: Principal) -> None:
        if self.closed:
            return
        refused = self.relay.link(self, sid, name)
        if refused is not None:
            self._owe_safely(_error(sid, *refused))
            return
        log.info(
            "relay: agent %r registered by %s:%s (session %s)",
            name,
            principal.scheme,
            principal.id,
            sid,
        )
        self._registrants[sid] = principal
        if principal.expires_at is not None:
            self._nursery.start_soon(self._expire, sid)
        self._owe_safely(
            ev.SessionCreated(
                session_id=sid,
                uamp_version="1.0",
                session=ty.Session(id=sid, status="active", unknown={"agent": name}),
                agent=name,
            )
        )

    # --- a registration lasts as long as its credential ---------------------------------

    def expired(self, sid: str | None) -> bool:
        """Whether registration ``sid``'s credential has expired (turns are no longer its)."""
        principal = self._registrants.get(sid) if sid is not None else None
        return principal is not None and principal.expired(time.time())

    async def _expire(self, sid: str) -> None:
        """End registration ``sid`` when its credential expires (unless refreshed meanwhile)."""
        while True:
            principal = self._registrants.get(sid)
            if principal is None or principal.expires_at is None or sid not in self.registered:
                return
            left = principal.expires_at - time.time()
            if left <= 0:
                break
            await trio.sleep(left)
        self.end_expired(sid)

    def end_expired(self, sid: str) -> None:
        """Registration ``sid``'s credential expired: its agent goes offline, the daemon is told."""
        self._registrants.pop(sid, None)
        agent = self.registered.get(sid)
        if agent is None:
            return
        log.info("relay: the registration of %r ended: its credential expired", agent.name)
        self.relay.unlink_one(self, sid, reason="its credential expired")
        if not self.closed:
            self._owe_safely(ev.SessionEnd(session_id=sid, reason="token_expired"))

    async def _refresh(self, sid: str, token: str | None) -> None:
        """``session.update`` on a registration: a fresh token of the same principal."""
        auth = self.relay.app.authenticator
        before = self._registrants.get(sid)
        agent = self.registered.get(sid)
        if auth is None or before is None or agent is None:
            self._owe_safely(ev.SessionUpdated(session_id=sid))
            return
        try:
            principal = await auth.authenticate(token)
        except AuthError as exc:
            self._owe_safely(_error(sid, "unauthorized", exc.message))
            return
        if principal.key != before.key or not bound_to(principal, agent.name):
            self._owe_safely(
                _error(
                    sid,
                    "forbidden",
                    "session.update must bring a token of the principal that registered "
                    f"agent {agent.name!r}",
                )
            )
            return
        if sid in self._registrants:  # not ended while the token was checked
            self._registrants[sid] = principal
            if before.expires_at is None and principal.expires_at is not None:
                self._nursery.start_soon(self._expire, sid)
        self._owe_safely(ev.SessionUpdated(session_id=sid))

    # --- turns ------------------------------------------------------------------------

    async def run_turn(
        self, request: TurnRequest, emit: Emit, forwarded: ev.InputText | None = None
    ) -> None:
        """Run ``request`` on the daemon; its events go to ``emit`` (see the module docstring).

        ``forwarded``: the ``input.text`` another relay process built for
        the turn, sent as it is under this turn's session id.

        Raises:
            ResponderError: ``agent_offline`` (the daemon went away),
                ``too_many_sessions``, ``overloaded``, or the daemon's own
                ``response.error``.
        """
        limits = self.relay.limits
        if len(self._turns) >= limits.max_sessions:
            raise ResponderError(
                "too_many_sessions",
                f"The agent's daemon runs {limits.max_sessions} turns already; try again later.",
            )
        sid = _new_id("rly_")
        turn = _Turn(sid)
        self._turns[sid] = turn
        finished = streamed_usage = False
        try:
            start = (
                turn_input(request, sid)
                if forwarded is None
                else attrs.evolve(forwarded, session_id=sid)
            )
            # The caller's payment token stays here (docs/relay.md, "Money").
            paid = start.payment_token is not None and self.relay.app.payment_policy is not None
            self.send(for_daemon(start, paid=paid))
            events = turn.events
            while True:
                while not events:
                    if turn.failure is not None:
                        raise turn.failure
                    await turn.lot.park()
                event = events.popleft()
                self._taken(1)
                if type(event) is ev.ResponseDelta:  # the hot path first
                    await emit(event)
                    continue
                if isinstance(event, ev.ResponseDone):
                    finished = True
                    usage = event.response.usage
                    if usage is not None and not streamed_usage:
                        await emit(ev.UsageDelta(delta=usage))
                    return
                if isinstance(event, ev.ResponseErrorEvent | ev.SessionErrorEvent):
                    finished = True
                    err = event.error
                    raise ResponderError(err.code, err.message, err.details)
                if isinstance(event, ev.ResponseCancelled):
                    finished = True
                    raise ResponderError("cancelled", "The agent's daemon cancelled the response.")
                if isinstance(event, _NOT_OF_A_RESPONSE) or event.direction == "client":
                    continue
                if type(event) is ev.PaymentRequired:
                    await self._top_up(request, sid, event, emit)
                    continue
                streamed_usage = streamed_usage or isinstance(event, ev.UsageDelta)
                await emit(event)
        finally:
            log.debug("relay: turn %s ends (finished=%s)", sid, finished)
            del self._turns[sid]
            self._taken(len(turn.events))
            if not self.closed and not self.outbox.closed:
                try:
                    if not finished:
                        self._owe(ev.ResponseCancel(session_id=sid))
                    self._owe(ev.SessionEnd(session_id=sid))
                except Overloaded:
                    self.outbox.close()

    async def _top_up(
        self, request: TurnRequest, sid: str, required: ev.PaymentRequired, emit: Emit
    ) -> None:
        """The daemon's mid-stream ``payment.required``: the client pays, the daemon hears of it.

        The client's transport holds the turn until its payment was
        accepted (the relay's own policy and ledger judge it, as for a
        local agent); the daemon then gets a ``payment.submit`` on the
        turn's session, where the agent's ``emit`` is waiting for it,
        holding a receipt for the amount, never the token the client paid
        with (that one spends money here, and the daemon is not trusted with it).
        """
        await emit(required)
        self.send(receipt(sid, required.requirements, _new_id("rcpt_")))


class Relay:
    """The daemons' agents of one app, by name; see the module docstring.

    Args:
        app: The host whose agent registry the agents join.
        limits: Per-daemon limits.
    """

    def __init__(self, app: Host, limits: RelayLimits | None = None) -> None:
        self.app = app
        self.limits = limits or RelayLimits()
        self.agents: dict[str, RemoteAgent] = {}
        #: The routes shared with other relay processes (``None``: this one only).
        self.shared: Shared | None = None

    def live(self, name: str) -> bool:
        """Whether ``name`` is hosted here or served by a connected daemon."""
        found = self.app.agents.get(name)
        agent = unwrapped(found) if found is not None else None  # metrics, traces wrap agents
        return agent is not None and not (isinstance(agent, RemoteAgent) and not agent.online)

    def link(self, link: DaemonLink, sid: str, name: str) -> tuple[str, str] | None:
        """Serve agent ``name`` through ``link``; ``(code, message)`` when refused.

        A second registration of a name replaces the first: new turns go to
        the newest daemon, turns in flight finish where they run, and the
        older daemon's registration ends with ``session.end`` ``replaced``.
        """
        agent = self.agents.get(name)
        if agent is None:
            if name in self.app.agents:
                return ("name_taken", f"agent {name!r} is hosted by the relay itself")
            agent = RemoteAgent(name)
            try:
                self.app.add_agent(agent)
            except ValueError as exc:
                return ("invalid_agent", str(exc))
            self.agents[name] = agent
        old, old_sid = agent.link, agent.registration
        if isinstance(old, DaemonLink) and old_sid is not None and old is not link:
            self.end_registration(old, old_sid, name)
        elif old is not None and self.shared is not None:
            self.shared.replace(name, old)
        agent.link, agent.registration = link, sid
        link.registered[sid] = agent
        self.app.agents.offline.discard(name)
        if self.shared is not None:
            self.shared.publish(name, agent)
        return None

    def end_registration(self, link: DaemonLink, sid: str, name: str) -> None:
        """A newer registration replaces ``link`` 's of ``name``: it ends with ``replaced``."""
        link.registered.pop(sid, None)
        log.info("relay: agent %r re-registered; the older daemon's registration ends", name)
        with contextlib.suppress(ResponderError):
            link.send(ev.SessionEnd(session_id=sid, reason="replaced"))

    def route(self, name: str, link: Link | None, declared: ty.Capabilities | None) -> None:
        """Another relay process serves ``name`` through ``link`` (``None``: nobody does now).

        A name a daemon of this process serves is left alone (its own
        registration is what the other processes will see).
        """
        agent = self.agents.get(name)
        if agent is not None and isinstance(agent.link, DaemonLink):
            return
        if agent is None:
            if link is None or name in self.app.agents:
                return
            agent = RemoteAgent(name)
            try:
                self.app.add_agent(agent)
            except ValueError:
                return
            self.agents[name] = agent
        agent.link, agent.registration = link, None
        if declared is not None:
            agent.declared = declared
        if link is None:
            self.app.agents.offline.add(name)
        else:
            self.app.agents.offline.discard(name)

    def unlink_one(
        self, link: DaemonLink, sid: str, reason: str = "unregistered by its daemon"
    ) -> None:
        """A registration ended (``session.end``, an expired credential): its agent goes offline."""
        agent = link.registered.pop(sid, None)
        if agent is not None and agent.link is link:
            self._offline(agent)
            log.info("relay: agent %r offline (%s)", agent.name, reason)

    def _offline(self, agent: RemoteAgent) -> None:
        agent.link = agent.registration = None
        self.app.agents.offline.add(agent.name)
        if self.shared is not None:
            self.shared.withdraw(agent.name)

    def unlink(self, link: DaemonLink) -> None:
        """A daemon's socket ended: its agents go offline until registered again."""
        for sid in list(link.registered):
            agent = link.registered.pop(sid)
            if agent.link is link:
                self._offline(agent)
                log.info("relay: agent %r offline (its daemon disconnected)", agent.name)

    def listing(self) -> list[dict[str, str]]:
        """Every agent of the app: ``{"name", "kind", "state"}``."""
        out = []
        for name, hosted in sorted(self.app.agents.items()):
            agent = unwrapped(hosted)
            if isinstance(agent, RemoteAgent):
                state = "online" if agent.online else "offline"
                out.append({"name": name, "kind": "connected", "state": state})
            else:
                out.append({"name": name, "kind": "local", "state": "online"})
        return out


class RelayEndpoint:
    """``/ws`` (client or daemon, by the first message) and ``/agents/connect`` (daemon).

    Args:
        relay: The relay daemons register with.
        clients: Serves a connection that turned out to be a UAMP client.
        daemon_only: Every connection is a daemon (``/agents/connect``).
    """

    def __init__(self, relay: Relay, clients: ClientHandler, *, daemon_only: bool) -> None:
        self.relay = relay
        self.daemon_only = daemon_only
        self.clients = clients

    async def __call__(self, pending: WebSocketRequest) -> None:
        """Accept the upgrade, then serve a daemon or a client."""
        chosen = next((p for p in SUBPROTOCOLS if p in pending.subprotocols), None)
        await pending.accept(subprotocol=chosen)
        data = pending.initial_data
        if not self.daemon_only:
            peeked = await self._first_message(pending)
            if peeked is None:
                return
            first, data = peeked
            if not self._is_registration(first):
                await self.clients(pending, data)
                return
        await self.serve_daemon(pending, data)

    async def _first_message(self, pending: WebSocketRequest) -> tuple[bytes, bytes] | None:
        """The first message and every byte read so far (``None``: the peer left)."""
        frames = make_engine(client=False, max_message_size=pending.max_message_size)
        data = bytes(pending.initial_data)
        with trio.move_on_after(FIRST_MESSAGE_TIMEOUT):
            try:
                chunk = data
                while True:
                    messages = frames.feed(chunk) if chunk else []
                    if messages:
                        return messages[0], data
                    chunk = bytes(await pending.stream.receive_some(_READ_SIZE))
                    if not chunk:
                        frames.feed(b"")
                    data += chunk
            except (WebSocketClosed, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(pending.stream)
        return None

    def _is_registration(self, message: bytes) -> bool:
        try:
            event = codec.decode(message)
        except DecodeError:
            return False
        if not isinstance(event, ev.SessionCreate) or not event.agent:
            return False
        extensions = event.session.extensions if event.session is not None else None
        if extensions and extensions.get(REGISTER) is True:
            return True  # a daemon says so (it may be taking the name over)
        return not self.relay.live(event.agent)

    async def serve_daemon(self, pending: WebSocketRequest, initial_data: bytes) -> None:
        """Serve a daemon's connection until it ends."""
        request = pending.request
        peer = request.client[0] if request.client else ""
        limits = SessionLimits(
            max_message_size=pending.max_message_size, send_timeout=pending.send_timeout
        )
        frames = make_engine(client=False, max_message_size=limits.max_message_size)

        def make_host(nursery: trio.Nursery) -> DaemonLink:
            return DaemonLink(self.relay, nursery, request.principal, is_loopback(peer), limits)

        await serve_host(
            pending.stream, make_host, frames, initial_data=initial_data, limits=limits
        )


def mount(app: Host, clients: ClientHandler, limits: RelayLimits | None = None) -> Relay:
    """Make ``app`` a relay: ``/ws`` and ``/agents/connect`` take daemons, ``GET /agents`` lists.

    ``clients`` serves a ``/ws`` connection that is a UAMP client after all
    (the root hands over its UAMP WebSocket endpoint).
    """
    relay = Relay(app, limits)
    daemons = RelayEndpoint(relay, clients, daemon_only=True)
    either = RelayEndpoint(relay, clients, daemon_only=False)
    app.router.websocket_routes[:0] = [
        WebSocketRoute("/agents/connect", daemons, meta=UAMP_ROUTES),
        WebSocketRoute("/ws", either, meta=UAMP_ROUTES),
    ]

    async def agents(request: Request) -> Response:
        return json_response({"agents": relay.listing()})

    app.router.add("GET", "/agents", agents, meta=LIST_ROUTES)
    return relay
