"""The binding-neutral spec 003 service: envelopes in, exchanges run, delta frames out.

Theory of operation
-------------------
Every spec 003 binding (HTTP + SSE, the length-prefixed WebSocket, gRPC,
HTTP/3) reads bytes and hands them here; this module verifies, routes to the
agent and runs the exchange; the binding writes what comes back. The API a
binding uses, in order:

1. ``agent = service.resolve(name, envelope)``: the hosted agent
   (``name`` from the path; ``None`` at the root: the only agent, or the one
   the envelope's ``to`` names as ``urn:uamp:agent:NAME`` or ``NAME``).
2. ``envelope = service.decode(data, declared=n)``: parse an envelope;
   4.13 from ``declared`` (or the size) past ``max_size``, 4.00 when it is
   not a valid envelope.
3. ``result = await service.submit(agent, envelope, nursery=...)``: verify
   (signature, ``cap_token`` aud/scope/exp, ``ts``, replayed ``id``; see
   :mod:`uamp_trio.trust.envelopes`) and act on the intent:

   * ``ask`` / ``propose`` / ``subscribe`` open an :class:`Exchange`
     (section 10: NEW -> IN_PROGRESS) and start the agent in ``nursery``
     (default: the host's background nursery); 5.04 with ``retry_after``
     when the agent already runs ``max_concurrent`` exchanges. The agent runs
     once per *turn*, taken from the exchange's queue: an ask or a proposal
     has one (a proposal's answer leaves it ANSWERED, waiting for
     ``confirm``/``deny``); a subscription has one for its body and one per
     ``notify`` naming it, each answer ending in a ``progress`` frame
     ``{"answered": id, ...}``, until ``confirm``, ``cancel`` or
     ``idle_timeout`` without an event;
   * ``cancel`` / ``deny`` / ``error`` / ``confirm`` (``reply_to`` = the
     exchange's id) move it as :data:`~uamp_proto.envelope.TRANSITIONS`
     says and stop its run; a ``confirm``/``deny`` after an ask's ``done``
     retires it;
   * ``inform`` / ``notify`` / ``progress`` are one-way: without
     ``reply_to`` the message waits (per caller and agent, bounded) for the
     caller's next opening envelope; with it, it joins that exchange (a
     subscription's next event, an acknowledgement for ``progress``
     (``delta_seq`` in ``ext`` or a JSON body; 4.09 without; a text body
     beside ``ext.delta_seq`` is also one of the running agent's
     ``metadata["updates"]``), else its conversation). A peer's ``error``
     ends the stream with an ``error`` frame carrying its code and message.

   The result (:class:`Submitted`) names the exchange (``None`` for a
   one-way envelope without ``reply_to``); ``result.location`` is
   ``/v1/stream/{id}``.
4. ``async for delta in exchange.deltas(after=-1)``: the delta frames, from
   the first with ``delta_seq > after`` until the final one (``done``,
   ``cancel`` or ``error``). The producer stops when ``delta_window`` frames
   are un-acknowledged (the consumer's window from the ask, at most
   ``max_window``) and waits for an ack; after ``idle_timeout`` without one
   the exchange is cancelled.
5. ``service.acknowledge(exchange, data_or_delta)``: a ``progress`` delta
   frame with the highest contiguous ``delta_seq`` received; 4.09 for a
   missing ``delta_seq``, another frame type, or a seq never sent.
   ``service.find(stream_or_id, principal)`` looks an exchange up for the
   stream endpoints (4.04 when absent or owned by someone else: the same).
6. Any refusal is :class:`~uamp_proto.adapters.envelope.EnvelopeRefused`
   (``error_code``, ``message``, ``retry_after``); ``service.error_envelope(
   refused, agent=..., reply_to=...)`` is the signed ``error`` envelope to
   send, and :func:`http_status` / :func:`close_code` give the HTTP status
   and WebSocket close code of its code.

Frames (:class:`~uamp_proto.envelope.Delta`) follow Appendix A.2 exactly;
their ``stream_id`` is the ask's ``stream_id``, else its ``id`` -- except
that a binding whose transport stream names them writes that name instead
and registers it with :meth:`Exchange.alias` (HTTP/3: the QUIC stream id of
the ``GET /v1/stream/{id}``), so an ack may name either. Finished
exchanges are kept (bounded by ``keep_finished``) for a late reader, a
``confirm`` and as conversation history: an ask whose ``context`` names an
earlier exchange of the same caller (``hash`` = ``sha256:`` of that
envelope's canonical form) continues that conversation.

A busy conversation (docs/busy.md): an exchange's turns run through the
host's gate (:attr:`Host.conversations <uamp_trio.hosting.host.Host.conversations>`)
under its conversation (the first exchange of a chain of ``context``
references; a subscription's events are turns of its own). An ``ask`` whose
``context`` names an exchange still running, or a ``notify`` for a
subscription whose turn still runs, meets the policy (the server's, or the
envelope's ``ext["uamp.on_busy"]``; a bad value is 4.00): ``reject`` (and a
full queue) is 5.04 with ``retry_after``; ``enqueue`` runs it after, on the
conversation as that turn left it; ``interrupt`` stops the running turn (an
ask ends with its ``cancel`` frame, a subscription's turn with a
``progress`` frame ``{"answered": id, "uamp.on_busy": "interrupt", "text":
...}`` and the subscription goes on), what it said staying in the
conversation; ``rollback`` too, and its turn leaves nothing there. A turn
waits (its exchange IN_PROGRESS, no frame yet) until its place comes.

With a store shared between processes (Redis: ``uamp serve --workers N``
or several servers) every accepted envelope id is claimed in the store, so a
replay is refused in every process, and each exchange is registered under
its caller's key with this process as owner: :meth:`EnvelopeService.remote`
gives the stream endpoints of another process a
:class:`~uamp_trio.envelope.remote.RemoteExchange` that acknowledges and
reads frames through the store's inbox messages, and a ``progress`` envelope
acknowledging an exchange another process runs is applied there the same way
(:class:`~uamp_trio.envelope.remote.RemoteAck` says what it left).

This module verifies, routes and keeps the exchanges; the rest of the
package holds the parts: :mod:`.exchange` (one exchange and its frames),
:mod:`.turns` (an exchange's run: its turns, the agent's events as frames),
:mod:`.remote` (exchanges across processes), :mod:`.fields` (what is read
from an envelope's body and ``ext``), :mod:`.notes` (one-way messages
waiting for an exchange) and :mod:`.keys` (the server's envelope key).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import trio

from uamp_proto import types as ty
from uamp_proto.adapters.envelope import BAD_REQUEST, NOT_FOUND, EnvelopeRefused
from uamp_proto.busy import BusyError, BusyPolicy
from uamp_proto.envelope import (
    BACKEND_BUSY,
    DEFAULT_MAX_SIZE,
    MISSING_DELTA_SEQ,
    PAYLOAD_TOO_LARGE,
    TRANSITIONS,
    UNAUTHENTICATED,
    UNAUTHORIZED,
    Delta,
    DeltaType,
    Envelope,
    EnvelopeError,
    ErrorCode,
    ExchangeState,
    Intent,
    Trigger,
    decode_delta,
    decode_envelope,
)
from uamp_proto.payment import Charge, PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_stores.busy import Slot

from ..engines.http import HTTPError
from ..hosting.host import Host
from ..trust.envelopes import DEFAULT_MAX_REMEMBERED, DEFAULT_PER_PRINCIPAL, EnvelopeTrust
from .exchange import Exchange, Turn, utc_ts
from .fields import (
    acked_seq,
    is_uuid,
    message_of,
    notes_address,
    payment_token_of,
    peer_error_of,
    response_format_of,
    update_of,
)
from .keys import EnvelopeKey
from .notes import Notes, fits, trimmed
from .remote import RemoteAck, answer_request, exchange_key, replay_key
from .remote import RemoteExchange as RemoteExchange  # (the bindings import it from here)
from .turns import release, run_turns

__all__ = [
    "AGENT_URN",
    "MAX_NOTES",
    "ONE_WAY_INTENTS",
    "OPENING_INTENTS",
    "SERVED_INTENTS",
    "EnvelopeLimits",
    "EnvelopeService",
    "Exchange",
    "Submitted",
    "close_code",
    "http_status",
    "refused_for",
    "utc_ts",
]

log = logging.getLogger("uamp_trio.envelope")

#: How an agent is named in ``from``/``to`` when no URL is configured.
AGENT_URN: Final = "urn:uamp:agent:"
#: Intents that open an exchange (the agent runs).
OPENING_INTENTS: Final = frozenset({Intent.ASK, Intent.PROPOSE, Intent.SUBSCRIBE})
#: Intents that address an open exchange by ``reply_to``.
_ADDRESSING: Final = frozenset({Intent.CONFIRM, Intent.CANCEL, Intent.DENY, Intent.ERROR})
#: Intents that expect no answer: recorded, the agent is not run for them
#: (except a ``notify`` naming a subscription, which is its next event).
ONE_WAY_INTENTS: Final = frozenset({Intent.INFORM, Intent.NOTIFY, Intent.PROGRESS})
#: Every intent an agent served here accepts (the manifest's ``intents``): all of section 4.1.
SERVED_INTENTS: Final = tuple(i.value for i in Intent)
#: One-way messages kept per caller for its next exchange, and ``progress``
#: updates per exchange (oldest dropped past it).
MAX_NOTES: Final = 32
#: Bytes of one principal's waiting one-way messages (``note_bytes_per_principal``).
DEFAULT_NOTE_BYTES: Final = 1024 * 1024
#: A subscription's events (``notify``) waiting for the agent; 5.04 past it.
_QUEUED_EVENTS: Final = 8

_HTTP_STATUS: Final[Mapping[str, int]] = {
    "4.00": 400,
    "4.01": 401,
    "4.03": 403,
    "4.04": 404,
    "4.09": 409,
    "4.13": 413,
    "5.04": 503,
}
_CLOSE_CODES: Final[Mapping[str, int]] = {"4.01": 4401, "4.03": 4403, "4.13": 4413}
#: The final frame of a subscription that ended between events, by its state.
_ENDING: Final = {ExchangeState.COMPLETED: DeltaType.DONE, ExchangeState.ERROR: DeltaType.ERROR}


def http_status(code: str) -> int:
    """The HTTP status of a section 9 code (400 for one not in the table)."""
    return _HTTP_STATUS.get(code, 400)


def close_code(code: str) -> int | None:
    """The WebSocket close code after an error frame (4401/4403/4413), or ``None`` to stay open."""
    return _CLOSE_CODES.get(code)


_BY_STATUS: Final[Mapping[int, ErrorCode]] = {
    401: UNAUTHENTICATED,
    403: UNAUTHORIZED,
    404: NOT_FOUND,
    413: PAYLOAD_TOO_LARGE,
    503: BACKEND_BUSY,
}


def refused_for(exc: HTTPError) -> EnvelopeRefused:
    """An HTTP refusal (a route miss, a middleware's) as the envelope error of its status."""
    retry = next((v for k, v in exc.headers if k.lower() == "retry-after"), None)
    return EnvelopeRefused(
        _BY_STATUS.get(exc.status, BAD_REQUEST),
        exc.message,
        retry_after=int(retry) if retry is not None and retry.isdigit() else None,
    )


@attrs.frozen(kw_only=True)
class EnvelopeLimits:
    """The limits of the envelope service (validated once).

    Attributes:
        max_size: Largest envelope accepted, bytes (4.13 past it).
        max_concurrent: Exchanges one agent runs at once (``--max-concurrent``;
            5.04 past it).
        max_window: Largest ``delta_window`` granted.
        idle_timeout: Seconds the producer waits on a full window before
            the exchange is cancelled.
        retry_after: The ``Retry-After`` of a 5.04, seconds.
        keep_finished: Finished exchanges kept for late readers, ``confirm``
            and history.
        exchanges_per_principal: Of those, the most one principal keeps:
            past it its own oldest finished exchange goes first, so one
            caller's asks never push out another caller's.
        replay_memory: Envelope ids remembered at once, from every sender
            (the replay check's memory; 5.04 for everyone past it).
        replay_per_principal: Of those, the most one principal may hold:
            its envelopes per validity window (5.04 for it alone past it).
        notes_per_principal: One-way messages (``inform``/``notify``
            without ``reply_to``) one principal may have waiting for its
            next exchange (5.04 past it, until an exchange takes them or
            they expire), and one-way messages one exchange takes into its
            conversation (4.13 past it).
        note_bytes_per_principal: Their ``body.content`` bytes, in all (a
            single one larger is 4.13); also the bytes of an exchange's
            ``progress`` updates (the oldest are dropped past it).
        note_ttl: Seconds an unclaimed one-way message waits.
    """

    max_size: int = DEFAULT_MAX_SIZE
    max_concurrent: int = 16
    max_window: int = 1024
    idle_timeout: float = 60.0
    retry_after: int = 1
    keep_finished: int = 1024
    exchanges_per_principal: int = 64
    replay_memory: int = DEFAULT_MAX_REMEMBERED
    replay_per_principal: int = DEFAULT_PER_PRINCIPAL
    notes_per_principal: int = MAX_NOTES
    note_bytes_per_principal: int = DEFAULT_NOTE_BYTES
    note_ttl: float = 600.0

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_size",
            "max_concurrent",
            "max_window",
            "retry_after",
            "keep_finished",
            "exchanges_per_principal",
            "replay_memory",
            "replay_per_principal",
            "notes_per_principal",
            "note_bytes_per_principal",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.idle_timeout <= 0 or self.note_ttl <= 0:
            raise ValueError("idle_timeout and note_ttl must be positive")


@attrs.frozen
class Submitted:
    """What :meth:`EnvelopeService.submit` did.

    Attributes:
        envelope: The verified envelope.
        principal: Who sent it.
        exchange: The exchange it opened or addressed; ``None`` for a one-way
            envelope without ``reply_to`` (kept for the caller's next exchange).
    """

    envelope: Envelope
    principal: Principal
    exchange: Exchange | None
    #: The exchange a ``progress`` acknowledged in another process, if so.
    remote: RemoteAck | None = None

    @property
    def opened(self) -> bool:
        """Whether the envelope opened its exchange (``ask``/``propose``/``subscribe``)."""
        return self.envelope.intent in OPENING_INTENTS

    @property
    def state(self) -> ExchangeState:
        """The state to report: the exchange's, or COMPLETED for a one-way envelope."""
        return ExchangeState.COMPLETED if self.exchange is None else self.exchange.state

    @property
    def location(self) -> str | None:
        """``/v1/stream/{id}`` of the exchange (relative to the agent's prefix), if any."""
        return None if self.exchange is None else f"/v1/stream/{self.exchange.id}"


class EnvelopeService:
    """Verifies envelopes and runs exchanges for the agents of ``host`` (module docstring).

    Args:
        host: The agents and shared services (payment, background nursery).
        key: The server's envelope key (signs error envelopes).
        trust: Who is trusted; default: authentication as configured on
            ``host`` (its ``authenticator``), no trusted peers.
        limits: The limits.
        base_urls: Public URLs of the server: ``{url}/agents/{name}`` is
            an accepted capability token audience besides the agent's name.
        clock: Seconds since the epoch (``ts`` of frames and error envelopes).
    """

    def __init__(
        self,
        host: Host,
        key: EnvelopeKey,
        *,
        trust: EnvelopeTrust | None = None,
        limits: EnvelopeLimits | None = None,
        base_urls: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.key = key
        self.limits = limits = limits or EnvelopeLimits()
        self.trust = (
            trust
            if trust is not None
            else EnvelopeTrust(
                host.authenticator,
                clock=clock,
                max_remembered=limits.replay_memory,
                per_principal=limits.replay_per_principal,
            )
        )
        self.base_urls = tuple(u.rstrip("/") for u in base_urls)
        self.clock = clock
        #: Every TLS client presents a certificate (``--client-ca``): the
        #: manifest lists ``mtls`` among its ``auth`` methods.
        self.mutual_tls = False
        #: Something besides the spec 003 bindings signs with the key (A2A
        #: agent cards): the server's JWKS publishes it even without them.
        self.key_in_use = False
        self._exchanges: OrderedDict[str, Exchange] = OrderedDict()
        #: Exchanges kept per owner (``Principal.key``).
        self._owned: dict[tuple[str, str], int] = {}
        self._streams: dict[str, Exchange] = {}
        self._running: dict[str, int] = {}
        #: One-way messages waiting for their caller's next exchange.
        self._notes = Notes(
            count=limits.notes_per_principal,
            size=limits.note_bytes_per_principal,
            ttl=limits.note_ttl,
            principals=limits.keep_finished,
        )

    # --- 1. which agent ---------------------------------------------------------

    def audiences(self, agent: str) -> list[str]:
        """The ``aud`` values that name ``agent`` here."""
        out = [agent, AGENT_URN + agent]
        for base in self.base_urls:
            out.append(f"{base}/agents/{agent}")
        return out

    def resolve(self, name: str | None, envelope: Envelope | None = None) -> Responder:
        """The agent addressed by the path's ``name``, else by the envelope's ``to``.

        Raises:
            EnvelopeRefused: 4.04 no such agent (or it is offline).
        """
        agents = self.host.agents
        try:
            if name is not None:
                return agents.resolve({"agent": name})
            if envelope is not None:
                for target in envelope.to:
                    candidate = target.removeprefix(AGENT_URN)
                    if candidate in agents:
                        return agents.resolve({"agent": candidate})
            return agents.resolve({})
        except HTTPError as exc:
            raise EnvelopeRefused(NOT_FOUND, exc.message) from None

    # --- 2. decode -------------------------------------------------------------------

    def decode(self, data: bytes, *, declared: int | None = None) -> Envelope:
        """Parse an envelope, checking the size first (``declared``: a Content-Length).

        Raises:
            EnvelopeRefused: 4.13 too large; 4.00 not a valid envelope (an
                unsigned one is 4.01, from :meth:`submit`).
        """
        size = len(data) if declared is None else max(declared, len(data))
        self.check_size(size)
        try:
            return decode_envelope(data, require_sig=False, max_size=self.limits.max_size)
        except EnvelopeError as exc:
            code = exc.error_code or BAD_REQUEST
            raise EnvelopeRefused(code, str(exc)) from None

    def check_size(self, size: int) -> None:
        """Refuse (4.13) a body of ``size`` bytes over ``max_size``."""
        if size > self.limits.max_size:
            raise EnvelopeRefused(
                PAYLOAD_TOO_LARGE,
                f"the envelope is {size} bytes; this agent accepts at most {self.limits.max_size}",
            )

    # --- 3. submit ------------------------------------------------------------

    async def submit(
        self, agent: Responder, envelope: Envelope, *, nursery: trio.Nursery | None = None
    ) -> Submitted:
        """Verify ``envelope`` and act on its intent (see the module docstring).

        Raises:
            EnvelopeRefused: The envelope is refused; nothing was started.
        """
        principal = await self.trust.authenticate(envelope, self.audiences(agent.name))
        # Checked and remembered in one step, before anything yields: of N
        # copies arriving together, one is taken and the others are replays.
        self.trust.claim(envelope, principal)
        shared = self.host.stores.event_log
        claim = replay_key(principal, envelope.id)
        claimed = False
        exchange: Exchange | None
        remote: RemoteAck | None = None
        try:
            # Another process (a worker on the same store) may have taken it: SET NX.
            if shared.shared:
                claimed = await shared.claim(claim, "id", ttl=2 * self.trust.validity)
                if not claimed:
                    raise EnvelopeRefused(
                        UNAUTHORIZED, "this envelope id was already received (replay)"
                    )
            if envelope.intent in OPENING_INTENTS:
                exchange = await self._open(agent, envelope, principal, nursery)
            elif envelope.intent in _ADDRESSING:
                exchange = self._address(envelope, principal)
            else:
                joined = await self._one_way(agent, envelope, principal)
                exchange, remote = (
                    (None, joined) if isinstance(joined, RemoteAck) else (joined, None)
                )
        except EnvelopeRefused:
            # A refused envelope may be sent again (here or in another process).
            self.trust.release(envelope, principal)
            if claimed:
                with trio.CancelScope(shield=True):
                    await shared.unclaim(claim, "id")
            raise
        return Submitted(envelope, principal, exchange, remote)

    async def _charge(
        self, name: str, token: str | None, response_id: str, principal: Principal
    ) -> Charge | None:
        try:
            return await self.host.open_charge(name, token, response_id, principal=principal)
        except PaymentRequiredError as exc:
            raise EnvelopeRefused(
                UNAUTHORIZED,
                f"payment required ({exc.code}): put a payment token in ext.payment_token",
            ) from None

    async def _open(
        self,
        agent: Responder,
        envelope: Envelope,
        principal: Principal,
        nursery: trio.Nursery | None,
    ) -> Exchange:
        name = agent.name
        if envelope.id in self._exchanges:  # a replay outside the guard's memory
            raise EnvelopeRefused(UNAUTHORIZED, "this envelope id was already received (replay)")
        message = message_of(envelope)
        earlier = self._continued(envelope, principal)
        gate = self.host.conversations
        try:
            policy = gate.policy(envelope.ext)
        except BusyError as exc:
            raise EnvelopeRefused(BAD_REQUEST, str(exc)) from None
        stream_id = envelope.stream_id or envelope.id
        if stream_id in self._streams:
            raise EnvelopeRefused(BAD_REQUEST, f"stream_id {stream_id!r} is already in use")
        if self._running.get(name, 0) >= self.limits.max_concurrent:
            raise EnvelopeRefused(
                BACKEND_BUSY,
                f"agent {name!r} is running {self.limits.max_concurrent} exchanges; retry later",
                retry_after=self.limits.retry_after,
            )
        target = nursery or self.host.background
        if target is None:
            raise RuntimeError("no nursery to run the exchange in (the server is not serving)")
        token = payment_token_of(envelope)
        response_format = response_format_of(envelope)
        response_id = f"resp_{uuid.uuid4().hex}"
        conversation = earlier.conversation if earlier is not None else envelope.id
        lane = ("envelope", principal.key, name, conversation)
        slot = self._enter(lane, principal, policy)
        try:
            charge = await self._charge(name, token, response_id, principal)
        except BaseException:
            slot.close()
            raise
        # No checkpoint from here until the charge is in the exchange's queue.
        window = min(envelope.effective_delta_window, self.limits.max_window)
        exchange = Exchange(envelope, name, principal.key, window, self.clock)
        exchange.conversation, exchange.continues = conversation, earlier
        exchange.lane = lane
        waiting = self._notes.take(principal.key, notes_address(name, envelope), self.clock())
        exchange.messages = list(waiting)
        exchange.payment_token = token
        exchange.response_format = response_format
        size = _QUEUED_EVENTS if exchange.subscription else 1
        send, receive = trio.open_memory_channel[Turn](size)
        send.send_nowait(Turn(envelope.id, message, token, response_id, charge, slot))
        slot.on_ready(exchange.wake)
        if not exchange.subscription:
            send.close()  # one turn
        exchange.turns = send
        self._remember(exchange)
        self._running[name] = self._running.get(name, 0) + 1
        target.start_soon(self._run, exchange, agent, principal, receive)
        await self._publish(exchange, principal)
        return exchange

    # --- exchanges reached from other processes (a shared store) ---------------------

    async def _publish(self, exchange: Exchange, principal: Principal) -> None:
        """With a shared store: name this process as the exchange's, and answer for it."""
        store = self.host.stores.event_log
        if not store.shared:
            return
        key = exchange_key(principal, exchange.id)

        async def handler(message: dict[str, Any]) -> dict[str, Any]:
            return await answer_request(self, exchange, principal, message)

        store.register(key, handler)
        exchange.routed = (key, handler)
        store.ensure_running(self.host.background)  # its inbox answers the other processes
        await store.claim(key, "exchange")

    async def remote(self, exchange_id: str, principal: Principal) -> RemoteExchange | None:
        """The exchange ``exchange_id`` of ``principal`` run by another process, if one does."""
        store = self.host.stores.event_log
        if not store.shared:
            return None
        key = exchange_key(principal, exchange_id)
        node = await store.claimant(key, "exchange")
        if node is None or node == store.node or not await store.alive(node):
            return None
        return RemoteExchange(store, node, key)

    async def _run(
        self,
        exchange: Exchange,
        agent: Responder,
        principal: Principal,
        turns: trio.MemoryReceiveChannel[Turn],
    ) -> None:
        try:
            await run_turns(
                exchange,
                agent,
                principal,
                turns,
                idle_timeout=self.limits.idle_timeout,
                options=self.host.turns,
            )
            if not exchange.finished:  # a subscription that ended between events
                kind = _ENDING.get(exchange.state, DeltaType.CANCEL)
                payload = {"state": exchange.state.value, **(exchange.peer_error or {})}
                await exchange.push(kind, payload, self.limits.idle_timeout)
        except trio.TooSlowError:
            log.info(
                "exchange %s: no ack for %.0f s; cancelled", exchange.id, self.limits.idle_timeout
            )
            if exchange.state is ExchangeState.IN_PROGRESS:
                exchange.machine.advance(Trigger.CANCEL)
        except Exception:
            log.exception("exchange %s failed", exchange.id)
            if exchange.state in (ExchangeState.IN_PROGRESS, ExchangeState.ANSWERED):
                exchange.machine.advance(Trigger.ERROR)
        finally:
            if exchange.state is ExchangeState.IN_PROGRESS:  # cancelled from outside
                exchange.machine.advance(Trigger.CANCEL)
            exchange.stop()
            exchange.end()
            self._running[exchange.agent] -= 1
            self._streams.pop(exchange.stream_id, None)
            with trio.CancelScope(shield=True):
                await release(turns)

    async def _one_way(
        self, agent: Responder, envelope: Envelope, principal: Principal
    ) -> Exchange | RemoteAck | None:
        """``inform``, ``notify``, ``progress``: recorded, answered by nothing.

        Without ``reply_to`` (``inform``, ``notify``) the message waits for
        the caller's next exchange with this agent; with it, it joins that
        exchange: a ``notify`` to a live subscription is its next event, a
        ``progress`` is one of its ``updates``, anything else joins its
        conversation (an ask continuing it sees it). A ``progress`` for an
        exchange another process runs (a shared store) is applied there.
        """
        message = message_of(envelope)
        intent = envelope.intent
        if envelope.reply_to is None:
            if intent is Intent.PROGRESS:
                raise EnvelopeRefused(
                    BAD_REQUEST, "a progress envelope names its exchange in reply_to"
                )
            self._notes.add(
                principal.key, notes_address(agent.name, envelope), message, self.clock()
            )
            return None
        try:
            exchange = self.find(envelope.reply_to, principal)
        except EnvelopeRefused:
            if intent is not Intent.PROGRESS:
                raise
            # Another process (a worker on the same store) may run it: the ack goes there.
            remote = await self.remote(envelope.reply_to, principal)
            if remote is None:
                raise
            seq, update = acked_seq(envelope)
            return await remote.progress(
                seq, envelope.stream_id, update_of(envelope) if update else None, [agent.name]
            )
        if exchange.agent != agent.name:
            raise EnvelopeRefused(NOT_FOUND, f"no exchange {envelope.reply_to!r}")
        limits = self.limits
        if intent is Intent.PROGRESS:
            # Section 5: the consumer acknowledges "via progress"; with only
            # the two endpoints of section 7, that is this envelope.
            seq, update = acked_seq(envelope)
            self.progress(
                exchange, seq, envelope.stream_id, update_of(envelope) if update else None
            )
        elif (
            intent is Intent.NOTIFY
            and exchange.subscription
            and exchange.state is ExchangeState.IN_PROGRESS
        ):
            await self._event(exchange, envelope, principal, message)
        else:
            exchange.joined = fits(
                exchange.joined,
                message,
                limits.notes_per_principal,
                limits.note_bytes_per_principal,
            )
            exchange.messages.append(message)
        return exchange

    def progress(
        self,
        exchange: Exchange,
        seq: int,
        stream_id: str | None,
        update: dict[str, str] | None,
    ) -> None:
        """A ``progress`` envelope's ack of ``exchange`` (and the agent's update beside it).

        Raises:
            EnvelopeRefused: 4.04 for a ``stream_id`` that is not the
                exchange's; 4.09 for a seq never sent.
        """
        if stream_id is not None and not exchange.names(stream_id):
            raise EnvelopeRefused(NOT_FOUND, f"no stream {stream_id!r} here")
        exchange.acknowledge(seq)
        if update is not None:  # a text besides the ack: the running agent's update
            limits = self.limits
            text = ty.Message(role="user", content=update["content"])
            # The newest updates are kept (the oldest dropped), within the budget.
            fits((0, 0), text, limits.notes_per_principal, limits.note_bytes_per_principal)
            exchange.updates.append(update)
            trimmed(exchange.updates, MAX_NOTES, limits.note_bytes_per_principal)

    async def _event(
        self, exchange: Exchange, envelope: Envelope, principal: Principal, message: ty.Message
    ) -> None:
        """Queue a ``notify`` as the subscription's next turn (5.04 when its queue is full)."""
        turns = exchange.turns
        assert turns is not None
        busy = EnvelopeRefused(
            BACKEND_BUSY,
            f"subscription {exchange.id!r} has {_QUEUED_EVENTS} events waiting; retry later",
            retry_after=self.limits.retry_after,
        )
        if exchange.state is not ExchangeState.IN_PROGRESS:
            raise EnvelopeRefused(BAD_REQUEST, f"subscription {exchange.id!r} has ended")
        if turns.statistics().current_buffer_used >= _QUEUED_EVENTS:
            raise busy
        gate = self.host.conversations
        try:
            policy = gate.policy(envelope.ext)
        except BusyError as exc:
            raise EnvelopeRefused(BAD_REQUEST, str(exc)) from None
        token = payment_token_of(envelope) or exchange.payment_token
        response_id = f"resp_{uuid.uuid4().hex}"
        charge = await self._charge(exchange.agent, token, response_id, principal)
        slot: Slot | None = None
        try:
            if exchange.state is not ExchangeState.IN_PROGRESS:
                raise trio.ClosedResourceError
            slot = self._enter(exchange.lane, principal, policy)
            turns.send_nowait(Turn(envelope.id, message, token, response_id, charge, slot))
        except (
            EnvelopeRefused,
            trio.WouldBlock,
            trio.ClosedResourceError,
            trio.BrokenResourceError,
        ) as exc:
            if slot is not None:
                slot.close()
            if charge is not None:
                await charge.settle(None, used=False)
            if isinstance(exc, EnvelopeRefused):
                raise
            raise busy from None
        slot.on_ready(exchange.wake)
        exchange.wake()

    def _enter(self, lane: tuple[Any, ...], principal: Principal, policy: BusyPolicy) -> Slot:
        """A turn's place in its conversation (5.04 when the policy refuses it)."""
        try:
            return self.host.conversations.enter(lane, principal, policy)
        except BusyError as exc:
            raise EnvelopeRefused(
                BACKEND_BUSY,
                f"{exc} ({exc.code})",
                retry_after=self.limits.retry_after,
            ) from None

    def _continued(self, envelope: Envelope, principal: Principal) -> Exchange | None:
        """The exchange the envelope's ``context`` continues (the last one that is the caller's).

        Raises:
            EnvelopeRefused: 4.00 for a ``hash`` that does not match that envelope.
        """
        found: Exchange | None = None
        for ref in envelope.context or ():
            earlier = self._exchanges.get(ref.id)
            if earlier is None or earlier.owner != principal.key:
                continue  # context that is not ours to give: ignored
            if ref.hash != earlier.envelope_hash:
                raise EnvelopeRefused(
                    BAD_REQUEST, f"context {ref.id!r}: hash does not match that envelope"
                )
            found = earlier
        return found

    def _remember(self, exchange: Exchange) -> None:
        owner = exchange.owner
        self._exchanges[exchange.id] = exchange
        self._streams[exchange.stream_id] = exchange
        self._owned[owner] = self._owned.get(owner, 0) + 1
        if self._owned[owner] > self.limits.exchanges_per_principal:
            # Its own oldest finished one goes first: never another caller's.
            mine = (x for x in self._exchanges.values() if x.owner == owner and x.finished)
            oldest = next(mine, None)
            if oldest is not None:
                self._forget(oldest)
        while len(self._exchanges) > self.limits.keep_finished:
            oldest = next((x for x in self._exchanges.values() if x.finished), None)
            if oldest is None:
                break
            self._forget(oldest)

    def _forget(self, exchange: Exchange) -> None:
        """Stop keeping ``exchange`` (finished: no reader, ``confirm`` or history finds it)."""
        if self._exchanges.pop(exchange.id, None) is None:
            return
        left = self._owned.get(exchange.owner, 1) - 1
        if left:
            self._owned[exchange.owner] = left
        else:
            self._owned.pop(exchange.owner, None)
        if exchange.routed is not None:
            self.host.stores.event_log.unregister(*exchange.routed)

    def _address(self, envelope: Envelope, principal: Principal) -> Exchange:
        if envelope.reply_to is None:
            raise EnvelopeRefused(
                BAD_REQUEST, f"a {envelope.intent.value} envelope names its exchange in reply_to"
            )
        exchange = self.find(envelope.reply_to, principal)
        trigger = Trigger(envelope.intent.value)
        if trigger in TRANSITIONS[exchange.state]:
            exchange.machine.advance(trigger)
            if trigger is Trigger.ERROR:
                exchange.peer_error = peer_error_of(envelope)
            exchange.stop()
        elif envelope.intent in (Intent.CONFIRM, Intent.DENY) and exchange.finished:
            self._forget(exchange)  # acknowledged: retired
        return exchange

    # --- 4/5. streams and acks -----------------------------------------------------

    def find(self, key: str, principal: Principal) -> Exchange:
        """The exchange with this ``id`` (or ``stream_id``) owned by ``principal``.

        Raises:
            EnvelopeRefused: 4.04 for none, and for one owned by someone else.
        """
        exchange = self._exchanges.get(key) or self._streams.get(key)
        if exchange is None or exchange.owner != principal.key:
            raise EnvelopeRefused(NOT_FOUND, f"no exchange {key!r}")
        return exchange

    def acknowledge(
        self, exchange: Exchange | None, ack: bytes | Delta, principal: Principal
    ) -> Exchange:
        """Apply a ``progress`` ack frame (to ``exchange``, else the one its ``stream_id`` names).

        Raises:
            EnvelopeRefused: 4.09 missing ``delta_seq``, not a ``progress``
                frame or a seq never sent; 4.04 unknown stream.
        """
        if isinstance(ack, bytes | bytearray):
            try:
                ack = decode_delta(bytes(ack), max_size=self.limits.max_size)
            except EnvelopeError as exc:
                raise EnvelopeRefused(MISSING_DELTA_SEQ, f"not an ack frame: {exc}") from None
        if ack.type is not DeltaType.PROGRESS:
            raise EnvelopeRefused(
                MISSING_DELTA_SEQ, f"an ack is a progress frame, not {ack.type.value!r}"
            )
        if exchange is None:
            exchange = self.find(ack.stream_id, principal)
        elif not exchange.names(ack.stream_id):
            raise EnvelopeRefused(NOT_FOUND, f"no stream {ack.stream_id!r} here")
        exchange.acknowledge(ack.delta_seq)
        return exchange

    # --- 6. errors ---------------------------------------------------------------

    def error_envelope(
        self, refused: EnvelopeRefused, *, agent: str | None = None, reply_to: str | None = None
    ) -> Envelope:
        """The signed ``error`` envelope that reports ``refused``."""
        sender = AGENT_URN + (agent or "server")
        envelope = Envelope(
            id=f"urn:uuid:{uuid.uuid4()}",
            ts=utc_ts(self.clock()),
            from_=sender,
            to=("urn:uamp:peer",),
            intent=Intent.ERROR,
            reply_to=reply_to if reply_to and is_uuid(reply_to) else None,
            body=refused.body(),
        )
        return self.key.sign(envelope)

    def running(self, agent: str) -> int:
        """Exchanges of ``agent`` running now."""
        return self._running.get(agent, 0)
