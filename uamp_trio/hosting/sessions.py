"""The per-connection UAMP session driver shared by the WebSocket and HTTP+SSE transports.

Theory of operation
-------------------
A :class:`SessionHost` drives one :class:`~uamp_proto.connection.ServerConnection`
(one WebSocket, or one HTTP+SSE session) on behalf of a transport that does
the I/O. The transport

* hands every incoming message to :meth:`SessionHost.feed` -- synchronous, so
  the transport's single reader task never waits on any session -- and
* drains :attr:`SessionHost.outbox` (a bounded :class:`Outbox` of encoded
  events) in a single writer task, writing everything that is ready at once.

``feed`` runs the core's ``receive``/``next_event`` loop and dispatches by
event type (UAMP sections 3, 5, 6, 10):

``session.create``
    The agent is resolved (the endpoint's agent, or ``session.create.agent``
    on a multi-agent endpoint). The server answers ``session.created`` then
    ``capabilities``; an agent that is not hosted gets ``session.error``
    ``agent_offline`` (``details.reason`` ``agent_not_found``) and no session
    is created.
``response.create``
    Hands the response to the session's worker: one task per session (in
    the transport's nursery, started by the first response), which runs the
    session's responses one after another under a cancel scope it replaces
    after each cancel. The worker runs the agent with the inline turn runner
    (:class:`uamp_trio.hosting.turns.ResponseRunner`, which owns the response lifecycle)
    whose sink passes each event through the core straight into the outbox,
    with no channel hop (on trio a task switch per event costs more than
    encoding the event).
    When the agent asked the client to run tools, the task waits for the
    ``tool.result`` events and runs the agent again on
    ``session.conversation()`` under the same response id (section 3.2); the
    ``response.done`` it finally sends carries the whole response's output.
``response.cancel``
    Cancels the worker's scope, which stops the agent; the response ends with
    ``response.cancelled`` and the partial output the client was sent.
``tool.result`` / delta acks (``progress`` stage ``ack``)
    Wake the session's worker (only that session's).
``session.update``
    The core keeps the new token on the session; answered ``session.updated``.
    Every later turn gets the session's current token in ``TurnRequest.token``.
    A ``payment_token`` answering an open ``payment.required`` is settled as
    a ``payment.submit``.
``payment.submit``
    The token is checked with the app's payment policy: ``payment.accepted``
    wakes the held or paused response, ``payment.error`` ``token_invalid``
    (``can_retry``) keeps it waiting.
``session.end``
    Stops the session's worker (and the response it runs).
``capabilities.query``
    Answered with the session's agent's current capabilities, the client's merged
    declaration under ``extensions.client_capabilities``: the same view as the
    ``capabilities`` event that follows ``session.created`` (section 9.1). With
    a ``model``, for that model (the agent's ``capabilities_for``) or that
    hosted agent. The agent's declaration is compared before and after every
    response, and sent again when it changed (section 6.4: a model swapped
    mid-session).

Replies the reader owes (``session.created``, errors, pongs, acks) go to the
outbox without waiting; response events wait for room, which is how a client
that stops reading stops the agent (:mod:`uamp_trio.hosting.outbox`).

Payment (UAMP 3.3 and 7.2; spec 004 "Payment Handling", "Mid-Stream Token
Top-Up"): the app's policy (:meth:`App.payment_required
<uamp_trio.app.App.payment_required>`, the one question every transport
asks) is consulted with the session's latest payment token before the agent
runs. A response it does not pay for is *held*: ``payment.required`` (with
the pending ``response_id``) goes out, and the session's worker parks until the
reader accepts a payment (then ``response.created`` and the agent) or a
``response.cancel`` arrives (``response.cancelled``). Inside a response the
agent asks for a top-up by emitting ``payment.required``: its ``emit`` parks
the same way and returns once paid, so the agent's coroutine resumes where it
was; the core refuses any content meanwhile. An agent that *raises*
:class:`~uamp_proto.payment.PaymentRequiredError` is held likewise and, once
paid, run again on the conversation so far (like after client tools), at
most :data:`~uamp_proto.topup.MAX_PAYMENT_ROUNDS` times per response
(:mod:`uamp_proto.topup`, shared with ``uamp_asgi``).

Signing (spec 004 "Response Signing"): with ``App.response_signer`` set,
``response.done`` carries ``signature`` over the response's text and the raw
``response.create`` message that started it (on HTTP+SSE: the whole POST
body that carried it, which may hold other events too).

Delta windows (``docs/flow.md``): on a session that opted in, the core
numbers deltas and refuses one past the window with
:class:`~uamp_proto.errors.FlowControlError`; the session's worker
then parks until an ack for that session arrives. Other sessions on the same
connection go on.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from uamp_proto import audio, flow, ratelimit
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.busy import BUSY, POLICY_KEY, BusyError, BusyPolicy
from uamp_proto.calls import (
    AnsweredCall,
    audio_turn,
    heard_pause,
    offer_of,
    reply_of,
    settings_refusal,
    turn_detector,
)
from uamp_proto.capabilities import queried, session_view
from uamp_proto.codec import from_dict, unstructure
from uamp_proto.connection import NEED_DATA, ConnectionConfig, ServerConnection
from uamp_proto.errors import FlowControlError, LocalProtocolError, RemoteProtocolError, UampError
from uamp_proto.interrupts import CAPABILITY_KEY, Answer, advertised, declaration, outcome_of
from uamp_proto.payment import (
    Charge,
    PaymentRequiredError,
    PaymentState,
    attempt_events,
    bounded_wait,
    held_event,
    settle_event,
)
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import (
    Responder,
    ResponderError,
    TurnRequest,
)
from uamp_proto.response import ResponseTracker
from uamp_proto.resume import (
    LAST_REQUEST,
    RESUMED,
    LogEntry,
    ResumeError,
    ResumeStream,
    interrupted_event,
    resume_from,
    start_after,
)
from uamp_proto.session_request import recoded, spoken_format, turn_request
from uamp_proto.topup import PaymentStops, TopUpAgent
from uamp_proto.voice import CallAnswer, CallOffer, default_answer
from uamp_stores.busy import Slot
from uamp_stores.event_log import HistoryJSON, SessionRecord
from uamp_stores.health import STORE_UNAVAILABLE, StoreUnavailable

from ..engines.supervise import supervised
from ..trust.auth import SESSION_AUTH, Authenticator, AuthError
from .agents import AGENT_OFFLINE, SPEC_SESSION_CODES
from .calls import answer_call, call_ended, has_call_hook
from .chats import ChatLink, ChatProfile, chat_settings
from .continuation import abandon, carry_on
from .interrupts import InterruptNotFound, InvalidAnswer, ResponsePort
from .outbox import Discard, Outbox, OutboxClosed, Overloaded, Quota, write_at_yields
from .turns import YIELD_EVERY, ResponseRunner, TurnStatus

if TYPE_CHECKING:
    from uamp_stores.event_log import EventLog, Handler, LogKey

    from .host import Host

__all__ = [
    "SessionHost",
    "SessionLimits",
]

log = logging.getLogger("uamp_trio.sessions")


_TERMINAL: Final = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)
#: Client events that are chat work (docs/chat.md), and what the chat link calls them.
_CHAT_WORK: Final = {"input.text": "say", "input.typing": "typing", "message.read": "read"}
#: What a session whose credential expired may still send (spec 000 section
#: 10.3): a fresh token, its end, a cancel; ``response.create`` is answered
#: ``response.error`` ``unauthorized`` by the response itself. Anything else
#: -- chat posts, joins, typing, reads, voice, tool results -- is refused.
_WHILE_EXPIRED: Final = frozenset(
    {
        "session.update",
        "session.end",
        "response.cancel",
        "response.create",
        "session.create",
        "ping",
    }
)
#: The refusal of an action on a session whose credential expired.
_EXPIRED: Final = "The session's token has expired; send session.update with a fresh one."


@attrs.frozen(kw_only=True)
class SessionLimits:
    """Limits of one UAMP connection (sizes in bytes, times in seconds).

    Attributes:
        max_sessions: Most concurrent sessions on one connection; one more
            ``session.create`` gets ``session.error`` ``too_many_sessions``.
        max_message_size: Largest incoming message; a larger WebSocket
            message closes the socket with 1009.
        idle_timeout: A connection with no incoming UAMP message and no
            response running for this long is closed (an HTTP+SSE session
            with no stream attached expires).
        keepalive_interval: With nothing received for this long the server
            sends a WebSocket ping; with still nothing after as long again,
            the peer is taken for dead and the connection dropped.
        outbox_size: Encoded events queued between the sessions and the
            writer before the sessions' workers wait (per connection).
        session_outbox_size: Of those, the most one session's worker may
            have queued before it waits, so one busy session cannot take the
            whole queue of a multiplexed connection (per session).
        max_owed: Replies the server may owe a peer that does not read
            before the peer is dropped.
        max_delta_window: The largest delta window granted.
        send_timeout: Longest a write may wait for a peer that does not read
            (a full send buffer) before the connection is dropped.
        max_pushed: Chat events fanned out to this connection and not yet
            written before its chat sessions end (told at half of it).
        payment_wait: Longest a response waits for payment after
            ``payment.required`` (whose ``requirements.expires_at`` says
            when); then it ends with ``response.error`` ``payment_required``.
    """

    max_sessions: int = 64
    max_message_size: int = 4 * 1024 * 1024
    idle_timeout: float = 300.0
    keepalive_interval: float = 30.0
    outbox_size: int = 64
    session_outbox_size: int = 32
    max_owed: int = 1024
    max_delta_window: int = 1024
    send_timeout: float = 30.0
    max_pushed: int = 1024
    payment_wait: float = 600.0

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_sessions",
            "max_message_size",
            "outbox_size",
            "session_outbox_size",
            "max_owed",
            "max_delta_window",
            "max_pushed",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("idle_timeout", "keepalive_interval", "send_timeout", "payment_wait"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


class _SessionGone(UampError):
    """The session ended while its worker was sending."""


class _Response:
    """The response a session is running."""

    def __init__(self, response_id: str, request_bytes: bytes | str | None = None) -> None:
        self.id = response_id
        #: The raw ``response.create`` message (what a response signature covers).
        self.request_bytes = request_bytes
        #: Payment stops caused by the agent raising PaymentRequiredError.
        self.stops = PaymentStops()
        #: The money the app's ledger holds for this response (settled at its end).
        self.charge: Charge | None = None
        #: The settled charge's ``payment.balance``, sent after the terminal event.
        self.balance: ev.PaymentBalance | None = None
        #: Set by ``response.cancel``: the session's worker then sends
        #: ``response.cancelled`` (a session's end cancels silently).
        self.cancel_requested = False
        #: Its place in the session under the busy policy (docs/busy.md).
        self.slot: Slot | None = None
        #: Instead of :attr:`slot`, while nobody arrived behind it: what the
        #: gate calls to enter its slot then (:meth:`ConversationGate.defer`).
        self.deferred: functools.partial[None] | None = None
        #: Whether its first output was written (:meth:`SessionHost._send`).
        self.written = False


class _Session:
    """The transport's side of one UAMP session."""

    def __init__(
        self,
        session_id: str,
        agent: Responder,
        principal: Principal = ANONYMOUS,
        token: str | None = None,
    ) -> None:
        self.id = session_id
        self.agent = agent
        #: Who the session acts for, and the credential that said so.
        self.principal = principal
        self.token = token
        #: Set while a token of this session is being verified (its
        #: ``session.create`` or a ``session.update``); the worker waits for it.
        self.verifying: trio.Event | None = None
        #: Parked on by the worker inside a response; woken by acks, tool results, cancels.
        self.wakeup = trio.lowlevel.ParkingLot()
        self.response: _Response | None = None
        #: The response waiting for the worker to pick it up.
        self.queued: tuple[_Response, ev.ResponseCreate] | None = None
        #: Where the idle worker waits for :attr:`queued`.
        self.idle = trio.lowlevel.ParkingLot()
        #: Whether the session's worker task runs (started by its first response).
        self.worker = False
        #: The worker's cancel scope: a cancel ends the response it runs (or
        #: is about to run), and a scope once cancelled is replaced.
        self.scope: trio.CancelScope | None = None
        #: Whether :attr:`scope` was cancelled (:meth:`stop`): its
        #: ``cancel_called``, which trio answers only after reading its clock.
        self.stopped = False
        #: A payment verdict is being worked out (off the event loop); a
        #: submit meanwhile asks for one more round instead of another task.
        self.settling = False
        self.settle_again = False
        #: This session's share of the connection's outbox.
        self.quota = Quota()
        #: The voice call its agent took (trio time), if any.
        self.call = AnsweredCall()
        #: The places its running and held responses hold (docs/busy.md).
        self.slots: list[Slot] = []
        #: The agent's capabilities as last sent on this session (UAMP 6.4).
        self.announced: ty.Capabilities | None = None
        #: Server-side turn detection (``turn_detection: server_vad``, UAMP 8.1).
        self.detector: audio.TurnDetector | None = None
        #: The running response's opening record, not put yet (:meth:`SessionHost._respond`).
        self.opening: Callable[[], None] | None = None
        #: Its events sent meanwhile (data, event id), logged after the record.
        self.unlogged: list[tuple[bytes, str]] = []

    def put_opening(self) -> None:
        """Put the running response's deferred opening record (and log its events) if owed."""
        opening = self.opening
        if opening is not None:
            self.opening = None
            opening()

    def wake(self) -> None:
        if self.wakeup:
            self.wakeup.unpark_all()

    def stop(self) -> None:
        """Cancel :attr:`scope`: the response the worker runs (or is about to run) ends."""
        if self.scope is not None:
            self.scope.cancel()
            self.stopped = True


class _PayingAgent(TopUpAgent):
    """The session's agent, held for the payments it asks for mid-response.

    :class:`uamp_proto.topup.TopUpAgent` (shared with ``uamp_asgi``) with
    this host's wait: an emitted ``payment.required`` pauses the agent in its
    ``emit`` until paid and the extra amount locked; a raised
    PaymentRequiredError holds the response, then ``respond`` is called again
    on the conversation so far (the output the agent produced before raising
    included) with the new payment token, under the same response id (spec
    004, "Payment Handling"). After :data:`~uamp_proto.topup.MAX_PAYMENT_ROUNDS`
    raises, or a top-up not paid in time, the error goes to the turn runner,
    which ends the response with ``response.error`` ``payment_required``.

    One object per response, its side of the payment as methods (no closures).
    """

    def __init__(
        self,
        host: SessionHost,
        session: _Session,
        response: _Response,
        create: ev.ResponseCreate,
    ) -> None:
        super().__init__(session.agent, response.stops)
        self._host = host
        self._session = session
        self._response = response
        self._create = create

    async def hold(self, required: ev.PaymentRequired) -> None:
        await self._host._hold_for_payment(self._session, self._response, required)

    def next_request(self) -> TurnRequest:
        retry = self._host._request(self._session, self._response.id, self._create)
        if retry is None:
            raise _SessionGone
        return retry

    def charge(self) -> Charge | None:
        return self._response.charge

    def token(self) -> str | None:
        ctx = self._host._contexts.get(self._session.id)
        return ctx.payment.token if ctx is not None else None


def _last_request(record: SessionRecord) -> dict[str, str]:
    """``session.created`` extensions naming the last turn a resumed session acted on."""
    return {LAST_REQUEST: record.request} if record.request else {}


#: ``interrupt.answer`` events one connection may have answered at once; more
#: are refused with ``rate_limited`` (docs/human-in-the-loop.md).
MAX_ANSWERS_IN_FLIGHT: Final = 16


def _error(
    session_id: str | None, code: str, message: str, field: str | None = None
) -> ev.SessionErrorEvent:
    """``session.error``; ``field`` names the offending field in ``details.field`` (6.3).

    A code UAMP 6.3 does not list is sent as the spec's code, the precise one
    in ``details.reason`` (:data:`~uamp_trio.hosting.agents.SPEC_SESSION_CODES`).
    """
    details: dict[str, Any] = {"field": field} if field else {}
    spec = SPEC_SESSION_CODES.get(code, code)
    if spec != code:
        details["reason"] = code
    return ev.SessionErrorEvent(
        session_id=session_id,
        error=ty.ErrorInfo(code=spec, message=message, details=details or None),
    )


class SessionHost:
    """Drives the UAMP sessions of one connection; see the module docstring.

    Args:
        nursery: Where the sessions' workers run (the transport's connection nursery).
        agents: The agents a multi-agent endpoint may reach, by name.
        agent: The agent of a per-agent endpoint (``/agents/{name}/...``), or
            ``None`` when ``session.create.agent`` chooses.
        limits: Connection limits.
        transport: Put into ``TurnRequest.metadata["transport"]``.
        clock: Wall-clock seconds for ``session.created.created_at``.
        app: The app served: its :meth:`~uamp_trio.app.App.payment_required`
            decides payment and its ``response_signer`` signs ``response.done``
            (both read when used, so they may be set late). ``None``: free,
            unsigned.
        principal: Who the connection acts for (the authenticated upgrade or
            HTTP request); every turn's ``TurnRequest.principal``.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        agents: Mapping[str, Responder],
        agent: Responder | None = None,
        *,
        limits: SessionLimits | None = None,
        transport: str = "uamp",
        clock: Callable[[], float] = time.time,
        app: Host | None = None,
        principal: Principal = ANONYMOUS,
    ) -> None:
        self.limits = limits or SessionLimits()
        self.principal = principal
        self.conn = ServerConnection(
            ConnectionConfig(
                max_sessions=self.limits.max_sessions,
                max_event_size=self.limits.max_message_size,
                max_delta_window=self.limits.max_delta_window,
                # A response.create while one runs: the busy policy (docs/busy.md).
                on_busy=None if app is None else self._busy_create,
            )
        )
        #: Encoded outgoing events for the transport's writer.
        self.outbox = Outbox(
            self.limits.outbox_size, self.limits.max_owed, self.limits.session_outbox_size
        )
        #: The core's sessions by id: ``conn.sessions``, the same mapping
        #: (read on every event; not through the property each time).
        self._contexts = self.conn.sessions
        #: ``trio.current_time``, from the run's clock itself: the same value
        #: without the two calls in front of it (read on every message).
        self._now = trio.lowlevel.current_clock().current_time
        #: trio time of the last incoming UAMP message.
        self.last_activity = self._now()
        self._nursery = nursery
        self._agents = agents
        self._fixed = agent
        self._transport = transport
        self._clock = clock
        self._app = app
        self._sessions: dict[str, _Session] = {}
        #: The message ``feed`` is processing (one message holds one event).
        self._message: bytes | str = b""
        #: Called when the last session ends (HTTP+SSE ends its HTTP session).
        self.on_empty: Callable[[], None] | None = None
        if app is not None and app.session_hosts is not None:
            app.session_hosts.add(self)  # counted by the app's metrics
        #: ``(code, message)`` of the last ``session.create`` refused for its agent.
        self.refusal: tuple[str, str] | None = None
        #: Where every event of a session goes too, for resuming (docs/resume.md).
        self.event_log: EventLog | None = app.stores.event_log if app is not None else None
        #: The sessions whose log this host writes: id -> (log key, owner callback).
        self._logged: dict[str, tuple[LogKey, Callable[[], None]]] = {}
        self._records: dict[str, SessionRecord] = {}
        self._history_json: dict[str, HistoryJSON] = {}
        #: Set once the peer is gone and its running responses go on into the log.
        self.detached = False
        #: The handlers this host answers with, by session id (:meth:`_answer_for`).
        self._answering: dict[str, tuple[LogKey, Handler]] = {}
        #: Answers messages other than ``cancel`` about this host's sessions
        #: (the HTTP+SSE transport: POSTs that reached another process).
        self.on_message: Handler | None = None
        #: The chat side of this connection, made by its first chat event (docs/chat.md).
        self.chat: ChatLink | None = None
        #: ``interrupt.answer`` events being answered (at most MAX_ANSWERS_IN_FLIGHT).
        self._answers_in_flight = 0

    # --- public ---------------------------------------------------------------

    #: The reader never waits for a session host (a FrameHost's backpressure
    #: hook): peers that do not read are dropped through ``max_owed`` instead.
    backlogged = False

    async def drained(self) -> None:
        """Nothing to wait for (see :attr:`backlogged`)."""

    @property
    def nursery(self) -> trio.Nursery:
        """Where the connection's work runs."""
        return self._nursery

    @property
    def session_ids(self) -> list[str]:
        """The ids of the live sessions."""
        return list(self._sessions)

    @property
    def busy(self) -> bool:
        """Whether a response is running on any session."""
        return any(s.response is not None for s in self._sessions.values())

    def feed(
        self, message: bytes | str, *, carrier: bytes | str | None = None
    ) -> list[RemoteProtocolError]:
        """Process one incoming message (one JSON event); never waits.

        ``carrier`` is what brought the message when that is more than the
        message itself (an HTTP body holding an array of events): a
        ``response.done`` signature covers it instead of the message.

        Returns:
            The protocol errors the message caused (their ``session.error``
            replies are already in the outbox); empty when all was well.

        Raises:
            Overloaded: The peer has too many unwritten replies queued.
        """
        self.last_activity = self._now()
        self._message = message if carrier is None else carrier
        conn = self.conn
        errors: list[RemoteProtocolError] = []
        try:
            conn.receive(message)
        except LocalProtocolError as exc:  # pragma: no cover - drained after every message
            errors.append(RemoteProtocolError(exc.message, code="overloaded"))
            return errors
        while True:
            try:
                event = conn.next_event()
            except RemoteProtocolError as exc:
                errors.append(exc)
                self._flush_owed()
                continue
            if event is NEED_DATA:
                break
            if conn.owed:
                self._flush_owed()
            if isinstance(event, ev.Event):
                self._dispatch(event)
            else:
                # Section 14.3: an unknown event type is logged, never an error.
                assert isinstance(event, ev.UnknownEvent)
                log.info("ignoring an event of unknown type %r", event.type[:64])
        if conn.owed:
            self._flush_owed()
        return errors

    @property
    def session_count(self) -> int:
        """How many sessions are open on this connection."""
        return len(self._sessions)

    def close_all(self, reason: str | None = None, *, notify: bool = True) -> None:
        """End every session and stop its work.

        Args:
            reason: The ``session.end`` reason (``"timeout"``...).
            notify: Tell the peer with ``session.end`` (not when it is gone).
        """
        for sid in list(self._sessions):
            if notify and sid in self._contexts:
                with contextlib.suppress(LocalProtocolError, Overloaded):
                    if reason == "timeout":  # UAMP 6.3's code, then the end
                        self.outbox.put_owed(
                            self.conn.send(_error(sid, "timeout", "the session timed out"))
                        )
                    end = ev.SessionEnd(session_id=sid, reason=reason)
                    self.outbox.put_owed(self.conn.send(end))
            self._drop(sid)

    # --- dispatch -------------------------------------------------------------

    def _update(self, session: _Session, event: ev.SessionUpdate) -> None:
        """Answer ``session.update`` for ``session``: ``session.updated`` once its token is good."""
        auth = self._app.authenticator if self._app is not None else None
        if auth is not None and event.token is not None:
            # Answered once the token is verified; the next response waits for it.
            session.verifying = trio.Event()
            self._nursery.start_soon(self._reauthenticate, auth, session, event.token)
        else:
            try:
                self._owe(ev.SessionUpdated(session_id=session.id))
            except LocalProtocolError as exc:  # not created yet: session.created comes first
                log.info("session %s: session.update not answered: %s", session.id, exc)
        ctx = self._contexts.get(session.id)
        if ctx is not None and ctx.payment.state is PaymentState.SUBMITTED:
            # The core took the new payment_token as the answer to the
            # outstanding payment.required (spec 004).
            self._ask_settle(session)

    def _lapsed(self, event: ev.Event) -> bool:
        """Refuse ``event`` when its session's credential has expired; ``True`` if refused."""
        session = self._session_of(event)
        if session is None or not session.principal.expired(self._clock()):
            return False
        with contextlib.suppress(LocalProtocolError):
            self.owe_quietly(_error(session.id, "unauthorized", _EXPIRED, "token"))
        return True

    def renew(self, principal: Principal) -> None:
        """A request of the same principal brought a credential verified now (HTTP+SSE POSTs).

        The connection's and its sessions' credentials become that one, so
        their expiry is its expiry; another principal's changes nothing.
        """
        if principal.key != self.principal.key:
            return
        self.principal = principal
        for session in self._sessions.values():
            if session.principal.key == principal.key:
                session.principal = principal

    def _owe(self, event: ev.Event) -> None:
        data = self.conn.send(event)
        sid = event.session_id
        if sid is not None and sid in self._logged:
            self._log(sid, data)
        self.outbox.put_owed(data)

    def _log(self, sid: str, data: bytes) -> None:
        """Append ``data`` (the last event the core serialised) to ``sid`` 's log."""
        entry = self._logged.get(sid)
        if entry is not None:
            session = self._sessions.get(sid)
            if session is not None and session.opening is not None:
                session.put_opening()  # what it deferred goes first
            assert self.event_log is not None
            self.event_log.append(entry[0], data, self.conn.last_event_id)

    def _flush_owed(self) -> None:
        for data in self.conn.data_to_send():
            self.outbox.put_owed(data)

    def _session_of(self, event: ev.Event) -> _Session | None:
        sid = event.session_id
        if sid is not None:
            return self._sessions.get(sid)
        if len(self._sessions) == 1:
            return next(iter(self._sessions.values()))
        return None

    def _dispatch(self, event: ev.Event) -> None:
        etype = event.type
        if etype == "response.delta" or (
            etype == "input.text"
            and getattr(event, "payment_token", None) is None
            and self.chat is None
            and getattr(event, "context", None) is None
        ):
            return  # the hot path: the core has accumulated the input already
        if etype not in _WHILE_EXPIRED and self._lapsed(event):
            return
        if etype in _CHAT_WORK and self._to_chat(event):
            return
        if etype == "session.create":
            assert isinstance(event, ev.SessionCreate)
            self._create(event)
            return
        session = self._session_of(event)
        if etype == "response.create":
            assert isinstance(event, ev.ResponseCreate)
            if session is not None:
                self._start_response(session, event)
        elif etype == "progress" or etype == "tool.result":
            if session is not None:
                session.wake()
        elif etype == "response.cancel":
            assert isinstance(event, ev.ResponseCancel)
            if session is not None:
                self._cancel(session, event.response_id)
        elif etype == "payment.submit":
            if session is not None:
                self._ask_settle(session)
        elif etype == "interrupt.answer":
            assert isinstance(event, ev.InterruptAnswer)
            if session is not None and self._app is not None:
                if self._answers_in_flight >= MAX_ANSWERS_IN_FLIGHT:
                    # A flood of answers (each may ask the store) is refused, not queued.
                    self._owe(_error(session.id, "rate_limited", "too many answers at once"))
                else:
                    self._answers_in_flight += 1
                    self._nursery.start_soon(self._answer_interrupt, session, event)
        elif etype == "input.text":
            assert isinstance(event, ev.InputText)
            if session is not None and event.payment_token is not None:
                ctx = self._contexts.get(session.id)
                if ctx is not None and ctx.payment.state is PaymentState.SUBMITTED:
                    # The core took the token as the answer to an open
                    # payment.required, as it does for session.update.
                    self._ask_settle(session)
        elif etype == "session.update":
            assert isinstance(event, ev.SessionUpdate)
            # Without session_id and with several sessions (or none) it is a
            # connection-level update (section 5.2), which the core applied
            # to every session: each is answered (and its token verified) as
            # if it had been named; with no session, a session-less error.
            targets = [session] if session is not None else list(self._sessions.values())
            if not targets:
                self._owe(_error(None, "no_session", "no session is open to update"))
            for target in targets:
                self._update(target, event)
        elif etype == "session.end":
            if session is not None:
                self._put_record(session.id, ended=True)
                self._drop(session.id)
        elif etype == "capabilities.query":
            assert isinstance(event, ev.CapabilitiesQuery)
            self._capabilities(session, event)
        elif etype.startswith("voice.") or etype == "input.audio":
            if session is None:
                return
            if self.chat is not None and self.chat.voice(session.id, event):
                # A call between people in a room (docs/voice.md): the audio
                # went to the other side, not into the next response's input.
                ctx = self._contexts.get(session.id)
                if etype == "input.audio" and ctx is not None and ctx.pending_input:
                    ctx.pending_input.pop()
                return
            if etype == "voice.invite" or etype == "voice.end":
                self._voice(session, event)
            elif isinstance(event, ev.InputAudio) and event.is_final:
                self._audio_turn(session)
            elif isinstance(event, ev.InputAudio) and session.detector is not None:
                self._detect_turn(session, event)

    # --- voice calls (sections 5.16, 7.3; docs/voice.md) ------------------------

    def _voice(self, session: _Session, event: ev.Event) -> None:
        """Answer a call to the session's agent, or end it (``voice.end`` from the client).

        The agent's ``take_call`` hook answers when it has one (in a task:
        the reader never waits; audio meanwhile is refused as the call still
        rings), else its capabilities do, at once. An accept carries the
        hook's SDP answer if it gave one; without it uamp carries the call's
        audio in-band (``input.audio`` / ``audio.delta`` on this connection).
        """
        if isinstance(event, ev.VoiceEnd):
            self._call_over(session, event.reason or "ended")
            return
        assert isinstance(event, ev.VoiceInvite)
        offer = offer_of(event, session.id, transport=self._transport, principal=session.principal)
        if has_call_hook(session.agent):
            self._nursery.start_soon(self._ask_agent, session, offer)
        else:
            answer = default_answer(session.agent.name, session.agent.capabilities())
            self._answer_call(session, offer, answer)

    async def _ask_agent(self, session: _Session, offer: CallOffer) -> None:
        answer = await answer_call(session.agent, offer)
        if self._sessions.get(session.id) is session:
            self._answer_call(session, offer, answer)

    def _answer_call(self, session: _Session, offer: CallOffer, answer: CallAnswer) -> None:
        """Send the agent's ``answer`` to ``offer``: ``voice.accept`` or ``voice.decline``."""
        try:
            self._owe(reply_of(offer, answer))
        except (LocalProtocolError, Overloaded) as exc:  # the caller hung up meanwhile
            log.info("session %s: voice.invite not answered: %s", session.id, exc)
            return
        if answer.accept:
            session.call.accepted(offer.call_id, trio.current_time())

    def _call_over(self, session: _Session, reason: str) -> None:
        """The session's accepted call ended: the agent's ``call_ended`` learns how long it ran."""
        ended = session.call.over(session.id, trio.current_time(), reason)
        if ended is None:
            return
        background = self._app.background if self._app is not None else None
        (background or self._nursery).start_soon(call_ended, session.agent, ended)

    def _audio_turn(self, session: _Session) -> None:
        """The caller finished an utterance (``is_final``): the agent answers it.

        In a call the server detects turns (as Realtime's ``server_vad``
        does): the audio so far goes to the agent as one user message with
        audio asked for in return, exactly as if the client had sent
        ``response.create``. Outside a call a final chunk changes nothing.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None or not session.call.active or ctx.response is not None:
            return
        # Queued behind the message being processed: feed's loop takes it next.
        self.conn.receive(audio_turn(session.id))

    def _detect_turn(self, session: _Session, event: ev.InputAudio) -> None:
        """``server_vad``: the caller's audio through the detector; a pause ends the turn."""
        detector = session.detector
        if detector is None or not session.call.active:
            return
        ctx = self._contexts.get(session.id)
        if heard_pause(detector, event, ctx.config if ctx is not None else None):
            self._audio_turn(session)

    # --- chats (docs/chat.md; the rooms live in hosting/chats.py) --------------------

    def _to_chat(self, event: ev.Event) -> bool:
        """Hand a chat event to the connection's :class:`ChatLink`; ``True`` when it was one."""
        session = self._session_of(event)
        ctx = self._contexts.get(session.id) if session is not None else None
        if session is None or ctx is None or ctx.chat_of(event) is None:
            return False
        link = self._chat_link()
        if link is None:
            self._owe(_error(session.id, "unsupported", "this server keeps no chat rooms"))
            return True
        link.submit(session.id, _CHAT_WORK[event.type], event)
        return True

    def _chat_link(self) -> ChatLink | None:
        if self.chat is None and self._app is not None:
            self.chat = ChatLink(self, self._app.chats)
        return self.chat

    def chat_of(self, session_id: str, event: ev.Event) -> str | None:
        """The chat a session's event belongs to (see :meth:`SessionContext.chat_of`)."""
        ctx = self._contexts.get(session_id)
        return ctx.chat_of(event) if ctx is not None else None

    def chat_profile(self, session_id: str) -> ChatProfile:
        """Who the session is in its chats.

        An authenticated principal is its own user id (a session cannot
        claim another's); without authentication the session names itself
        with ``session.extensions.chat.user_id`` / ``username``, else its
        session id stands for it.
        """
        session = self._sessions.get(session_id)
        ctx = self._contexts.get(session_id)
        settings = chat_settings(ctx.config if ctx is not None else None)
        principal = session.principal if session is not None else self.principal
        name = settings.get("username")
        username = name if isinstance(name, str) and name else None
        if principal.scheme == "anonymous":
            claimed = settings.get("user_id")
            user_id = claimed if isinstance(claimed, str) and claimed else username or session_id
        else:
            user_id = principal.id
        return ChatProfile(
            principal=principal,
            user_id=user_id,
            username=username or user_id,
            agent=session.agent.name if session is not None else "",
            settings=settings,
        )

    def session_tokens(self, session_id: str) -> tuple[str | None, str | None]:
        """The session's auth token and payment token."""
        session = self._sessions.get(session_id)
        ctx = self._contexts.get(session_id)
        token = session.token if session is not None else None
        return token, ctx.payment.token if ctx is not None else None

    def client_capabilities(self, session_id: str) -> ty.Capabilities | None:
        """What the session's client declared it can handle, merged (UAMP 5.5, 9)."""
        ctx = self._contexts.get(session_id)
        return ctx.client_capabilities if ctx is not None else None

    def owe_quietly(self, event: ev.Event) -> None:
        """Queue a reply the server owes; a peer with too many unread ones is cut off."""
        try:
            self._owe(event)
        except Overloaded:
            self.outbox.close()

    def end_session(self, session_id: str, reason: str) -> None:
        """End one session from the server's side (``session.end`` with ``reason``)."""
        if session_id in self._contexts:
            with contextlib.suppress(LocalProtocolError):
                self.owe_quietly(ev.SessionEnd(session_id=session_id, reason=reason))
        self._drop(session_id)

    def _hosted(self, name: str | None) -> Responder | None:
        found = self._resolve(name)
        return None if isinstance(found, tuple) else found

    def _resolve(self, name: str | None) -> Responder | tuple[str, str]:
        fixed = self._fixed
        if fixed is not None:
            if name is None or name == fixed.name:
                return fixed
            return (
                "agent_not_found",
                f"this endpoint serves agent {fixed.name!r}, not {name!r}; connect to /ws to "
                "choose the agent per session",
            )
        hosted = ", ".join(sorted(self._agents)) or "none"
        if name is None:
            if len(self._agents) == 1:
                return next(iter(self._agents.values()))
            return (
                "agent_required",
                f"name the agent in session.create.agent (hosted here: {hosted})",
            )
        agent = self._agents.get(name)
        if agent is None:
            return ("agent_not_found", f"no agent named {name!r} is hosted here (hosted: {hosted})")
        if name in getattr(self._agents, "offline", ()):
            return (AGENT_OFFLINE, f"agent {name!r} is offline: its daemon is not connected")
        return agent

    def _create(self, event: ev.SessionCreate) -> None:
        sid = event.session_id
        assert sid is not None  # the server core assigns one
        found = self._resolve(event.agent)
        if isinstance(found, tuple):
            self.refusal = found
            self._owe(_error(sid, *found, "agent"))  # the session ends in the core: never created
            return
        unheard = settings_refusal(event.session, found)
        if unheard is not None:
            # UAMP 8.1: a voice setting is honoured or refused, never echoed as if it were.
            self.refusal = ("unsupported", unheard[1])
            self._owe(_error(sid, "unsupported", unheard[1], f"session.{unheard[0]}"))
            return
        down = self._store_down()
        if down is not None:
            self.refusal = (STORE_UNAVAILABLE, down)
            self._owe(_error(sid, STORE_UNAVAILABLE, down))
            return
        auth = self._app.authenticator if self._app is not None else None
        token = event.token
        try:
            after = resume_from(event.unknown.get("extensions"))
        except ResumeError as exc:
            self.refusal = (exc.code, exc.message)
            self._owe(_error(sid, exc.code, exc.message))
            return
        if token is None and self.principal.expired(self._clock()):
            # The connection's credential expired: a new session brings its own.
            self.refusal = (
                "unauthorized",
                "this connection's token has expired; send a fresh one in session.create.token",
            )
            self._owe(_error(sid, *self.refusal, "token"))
            return
        if after is not None and (token is not None or self.principal is not SESSION_AUTH):
            # Resuming reads the store: answered once the log says where to start.
            session = _Session(sid, found, self.principal, token)
            session.verifying = trio.Event()
            self._sessions[sid] = session
            self._nursery.start_soon(
                self._admit, auth if token is not None else None, session, token, after
            )
            return
        if auth is None or (token is None and self.principal is not SESSION_AUTH):
            self._sessions[sid] = _Session(sid, found, self.principal, token)
            self._accept(sid, found)
            return
        if token is None:
            # The upgrade presented no token: each session must bring its own.
            self.refusal = ("unauthorized", "session.create needs a token on this connection")
            self._owe(_error(sid, *self.refusal, "token"))
            return
        session = _Session(sid, found, SESSION_AUTH)
        session.verifying = trio.Event()
        self._sessions[sid] = session
        self._nursery.start_soon(self._admit, auth, session, token)

    def _accept(self, sid: str, agent: Responder) -> None:
        data = self.conn.accept(sid, agent=agent.name, created_at=self._clock())
        self._begin_log(sid)
        self._log(sid, data)
        self.outbox.put_owed(data)
        ctx = self._contexts.get(sid)
        # Section 9.1: session.created, then capabilities -- the same merged
        # view capabilities.query answers (the client's declaration echoed).
        caps = agent.capabilities()
        session = self._sessions.get(sid)
        if session is not None:
            session.announced = caps
            # Checked at session.create: server_vad, valid settings.
            session.detector = turn_detector(ctx.config if ctx is not None else None)
        view = self._view(caps, ctx.client_capabilities if ctx else None)
        self._owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view))
        self._warn_limits(sid)
        if ctx is not None and ctx.chat:
            # session.create.chat (section 5.1, 10.2): the session joins at once.
            link = self._chat_link()
            if link is None:
                self._owe(_error(sid, "unsupported", "this server keeps no chat rooms"))
            else:
                link.submit(sid, "join", (ctx.chat, chat_settings(ctx.config)))

    def _warn_limits(self, sid: str) -> None:
        """``rate_limit`` after ``session.created`` when a limit is nearly spent (UAMP 6.17).

        The connection's sessions (``max_sessions``) and the server's
        connections (``max_connections``, ``uamp serve --limit-concurrency``):
        at a tenth or less left the client hears how much is.
        """
        limit = self.limits.max_sessions
        warnings = []
        if limit > 1:  # an HTTP+SSE session is a "connection" of one: nothing to tell
            left = limit - len(self._contexts)
            warnings.append(ratelimit.notice(limit, left, session_id=sid))
        app = self._app
        count = app.connection_count if app is not None else None
        cap = app.server_config.max_connections if app is not None else None
        if count is not None and cap is not None:
            warnings.append(ratelimit.notice(cap, cap - count(), session_id=sid))
        for warning in warnings:
            if warning is not None:
                self._owe(warning)

    # --- the event log (resumable sessions; docs/resume.md) ------------------------

    def _store_down(self) -> str | None:
        """Why new work is refused now: the event log's store does not answer (or ``None``)."""
        log = self.event_log
        if log is None or not log.health.unavailable:
            return None
        return "the session store is unavailable; try again shortly"

    def _begin_log(self, sid: str) -> None:
        """Start the log of a new session: every event it sends from now on is logged."""
        log, session = self.event_log, self._sessions.get(sid)
        if log is None or session is None:
            return
        ctx = self._contexts.get(sid)
        config = ctx.config if ctx is not None else None
        record = SessionRecord(
            agent=session.agent.name,
            config=unstructure(config) if config else None,
            node=log.node,
        )
        key = (session.principal.key, sid)
        owner = functools.partial(self._taken_over, sid)
        log.begin(key, record.copy(), owner)
        self._logged[sid] = (key, owner)
        self._records[sid] = record
        self._answer_for(sid, key)
        self._start_flusher()

    def _start_flusher(self) -> None:
        assert self.event_log is not None
        self.event_log.ensure_running(self._app.background if self._app is not None else None)

    def _put_record(self, sid: str, **changes: object) -> None:
        """Queue ``sid`` 's record with ``changes`` and its conversation so far."""
        entry, record = self._logged.get(sid), self._records.get(sid)
        if entry is None or record is None:
            return
        assert self.event_log is not None
        ctx = self._contexts.get(sid)
        if ctx is not None:
            converted = self._history_json.get(sid)
            if converted is None:
                converted = self._history_json[sid] = HistoryJSON()
            record.history = converted.of(ctx.history)
        for name, value in changes.items():
            setattr(record, name, value)
        log = self.event_log
        log.put_record(entry[0], record if log.copies_records else record.copy())

    def _answer_for(self, sid: str, key: LogKey) -> None:
        """Answer what other connections and processes ask about ``sid`` (its writer is here)."""
        assert self.event_log is not None
        handler = functools.partial(self._on_message, sid)
        self._answering[sid] = (key, handler)
        self.event_log.register(key, handler)

    def _stop_answering(self, sid: str) -> None:
        entry = self._answering.pop(sid, None)
        if entry is not None and self.event_log is not None:
            self.event_log.unregister(*entry)

    async def _on_message(self, sid: str, message: dict[str, Any]) -> dict[str, Any]:
        """A message about ``sid`` from another connection or process (:meth:`EventLog.ask`).

        ``cancel`` cancels the response running here (a ``response.cancel``
        sent on a connection that resumed the session meanwhile); other
        messages go to :attr:`on_message` (the HTTP+SSE transport's POSTs).
        """
        if message.get("op") == "cancel":
            session = self._sessions.get(sid)
            if session is None or session.response is None:
                return {"cancelled": False}
            self._cancel(session, message.get("response_id"))
            return {"cancelled": session.response.cancel_requested}
        if self.on_message is not None:
            return await self.on_message(message)
        return {"error": "unsupported"}

    def _taken_over(self, sid: str) -> None:
        """Another connection of this process resumed ``sid``: it is not ours any more."""
        self._stop_answering(sid)
        self._logged.pop(sid, None)
        self._records.pop(sid, None)
        self._history_json.pop(sid, None)
        if sid in self._sessions:
            if not self.detached and sid in self._contexts:
                with contextlib.suppress(LocalProtocolError, Overloaded):
                    end = ev.SessionEnd(session_id=sid, reason="resumed")
                    self.outbox.put_owed(self.conn.send(end))
            self._drop(sid)

    def _release_log(self, sid: str) -> None:
        self._stop_answering(sid)
        entry = self._logged.pop(sid, None)
        self._records.pop(sid, None)
        self._history_json.pop(sid, None)
        if entry is not None and self.event_log is not None:
            self.event_log.release(entry[0], entry[1])

    def detach(self) -> bool:
        """The peer is gone: logged sessions with a running response go on, into the log.

        The other sessions end (their logs and records stay, to be resumed).
        Returns whether any session goes on (then :meth:`linger`).
        """
        if not self._logged:
            return False
        self.detached = True
        self.outbox = Discard()
        for sid, session in list(self._sessions.items()):
            if session.response is None or sid not in self._logged:
                self._drop(sid)
                continue
            ctx = self._contexts.get(sid)
            if ctx is not None and ctx.send_window is not None:
                # No ack comes back here any more: the response goes on into
                # the log, still numbered, read at the resuming client's pace.
                ctx.send_window.lift()
                session.wake()
        return bool(self._sessions)

    async def linger(self, limit: float) -> None:
        """After :meth:`detach`: wait (at most ``limit`` s) for the running responses to end.

        A response still running then ends in the log with ``response.error``
        ``interrupted`` and its partial output.
        """
        with trio.move_on_after(limit):
            while self.busy:
                await trio.sleep(0.05)
        for sid, session in list(self._sessions.items()):
            ctx = self._contexts.get(sid)
            tracker = ctx.response if ctx is not None else None
            if session.response is not None and tracker is not None and sid in self._logged:
                with contextlib.suppress(LocalProtocolError):
                    self._log(sid, self.conn.send(interrupted_event(tracker, session_id=sid)))
                self._put_record(sid, running=None)
        self.close_all(notify=False)
        if self.event_log is not None:
            # A store that does not answer keeps them queued: the flusher writes them later.
            with contextlib.suppress(StoreUnavailable):
                await self.event_log.flush()

    async def _resume(self, session: _Session, after_id: str) -> None:
        """Resume ``session`` from its log: created, the missed events, then live.

        See docs/resume.md. A refusal is ``session.error`` with the
        :class:`~uamp_proto.resume.ResumeError` code; the session is not created.
        """
        log, sid = self.event_log, session.id
        key = (session.principal.key, sid)
        try:
            if log is None:
                raise ResumeError(
                    "this server keeps no event log; sessions cannot be resumed",
                    code="resume_unavailable",
                )
            record = await log.load(key)
            if record.agent != session.agent.name:
                # Another endpoint's session is answered as an unknown one.
                raise ResumeError(
                    f"no session {sid!r} to resume: it never existed or was forgotten",
                    code="unknown_session",
                )
            window = await log.window(key)
            start = start_after(window, await log.find(key, after_id), after_id)
        except (ResumeError, StoreUnavailable) as exc:
            self._refuse(session, exc.code, exc.message)
            return
        ctx = self._contexts.get(sid)
        if ctx is None or self._sessions.get(sid) is not session:
            return
        self._restore(sid, record)
        self.outbox.put_owed(
            self.conn.accept(
                sid,
                agent=session.agent.name,
                created_at=self._clock(),
                # The last turn it acted on: a client resends a later one.
                extensions={RESUMED: True, **_last_request(record)},
            )
        )
        self._start_flusher()
        try:
            stream = ResumeStream(start)
            record = await self._follow(session, key, stream)
            if self._sessions.get(sid) is not session:
                return
            owner = functools.partial(self._taken_over, sid)
            log.take_over(key)
            await log.adopt(key, owner)
            # Anything the previous writer appended before it let go.
            await self._replay(stream, await log.read(key, stream.cursor))
        except ResumeError as exc:
            log.release(key)
            self._refuse(session, exc.code, exc.message)
            return
        record.node = log.node
        self._logged[sid] = (key, owner)
        self._answer_for(sid, key)
        self._records[sid] = record
        self._restore(sid, record)
        self._put_record(sid)

    def _refuse(self, session: _Session, code: str, message: str) -> None:
        self.refusal = (code, message)
        if session.id in self._contexts:
            with contextlib.suppress(LocalProtocolError, Overloaded):
                self._owe(_error(session.id, code, message))
        self._drop(session.id)

    def _restore(self, sid: str, record: SessionRecord) -> None:
        """Put the record's conversation and configuration into the core's session."""
        ctx = self._contexts.get(sid)
        if ctx is None:
            return
        ctx.history = [from_dict(ty.Message, m) for m in record.history]
        if record.config is not None:
            ctx.config = from_dict(ty.SessionConfig, record.config)

    async def _replay(self, stream: ResumeStream, entries: Iterable[LogEntry]) -> None:
        step = stream.backfill(entries)
        for entry in step.send:
            await self.outbox.put(entry.data)

    async def _follow(self, session: _Session, key: LogKey, stream: ResumeStream) -> SessionRecord:
        """Send the log from the stream's cursor on until no response runs elsewhere.

        A response running in another connection or process streams on into
        this one through the log; one whose process is gone (no heartbeat)
        is ended in the log with ``response.error`` ``interrupted`` by the
        first process that notices (:meth:`EventLog.claim`). Returns the
        session's record once nobody else runs a response.
        """
        log = self.event_log
        assert log is not None
        while True:
            entries = await log.read(key, stream.cursor)
            if entries:
                await self._replay(stream, entries)
                continue
            record = await log.load(key)
            running = record.running
            if running is None:
                return record
            if not log.writing(key) and not (
                record.node != log.node and await log.alive(record.node)
            ):
                # Nobody runs it any more: its process stopped mid-stream.
                await self._interrupt_orphan(session, key, record, running)
                continue
            await self._replay(stream, await log.wait(key, stream.cursor, timeout=0.5))

    async def _interrupt_orphan(
        self, session: _Session, key: LogKey, record: SessionRecord, running: str
    ) -> None:
        """Carry on the response of a lost process (or end it ``interrupted``), once.

        The first process to claim the loss adopts the log and carries the
        response on in the background (:func:`~uamp_trio.hosting.continuation.carry_on`);
        this connection follows the log meanwhile, like any other writer's.
        """
        log = self.event_log
        assert log is not None
        if not await log.claim(key, f"{running}@{record.node}"):
            await trio.sleep(0.1)  # another process is carrying it on
            return

        def carrying() -> None:
            """The continuation's hold on the log: released only while it is the holder."""

        await log.adopt(key, carrying)
        app = self._app
        nursery = app.background if app is not None and app.background is not None else None
        job = functools.partial(
            carry_on, log, key, record, session.agent, session.principal, app, carrying
        )
        failed = functools.partial(abandon, log, key, record, carrying)
        what = f"session {session.id}: carrying on response {running}"
        (nursery or self._nursery).start_soon(
            functools.partial(supervised, job, what=what, on_error=failed)
        )

    # --- authentication (spec 000 section 10.3; docs/security.md) ---------------

    async def _admit(
        self,
        auth: Authenticator | None,
        session: _Session,
        token: str | None,
        resume: str | None = None,
    ) -> None:
        """Verify a ``session.create`` token: created, or ``session.error`` ``unauthorized``.

        With ``resume`` (the ``resume_from`` event id) the session is then
        resumed from its log (:meth:`_resume`). Without ``auth`` the
        connection's principal is the session's.
        """
        try:
            if auth is None or token is None:
                principal: Principal | None = session.principal
                reason = ""
            else:
                principal = await auth.authenticate(token)
                reason = ""
        except AuthError as exc:
            principal, reason = None, exc.message
        try:
            if self._sessions.get(session.id) is not session:
                return  # ended while it was being verified
            if principal is None:
                self.refusal = ("unauthorized", reason)
                self._owe(_error(session.id, "unauthorized", reason, "token"))  # ends it
                self._drop(session.id)
                return
            session.principal, session.token = principal, token
            if resume is not None:
                await self._resume(session, resume)
            else:
                self._accept(session.id, session.agent)
        except (LocalProtocolError, Overloaded, OutboxClosed) as exc:
            log.info("session %s: cannot answer its session.create: %s", session.id, exc)
        finally:
            assert session.verifying is not None
            session.verifying.set()

    async def _reauthenticate(self, auth: Authenticator, session: _Session, token: str) -> None:
        """Verify a ``session.update`` token: the same principal, or ``unauthorized``.

        A token for another principal than the session's is refused (a session
        never changes hands); the session keeps its former credential.
        """
        done = session.verifying
        try:
            try:
                principal = await auth.authenticate(token)
                same = (principal.id, principal.scheme) == (
                    session.principal.id,
                    session.principal.scheme,
                )
                reason = "" if same else "the token names another principal than the session's"
            except AuthError as exc:
                principal, reason = session.principal, exc.message
            if self._sessions.get(session.id) is not session:
                return
            ctx = self._contexts.get(session.id)
            if reason:
                if ctx is not None:
                    ctx.token = session.token  # the refused token is not the session's
                self._owe(_error(session.id, "unauthorized", reason, "token"))
                return
            session.principal, session.token = principal, token
            if self.principal.key == principal.key:
                self.principal = principal  # the connection's new sessions go on with it
            self._owe(ev.SessionUpdated(session_id=session.id))
        except (LocalProtocolError, Overloaded, OutboxClosed) as exc:
            log.info("session %s: cannot answer its session.update: %s", session.id, exc)
        finally:
            if done is not None:
                done.set()

    async def _verified(self, session: _Session) -> None:
        """Wait for the session's pending token check; raise if it ended meanwhile."""
        while session.verifying is not None and not session.verifying.is_set():
            await session.verifying.wait()
        if self._sessions.get(session.id) is not session:
            raise _SessionGone

    async def admitted(self) -> None:
        """Wait until every session's pending token check is done (HTTP+SSE answers after it)."""
        for session in list(self._sessions.values()):
            if session.verifying is not None:
                await session.verifying.wait()

    def _capabilities(self, session: _Session | None, event: ev.CapabilitiesQuery) -> None:
        """Answer ``capabilities.query`` (UAMP 5.4, 9.1).

        ``model`` inside a session: the session's agent (its name or ``None``),
        the agent as it would be on that model of its provider
        (``capabilities_for``, when the agent has it), else the hosted agent
        of that name. Outside a session ``model`` names a hosted agent.
        """
        model = event.model
        caps = queried(session.agent if session is not None else None, model, self._hosted)
        if caps is None:
            found = self._resolve(model)
            code, message = found if isinstance(found, tuple) else ("unsupported", "")
            if session is not None:
                code, message = "unsupported", f"no model or agent {model!r} is known here"
            self._owe(_error(session.id if session else None, code, message, "model"))
            return
        if session is not None and model in (None, session.agent.name):
            session.announced = caps
        sid = session.id if session is not None else None
        ctx = self._contexts.get(sid) if sid is not None else None
        view = self._view(caps, ctx.client_capabilities if ctx is not None else None)
        self._owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view))

    async def _announce(self, session: _Session, caps: ty.Capabilities) -> None:
        """Send ``capabilities`` again when the agent's declaration changed (UAMP 6.4).

        Checked before and after each response: an agent whose model was
        swapped (or whose tools changed) between turns or during one tells
        the client before its next output. ``caps`` is what the agent
        declares now (the caller compared it by identity already).
        """
        if caps is session.announced or caps == session.announced:
            return
        session.announced = caps
        ctx = self._contexts.get(session.id)
        if ctx is None:
            return
        view = self._view(caps, ctx.client_capabilities)
        try:
            data = self.conn.send(ev.CapabilitiesEvent(session_id=session.id, capabilities=view))
        except LocalProtocolError:
            return  # the session is ending
        self._log(session.id, data)
        await self.outbox.put(data, session.quota)

    def _view(self, caps: ty.Capabilities, client: ty.Capabilities | None) -> ty.Capabilities:
        """The capabilities a session sees: the agent's, the client's echoed, and
        the interrupts this transport carries (docs/human-in-the-loop.md)."""
        view = session_view(caps, client)
        if self._app is None:
            return view
        declared = {
            **(view.extensions or {}),
            CAPABILITY_KEY: declaration(self._app.interrupts.expiry),
        }
        return attrs.evolve(view, extensions=declared)

    async def _answer_interrupt(self, session: _Session, event: ev.InterruptAnswer) -> None:
        """Answer a paused run's interrupt, on this session or any other (by id)."""
        try:
            await self._answer_one(session, event)
        finally:
            self._answers_in_flight -= 1

    async def _answer_one(self, session: _Session, event: ev.InterruptAnswer) -> None:
        assert self._app is not None
        answer = Answer(
            approved=event.approved,
            arguments=event.arguments,
            value=event.value,
            reason=event.reason,
        )
        try:
            found = await self._app.interrupts.answer(session.principal, event.interrupt_id, answer)
        except (InterruptNotFound, InvalidAnswer) as exc:
            reply: ev.Event = _error(session.id, exc.code, str(exc), "interrupt_id")
        else:
            if found.session_id == session.id:
                return  # the paused run's own stream reports interrupt.resolved
            reply = ev.InterruptResolved(
                session_id=session.id,
                interrupt_id=found.id,
                outcome=outcome_of(found, answer),
                response_id=found.response_id,
            )
        with contextlib.suppress(LocalProtocolError, OutboxClosed):
            self._owe(reply)

    def _drop(self, sid: str) -> None:
        self._release_log(sid)
        if self.chat is not None:
            self.chat.end(sid)
        session = self._sessions.pop(sid, None)
        if session is None:
            return
        self._call_over(session, "closed")
        for slot in session.slots:  # its running and held responses give their places up
            slot.close()
        session.slots.clear()
        self._undefer(session.response)
        if session.queued is not None:
            self._undefer(session.queued[0])
        session.stop()  # the worker leaves its response (if any) and ends
        session.wake()
        if not self._sessions and self.on_empty is not None:
            self.on_empty()

    def _cancel(self, session: _Session, response_id: str | None) -> None:
        response = session.response
        if response is None and self.event_log is not None and session.id not in self._logged:
            # A resumed session whose response runs on another connection or
            # process (it streams in through the log): ask its writer.
            self._nursery.start_soon(self._cancel_elsewhere, session, response_id)
            return
        if response is None or (response_id is not None and response_id != response.id):
            return  # nothing running, or a cancel racing the end of an earlier response
        response.cancel_requested = True
        session.stop()

    async def _cancel_elsewhere(self, session: _Session, response_id: str | None) -> None:
        """Cancel ``session`` 's response where it runs (the record names the process)."""
        store = self.event_log
        assert store is not None
        key = (session.principal.key, session.id)
        try:
            record = await store.load(key)
        except ResumeError:
            return
        running = record.running
        if running is None or (response_id is not None and response_id != running):
            return
        answer = await store.ask(record.node, key, {"op": "cancel", "response_id": running})
        if not answer or not answer.get("cancelled"):
            log.info("session %s: response %s was not cancelled where it runs", key[1], running)

    # --- payment (UAMP 3.3, 7.2; spec 004) ----------------------------------------

    async def _unpaid(self, agent: str, token: str | None) -> PaymentRequiredError | None:
        """What the app's payment policy asks before ``agent`` may answer, or ``None``."""
        app = self._app
        return None if app is None else await app.payment_required(agent, token)

    def _ask_settle(self, session: _Session) -> None:
        """Have the latest payment token judged (:meth:`_settle`) in a task of its own.

        One task per session at a time (a flood of submits is one more
        round, not a task each); the reader never waits for the ledger.
        """
        if self._refuse_payment_attempt(session):
            return
        if session.settling:
            session.settle_again = True
            return
        session.settling = True
        self._nursery.start_soon(self._settle_rounds, session)

    def _refuse_payment_attempt(self, session: _Session) -> bool:
        """Count a presented token for the session's principal; past the rate, refuse it.

        ``payment.error`` ``rate_limited`` (``can_retry``: the response stays
        held), with a ``rate_limit`` event saying when the window resets;
        the ledger is not asked. A ``rate_limit`` also warns as the rate
        comes near (UAMP 6.17).
        """
        app = self._app
        if app is None:
            return False
        verdict = app.payment_attempts.hit(
            session.principal.key, trio.current_time(), self._clock()
        )
        with contextlib.suppress(LocalProtocolError):
            for event in attempt_events(verdict, session.id):
                self._owe(event)
        return not verdict.allowed

    async def _settle_rounds(self, session: _Session) -> None:
        try:
            while True:
                session.settle_again = False
                await self._settle(session)
                if not session.settle_again:
                    return
        finally:
            session.settling = False

    async def _settle(self, session: _Session) -> None:
        """Answer a ``payment.submit`` (or a ``session.update`` token) with the policy's verdict.

        The token the client presented is checked with the same policy that
        demanded it: ``payment.accepted`` releases a held or paused response
        (its task is woken), ``payment.error`` ``token_invalid`` with
        ``can_retry`` keeps it waiting for another token.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None:
            return
        negotiation = ctx.payment
        unpaid = await self._unpaid(session.agent.name, negotiation.token)
        app = self._app
        remaining = None
        if unpaid is None and app is not None:
            remaining = await app.payment_balance(negotiation.token)
        if self._contexts.get(session.id) is not ctx:
            return  # the session ended while the ledger answered
        reply = settle_event(
            negotiation, session.id, unpaid, remaining, f"pay_{uuid.uuid4().hex[:24]}"
        )
        try:
            self._owe(reply)
        except LocalProtocolError as exc:  # pragma: no cover - any state after a submit allows it
            log.warning("cannot answer payment.submit: %s", exc)
            return
        session.wake()

    async def _hold_for_payment(
        self, session: _Session, response: _Response, required: ev.PaymentRequired
    ) -> None:
        """Send ``payment.required`` and wait until the client has paid.

        No response content flows meanwhile (the core refuses it while the
        negotiation is ``required`` or ``submitted``). The reader settles each
        ``payment.submit`` (:meth:`_settle`) and wakes this task; a
        ``response.cancel`` cancels the worker's scope, which ends the wait
        (and the response) with ``response.cancelled``.

        The wait is bounded (:attr:`SessionLimits.payment_wait`): the
        requirements carry ``expires_at``, the wall-clock second it ends
        (UAMP 7.2; an earlier one the policy set stands).

        Raises:
            _SessionGone: The session ended while waiting.
            ResponderError: ``payment_required``: nothing was paid by then.
        """
        required, wait = bounded_wait(required, self._clock(), self.limits.payment_wait)
        await self._send(session, response, required)
        with trio.move_on_after(wait):
            while True:
                ctx = self._contexts.get(session.id)
                if ctx is None:
                    # Ending the session cancelled this response: let that land first.
                    await trio.lowlevel.checkpoint()
                    raise _SessionGone
                if ctx.payment.state is PaymentState.ACCEPTED:
                    return
                await session.wakeup.park()
        raise ResponderError(
            "payment_required",
            f"no payment was accepted within {wait:g} s (the requirements' expires_at)",
        )

    async def _preflight(self, session: _Session, response: _Response) -> None:
        """Hold the response's price before the agent runs (spec 004, UAMP row of the table).

        The app locks the price on the session's latest payment token
        (:meth:`Host.open_charge <uamp_trio.hosting.host.Host.open_charge>`)
        into :attr:`_Response.charge`. A response that token does not pay for
        is held: the client gets ``payment.required`` with the pending
        ``response_id`` and the agent does not run until a ``payment.submit``
        (or a ``payment_token`` on ``session.update`` or ``input.text``) is
        accepted and the lock succeeds. A negotiation left open by a response
        cancelled while it waited is announced again unless such a token has
        settled it meanwhile.
        """
        while True:
            ctx = self._contexts.get(session.id)
            if ctx is None:
                raise _SessionGone
            negotiation = ctx.payment
            if not negotiation.blocks_content:
                app = self._app
                if app is None or app.payment_policy is None:
                    return  # nothing to lock (Host.open_charge would answer None)
                try:
                    response.charge = await app.open_charge(
                        session.agent.name,
                        negotiation.token,
                        response.id,
                        principal=session.principal,
                    )
                    return
                except PaymentRequiredError as unpaid:
                    required = held_event(negotiation, response.id, session.id, unpaid)
            else:
                required = held_event(negotiation, response.id, session.id)
            await self._hold_for_payment(session, response, required)

    async def _settle_charge(
        self, session: _Session, response: _Response, tracker: ResponseTracker | None
    ) -> None:
        """Settle the response's charge from its usage; ``payment.balance`` to the client.

        ``tracker`` ``None``: the response never ran (its session ended
        while the price was being locked): the whole lock is freed.
        """
        await self._charge_now(response, tracker)
        balance, response.balance = response.balance, None
        if balance is None or session.id not in self._contexts:
            return
        try:
            data = self.conn.send(attrs.evolve(balance, session_id=session.id))
        except LocalProtocolError as exc:  # pragma: no cover - allowed in every state
            log.info("payment.balance not sent: %s", exc)
            return
        self._log(session.id, data)
        # In order after the response's last event (an owed reply would jump
        # the queue); a client whose outbox is full misses this update.
        if not self.outbox.offer(data):
            log.info("payment.balance not sent: the outbox is full")

    @staticmethod
    async def _charge_now(response: _Response, tracker: ResponseTracker | None) -> None:
        """Settle the response's charge (once) from ``tracker`` 's usage, keeping its balance.

        Called before the response's terminal event is sent or logged: a
        process that dies after its client (or the session's log) got
        ``response.done`` has charged it already. Settling after it left a
        window where the lock outlived the delivered response and the
        recovery of the dead process's locks freed it: a free response.
        """
        charge, response.charge = response.charge, None
        if charge is None:
            return
        if tracker is None:
            await charge.settle(None, used=False)
            return
        used = tracker.usage is not None or bool(tracker.output)
        response.balance = await charge.settle(tracker.usage, used=used)

    async def _send_cancelled(self, session: _Session, response: _Response) -> None:
        ctx = self._contexts.get(session.id)
        if ctx is None or ctx.response is None or ctx.response.response_id != response.id:
            raise _SessionGone
        await self._send(session, response, ctx.response.cancelled_event(session_id=session.id))

    # --- responses --------------------------------------------------------------

    def _start_response(self, session: _Session, create: ev.ResponseCreate) -> None:
        ctx = self._contexts.get(session.id)
        if ctx is None:  # pragma: no cover - the core checked
            return
        if ctx.held and ctx.held[-1].create is create:
            return  # held behind the running response (_busy_create); the worker starts it
        if ctx.response is None:  # pragma: no cover - the core checked
            return
        response = _Response(ctx.response.response_id, self._message)
        if self._app is not None:
            gate = self._app.conversations
            key = self._busy_key(session)
            if not create.unknown:
                # The server's policy, and the conversation idle as the core
                # found it: the response runs, and enters its place in the
                # gate only if another message arrives for it meanwhile.
                enter = functools.partial(
                    self._enter_late, session, response, key, session.principal
                )
                if gate.defer(key, enter):
                    response.deferred = enter
            if response.deferred is None:
                try:
                    slot = gate.enter(key, session.principal, gate.policy(create.unknown))
                except BusyError:  # a bad policy (the core found the slot idle)
                    slot = gate.free()
                self._hold_slot(session, response, slot)
        session.response = response
        session.queued = (response, create)
        if not session.worker:
            session.worker = True
            self._nursery.start_soon(self._work, session)
        elif session.idle:
            session.idle.unpark_all()

    # --- a busy session (docs/busy.md) ----------------------------------------------

    @staticmethod
    def _busy_key(session: _Session) -> tuple[str, object, str]:
        return ("uamp", session.principal.key, session.id)

    def _busy_policy(self, create: ev.ResponseCreate) -> BusyPolicy:
        assert self._app is not None
        try:
            return self._app.conversations.policy(create.unknown)
        except BusyError as exc:
            raise LocalProtocolError(str(exc), code="invalid_request", field=POLICY_KEY) from None

    def _busy_create(self, sid: str, create: ev.ResponseCreate) -> Slot:
        """The core's question on a ``response.create`` while a response runs: hold or refuse."""
        session = self._sessions.get(sid)
        if session is None or self._app is None:
            raise LocalProtocolError("a response is in progress", code="response_in_progress")
        try:
            slot = self._app.conversations.enter(
                self._busy_key(session), session.principal, self._busy_policy(create)
            )
        except BusyError as exc:
            code = "response_in_progress" if exc.code == BUSY else exc.code
            raise LocalProtocolError(
                f"{exc} (send response.cancel to stop the running response)", code=code
            ) from None
        session.slots.append(slot)
        return slot

    def _enter_late(
        self, session: _Session, response: _Response, key: object, principal: Principal
    ) -> None:
        """The gate's call for a deferred response: it enters its place now (it runs)."""
        response.deferred = None
        assert self._app is not None
        gate = self._app.conversations
        self._hold_slot(session, response, gate.enter(key, principal, gate.default))

    def _undefer(self, response: _Response | None) -> None:
        """``response`` ended before anybody arrived behind it: the gate forgets it."""
        enter = response.deferred if response is not None else None
        if enter is not None:
            assert response is not None and self._app is not None
            response.deferred = None
            self._app.conversations.undefer(enter.args[2], enter)

    def _hold_slot(self, session: _Session, response: _Response, slot: Slot) -> None:
        """Give ``response`` its place; a later message may stop it through the place."""
        response.slot = slot
        if slot not in session.slots:
            session.slots.append(slot)

        def stop() -> None:
            if slot.dropped:  # rolled back: the core leaves its turn out of the history
                ctx = self._contexts.get(session.id)
                if ctx is not None:
                    ctx.drop_response = response.id
            self._cancel(session, response.id)

        slot.bind(stop)

    def _release_slot(self, session: _Session, response: _Response | None) -> None:
        """``response`` ended: its place goes to the next held ``response.create``."""
        if response is None:
            return
        if response.deferred is not None:
            self._undefer(response)
            return
        if response.slot is None:
            return
        slot, response.slot = response.slot, None
        slot.close()
        if slot in session.slots:
            session.slots.remove(slot)

    def _take_held(self, session: _Session) -> bool:
        """Queue the held ``response.create`` whose turn has come; ``False``: none has."""
        ctx = self._contexts.get(session.id)
        if ctx is None or not ctx.held or ctx.response is not None:
            return False
        held = next((h for h in ctx.held if isinstance(h.token, Slot) and h.token.ready), None)
        if held is None:
            return False
        slot = held.token
        assert isinstance(slot, Slot)
        create = self.conn.start_held(session.id, slot)
        response = _Response(held.response_id, None)
        self._hold_slot(session, response, slot)
        session.response = response
        session.queued = (response, create)
        return True

    def _request(
        self, session: _Session, response_id: str, create: ev.ResponseCreate, port: bool = False
    ) -> TurnRequest | None:
        """The agent's request for the response running on ``session`` (``None``: none runs).

        With ``port`` (and an app), the request carries the response's
        interrupt port (docs/human-in-the-loop.md), made before it and bound
        to it after: one request built, not one more copied to hold the port.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None or ctx.response is None or ctx.response.response_id != response_id:
            return None
        interrupts: ResponsePort | None = None
        if port and self._app is not None:
            client = ctx.client_capabilities
            interrupts = self._app.interrupts.port(
                None, supported=advertised(client.extensions if client is not None else None)
            )
        request = turn_request(
            ctx,
            create,
            agent=session.agent.name,
            transport=self._transport,
            token=session.token if self._app and self._app.authenticator else ctx.token,
            principal=session.principal,
            interrupts=interrupts,
        )
        if interrupts is not None and request is not None:
            interrupts.bind(request)
        return request

    async def _work(self, session: _Session) -> None:
        """Run the session's responses one after another, until the session ends.

        One task per session, started by its first ``response.create``, rather
        than a task and a cancel scope per response: responses of a session
        never overlap (the core allows one at a time), and spawning a task
        and entering a scope cost about as much as the core's work on
        ``response.create``. ``response.cancel`` cancels :attr:`_Session.scope`,
        which ends the response (also a wait for payment or tool results);
        the worker sends ``response.cancelled`` and goes on in a new scope.

        The worker holds the events it sends during each of its scheduler
        steps and writes them when the step ends (:func:`write_at_yields`),
        when the transport can (the WebSocket's writer is idle).
        """
        await write_at_yields(self._responses(session), self.outbox, session.put_opening)

    async def _responses(self, session: _Session) -> None:
        """The body of :meth:`_work`."""
        try:
            while self._sessions.get(session.id) is session:
                scope = session.scope = trio.CancelScope()
                session.stopped = False
                with scope:
                    while True:
                        job = session.queued
                        if job is None:
                            if not self._take_held(session):
                                await session.idle.park()
                            continue
                        if session.stopped or job[0].cancel_requested:
                            # Cancelled before it started (maybe before this
                            # scope existed), or a cancel came late for the one
                            # before: settle that in a fresh scope first.
                            break
                        session.queued = None
                        caps = session.agent.capabilities()
                        if caps is not session.announced:
                            await self._announce(session, caps)  # changed, or only equal
                        await self._respond(session, *job)
                        self._release_slot(session, job[0])
                        caps = session.agent.capabilities()
                        if caps is not session.announced:
                            await self._announce(session, caps)
                cancelled = session.response
                job = session.queued
                if job is not None and job[0].cancel_requested:
                    cancelled = job[0]
                    session.queued = None
                if cancelled is not None and cancelled.cancel_requested:
                    # Running or not yet started, it ends with response.cancelled:
                    # the partial output is what the client got.
                    try:
                        await self._send_cancelled(session, cancelled)
                    except _SessionGone:
                        pass  # the response had ended before the cancel landed
                    finally:
                        if session.response is cancelled:
                            session.response = None
                        self._release_slot(session, cancelled)
        except OutboxClosed:
            pass  # the connection is closing
        finally:
            session.worker = False
            session.scope = None

    async def _respond(
        self, session: _Session, response: _Response, create: ev.ResponseCreate
    ) -> None:
        """Run one response; a cancel of the worker's scope propagates out."""
        self.outbox.producers += 1
        logged = session.id in self._logged
        if logged:
            opening = functools.partial(self._open_record, session.id, response.id, create)
            assert self.event_log is not None
            if self.event_log.applies_at_once:
                # Deferred to just after the response's first write, or to the
                # end of the worker's step, whichever comes first (and before
                # any event that changes the conversation, :meth:`_send`), and
                # so are the log entries of the events sent before then
                # (``response.created``, that delta), in order after it: a
                # store that applies each write at once is read by no one
                # before the step ends, so this is the log every reader sees;
                # the client gets its first delta sooner.
                session.opening = opening
            else:
                opening()  # queued before any of the response's events
        try:
            await self._run_response(session, response, create)
        except _SessionGone:
            pass
        finally:
            self.outbox.producers -= 1
            if logged:
                session.put_opening()  # if still owed (its events are logged with it)
                self._put_record(session.id, running=None, input=[])
            if session.response is response and not response.cancel_requested:
                session.response = None

    def _open_record(self, sid: str, rid: str, create: ev.ResponseCreate) -> None:
        """Put the record of response ``rid`` starting: what it runs on, for a resume.

        Then log the events of ``rid`` sent while the record was deferred.
        """
        ctx = self._contexts.get(sid)
        tracker = ctx.response if ctx is not None else None
        inputs = []
        if tracker is not None:  # each message by its compiled hook, not the list walk
            inputs = [unstructure(m) for m in tracker.input_messages]
        self._put_record(sid, running=rid, input=inputs, request=create.event_id)
        session, entry = self._sessions.get(sid), self._logged.get(sid)
        if session is None or not session.unlogged:
            return
        unlogged, session.unlogged = session.unlogged, []
        if entry is not None:
            assert self.event_log is not None
            for data, event_id in unlogged:
                self.event_log.append(entry[0], data, event_id)

    async def _run_response(
        self, session: _Session, response: _Response, create: ev.ResponseCreate
    ) -> None:
        rid = response.id
        if session.verifying is not None or self._sessions.get(session.id) is not session:
            await self._verified(session)
        if session.principal.expires_at is not None and session.principal.expired(self._clock()):
            # Spec 000 section 10.3: the session lives on; a session.update
            # with a fresh token lets its next response run.
            error = ty.ErrorInfo(
                code="unauthorized",
                message="The session's token has expired; send session.update with a fresh one.",
            )
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        down = self._store_down()
        if down is not None:
            # The agent does not run: what it sent could not be kept for a resume.
            error = ty.ErrorInfo(code=STORE_UNAVAILABLE, message=down)
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        ctx = self._contexts.get(session.id)
        app = self._app
        try:
            if (
                ctx is None
                or ctx.payment.blocks_content
                or (app is not None and app.payment_policy is not None)
            ):
                await self._preflight(session, response)  # else nothing to hold or lock
        except ResponderError as exc:  # the payment's time ran out
            error = ty.ErrorInfo(code=exc.code, message=exc.message)
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is not None and tracker.response_id != rid:
            tracker = None
        try:
            await self._run_rounds(session, response, create)
        finally:
            # However the response ended (done, failed, cancelled, session
            # gone, or never started): charge what it used, free the rest.
            if response.charge is not None or response.balance is not None:
                await self._settle_charge(session, response, tracker)

    async def _run_rounds(
        self, session: _Session, response: _Response, create: ev.ResponseCreate
    ) -> None:
        """The agent's calls of one response: again after client tools or a payment."""
        rid = response.id
        agent = _PayingAgent(self, session, response, create)
        first = True
        while True:
            request = self._request(session, rid, create, port=True)
            if request is None:
                return
            status = await self._run_turn(session, response, agent, request, first)
            first = False
            if status != "requires_action":
                return
            # Section 3.2: wait for the client's tool.result events.
            while True:
                ctx = self._contexts.get(session.id)
                if ctx is None or ctx.response is None or ctx.response.response_id != rid:
                    return
                if not ctx.response.pending_tool_calls:
                    break
                await session.wakeup.park()

    async def _run_turn(
        self,
        session: _Session,
        response: _Response,
        agent: _PayingAgent,
        request: TurnRequest,
        first: bool,
    ) -> TurnStatus:
        """One call of ``agent.respond`` through the inline turn runner; returns how it ended.

        :class:`~uamp_trio.hosting.turns.ResponseRunner` owns the lifecycle
        (``response.created`` first unless this is a later tool round, one
        terminal event unless client tools are pending, error mapping); its
        sink passes each event through the core straight into the outbox,
        without a channel or a task switch per event. The sink only waits
        when the outbox is full, the delta window is closed, or payment is
        open.

        The runner works on the core's tracker without applying events to it
        (``track=False``: the core's ``send`` does) and leaves the ids to the
        core (``stamp=False``: :meth:`_send` passes them to ``send``), so an
        event is neither copied nor counted twice.

        The sink's special cases: a terminal event is rebuilt from the core's
        tracker and signed when asked (``response.done`` carries the
        signature); G.711 speech is recoded. An emitted ``payment.required``
        never reaches it: :class:`_PayingAgent` holds the agent in its ``emit``
        (spec 004's mid-stream top-up).
        """
        send = self._send
        recode = spoken_format(self._contexts.get(session.id))

        async def sink(event: ev.Event) -> None:
            kind = type(event)
            if kind is ev.AudioDelta and recode is not None:
                # UAMP 8.2: the agent speaks pcm16; the client asked for G.711.
                assert isinstance(event, ev.AudioDelta)
                event = recoded(event, recode)
            if kind is ev.ResponseDone or kind is ev.ResponseCancelled:
                event = self._final(session, response, event)
            if kind in _TERMINAL and response.charge is not None:
                await self._charge_now(response, tracker)  # charged before it is told
            await send(session, response, event)

        # One tracker per response: the runner reads the core's (which the
        # core's send updates) instead of applying every event to its own,
        # and the core writes the ids the agent left out (no copy per event).
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is None or tracker.response_id != response.id:
            raise _SessionGone
        # The worker's scope is the only one: response.cancel cancels it and
        # the worker sends response.cancelled (cancellable=False).
        port = request.interrupts
        assert port is None or isinstance(port, ResponsePort)  # _request(port=True) made it
        # Built and initialised apart: a class call with keywords costs a
        # keyword dict that __init__ unpacks again (see turns.run_response).
        runner = ResponseRunner.__new__(ResponseRunner)
        runner.__init__(  # type: ignore[misc]
            agent,
            request,
            sink,
            tracker=tracker,
            created=first,
            yield_every=YIELD_EVERY,
            stamp=False,
            track=False,
            cancellable=False,
        )
        if port is not None:
            port.emit = runner.emit
        try:
            outcome = await runner.run()
        finally:
            if port is not None:
                port.close()  # no cycle keeps the request (and its conversation) alive
        error = outcome.error
        if error is not None and error.code == AGENT_OFFLINE and session.id in self._contexts:
            # The agent's daemon went away (docs/relay.md): the whole session
            # is told, after the response's own error, not only this response.
            offline = _error(session.id, AGENT_OFFLINE, error.message)
            with contextlib.suppress(LocalProtocolError, OutboxClosed):
                await self.outbox.put(self.conn.send(offline))
        return outcome.status

    def _final(self, session: _Session, response: _Response, event: ev.Event) -> ev.Event:
        """The runner's terminal event, signed if asked.

        The runner built it from the core's tracker (the runner shares it), so
        its output is what the client was sent, and both ids.
        """
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is None or tracker.response_id != response.id:
            raise _SessionGone
        app = self._app
        if type(event) is ev.ResponseDone and app is not None and app.response_signer is not None:
            return self._done(tracker, response, session.id)
        return event

    def _done(
        self, tracker: ResponseTracker, response: _Response, session_id: str
    ) -> ev.ResponseDone:
        """``response.done``, signed when the app has a signer (spec 004 "Response Signing").

        The signature covers the response's whole text and the raw bytes of
        the ``response.create`` message that started it.
        """
        signer = self._app.response_signer if self._app is not None else None
        if signer is None or response.request_bytes is None:
            return tracker.done_event(session_id=session_id)
        return tracker.done_event(
            signature=signer(tracker.text, response.request_bytes), session_id=session_id
        )

    async def _send(self, session: _Session, response: _Response, event: ev.Event) -> None:
        conn = self.conn
        etype = event.type
        if (
            session.opening is not None
            and etype != "response.created"
            and etype not in flow.FLOW_CONTROLLED_TYPES
        ):
            session.put_opening()  # before an event that may end the response
        while True:
            if session.id not in self._contexts:
                raise _SessionGone
            if response.cancel_requested and etype in flow.FLOW_CONTROLLED_TYPES:
                return  # cancelled: the partial output is what the client was sent
            try:
                data = conn.send(event, session_id=session.id, response_id=response.id)
            except FlowControlError:
                await session.wakeup.park()  # until an ack (or a cancel) for this session
                continue
            except LocalProtocolError as exc:
                if isinstance(event, _TERMINAL):
                    raise _SessionGone from None
                log.warning("dropping %s of agent %r: %s", event.type, session.agent.name, exc)
                return
            break
        logged = self._logged.get(session.id)
        if logged is not None:
            if session.opening is not None:  # logged with the deferred record (_respond)
                session.unlogged.append((data, conn.last_event_id))
            else:
                assert self.event_log is not None
                self.event_log.append(logged[0], data, conn.last_event_id)
        outbox, quota = self.outbox, session.quota
        if not outbox.offer(data, quota):
            try:
                if isinstance(event, _TERMINAL):
                    # The core has ended the response: a cancel landing now must
                    # not lose the event that tells the client so.
                    with trio.CancelScope(shield=True):
                        await outbox.put(data, quota)
                else:
                    await outbox.put(data, quota)  # waits for room, or raises OutboxClosed
            except OutboxClosed:
                if not self.detached:
                    raise  # else the log has it: the response goes on
        elif not response.written and etype in flow.FLOW_CONTROLLED_TYPES:
            # The response's first output (held with the rest of this step's:
            # ``response.created``, a ``capabilities`` before it): written now,
            # not after the work that follows it in the step -- the agent's
            # next deltas, the terminal event, the session's record, the
            # settled charge, the next capabilities check. The time to the
            # first delta is what the client waits for; the rest goes in the
            # step's one write (``response.done`` with it).
            response.written = True
            outbox.write_held()
            session.put_opening()
