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

Payment (UAMP 3.3 and 7.2; spec 004): a response the session's latest payment
token does not pay for is *held* until paid; an agent may ask for a top-up
mid-response (:mod:`~uamp_trio.hosting.session_payment`).

The host is one class built from parts, each a module of its own: the
responses and their worker (:mod:`~uamp_trio.hosting.session_responses`),
payment, the event log and resume (:mod:`~uamp_trio.hosting.session_log`),
authentication (:mod:`~uamp_trio.hosting.session_auth`), voice calls
(:mod:`~uamp_trio.hosting.session_calls`), and the state they share
(:mod:`~uamp_trio.hosting.session_state`); this module keeps dispatch,
sessions, capabilities and chats.

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
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto import history, ratelimit
from uamp_proto import types as ty
from uamp_proto.calls import settings_refusal, turn_detector
from uamp_proto.capabilities import queried, session_view
from uamp_proto.connection import (
    MAX_SESSION_HISTORY_BYTES,
    NEED_DATA,
    ConnectionConfig,
    ServerConnection,
)
from uamp_proto.errors import LocalProtocolError, RemoteProtocolError
from uamp_proto.interrupts import CAPABILITY_KEY, Answer, declaration, outcome_of
from uamp_proto.payment import (
    PaymentState,
)
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import (
    Responder,
)
from uamp_proto.response import MAX_OUTPUT_BYTES
from uamp_proto.resume import (
    ResumeError,
    resume_from,
)
from uamp_stores.event_log import HistoryJSON, SessionRecord
from uamp_stores.health import STORE_UNAVAILABLE

from ..trust.auth import SESSION_AUTH
from .agents import AGENT_OFFLINE
from .chats import ChatLink, ChatProfile, chat_settings
from .interrupts import InterruptNotFound, InvalidAnswer
from .outbox import Outbox, OutboxClosed, Overloaded
from .session_auth import _WHILE_EXPIRED, AuthPart
from .session_calls import CallPart
from .session_responses import ResponsePart
from .session_state import SessionState, session_error

if TYPE_CHECKING:
    from uamp_stores.event_log import EventLog, Handler, LogKey

    from .host import Host

__all__ = [
    "SessionHost",
    "SessionLimits",
]

log = logging.getLogger("uamp_trio.sessions")


#: Client events that are chat work (docs/chat.md), and what the chat link calls them.
_CHAT_WORK: Final = {"input.text": "say", "input.typing": "typing", "message.read": "read"}


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
        max_response_output_bytes: Most output one response keeps (its
            text, arguments, thinking, audio...; :data:`uamp_proto.response.MAX_OUTPUT_BYTES`
            by default): past it the agent is stopped and the response ends
            with ``response.error`` ``output_too_large``; the session goes on.
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
    max_response_output_bytes: int = MAX_OUTPUT_BYTES

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_sessions",
            "max_response_output_bytes",
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


#: ``interrupt.answer`` events one connection may have answered at once; more
#: are refused with ``rate_limited`` (docs/human-in-the-loop.md).
MAX_ANSWERS_IN_FLIGHT: Final = 16


class SessionHost(ResponsePart, AuthPart, CallPart):
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
        #: The budget of each principal's kept conversations: the app's, over
        #: all its connections, sized by its server's configuration alone
        #: (``ServerConfig.max_history_bytes_per_principal``); this
        #: connection's own, of the default size, without an app.
        self._histories = app.uamp_histories if app is not None else history.SessionHistories()
        budget = self._histories.budget.max_bytes
        self.conn = ServerConnection(
            ConnectionConfig(
                max_sessions=self.limits.max_sessions,
                max_event_size=self.limits.max_message_size,
                max_delta_window=self.limits.max_delta_window,
                # A response.create while one runs: the busy policy (docs/busy.md).
                on_busy=None if app is None else self._busy_create,
                max_history_bytes=min(MAX_SESSION_HISTORY_BYTES, budget),
                on_history=self._history_kept,
                max_response_output_bytes=self.limits.max_response_output_bytes,
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
        self._sessions: dict[str, SessionState] = {}
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
        #: Set by a transport whose reader runs a session's responses itself
        #: when the session has no worker (the WebSocket's; see
        #: :meth:`run_inline`): then :attr:`inline` names the session whose
        #: response the reader runs after its read, instead of a worker task.
        self.inline_reader = False
        self.inline: SessionState | None = None

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
        # The message in and its event out in one call (receive_event); then
        # next_event only while the core holds more (an audio turn queued by
        # the dispatch): the same events as receive() and next_event() until
        # NEED_DATA, two calls fewer.
        inbox = conn.inbox
        event: ev.Event | ev.UnknownEvent | object | None
        try:
            event = conn.receive_event(message)
        except RemoteProtocolError as exc:
            errors.append(exc)
            self._flush_owed()
            event = None
        except LocalProtocolError as exc:  # pragma: no cover - drained after every message
            if exc.code != "queue_full":
                raise
            errors.append(RemoteProtocolError(exc.message, code="overloaded"))
            return errors
        while event is not NEED_DATA:
            if event is not None:
                if conn.owed:
                    self._flush_owed()
                if isinstance(event, ev.Event):
                    self._dispatch(event)
                else:
                    # Section 14.3: an unknown event type is logged, never an error.
                    assert isinstance(event, ev.UnknownEvent)
                    log.info("ignoring an event of unknown type %r", event.type[:64])
            if not inbox:
                break
            try:
                event = conn.next_event()
            except RemoteProtocolError as exc:
                errors.append(exc)
                self._flush_owed()
                event = None
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
                            self.conn.send(session_error(sid, "timeout", "the session timed out"))
                        )
                    end = ev.SessionEnd(session_id=sid, reason=reason)
                    self.outbox.put_owed(self.conn.send(end))
            self._drop(sid)

    # --- dispatch -------------------------------------------------------------

    def _update(self, session: SessionState, event: ev.SessionUpdate) -> None:
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

    def _session_of(self, event: ev.Event) -> SessionState | None:
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
                    self._owe(session_error(session.id, "rate_limited", "too many answers at once"))
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
                self._owe(session_error(None, "no_session", "no session is open to update"))
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
                if etype == "input.audio" and ctx is not None:
                    ctx.drop_last_input()
                return
            if etype == "voice.invite" or etype == "voice.end":
                self._voice(session, event)
            elif isinstance(event, ev.InputAudio) and event.is_final:
                self._audio_turn(session)
            elif isinstance(event, ev.InputAudio) and session.detector is not None:
                self._detect_turn(session, event)

    # --- chats (docs/chat.md; the rooms live in hosting/chats.py) --------------------

    def _to_chat(self, event: ev.Event) -> bool:
        """Hand a chat event to the connection's :class:`ChatLink`; ``True`` when it was one."""
        session = self._session_of(event)
        ctx = self._contexts.get(session.id) if session is not None else None
        if session is None or ctx is None or ctx.chat_of(event) is None:
            return False
        link = self._chat_link()
        if link is None:
            self._owe(session_error(session.id, "unsupported", "this server keeps no chat rooms"))
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
            # The session ends in the core: never created.
            self._owe(session_error(sid, *found, "agent"))
            return
        unheard = settings_refusal(event.session, found)
        if unheard is not None:
            # UAMP 8.1: a voice setting is honoured or refused, never echoed as if it were.
            self.refusal = ("unsupported", unheard[1])
            self._owe(session_error(sid, "unsupported", unheard[1], f"session.{unheard[0]}"))
            return
        down = self._store_down()
        if down is not None:
            self.refusal = (STORE_UNAVAILABLE, down)
            self._owe(session_error(sid, STORE_UNAVAILABLE, down))
            return
        auth = self._app.authenticator if self._app is not None else None
        token = event.token
        try:
            after = resume_from(event.unknown.get("extensions"))
        except ResumeError as exc:
            self.refusal = (exc.code, exc.message)
            self._owe(session_error(sid, exc.code, exc.message))
            return
        if token is None and self.principal.expired(self._clock()):
            # The connection's credential expired: a new session brings its own.
            self.refusal = (
                "unauthorized",
                "this connection's token has expired; send a fresh one in session.create.token",
            )
            self._owe(session_error(sid, *self.refusal, "token"))
            return
        if after is not None and (token is not None or self.principal is not SESSION_AUTH):
            # Resuming reads the store: answered once the log says where to start.
            session = SessionState(sid, found, self.principal, token)
            session.verifying = trio.Event()
            self._sessions[sid] = session
            self._nursery.start_soon(
                self._admit, auth if token is not None else None, session, token, after
            )
            return
        if auth is None or (token is None and self.principal is not SESSION_AUTH):
            self._sessions[sid] = SessionState(sid, found, self.principal, token)
            self._accept(sid, found)
            return
        if token is None:
            # The upgrade presented no token: each session must bring its own.
            self.refusal = ("unauthorized", "session.create needs a token on this connection")
            self._owe(session_error(sid, *self.refusal, "token"))
            return
        session = SessionState(sid, found, SESSION_AUTH)
        session.verifying = trio.Event()
        self._sessions[sid] = session
        self._nursery.start_soon(self._admit, auth, session, token)

    def _accept(self, sid: str, agent: Responder) -> None:
        if self._log_taken(sid):
            return
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
                self._owe(session_error(sid, "unsupported", "this server keeps no chat rooms"))
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

    def _capabilities(self, session: SessionState | None, event: ev.CapabilitiesQuery) -> None:
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
            self._owe(session_error(session.id if session else None, code, message, "model"))
            return
        if session is not None and model in (None, session.agent.name):
            session.announced = caps
        sid = session.id if session is not None else None
        ctx = self._contexts.get(sid) if sid is not None else None
        view = self._view(caps, ctx.client_capabilities if ctx is not None else None)
        self._owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view))

    async def _announce(self, session: SessionState, caps: ty.Capabilities) -> None:
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

    async def _answer_interrupt(self, session: SessionState, event: ev.InterruptAnswer) -> None:
        """Answer a paused run's interrupt, on this session or any other (by id)."""
        try:
            await self._answer_one(session, event)
        finally:
            self._answers_in_flight -= 1

    async def _answer_one(self, session: SessionState, event: ev.InterruptAnswer) -> None:
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
            reply: ev.Event = session_error(session.id, exc.code, str(exc), "interrupt_id")
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

    def _history_kept(self, sid: str, size: int) -> None:
        """The core weighed ``sid`` 's conversation: it counts against its principal's budget."""
        session = self._sessions.get(sid)
        if session is None:
            return  # dropped already (a response ending after it): nothing to count
        self._histories.kept(session.principal.key, self, sid, size)

    def forget_history(self, session_id: str) -> None:
        """Empty ``session_id`` 's kept conversation, and its copy in the event log's record
        (the principal's budget trimmed it: its next turn starts afresh)."""
        self.conn.forget_history(session_id)
        self._put_record(session_id)

    def _drop(self, sid: str) -> None:
        self._histories.ended(self, sid)
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

    def _cancel(self, session: SessionState, response_id: str | None) -> None:
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

    async def _cancel_elsewhere(self, session: SessionState, response_id: str | None) -> None:
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
