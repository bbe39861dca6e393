"""A connection's session lifecycle: opening, creation, updates and the end.

Theory of operation
-------------------
A session (UAMP sections 3, 5, 6, 10) moves ``IDLE -> CREATING -> ACTIVE ->
ENDED`` in the session table (:mod:`uamp_proto._state`); the connection's
general path looks each move up, and :class:`SessionPart` applies the moves
that make or change a session:

* ``session.create`` opens one (:meth:`SessionPart._open_session`): within
  the connection's ``max_sessions``, under a new id (the client's proposal,
  else one from the id source on a server, else a provisional one on a
  client), with a compatible ``uamp_version`` (section 14.2: the major
  number) and the delta window it asks for (a server grants at most
  ``max_delta_window``; :mod:`uamp_proto.flow`).
* ``session.created`` finds the session it answers
  (:meth:`SessionPart._pending_session`: a client takes its oldest pending
  one when the server chose the id) and makes it active
  (:meth:`SessionPart._created`): the server starts its send window, the
  client checks the version, renames a provisional session and starts the
  receive window the server granted.
* ``session.update`` (on one session, or on the connection: every session)
  replaces the token, the configuration or the payment token; a payment
  token also answers an outstanding ``payment.required`` (spec 004), as one
  on ``input.text`` does.
* ``session.end`` ends it (:meth:`SessionPart._end`): its id joins the
  last 256 ended, for which a late event is refused ``session_ended`` and a
  new ``session.create`` ``duplicate_session``.

Each raises :class:`~uamp_proto.errors.LocalProtocolError` for a broken rule
before changing anything; the general path says whose fault it was.
:class:`SessionPart` is that side of
:class:`~uamp_proto.connection.Connection`, which subclasses it and sets
every attribute it declares.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs

from . import events as ev
from . import flow
from . import types as ty
from ._state import Role, SessionState, next_session_state, refuse
from .errors import ProtocolError, RemoteProtocolError
from .session_context import SessionContext

if TYPE_CHECKING:
    from .connection_config import ConnectionConfig
    from .ids import IdSource

__all__ = ["SessionPart"]


def _major(version: str) -> str:
    return version.split(".", 1)[0].strip()


class SessionPart:
    """A connection's session lifecycle (module docstring): the moves that open,
    activate, update and end a session, applied once the tables allow them."""

    if TYPE_CHECKING:
        our_role: Role
        config: ConnectionConfig
        _ids: IdSource
        _sessions: dict[str, SessionContext]
        _ended: deque[str]

    def _open_session(self, event: ev.SessionCreate, sender: Role) -> ev.SessionCreate:
        # A new session starts at the connection level; its id must be new.
        state = next_session_state(
            sender, SessionState.IDLE, event.type, session_id=None, live=len(self._sessions)
        )
        live = sum(1 for s in self._sessions.values() if s.state is not SessionState.ENDED)
        if live >= self.config.max_sessions:
            raise refuse(
                "too_many_sessions",
                f"this connection already has {live} sessions (limit {self.config.max_sessions})",
            )
        sid = event.session_id
        if sid is not None and (sid in self._sessions or sid in self._ended):
            raise refuse("duplicate_session", f"session {sid!r} already exists", "session_id")
        ours = _major(self.config.uamp_version)
        if _major(event.uamp_version) != ours and self.our_role is Role.SERVER:
            raise RemoteProtocolError(
                f"uamp_version {event.uamp_version!r} is not supported; this server speaks "
                f"{self.config.uamp_version}",
                code="version_mismatch",
                session_id=sid,
                event_id=event.event_id,
                field="uamp_version",
            )
        window: int | None = None
        if event.session.extensions:
            try:
                window = flow.requested_window(event.session.extensions)
            except ProtocolError as exc:
                raise refuse("invalid_event", exc.message) from None
        if sid is None:
            sid = self._ids("sess") if self.our_role is Role.SERVER else f"pending:{id(event)}"
            if self.our_role is Role.SERVER:
                event = attrs.evolve(event, session_id=sid)
        session = SessionContext(sid, event, state)
        if self.our_role is Role.SERVER and window is not None:
            session.requested_window = min(window, self.config.max_delta_window)
        elif window is not None:
            session.requested_window = window
        self._sessions[sid] = session
        return event

    def _pending_session(self, event: ev.SessionCreated) -> SessionContext:
        """The session a ``session.created`` answers.

        The server names it; a client matches its oldest pending
        ``session.create`` when the id is not one of its own (the server
        assigned it, or replaced the provisional one).
        """
        sid = event.session_id or event.session.id
        session = self._sessions.get(sid)
        if self.our_role is Role.SERVER:
            if session is None:
                if len(self._sessions) == 1 and event.session_id is None:
                    return next(iter(self._sessions.values()))
                raise refuse("unknown_session", f"no session {sid!r} is being created")
            return session
        if session is None or session.state is not SessionState.CREATING:
            session = next(
                (s for s in self._sessions.values() if s.state is SessionState.CREATING),
                None,
            )
        if session is None:
            raise refuse("unknown_session", "session.created for no pending session.create")
        return session

    def _created(
        self, session: SessionContext, event: ev.SessionCreated, after: SessionState
    ) -> ev.SessionCreated:
        sid = event.session_id or event.session.id
        if self.our_role is Role.SERVER:
            if session.requested_window is not None:
                session.send_window = flow.SendWindow(session.requested_window)
        else:
            if _major(event.uamp_version) != _major(self.config.uamp_version):
                raise refuse(
                    "version_mismatch",
                    f"server speaks uamp_version {event.uamp_version!r}, "
                    f"we speak {self.config.uamp_version!r}",
                )
            granted = None
            if event.session.config is not None and event.session.config.extensions:
                try:
                    granted = flow.confirmed_window(
                        event.session.config.extensions, session.requested_window
                    )
                except ProtocolError as exc:
                    raise refuse(exc.code, exc.message) from None
            if session.id != sid:
                del self._sessions[session.id]
                session.id = sid
                self._sessions[sid] = session
            if granted is not None:
                session.receive_window = flow.ReceiveWindow(granted)
        session.state = after
        if event.session.config is not None:
            session.config = event.session.config
        return event

    def _end(self, session: SessionContext) -> None:
        session.state = SessionState.ENDED
        self._sessions.pop(session.id, None)
        self._ended.append(session.id)

    def _update_session(self, session: SessionContext, event: ev.SessionUpdate) -> None:
        if event.token is not None:
            session.token = event.token
        if event.payment_token is not None:
            session.payment_token = event.payment_token
            self._offer_token(session, event.payment_token)
        if event.session is not None:
            session.config = event.session

    @staticmethod
    def _offer_token(session: SessionContext, token: str) -> None:
        """Record a payment token; it answers an outstanding ``payment.required``.

        Spec 004 lets ``session.update`` (and, per section 5.6, ``input.text``)
        deliver the token instead of ``payment.submit``.
        """
        session.payment.preload(token)
        if session.payment.blocks_content:
            session.payment.apply(ev.PaymentSubmit(payment=ty.PaymentSubmission(token=token)))
