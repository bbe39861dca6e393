"""The daemon side: dial a relay, register agents, serve their turns over that one socket.

::

    daemon = Daemon("https://relay.example", [agent_a, agent_b], token="...")
    await daemon.run()              # until daemon.stop() or a refusal

``uamp connect URL --agent module:attr ...`` runs exactly this.

Theory of operation
-------------------
:meth:`Daemon.run` dials the relay's WebSocket (:func:`uamp_proto.relay.daemon_url`:
``http(s)`` becomes ``ws(s)``, a bare origin gets ``/ws``), the credential in
``Authorization: Bearer`` on the upgrade, and runs the connection with the
same reader, writer and keeper as a UAMP server connection
(:func:`uamp_trio.hosting.ws_connection.serve_host`; the keeper's WebSocket pings
are the daemon's heartbeat). The :class:`DaemonHost` it drives sends one
``session.create`` per agent, ``{"session": {"agent": NAME, "token": T}}``
under a session id it proposes, and logs one line per ``session.created``.

Then the roles turn. An ``input.text`` (a frame with a top-level ``type``;
``event``-only broadcast frames never start anything) starts a turn of the
agent registered under its ``session_id``, or named by its ``agent`` field
when the id is an interaction-scoped one the relay opened for the turn. The
turn runs through the turn driver every listening transport uses
(:class:`~uamp_trio.hosting.turns.ResponseRunner`) on
:func:`uamp_proto.relay.turn_request` (the relay's ``messages``: a daemon
keeps no state), in a task of its own, so a slow turn never stalls the
reader. Its events go back under the turn's ``session_id``; a turn that
stops for client tools ends with ``response.done`` status
``requires_action``. An agent's mid-stream ``payment.required`` (a
top-up) goes to the relay and its ``emit`` waits for the ``payment.submit``
the relay sends once the client paid: a receipt for the amount (its id
lands in the request's ``metadata[PAID_TOKEN]``), never the client's token,
which stays with the relay; ``metadata["paid"]`` says the relay took payment
for the turn. ``response.cancel`` and ``session.end`` cancel the
turn's runner (``response.cancelled``); a second ``input.text`` on a busy
session replaces the turn running there.

The relay ends a registration when the credential it was made with expires
(``session.end`` reason ``token_expired``); :meth:`Daemon.refresh` sends each
agent's fresh token as ``session.update`` on its registration before that.
A refused credential or agent (``session.error`` for a registration) is one
log line; when every agent was refused, or the upgrade itself was refused
with 401/403, :meth:`Daemon.run` raises :class:`DaemonRefused`. Any other end
of the connection reconnects after :func:`uamp_proto.relay.backoff_delay`
(exponential, with jitter) and registers every agent again.
:meth:`Daemon.stop` cancels the turns in flight (each ends
``response.cancelled``), ends every registration with ``session.end`` and
closes the socket with 1000.
"""

from __future__ import annotations

import logging
import random
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import orjson
import trio

from uamp_proto import codec
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import DecodeError
from uamp_proto.errors import UampError
from uamp_proto.relay import REGISTER, backoff_delay, daemon_url, turn_request
from uamp_proto.responder import PAID_TOKEN, Emit, Responder, TurnRequest
from uamp_proto.response import MAX_OUTPUT_BYTES

from ..client.uamp import ClientError, open_websocket
from ..engines.ws_frames import CLOSE_NORMAL, FrameEngine, make_engine
from ..hosting.outbox import Outbox, OutboxClosed
from ..hosting.sessions import SessionLimits
from ..hosting.turns import ResponseRunner, TurnOptions
from ..hosting.ws_connection import serve_host

__all__ = ["Daemon", "DaemonHost", "DaemonRefused", "connect"]

log = logging.getLogger("uamp_trio.daemon")

#: Upgrade statuses that mean the credential itself is refused: retrying cannot help.
_REFUSED_CODES: Final = frozenset({"unauthorized", "forbidden", "invalid_token"})
#: How long :meth:`Daemon.stop` lets cancelled turns send their last events.
STOP_GRACE: Final = 2.0


class DaemonRefused(UampError):
    """The relay refused the daemon's credential or every agent it registers (one line)."""


def _turn_id() -> str:
    return "resp_" + uuid.uuid4().hex


class _Payment:
    """A turn's mid-stream ``payment.required``, until the relay's ``payment.submit`` answers it."""

    __slots__ = ("paid", "token")

    def __init__(self) -> None:
        self.paid = trio.Event()
        self.token: str | None = None


class DaemonHost:
    """One daemon connection's registrations and turns (a ``FrameHost``, see the module docstring).

    Args:
        nursery: Where the turns run.
        agents: The agents to register, by name.
        tokens: Each agent's registration token (``None``: the connection's credential).
        frames: The connection's framing engine (for the close frame).
        limits: Outbox sizes, and the bound on one response's output
            (``max_response_output_bytes``).
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        agents: Mapping[str, Responder],
        tokens: Mapping[str, str | None],
        frames: FrameEngine,
        limits: SessionLimits,
    ) -> None:
        self.outbox = Outbox(limits.outbox_size, limits.max_owed)
        #: What its turns run on, built once from ``limits`` (the output bound).
        self.turns = TurnOptions(max_output_bytes=limits.max_response_output_bytes)
        self.last_activity = trio.current_time()
        self._nursery = nursery
        self._agents = agents
        self._frames = frames
        #: Registration session id -> agent name, proposed and not yet answered.
        self._pending: dict[str, str] = {}
        #: Registration session id -> agent name, accepted by the relay.
        self.registered: dict[str, str] = {}
        #: ``(agent, code, message)`` of each refused registration.
        self.refused: list[tuple[str, str, str]] = []
        self._runs: dict[str, ResponseRunner] = {}
        #: Turn session id -> its emitted ``payment.required``, waiting for ``payment.submit``.
        self._payments: dict[str, _Payment] = {}
        for name, agent in agents.items():
            sid = "reg_" + uuid.uuid4().hex
            self._pending[sid] = name
            # Spec 004's multiplexed form: the agent and its token inside ``session``.
            named: dict[str, str] = {"agent": agent.name}
            token = tokens.get(name)
            if token is not None:
                named["token"] = token
            # ``extensions.relay_register``: a registration even on ``/ws`` while
            # the relay still lists the name (its old daemon's process just died).
            create = ev.SessionCreate(
                session_id=sid,
                uamp_version="1.0",
                session=ty.SessionConfig(
                    modalities=["text"], extensions={REGISTER: True}, unknown=named
                ),
            )
            self._owe(create)
        #: Set once every agent was answered (registered or refused).
        self.answered = trio.Event()

    #: The relay's messages are taken at once: turns run in tasks of their own.
    backlogged = False

    async def drained(self) -> None:
        """Nothing to wait for (see :attr:`backlogged`)."""

    @property
    def busy(self) -> bool:
        """A daemon's connection is never idle-closed."""
        return True

    @property
    def fatal(self) -> bool:
        """Whether the relay refused every agent."""
        return not self.registered and not self._pending and bool(self.refused)

    def _owe(self, event: ev.Event) -> None:
        self.outbox.put_owed(codec.encode(event))

    # --- the reader's side ------------------------------------------------------------

    def feed(self, message: bytes | str) -> None:
        """Take one message from the relay; never waits."""
        self.last_activity = trio.current_time()
        try:
            obj = orjson.loads(message)
        except orjson.JSONDecodeError:
            log.warning("relay sent a message that is not JSON; ignored")
            return
        if type(obj) is not dict or type(obj.get("type")) is not str:
            return  # a broadcast copy ({"event": ...}): never a command
        try:
            event = codec.decode_object(obj)
        except DecodeError as exc:
            log.warning("relay sent an event this daemon cannot read: %s", exc)
            return
        if not isinstance(event, ev.Event):
            return
        sid = event.session_id
        if isinstance(event, ev.InputText):
            self._start(event)
        elif isinstance(event, ev.ResponseCancel | ev.SessionEnd):
            log.debug("daemon: %s for %s (running: %s)", event.type, sid, sid in self._runs)
            if sid is not None:
                runner = self._runs.get(sid)
                if runner is not None:
                    runner.cancel()
                if isinstance(event, ev.SessionEnd) and sid in self.registered:
                    name = self.registered.pop(sid)
                    log.warning("relay ended the registration of agent %r (%s)", name, event.reason)
        elif isinstance(event, ev.PaymentSubmit):
            self._paid(event)
        elif isinstance(event, ev.SessionCreated):
            self._created(event)
        elif isinstance(event, ev.SessionErrorEvent):
            self._refused(event)
        elif isinstance(event, ev.Ping):
            self._owe(ev.Pong())
        elif isinstance(event, ev.SessionUpdate):
            self._owe(ev.SessionUpdated(session_id=sid))

    def refresh(self, tokens: Mapping[str, str]) -> None:
        """Send each registered agent's fresh token (``session.update``) before the old expires."""
        for sid, name in self.registered.items():
            token = tokens.get(name)
            if token is not None:
                self._owe(ev.SessionUpdate(session_id=sid, token=token))

    def _created(self, event: ev.SessionCreated) -> None:
        sid = event.session_id
        name = self._pending.pop(sid, None) if sid is not None else None
        if name is None or sid is None:
            return
        self.registered[sid] = name
        agent = self._agents[name]
        log.info("registered agent %r with the relay (session %s)", name, sid)
        self._owe(ev.CapabilitiesEvent(session_id=sid, capabilities=agent.capabilities()))
        self._check_answered()

    def _refused(self, event: ev.SessionErrorEvent) -> None:
        sid = event.session_id
        name = self._pending.pop(sid, None) if sid is not None else None
        if name is None:
            log.warning("relay: %s: %s", event.error.code, event.error.message)
            return
        self.refused.append((name, event.error.code, event.error.message))
        log.error("relay refused agent %r: %s: %s", name, event.error.code, event.error.message)
        self._check_answered()
        if self.fatal:
            self.shutdown(registrations=False)

    def _check_answered(self) -> None:
        if not self._pending:
            self.answered.set()

    def _agent_for(self, event: ev.InputText) -> Responder | None:
        sid = event.session_id
        name = self.registered.get(sid) if sid is not None else None
        if name is None:
            named = event.unknown.get("agent")
            if isinstance(named, str) and named in self.registered.values():
                name = named
        return self._agents.get(name) if name is not None else None

    def _start(self, event: ev.InputText) -> None:
        sid = event.session_id
        agent = self._agent_for(event)
        if sid is None or agent is None:
            self._owe(
                ev.SessionErrorEvent(
                    session_id=sid,
                    error=ty.ErrorInfo(
                        code="agent_not_found",
                        message="no agent of this daemon is registered under that session",
                    ),
                )
            )
            return
        earlier = self._runs.get(sid)
        if earlier is not None:
            earlier.cancel()
        self._nursery.start_soon(self._turn, sid, agent, event)

    async def _turn(self, sid: str, agent: Responder, event: ev.InputText) -> None:
        proposed = event.unknown.get("response_id")
        response_id = proposed if isinstance(proposed, str) and proposed else _turn_id()
        try:
            request = turn_request(event, agent.name, response_id, {"transport": "relay"})
        except DecodeError as exc:
            self._owe(
                ev.ResponseErrorEvent(
                    session_id=sid,
                    response_id=response_id,
                    error=ty.ErrorInfo(code="invalid_event", message=str(exc)),
                )
            )
            return
        runner = self.turns.runner(agent, request, self._turn_sink(sid, request))
        previous = self._runs.get(sid)
        while previous is not None:  # the turn it replaces sends its last event first
            await trio.sleep(0)
            previous = self._runs.get(sid)
        self._runs[sid] = runner
        self.outbox.producers += 1
        try:
            outcome = await runner.run()
            if outcome.final is None:  # stopped for client tools: the relay needs an end
                done = outcome.tracker.done_event(session_id=sid)
                done = ev.ResponseDone(
                    session_id=sid,
                    response_id=done.response_id,
                    response=ty.ResponseOutput(
                        id=done.response.id,
                        status="requires_action",
                        output=done.response.output,
                        usage=done.response.usage,
                    ),
                )
                await self._sink(done)
        except OutboxClosed:
            pass
        finally:
            self.outbox.producers -= 1
            if self._runs.get(sid) is runner:
                del self._runs[sid]

    async def _sink(self, event: ev.Event) -> None:
        await self.outbox.put(codec.encode(event))

    def _turn_sink(self, sid: str, request: TurnRequest) -> Emit:
        """The turn's sink; an emitted ``payment.required`` waits for ``payment.submit``."""

        async def sink(event: ev.Event) -> None:
            await self.outbox.put(codec.encode(event))
            if type(event) is ev.PaymentRequired:
                waiting = self._payments[sid] = _Payment()
                try:
                    await waiting.paid.wait()
                finally:
                    if self._payments.get(sid) is waiting:
                        del self._payments[sid]
                if waiting.token is not None:
                    request.metadata[PAID_TOKEN] = waiting.token

        return sink

    def _paid(self, event: ev.PaymentSubmit) -> None:
        waiting = self._payments.pop(event.session_id or "", None)
        if waiting is None:
            log.info("relay sent payment.submit for a turn that asks for none; ignored")
            return
        waiting.token = event.payment.token
        waiting.paid.set()

    # --- ending -----------------------------------------------------------------------

    def close_all(self, reason: str | None = None, *, notify: bool = True) -> None:
        """The connection ended: stop every turn."""
        for runner in self._runs.values():
            runner.cancel()

    def shutdown(self, *, registrations: bool = True) -> None:
        """Cancel the turns, end the registrations and close (after :data:`STOP_GRACE`)."""
        for runner in self._runs.values():
            runner.cancel()
        self._nursery.start_soon(self._close, registrations)

    async def _close(self, registrations: bool) -> None:
        with trio.move_on_after(STOP_GRACE):
            while self._runs:
                await trio.sleep(0.01)
        if registrations:
            for sid in list(self.registered):
                self._owe(ev.SessionEnd(session_id=sid, reason="shutdown"))
        self._frames.close(CLOSE_NORMAL, "")
        self.outbox.close()


class Daemon:
    """Serves agents to a relay over one outgoing WebSocket; see the module docstring.

    Args:
        url: The relay (``ws(s)://`` or ``http(s)://``; a bare origin gets ``/ws``).
        agents: The agents to register.
        token: The connection's credential (the upgrade's bearer token), also
            each agent's registration token unless ``tokens`` names one.
        tokens: Per-agent registration tokens, by agent name.
        backoff: ``(base, cap)`` seconds of the reconnect delay.
        keepalive: Seconds of silence before the daemon pings the relay (and
            as long again before it takes the relay for gone).
        ssl_context: For ``wss://``.
        rng: The jitter's random source (seconds in ``[0, 1)``).
        max_response_output_bytes: The most output one response keeps
            (``uamp connect --max-response-output-bytes``); past it the
            response ends ``output_too_large``.
    """

    def __init__(
        self,
        url: str,
        agents: Sequence[Responder],
        *,
        token: str | None = None,
        tokens: Mapping[str, str] | None = None,
        backoff: tuple[float, float] = (0.5, 30.0),
        keepalive: float = 20.0,
        ssl_context: ssl.SSLContext | None = None,
        rng: Callable[[], float] = random.random,
        max_response_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> None:
        self.url = daemon_url(url)
        self.agents: dict[str, Responder] = {}
        for agent in agents:
            if agent.name in self.agents:
                raise ValueError(f"two agents are named {agent.name!r}")
            self.agents[agent.name] = agent
        if not self.agents:
            raise ValueError("a daemon needs at least one agent")
        tokens = dict(tokens or {})
        unknown = sorted(set(tokens) - set(self.agents))
        if unknown:
            raise ValueError(f"a token is given for an agent that is not hosted: {unknown[0]!r}")
        self.tokens: dict[str, str | None] = {name: tokens.get(name, token) for name in self.agents}
        self.token = token if token is not None else next(iter(tokens.values()), None)
        self.backoff = backoff
        self.limits = SessionLimits(
            keepalive_interval=keepalive, max_response_output_bytes=max_response_output_bytes
        )
        self.ssl_context = ssl_context
        self.rng = rng
        #: Set while a connection has every agent answered; cleared when it ends.
        self.connected = trio.Event()
        #: Connections made so far (the first is 1).
        self.connections = 0
        self._host: DaemonHost | None = None
        self._stopping = False
        self._scope: trio.CancelScope | None = None

    def refresh(self, token: str | None = None, tokens: Mapping[str, str] | None = None) -> None:
        """Use fresh credentials: ``token`` for every agent (and the next connections),
        ``tokens`` per agent name.

        The relay ends a registration when the credential it was made with
        expires; each registered agent's new token goes to the relay at once
        as ``session.update`` on its registration, and a reconnection uses
        them all.
        """
        fresh = dict(tokens or {})
        if token is not None:
            self.token = token
            fresh = {name: fresh.get(name, token) for name in self.agents}
        self.tokens.update({name: t for name, t in fresh.items() if name in self.agents})
        if self._host is not None:
            self._host.refresh({n: t for n, t in self.tokens.items() if t is not None})

    def stop(self) -> None:
        """Stop: cancel the turns in flight, end the registrations, close the socket."""
        self._stopping = True
        if self._host is not None:
            self._host.shutdown()
        elif self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        """Connect, serve and reconnect until :meth:`stop`.

        :attr:`connected` is set while a connection has its agents registered.

        Raises:
            DaemonRefused: The relay refused the credential or every agent.
        """
        attempt = 0
        with trio.CancelScope() as scope:
            self._scope = scope
            while not self._stopping:
                try:
                    stream, initial = await open_websocket(
                        self.url,
                        headers=[("Authorization", f"Bearer {self.token}")] if self.token else [],
                        ssl_context=self.ssl_context,
                    )
                except ClientError as exc:
                    if exc.code in _REFUSED_CODES:
                        raise DaemonRefused(
                            f"the relay at {self.url} refused the credential: {exc}"
                        ) from None
                    attempt += 1
                    await self._pause(attempt, str(exc))
                    continue
                except (OSError, trio.TooSlowError) as exc:
                    attempt += 1
                    await self._pause(attempt, str(exc) or type(exc).__name__)
                    continue
                self.connections += 1
                log.info("connected to %s", self.url)
                host = await self._serve(stream, initial)
                if host is not None and host.registered:
                    attempt = 0
                if host is not None and host.fatal:
                    names = ", ".join(f"{n} ({c})" for n, c, _ in host.refused)
                    raise DaemonRefused(f"the relay at {self.url} refused every agent: {names}")
                if self._stopping:
                    break
                attempt += 1
                await self._pause(attempt, "the connection ended")
        self._scope = None

    async def _pause(self, attempt: int, why: str) -> None:
        delay = backoff_delay(attempt, base=self.backoff[0], cap=self.backoff[1], jitter=self.rng())
        log.warning("relay %s: %s; reconnecting in %.1fs", self.url, why, delay)
        await trio.sleep(delay)

    async def _serve(
        self,
        stream: trio.abc.Stream,
        initial: bytes,
    ) -> DaemonHost | None:
        frames = make_engine(client=True, max_message_size=self.limits.max_message_size)
        made: list[DaemonHost] = []

        def make_host(nursery: trio.Nursery) -> DaemonHost:
            host = DaemonHost(nursery, self.agents, self.tokens, frames, self.limits)
            made.append(host)
            self._host = host

            async def announce() -> None:
                await host.answered.wait()
                if host.registered:
                    self.connected.set()

            nursery.start_soon(announce)
            if self._stopping:
                host.shutdown()
            return host

        try:
            await serve_host(stream, make_host, frames, initial_data=initial, limits=self.limits)
        finally:
            self._host = None
            self.connected = trio.Event()
        return made[0] if made else None


async def connect(
    url: str,
    agents: Sequence[Responder],
    *,
    token: str | None = None,
    tokens: Mapping[str, str] | None = None,
) -> None:
    """Serve ``agents`` to the relay at ``url`` until cancelled (see :class:`Daemon`)."""
    await Daemon(url, agents, token=token, tokens=tokens).run()
