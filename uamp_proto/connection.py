"""The state machine of one UAMP transport connection, for either role.

Theory of operation
-------------------
Like h11, a :class:`Connection` does no I/O. It is message-oriented: the
WebSocket or SSE layer hands it whole messages.

* :meth:`Connection.receive` queues one incoming message;
  :meth:`Connection.next_event` decodes, routes and checks the next one and
  returns the typed event, or :data:`NEED_DATA` when the queue is empty.
* :meth:`Connection.send` checks an outgoing event against the rules, updates
  the state, and returns the bytes to write.
* Replies the core owes the peer -- ``pong``, ``session.error`` for a bad
  event, delta acknowledgements -- collect in :meth:`Connection.data_to_send`;
  drain it after every ``next_event`` and ``send``.

A peer that breaks a rule makes ``next_event`` raise
:class:`~uamp_proto.errors.RemoteProtocolError`; its ``reply`` (also queued
in ``data_to_send``) is the error event owed to the peer. Such an error
concerns one event of one session: the connection and its other sessions go
on (UAMP section 10: a bad event never reaches another session). Breaking a
rule locally makes ``send`` raise
:class:`~uamp_proto.errors.LocalProtocolError` and changes nothing.

Sessions (sections 3, 5, 6, 10)
    ``session.create`` opens a session; the server answers ``session.created``
    (see :meth:`ServerConnection.accept`) then ``capabilities``. A client may
    pipeline input before ``session.created`` arrives. Without a
    ``session_id`` an event goes to the only live session (single-session
    mode); with several sessions open each event must name its session
    (multiplexed mode). An event for an unknown or ended session is refused
    with ``session.error``. The server takes a ``session_id`` the client
    proposes in ``session.create``, or makes one from its id source.

Versions (section 14.2)
    A ``uamp_version`` whose major number differs from the server's is
    refused with ``response.error`` code ``version_mismatch``; minor versions
    are compatible.

Responses (section 6, :mod:`uamp_proto.response`)
    One response per session at a time: ``response.create`` while one is
    requested or in progress is refused (``response_in_progress``). The
    input events received since the last response accumulate into one user
    message with ``content_items`` (section 8.5.1), handed to the response's
    tracker when ``response.create`` arrives.

Payment (:mod:`uamp_proto.payment`) and delta windows (:mod:`uamp_proto.flow`)
    are tracked per session; while payment is required no response content
    may be sent or accepted, and on a session that opted into delta windows
    deltas are numbered and refused once the window is full.

What the connection keeps of each session is a
:class:`~uamp_proto.session_context.SessionContext`; its options are a
:class:`~uamp_proto.connection_config.ConnectionConfig` (both importable
from here too).

The rules are the tables of :mod:`uamp_proto._state` (a session machine and
a response machine); every event goes through them. Protocol violations are
answered with ``session.error`` (code ``invalid_event`` and friends,
``details`` naming the offending event), which leaves the session open;
``response.error`` is kept for failures of a response and for
``version_mismatch``, as the spec uses it.

This module is the way in and out: receiving, decoding, routing to a
session, the tables' lookups, the connection-level events, the errors and
the replies they owe, serialising. What a move does is in the parts
:class:`Connection` is made of (classes it subclasses; they share its
state):

* :mod:`uamp_proto.connection_sessions` (``SessionPart``): a session's
  opening, creation, updates and end;
* :mod:`uamp_proto.connection_input` (``InputPart``): the input gathered
  for the next response, voice calls, chats;
* :mod:`uamp_proto.connection_responses` (``ResponsePart``): the response
  slot's rules, held creates, delta windows;
* :mod:`uamp_proto.connection_shortcuts` (``ShortcutPart``): the server's
  usual turn, applied as the general path would in fewer steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
import orjson

from . import events as ev
from . import flow
from . import types as ty
from ._state import (
    CLIENT_EVENTS,
    CONNECTION_EVENTS,
    RESPONSE_EVENTS,
    RESPONSE_TRANSITIONS,
    SERVER_EVENTS,
    SESSION_TRANSITIONS,
    ResponseState,
    Role,
    SessionState,
    next_session_state,
    refuse,
)
from .capabilities import merge_capabilities
from .codec import DecodeError, decode, json_text, to_dict
from .connection_config import MAX_SESSION_HISTORY_BYTES, ConnectionConfig
from .connection_input import MAX_CHATS_PER_SESSION as MAX_CHATS_PER_SESSION
from .connection_input import InputPart
from .connection_responses import ResponsePart
from .connection_sessions import SessionPart
from .connection_shortcuts import ShortcutPart
from .errors import LocalProtocolError, RemoteProtocolError
from .ids import event_id_stem, numbered
from .payment import CONTENT_EVENTS
from .session_context import HeldResponse, SessionContext
from .types import EMPTY

__all__ = [
    "CLIENT_EVENTS",
    "CONNECTION_EVENTS",
    "MAX_SESSION_HISTORY_BYTES",
    "NEED_DATA",
    "RESPONSE_EVENTS",
    "RESPONSE_TRANSITIONS",
    "SERVER_EVENTS",
    "SESSION_TRANSITIONS",
    "ClientConnection",
    "Connection",
    "ConnectionConfig",
    "HeldResponse",
    "ResponseState",
    "Role",
    "ServerConnection",
    "SessionContext",
    "SessionState",
]


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by :meth:`Connection.next_event` when no message is queued.
NEED_DATA: Final = _NeedData()


#: ``Role.SERVER`` as a module constant: the hot paths compare with it, and
#: an enum member read off its class costs 900 instructions on CPython 3.11
#: (a module global: 20).
_SERVER: Final = Role.SERVER
_INPUT_TYPES: Final = frozenset(
    {"input.text", "input.image", "input.audio", "input.video", "input.file"}
)
_VOICE_TYPES: Final = frozenset({"voice.invite", "voice.accept", "voice.decline", "voice.end"})
_PAYMENT_TYPES: Final = frozenset(
    {"payment.required", "payment.submit", "payment.accepted", "payment.balance", "payment.error"}
)
# How ``_apply`` sorts the two: what the shortcuts do is what these branches do.
assert "input.text" in CLIENT_EVENTS and "response.create" in CLIENT_EVENTS
assert "input.text" in _INPUT_TYPES and not {"input.text"} & (RESPONSE_EVENTS | _PAYMENT_TYPES)
assert "response.create" in RESPONSE_EVENTS and "response.create" not in CONTENT_EVENTS


class Connection(ShortcutPart, SessionPart, InputPart, ResponsePart):
    """One UAMP connection seen from ``role``; see the module docstring."""

    def __init__(self, role: Role, config: ConnectionConfig | None = None) -> None:
        self.our_role = role
        self.their_role = Role.SERVER if role is Role.CLIENT else Role.CLIENT
        self.config = config if config is not None else ConnectionConfig()
        self._ids = self.config.ids
        self._sessions: dict[str, SessionContext] = {}
        self._ended: deque[str] = deque(maxlen=256)
        #: Messages :meth:`receive` queued that :meth:`next_event` has not
        #: taken yet, oldest first (read only: test it to skip that call).
        self.inbox: deque[bytes | str] = deque()
        #: Replies the core owes the peer (pongs, errors), oldest first;
        #: :meth:`data_to_send` drains it (test it to skip that call).
        self.owed: list[bytes] = []
        prefix, after = event_id_stem(self._ids("evt"))
        #: This connection's event ids, in order (:func:`~uamp_proto.ids.numbered`).
        self._evt_ids = numbered(prefix, after)
        #: Whether they go into JSON as they are: then a server writes its
        #: usual ``response.created`` and text deltas from parts (``_send_created``).
        self._plain_ids = json_text(prefix)
        #: The session id, response id and ``text_delta_tail`` of the text
        #: deltas last written from parts.
        self._delta_tail: tuple[str, str, bytes] | None = None
        #: The ``event_id`` of the last event :meth:`send` serialised (what a
        #: binding logs it under, without parsing the message again).
        self.last_event_id = ""
        self._our_events = CLIENT_EVENTS if role is Role.CLIENT else SERVER_EVENTS

    # --- public API ----------------------------------------------------------

    @property
    def sessions(self) -> Mapping[str, SessionContext]:
        """The live sessions, by id."""
        return self._sessions

    def session(self, session_id: str | None = None) -> SessionContext:
        """The named session, or the only live one when ``session_id`` is None.

        Raises:
            KeyError: no such session, or several and none named.
        """
        if session_id is not None:
            return self._sessions[session_id]
        if len(self._sessions) == 1:
            return next(iter(self._sessions.values()))
        raise KeyError(f"name a session: this connection has {len(self._sessions)}")

    def receive(self, data: bytes | str) -> None:
        """Queue one whole incoming message (one JSON event).

        Raises:
            LocalProtocolError: more than ``max_queued`` messages are waiting;
                call :meth:`next_event` first.
        """
        if len(self.inbox) >= self.config.max_queued:
            raise LocalProtocolError(
                "receive queue is full: call next_event() before receiving more",
                code="queue_full",
            )
        self.inbox.append(data)

    def receive_event(self, data: bytes | str) -> ev.Event | ev.UnknownEvent | _NeedData:
        """:meth:`receive` one message, then :meth:`next_event`: in one call.

        With nothing queued before it (a host that drains after every
        message), this is the event of ``data``; otherwise the oldest queued
        event, ``data`` waiting behind the others. Either way exactly what
        ``receive(data)`` followed by ``next_event()`` returns, raises and
        changes; a host then calls :meth:`next_event` only while
        :attr:`inbox` holds more (two calls a message fewer on a server's
        way to its first delta).

        Raises:
            LocalProtocolError: as :meth:`receive` (the queue is full).
            RemoteProtocolError: as :meth:`next_event`.
        """
        inbox = self.inbox
        if inbox and len(inbox) >= self.config.max_queued:
            self.receive(data)  # raises queue_full
        inbox.append(data)
        return self.next_event()

    def next_event(self) -> ev.Event | ev.UnknownEvent | _NeedData:
        """The next incoming event, checked and applied, or :data:`NEED_DATA`.

        Raises:
            RemoteProtocolError: the message was malformed or broke a rule.
                Its ``reply`` is queued in :meth:`data_to_send`; the
                connection stays usable.
        """
        if not self.inbox:
            return NEED_DATA
        data = self.inbox.popleft()
        if len(data) > self.config.max_event_size:
            raise self._remote(
                RemoteProtocolError(
                    f"event of {len(data)} bytes exceeds the limit of "
                    f"{self.config.max_event_size} bytes",
                    code="message_too_large",
                ),
                None,
            )
        try:
            event = decode(data)
        except DecodeError as exc:
            err = RemoteProtocolError(
                exc.message,
                code="invalid_event",
                session_id=exc.session_id if exc.session_id in self._sessions else None,
                event_id=exc.event_id,
                field=exc.path or None,
            )
            raise self._remote(err, exc.event_type) from None
        # A server's shortcuts for the client's usual turn; anything they
        # leave takes the general path.
        kind = type(event)
        if kind is ev.InputText:
            if self.our_role is _SERVER and self._receive_text(event):  # type: ignore[arg-type]
                return event
        elif (
            kind is ev.ResponseCreate and self.our_role is _SERVER and self._receive_create(event)  # type: ignore[arg-type]
        ):
            return event
        try:
            return self._process(event, self.their_role)
        except RemoteProtocolError as err:
            raise self._remote(err, event.type) from None

    def send(
        self,
        event: ev.Event | ev.UnknownEvent,
        *,
        session_id: str | None = None,
        response_id: str | None = None,
    ) -> bytes:
        """Check ``event`` against the rules, apply it, and serialise it.

        ``event_id`` (and ``timestamp`` when a clock is configured) are
        filled in when absent; on sessions with delta windows, delta frames
        get their ``delta_seq``.

        ``session_id`` and ``response_id`` fill in the event's own when it
        has none (an agent's events usually leave them out): the event is
        routed and checked as if it carried them, and they are written into
        the message. This is what copying the event with the ids would do,
        without the copy on the server's delta path.

        Raises:
            LocalProtocolError: the event is not allowed now; nothing changed.
            FlowControlError: the session's delta window is full.
            OutputTooLarge: the event would take its response's output past
                :attr:`ConnectionConfig.max_response_output_bytes`; nothing
                changed (end the response: ``response.error``).
        """
        if type(event) is ev.UnknownEvent:
            raw = dict(event.raw)
            if session_id is not None and raw.get("session_id") is None:
                raw["session_id"] = session_id
            raw.setdefault("event_id", self._event_id())
            self.last_event_id = str(raw["event_id"])
            return orjson.dumps(raw)
        if type(event) is ev.ResponseDelta and self.our_role is _SERVER:
            fast = self._send_delta(event, session_id, response_id)
            if fast is not None:
                return fast
        elif type(event) is ev.ResponseCreated and self.our_role is _SERVER:
            fast = self._send_created(event, session_id)
            if fast is not None:
                return fast
        elif type(event) is ev.ResponseDone and self.our_role is _SERVER:
            fast = self._send_done(event)
            if fast is not None:
                return fast
        if session_id is not None or response_id is not None:
            event = ev.with_ids(
                event,  # type: ignore[arg-type]  # UnknownEvent returned above
                session_id=session_id,
                response_id=response_id,
            )
        try:
            stamps = self._step(event, self.our_role)[1]  # type: ignore[arg-type]
        except LocalProtocolError as err:
            raise self._local(err, event) from None  # type: ignore[arg-type]
        out = to_dict(event)
        if stamps is not None:
            out.update(stamps)
        return self._serialise(out)

    def data_to_send(self) -> list[bytes]:
        """Messages the core owes the peer (pongs, errors, acks); drains them."""
        out, self.owed = self.owed, []
        return out

    def bound_history(self, session_id: str) -> None:
        """Weigh and bound a session's conversation replaced from outside (a resume's record).

        As after a turn: past the bounds the oldest turns go, and
        :attr:`ConnectionConfig.on_history` is told. An unknown session is ignored.
        """
        session = self._sessions.get(session_id)
        if session is not None:
            session.bound_history(self.config)

    def forget_history(self, session_id: str) -> None:
        """Empty a session's kept conversation: its next turn starts afresh.

        What a server's budget over many sessions does to the ones it trims
        (:class:`uamp_proto.history.SessionHistories`). A response running
        keeps the conversation it was given; its turn joins the empty one. A
        new list replaces the old, so what reads it incrementally (an event
        log's record) sees the change. An unknown session is ignored.
        """
        session = self._sessions.get(session_id)
        if session is not None:
            session.forget_history()

    # --- internals -----------------------------------------------------------

    def _serialise(self, out: dict[str, Any]) -> bytes:
        """Fill in ``event_id`` (and ``timestamp`` with a clock) when absent; JSON bytes."""
        if "event_id" not in out:
            out["event_id"] = self.last_event_id = next(self._evt_ids)
        else:
            self.last_event_id = str(out["event_id"])
        if self.config.clock is not None and "timestamp" not in out:
            out["timestamp"] = int(self.config.clock() * 1000)
        return orjson.dumps(out)

    def _event_id(self) -> str:
        return next(self._evt_ids)

    def _reply_for(
        self,
        code: str,
        message: str,
        session_id: str | None,
        event_id: str | None,
        event_type: str | None,
        field: str | None = None,
    ) -> ev.Event:
        """The error event a server answers a client's violation with.

        ``session.error`` names the offending event in ``details`` (and the
        offending field, when one is to blame, as ``details.field``);
        ``version_mismatch`` is a ``response.error`` listing the supported
        version (section 14.2).
        """
        details: dict[str, Any] = {}
        if event_id is not None:
            details["event_id"] = event_id
        if event_type is not None:
            details["event_type"] = event_type
        if field:
            details["field"] = field
        if code == "version_mismatch":
            return ev.ResponseErrorEvent(
                session_id=session_id,
                error=ty.ErrorInfo(
                    code=code,
                    message=message,
                    details={**details, "supported": [self.config.uamp_version]},
                ),
            )
        return ev.SessionErrorEvent(
            session_id=session_id,
            error=ty.ErrorInfo(code=code, message=message, details=details or None),
        )

    def _local(self, err: LocalProtocolError, event: ev.Event) -> LocalProtocolError:
        """Complete a refusal of our own event: ids, and the reply when we are the client.

        The reply is what a server would answer the same event with, had we
        sent it: the one :meth:`_remote` gives a server receiving it.
        """
        if err.session_id is None:
            err.session_id = event.session_id
        if err.event_id is None:
            err.event_id = event.event_id
        if self.our_role is Role.CLIENT and err.reply is None:
            sid = event.session_id
            err.reply = self._reply_for(
                err.code,
                f"{event.type}: {err.message}",
                sid if sid in self._sessions else None,
                event.event_id,
                event.type,
                err.field,
            )
        return err

    def _remote(self, err: RemoteProtocolError, event_type: str | None) -> RemoteProtocolError:
        """Attach and queue the error event owed to the peer."""
        if self.our_role is Role.SERVER and err.reply is None:
            err.reply = self._reply_for(
                err.code, err.message, err.session_id, err.event_id, event_type, err.field
            )
        if err.reply is not None:
            self.owed.append(self._encode_reply(err.reply))
        return err

    def _encode_reply(self, event: ev.Event) -> bytes:
        return self._serialise(to_dict(event))

    def _process(
        self, event: ev.Event | ev.UnknownEvent, sender: Role
    ) -> ev.Event | ev.UnknownEvent:
        """Apply a received event; return what next_event gives the caller."""
        if type(event) is ev.UnknownEvent:
            return event  # section 14.3: never an error
        assert isinstance(event, ev.Event)
        try:
            return self._step(event, sender)[0]
        except LocalProtocolError as err:
            # A refusal of the peer's event: the same rule, the peer's fault
            # (h11 converts at this boundary likewise).
            raise RemoteProtocolError(
                f"{event.type}: {err.message}",
                code=err.code,
                session_id=self._refused_session(event, err.code),
                event_id=event.event_id,
                field=err.field,
            ) from None

    def _refused_session(self, event: ev.Event, code: str) -> str | None:
        """The ``session_id`` of the error refusing ``event``: its session's when known.

        A refused ``session.create`` names the id it proposed (section 10:
        every event of a multiplexed connection is scoped), so the client
        fails that opening instead of waiting for it; the id of an ended
        session proposed again is not named.
        """
        sid = event.session_id
        if sid in self._sessions:
            return sid
        if event.type == "session.create" and code != "duplicate_session":
            return sid
        return None

    def _step(self, event: ev.Event, sender: Role) -> tuple[ev.Event, dict[str, Any] | None]:
        """Check and apply one event in either direction.

        Returns:
            The event as applied (``session.create`` gains the session id the
            server assigned) and the fields to stamp on the outgoing message.

        Every event takes the same way: the direction check, routing to its
        session (``None``: the connection level, the tables' ``IDLE`` state),
        the session table, then the event's own rules and effects (the
        response table for response events).

        Raises:
            LocalProtocolError: a rule was broken; nothing changed. The
                caller says whose fault it was.
        """
        self._check_direction(event, sender)
        etype = event.type
        if etype == "session.create":
            return self._open_session(event, sender), None  # type: ignore[arg-type]
        session = (
            self._pending_session(event)  # type: ignore[arg-type]
            if etype == "session.created"
            else self._route(event)
        )
        if session is None:
            next_session_state(
                sender, SessionState.IDLE, etype, session_id=None, live=len(self._sessions)
            )
            self._connection_event(event, sender)
            return event, None
        # The lookup inlined (every event passes here); the function names the refusal.
        after = SESSION_TRANSITIONS[(sender, session.state)].get(etype)
        if after is None:
            after = next_session_state(
                sender, session.state, etype, session_id=session.id, live=len(self._sessions)
            )
        if etype == "session.created":
            return self._created(session, event, after), None  # type: ignore[arg-type]
        return event, self._apply(session, event, sender, after)

    def _check_direction(self, event: ev.Event, sender: Role) -> None:
        allowed = CLIENT_EVENTS if sender is Role.CLIENT else SERVER_EVENTS
        if event.type not in allowed:
            if event.direction == "system":
                raise refuse(
                    "invalid_event", f"{event.type} is internal and never sent on a connection"
                )
            raise refuse("invalid_event", f"{event.type} is not an event a {sender.value} sends")

    def _route(self, event: ev.Event) -> SessionContext | None:
        """The event's session; ``None`` for the connection level.

        Without a ``session_id`` an event goes to the only live session; with
        none or several it is a connection-level event (the session table's
        ``IDLE`` row says which are allowed).
        """
        sid = event.session_id
        if sid is not None:
            session = self._sessions.get(sid)
            if session is None:
                if sid in self._ended:
                    raise refuse("session_ended", f"session {sid!r} has ended", "session_id")
                raise refuse(
                    "unknown_session", f"no session {sid!r} on this connection", "session_id"
                )
            return session
        sessions = self._sessions
        if len(sessions) == 1:
            return next(iter(sessions.values()))
        return None

    def _connection_event(self, event: ev.Event, sender: Role) -> None:
        if event.type == "session.update" and event.session_id is None:
            # Connection-level update (section 5.2): applies to every session.
            for session in self._sessions.values():
                self._update_session(session, event)  # type: ignore[arg-type]
        elif event.type == "ping" and sender is self.their_role:
            self.owed.append(self._encode_reply(ev.Pong()))

    # --- per-session rules ---------------------------------------------------

    def _apply(
        self, session: SessionContext, event: ev.Event, sender: Role, new_state: SessionState
    ) -> dict[str, Any] | None:
        """The rules and effects of an event the session table allows (``new_state``)."""
        etype = event.type
        stamps: dict[str, Any] | None = None
        if etype in RESPONSE_EVENTS:
            if etype == "audio.delta":
                self._check_audio(session)
            if sender is Role.SERVER and event.unknown and event.unknown.get("chat_id"):
                # A chat's response fanned out to a participant (section 7.1):
                # it is not this session's own response slot.
                pass
            else:
                stamps = self._response_rules(session, event, sender)
        elif etype in _PAYMENT_TYPES:
            if not session.payment.can_apply(event):
                raise refuse(
                    "invalid_event", f"not allowed while payment is {session.payment.state.value}"
                )
            session.payment.apply(
                event,
                active_response=session.response.response_id if session.response else None,
            )
        elif etype in _INPUT_TYPES:
            if etype == "input.audio":
                self._check_audio(session)
            self._input(session, event)
        elif etype in _VOICE_TYPES:
            self._voice(session, event)
        elif etype == "input.typing" or etype == "message.read":
            chat = session.chat_of(event)
            if chat is not None:
                self._join_chat(session, chat)
        elif etype == "progress" and flow.is_ack(event):
            self._ack(session, event, sender)
        elif etype == "session.update":
            self._update_session(session, event)  # type: ignore[arg-type]
        elif etype == "client.capabilities":
            assert isinstance(event, ev.ClientCapabilities)
            session.client_capabilities = merge_capabilities(
                session.client_capabilities, event.capabilities
            )
        elif etype == "ping" and sender is self.their_role:
            self.owed.append(self._encode_reply(ev.Pong(session_id=event.session_id)))
        elif etype == "session.error" and session.state is SessionState.CREATING:
            pass
        if new_state is SessionState.ENDED:
            if session.response is not None:
                session._finish_response(keep_output=True)
            self._end(session)
        elif new_state is not session.state:
            session.state = new_state
        return stamps

    def __iter__(self) -> Iterator[ev.Event | ev.UnknownEvent]:
        """Iterate over queued events until NEED_DATA (errors propagate)."""
        while True:
            event = self.next_event()
            if event is NEED_DATA:
                return
            yield event  # type: ignore[misc]


class ServerConnection(Connection):
    """The server side of a UAMP connection."""

    def __init__(self, config: ConnectionConfig | None = None) -> None:
        super().__init__(Role.SERVER, config)

    def accept(
        self,
        session_id: str,
        *,
        agent: str | None = None,
        created_at: float | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> bytes:
        """Send ``session.created`` for a session being created.

        The configuration is echoed back; a granted delta window appears in
        ``config.extensions.flow``. ``extensions`` become the event's own
        ``extensions`` object (``{"resumed": true}``: :mod:`uamp_proto.resume`).
        """
        session = self._sessions[session_id]
        config = session.config or ty.SessionConfig(modalities=["text"])
        if session.requested_window is not None:
            granted = dict(config.extensions or {})
            granted.update(flow.flow_extension(session.requested_window))
            config = attrs.evolve(config, extensions=granted)
        return self.send(
            ev.SessionCreated(
                session_id=session_id,
                uamp_version=self.config.uamp_version,
                session=ty.Session(
                    id=session_id, created_at=created_at, config=config, status="active"
                ),
                chat=session.chat,
                agent=agent or session.agent,
                unknown={"extensions": extensions} if extensions else EMPTY,
            )
        )


class ClientConnection(Connection):
    """The client side of a UAMP connection."""

    def __init__(self, config: ConnectionConfig | None = None) -> None:
        super().__init__(Role.CLIENT, config)

    def windowed(self, config: ty.SessionConfig) -> ty.SessionConfig:
        """``config`` asking for this client's delta window (unchanged without one)."""
        if self.config.delta_window is None:
            return config
        extensions = dict(config.extensions or {})
        extensions.update(flow.flow_extension(self.config.delta_window))
        return attrs.evolve(config, extensions=extensions)

    def create_session(
        self,
        config: ty.SessionConfig | None = None,
        *,
        session_id: str | None = None,
        agent: str | None = None,
        token: str | None = None,
        payment_token: str | None = None,
        chat: str | None = None,
        client_capabilities: ty.Capabilities | None = None,
    ) -> bytes:
        """Send ``session.create``; opts into delta windows when configured."""
        return self.send(
            ev.SessionCreate(
                session_id=session_id,
                uamp_version=self.config.uamp_version,
                session=self.windowed(config or ty.SessionConfig(modalities=["text"])),
                agent=agent,
                token=token,
                payment_token=payment_token,
                chat=chat,
                client_capabilities=client_capabilities,
            )
        )
