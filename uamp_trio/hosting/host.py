"""The host: what a transport sees of the server it is mounted on.

A :class:`Host` holds the route table, the hosted agents and the shared
services and state the composition root creates and configures (payment
policy, response signer, the background nursery, the stores). Transports are
plain ``mount(host)`` functions that register routes with
:meth:`Host.agent_route` / :meth:`Host.agent_websocket` -- each under
``/agents/{agent}`` and, as spec 004 asks for a single-agent server, at the
root -- and find their agent with :meth:`Host.resolve_agent`.
:class:`uamp_trio.App` is the host the root builds (it adds the middleware
chain and the default transports); see docs/architecture.md.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from uamp_proto import history
from uamp_proto.busy import BusyLimits, parse_policy
from uamp_proto.payment import (
    PAYMENT_ATTEMPTS_PER_MINUTE,
    Charge,
    PaymentPolicy,
    PaymentRequiredError,
    balance_of,
    open_charge,
    pricing_of,
    refusal,
)
from uamp_proto.principal import Principal
from uamp_proto.ratelimit import SlidingWindow
from uamp_proto.responder import Responder
from uamp_stores.busy import ConversationGate

from ..engines.http import Endpoint
from ..engines.server import ServerConfig
from ..engines.supervise import Spawner
from ..engines.websocket import WebSocketHandler
from .agents import AgentRegistry, ServedAgent
from .chats import ChatHub
from .interrupts import Interrupts
from .parked import ParkedTurns
from .router import AGENT_PREFIX, DEFAULT_META, RouteMeta, Router, RouteWhen
from .turns import DEFAULT_TURN_OPTIONS, TurnOptions

if TYPE_CHECKING:
    from uamp_proto.signing import ResponseSigner

    from ..envelope.service import EnvelopeService
    from ..stores import Stores
    from ..trust.auth import Authenticator

__all__ = ["PAYMENT_ATTEMPTS_PER_MINUTE", "Host", "PolicyTransport", "Transport"]

#: A transport mounts its endpoints on a host.
Transport = Callable[["Host"], None]


class Host:
    """The agents a server hosts, the routes of their transports and shared services.

    Args:
        agents: The agents to host.
        payment_policy: See :attr:`payment_policy`.
        stores: The server-side state the root created for this host; a
            transport takes the store it needs from here when it mounts.
    """

    def __init__(
        self,
        agents: Iterable[Responder] = (),
        *,
        payment_policy: PaymentPolicy | None = None,
        stores: Stores,
    ) -> None:
        self.router = Router()
        self.agents = AgentRegistry()
        #: State that outlives a request (tasks, sessions), created by the root.
        self.stores = stores
        #: The live chat rooms (docs/chat.md), kept in ``stores.chats``.
        self.chats = ChatHub(stores.chats, self)
        #: Runs paused for a person, answerable by id from any transport
        #: (docs/human-in-the-loop.md).
        self.interrupts = Interrupts()
        #: Turns that outlive the request that started them: a run paused
        #: for a person on a protocol whose response ends with the ask
        #: (AG-UI, the AI SDK ...), read on by a later request.
        self.parked = ParkedTurns()
        #: Consulted by every transport before a turn runs (``None``: free).
        #: Transports read it when a request arrives, so it may be set after
        #: mounting.
        self.payment_policy: PaymentPolicy | None = payment_policy
        #: A nursery for work that outlives the request that started it (A2A
        #: tasks). :class:`~uamp_trio.engines.server.Server` sets it while
        #: serving and cancels what is left at the end of its shutdown grace
        #: period.
        #: Every task started in it runs supervised (:mod:`~uamp_trio.engines.supervise`).
        self.background: Spawner | None = None
        #: Tasks that run in :attr:`background` for as long as a server
        #: serves the app (started when it starts listening; the relay's
        #: routes shared between processes, docs/relay.md).
        self.services: list[Callable[[], Awaitable[None]]] = []
        #: Ready (``/readyz``) while it hosts no agent: a relay, whose agents
        #: come with the daemons that dial in, through the load balancer that
        #: asks it whether it is ready.
        self.ready_without_agents = False
        self._draining = False
        #: Set when a graceful shutdown begins (:attr:`draining`): long-lived
        #: streams with nothing in flight end then instead of holding the
        #: shutdown for its whole grace period.
        self.drain_started = trio.Event()
        #: ``(per connection, per session)``: the most encoded events queued
        #: for one connection's writer, and for one session of it
        #: (``ServerConfig.max_queued_events`` and
        #: ``max_session_queued_events``; the server sets them while serving).
        self.queue_limits: tuple[int, int] = (64, 32)
        #: What each principal's live UAMP sessions keep of their conversations,
        #: over all connections; its size is :attr:`server_config` 's
        #: ``max_history_bytes_per_principal``, and nothing else's.
        self.uamp_histories = history.SessionHistories()
        #: The turn options every turn the host runs starts on (the output
        #: bound ...), built from :attr:`server_config` whenever it is set.
        self.turns = DEFAULT_TURN_OPTIONS
        self.server_config = ServerConfig()
        #: How many connections the server serving the app has open (the
        #: server sets it when it starts; ``None`` until then): UAMP sessions
        #: warn their client as ``max_connections`` comes near (UAMP 6.17).
        self.connection_count: Callable[[], int] | None = None
        #: Payment tokens presented per principal and minute (UAMP 7.2 ``rate_limited``).
        self.payment_attempts = SlidingWindow(PAYMENT_ATTEMPTS_PER_MINUTE)
        #: Signs every transport's responses (spec 004 "Response Signing";
        #: where each puts the signature: docs/signing.md): a
        #: :class:`uamp_proto.signing.ResponseSigner`, i.e. a callable
        #: ``sign(response_text, request_bytes) -> str`` with a ``jwks()``
        #: method. ``None`` (the default): responses are not signed and no
        #: JWKS is served. Read per request, so it may be set after mounting.
        self.response_signer: ResponseSigner | None = None
        #: Verifies bearer tokens (the root's gate, and the per-session tokens
        #: of multiplexed UAMP sessions); ``None``: no authentication.
        self.authenticator: Authenticator | None = None
        #: The spec 003 envelope service every envelope binding (HTTP, WebSocket,
        #: gRPC, HTTP/3) hands envelopes to; the root creates it. ``None``: no
        #: envelope binding is served.
        self.envelopes: EnvelopeService | None = None
        #: The live :class:`~uamp_trio.hosting.sessions.SessionHost` of every
        #: UAMP connection, when something counts sessions (the metrics);
        #: ``None``: nobody does and they are not tracked.
        self.session_hosts: weakref.WeakSet[Any] | None = None
        #: Wraps every charge :meth:`open_charge` opens, with the agent's name
        #: (the metrics count what is settled); ``None``: charges as they are.
        self.on_charge: Callable[[Charge, str], Charge] | None = None
        self._gate = ConversationGate()
        self._gate_config: ServerConfig | None = None
        for agent in agents:
            self.add_agent(agent)

    async def payment_required(self, agent: str, token: str | None) -> PaymentRequiredError | None:
        """Why ``token`` cannot pay for a turn of ``agent`` now, or ``None`` (locks nothing).

        Every transport asks the host, so that the same agent behaves the
        same whatever protocol its client speaks.
        """
        return await refusal(self.payment_policy, agent, token, pricing_of(self.agents.get(agent)))

    async def payment_balance(self, token: str | None) -> str | None:
        """What ``token`` has left to spend, where the payment policy keeps balances."""
        return await balance_of(self.payment_policy, token)

    async def adopt_charge(self, agent: str, response_id: str) -> Charge | None:
        """The money a lost process held for ``response_id``, to settle here (or ``None``).

        For a response carried on (or ended ``interrupted``) after the
        process running it died (docs/resume.md, "Node loss"): its lock is
        settled once, with what was delivered, and never taken again.
        """
        adopt = getattr(self.payment_policy, "adopt", None)
        if adopt is None:
            return None
        charge: Charge | None = await adopt(agent, response_id, pricing_of(self.agents.get(agent)))
        if charge is not None and self.on_charge is not None:
            return self.on_charge(charge, agent)
        return charge

    async def open_charge(
        self,
        agent: str,
        token: str | None,
        response_id: str,
        *,
        policy: PaymentPolicy | None = None,
        principal: Principal | None = None,
    ) -> Charge | None:
        """Hold the price of one response of ``agent`` before it starts.

        With a ledger behind the policy this locks money on ``token``; the
        turn driver settles the returned charge when the response ends.
        ``None``: nothing to settle (free, or a policy that only decides).
        ``policy`` overrides the host's for a transport configured with its own.
        The lock records ``principal`` (the caller) as its owner.

        The lock is done once this returns: a caller must put the charge
        where it is settled (a ``finally``, a response's ``on_close``) before
        its next checkpoint.

        Raises:
            PaymentRequiredError: The response may not run until paid; its
                ``code`` says why (spec 000 section 7.2).
        """
        in_force = policy if policy is not None else self.payment_policy
        if in_force is None:
            return None  # free: what open_charge answers, without its frame
        declared = pricing_of(self.agents.get(agent))
        charge = await open_charge(
            in_force,
            agent,
            token,
            response_id,
            declared,
            principal=None if principal is None else principal.id,
        )
        if charge is not None and self.on_charge is not None:
            return self.on_charge(charge, agent)
        return charge

    @property
    def server_config(self) -> ServerConfig:
        """The configuration of the server serving the app (the server sets it when it starts).

        Transports read their per-principal limits here (``acp_max_sessions``
        ...) when a request arrives. Setting it sizes the app's history budget
        and builds :attr:`turns`, the options every turn runs on, once: a
        transport starting a turn passes no setting of its own
        (``host.turns.runner(...)``).
        """
        return self._server_config

    @server_config.setter
    def server_config(self, config: ServerConfig) -> None:
        self._server_config = config
        # The app's one history budget takes its size from here alone, before
        # the server's first connection: a connection's settings never set it
        # (what it has counted stays counted).
        self.uamp_histories.budget.max_bytes = config.max_history_bytes_per_principal
        # Built here, once per configuration: every turn reads this object.
        self.turns = self.parked.turns = TurnOptions(
            max_output_bytes=config.max_response_output_bytes
        )

    @property
    def conversations(self) -> ConversationGate:
        """The busy-conversation gate (:mod:`.busy`), set from :attr:`server_config`."""
        gate, config = self._gate, self._server_config  # the property, inline (every response)
        if self._gate_config is not config:
            self._gate_config = config
            limits = BusyLimits(
                per_conversation=config.busy_max_queued,
                per_principal=config.busy_max_queued_per_principal,
            )
            gate.configure(limits, parse_policy(config.on_busy))
        return gate

    @property
    def draining(self) -> bool:
        """Set by the server from the start of a graceful shutdown until it stops.

        Requests still served meanwhile (on open connections) see the server
        as not ready.
        """
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._draining = value
        if value:
            self.drain_started.set()
        elif self.drain_started.is_set():
            self.drain_started = trio.Event()

    def add_agent(self, agent: Responder) -> None:
        """Host ``agent`` under ``/agents/{agent.name}/`` (see :meth:`AgentRegistry.add`)."""
        self.agents.add(agent)

    def mount(self, *transports: Transport) -> None:
        """Let each transport register its routes."""
        for transport in transports:
            transport(self)

    def agent_route(
        self,
        methods: str | Iterable[str],
        subpath: str,
        endpoint: Endpoint,
        *,
        label: str | None = None,
        root: bool = True,
        meta: RouteMeta = DEFAULT_META,
        when: RouteWhen | None = None,
    ) -> None:
        """Serve ``endpoint`` at ``/agents/{agent}<subpath>`` (and at ``<subpath>``).

        Args:
            root: Also answer at the bare ``subpath``; :meth:`resolve_agent`
                then picks the only hosted agent.
            meta: What middleware knows of the route (transport, error style,
                public).
            when: Match only requests whose headers it accepts (a path
                shared with another transport; see :class:`Router`).
        """
        add = functools.partial(self.router.add, methods, endpoint=endpoint, meta=meta, when=when)
        _per_agent(add, subpath, label, root)

    def agent_websocket(
        self,
        subpath: str,
        handler: WebSocketHandler,
        *,
        label: str | None = None,
        root: bool = True,
        meta: RouteMeta = DEFAULT_META,
    ) -> None:
        """Serve a WebSocket ``handler`` at ``/agents/{agent}<subpath>`` (and ``<subpath>``)."""
        add = functools.partial(self.router.add_websocket, handler=handler, meta=meta)
        _per_agent(add, subpath, label, root)

    def resolve_agent(self, path_params: dict[str, str], *, model: str | None = None) -> Responder:
        """The agent a request addresses (see :meth:`AgentRegistry.resolve`).

        Raises:
            HTTPError: 404 ``agent_not_found``.
        """
        return self.agents.resolve(path_params, model=model)

    def urls(self, http_base: str, ws_base: str) -> dict[str, list[tuple[str, str]]]:
        """``{agent: [(label, url), ...]}`` for every labelled route, for display."""
        out: dict[str, list[tuple[str, str]]] = {}
        for name in self.agents:
            rows: list[tuple[str, str]] = []
            for route in self.router.routes:
                if route.label and "{agent}" in route.pattern:
                    rows.append((route.label, http_base + route.pattern.replace("{agent}", name)))
            for ws in self.router.websocket_routes:
                if ws.label and "{agent}" in ws.pattern:
                    rows.append((ws.label, ws_base + ws.pattern.replace("{agent}", name)))
            out[name] = rows
        return out

    def server_urls(self, http_base: str, ws_base: str) -> list[tuple[str, str]]:
        """``[(label, url), ...]`` of the labelled routes that name no agent, for display."""
        rows = [
            (route.label, http_base + route.pattern)
            for route in self.router.routes
            if route.label and "{" not in route.pattern
        ]
        rows.extend(
            (ws.label, ws_base + ws.pattern)
            for ws in self.router.websocket_routes
            if ws.label and "{" not in ws.pattern
        )
        return rows


def _per_agent(add: Callable[..., object], subpath: str, label: str | None, root: bool) -> None:
    """Register under ``/agents/{agent}`` (labelled), and at the root unless ``root`` is false."""
    add(AGENT_PREFIX + subpath, label=label)
    if root:
        add(subpath, label=None)


class PolicyTransport:
    """A transport mounted on a host, charging on a payment policy of its own or the host's.

    Args:
        app: The app whose agents are served.
        payment_policy: Consulted before every response; ``None``: the app's
            :attr:`~uamp_trio.app.App.payment_policy` (read per connection).
    """

    def __init__(self, app: Host, *, payment_policy: PaymentPolicy | None = None) -> None:
        self.app = app
        self._payment_policy = payment_policy

    @property
    def payment_policy(self) -> PaymentPolicy | None:
        """The policy in force: the one given, else the app's."""
        return self._payment_policy or self.app.payment_policy

    def served(self, agent: Responder) -> ServedAgent:
        """``agent`` on the terms in force now: the policy in force, the app's signer and turns."""
        return ServedAgent(agent, self.payment_policy, self.app.response_signer, self.app.turns)
