"""The server's shortcuts for its usual turn: the general path's result, in fewer steps.

Theory of operation
-------------------
Most of what a server's :class:`~uamp_proto.connection.Connection` handles
is one turn: the client's ``input.text`` and ``response.create``, then the
server's ``response.created``, its text deltas and ``response.done``. Each of
those takes a shortcut here before the general path (``_step``: direction,
routing, both tables, the event's rules):

* :meth:`ShortcutPart._receive_text` and :meth:`ShortcutPart._receive_create`
  apply a client's plain ``input.text`` and ``response.create`` for a free
  slot (``next_event`` tries them);
* :meth:`ShortcutPart._send_created`, :meth:`ShortcutPart._send_delta` and
  :meth:`ShortcutPart._send_done` apply and serialise the server's three
  (``send`` tries them); where the ids need no escaping, ``response.created``
  and text deltas are written from prepared byte strings
  (:data:`uamp_proto.codec.TEXT_DELTA_HEAD`), not from a dict.

Each applies an event only where the tables make it a move that changes
nothing else: the states below are read off the tables at import, and the
asserts stop the import if a table change would make a shortcut differ from
the general path. Anything a shortcut does not take -- another state, a
chat, payment holding content back, a delta window, another response's id,
extra fields, an unknown session -- it leaves unchanged (``None`` or
``False``) for the general path, which also reports the errors. So a
shortcut changes no outcome, only the cost (``bench/core_turn.py``).

:class:`ShortcutPart` is that side of
:class:`~uamp_proto.connection.Connection`, which subclasses it and sets
every attribute it declares.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from . import _fastinit, flow
from . import events as ev
from . import types as ty
from ._state import (
    RESPONSE_TRANSITIONS,
    SESSION_TRANSITIONS,
    TERMINAL_RESPONSE_STATES,
    ResponseState,
    Role,
)
from .codec import (
    CREATED_HEAD,
    CREATED_SESSION,
    EVENT_END,
    EVENT_ID_KEY,
    TEXT_DELTA_HEAD,
    TEXT_DELTA_RESPONSE,
    TEXT_DELTA_SESSION,
    text_delta_tail,
    to_dict,
)
from .payment import BLOCKING_STATES, CONTENT_EVENTS
from .response import ResponseTracker
from .types import EMPTY

if TYPE_CHECKING:
    from .connection_config import ConnectionConfig
    from .ids import IdSource
    from .session_context import SessionContext

__all__ = ["ShortcutPart"]


def _staying(
    table: Mapping[tuple[Role, Any], Mapping[str, Any]], sender: Role, etype: str
) -> frozenset[Any]:
    """The states in which ``table`` lets ``sender`` 's ``etype`` in and keeps the state."""
    return frozenset(
        state for (role, state), row in table.items() if role is sender and row.get(etype) is state
    )


def _never_moves(table: Mapping[tuple[Role, Any], Mapping[str, Any]], etype: str) -> bool:
    """Whether the server's ``etype`` keeps ``table`` 's state wherever it is let in."""
    return all(
        row.get(etype) in (None, state)
        for (role, state), row in table.items()
        if role is Role.SERVER
    )


def _server_moves(etype: str) -> dict[ResponseState, ResponseState]:
    """The response state the server's ``etype`` moves to, from each state that lets it in."""
    return {
        state: row[etype]
        for (role, state), row in RESPONSE_TRANSITIONS.items()
        if role is Role.SERVER and etype in row
    }


#: Where the tables let the server send a ``response.delta``; there it moves
#: neither machine (checked below), which is what lets ``_send_delta`` skip
#: writing states.
_DELTA_SESSION_STATES: Final = _staying(SESSION_TRANSITIONS, Role.SERVER, "response.delta")
_DELTA_RESPONSE_STATES: Final = _staying(RESPONSE_TRANSITIONS, Role.SERVER, "response.delta")
assert _never_moves(SESSION_TRANSITIONS, "response.delta"), (
    "a response.delta that changes the session state needs the general path"
)
assert _never_moves(RESPONSE_TRANSITIONS, "response.delta"), (
    "a response.delta that changes the response state needs the general path"
)
#: Where the tables let the server send ``response.created`` without changing
#: the session's state, and the response state it moves to from each (what
#: ``_send_created`` writes instead of the general path).
_CREATED_SESSION_STATES: Final = _staying(SESSION_TRANSITIONS, Role.SERVER, "response.created")
_CREATED_MOVES: Final = _server_moves("response.created")
assert "response.created" not in CONTENT_EVENTS, "a created that payment blocks needs a check"
#: Where the tables let the server end a response with ``response.done``
#: without changing the session's state, and the (terminal, not failed)
#: response state it moves to from each (what ``_send_done`` writes).
_DONE_SESSION_STATES: Final = _staying(SESSION_TRANSITIONS, Role.SERVER, "response.done")
_DONE_MOVES: Final = _server_moves("response.done")
assert all(
    after in TERMINAL_RESPONSE_STATES and after is not ResponseState.FAILED
    for after in _DONE_MOVES.values()
), "a response.done that does not end the response needs the general path"
assert "response.done" not in flow.FLOW_CONTROLLED_TYPES, "a done to stamp needs the general path"
#: Where the tables let a client's ``input.text`` / ``response.create`` in
#: without changing the session's state (what ``_receive_text`` and
#: ``_receive_create`` check instead of the general path's lookup).
_TEXT_SESSION_STATES: Final = _staying(SESSION_TRANSITIONS, Role.CLIENT, "input.text")
_CREATE_SESSION_STATES: Final = _staying(SESSION_TRANSITIONS, Role.CLIENT, "response.create")

_dumps = orjson.dumps
_join = b"".join
#: The response state a client's ``response.create`` moves a free slot to.
_CREATE_MOVE: Final = RESPONSE_TRANSITIONS[(Role.CLIENT, ResponseState.IDLE)]["response.create"]
#: ``TextContent(text=...)``, positionally (:func:`uamp_proto._fastinit.maker`).
_make_text = _fastinit.maker(ty.TextContent, ("text",))


class ShortcutPart:
    """A connection's shortcuts for the usual turn (module docstring): each applies
    its event as the general path would, or leaves it to the general path."""

    if TYPE_CHECKING:
        config: ConnectionConfig
        _ids: IdSource
        _sessions: dict[str, SessionContext]
        _evt_ids: Iterator[str]
        _plain_ids: bool
        _delta_tail: tuple[str, str, bytes] | None
        last_event_id: str

        def _serialise(self, out: dict[str, Any]) -> bytes: ...

    def _send_delta(
        self, event: ev.ResponseDelta, session_id: str | None, response_id: str | None
    ) -> bytes | None:
        """The server's hot path: a ``response.delta`` the tables allow as it is.

        The states come from the tables (``_DELTA_SESSION_STATES`` and
        ``_DELTA_RESPONSE_STATES``: where a server's delta is a legal move
        that changes neither machine). Anything else -- a state the tables
        refuse, content blocked by payment, a delta window to stamp, the id
        of another response, an unroutable event -- returns ``None`` and
        takes the general path (and its error reporting).
        """
        sid = event.session_id
        if sid is None:
            sid = session_id
        if sid is None:
            if len(self._sessions) != 1:
                return None
            session = next(iter(self._sessions.values()))
        else:
            found = self._sessions.get(sid)
            if found is None:
                return None
            session = found
        tracker = session.response
        rid = event.response_id
        if rid is None:
            rid = response_id
        if (
            tracker is None
            or tracker.state not in _DELTA_RESPONSE_STATES
            or session.state not in _DELTA_SESSION_STATES
            or session.send_window is not None
            or session.payment.state in BLOCKING_STATES
            or (rid is not None and rid != tracker.response_id)
        ):
            return None
        delta = event.delta
        tracker._delta(delta)  # what tracker.apply does with a delta
        if (
            type(delta) is ty.DeltaText
            and session_id is not None
            and response_id is not None
            and event.session_id is None
            and event.response_id is None
            and event.event_id is None
            and event.timestamp is None
            and event.delta_seq is None
            and event.unknown is EMPTY
            and delta.unknown is EMPTY
            and self._plain_ids
            and self.config.clock is None
        ):
            # The agent's text with the ids send was given: the bytes below
            # (codec.TEXT_DELTA_HEAD), without the dict.
            tail = self._delta_tail
            if tail is None or tail[0] != session_id or tail[1] != response_id:
                tail = (session_id, response_id, text_delta_tail(session_id, response_id))
                self._delta_tail = tail
            eid = self.last_event_id = next(self._evt_ids)
            return _join((TEXT_DELTA_HEAD, _dumps(delta.text), tail[2], eid.encode(), EVENT_END))
        out = to_dict(event)
        # to_dict puts session_id, then response_id, last: same order as a copy's.
        if event.session_id is None and session_id is not None:
            out["session_id"] = session_id
        if event.response_id is None and response_id is not None:
            out["response_id"] = response_id
        return self._serialise(out)

    def _send_created(self, event: ev.ResponseCreated, session_id: str | None) -> bytes | None:
        """The server's ``response.created`` naming the session's requested response.

        What the general path does with it where the tables allow it as it
        is (``_CREATED_SESSION_STATES``, ``_CREATED_MOVES``): the response
        moves, nothing else changes. Anything else -- another state, a
        delta window to start, another response id, extra fields, an
        unroutable event -- returns ``None`` for the general path.
        """
        sid = event.session_id
        if sid is None:
            sid = session_id
        if sid is None or event.unknown:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        tracker = session.response
        if (
            tracker is None
            or tracker.response_id != event.response_id
            or session.state not in _CREATED_SESSION_STATES
            or session.send_window is not None
        ):
            return None
        after = _CREATED_MOVES.get(tracker.state)
        if after is None:
            return None
        tracker.state = after  # what tracker.apply does with response.created
        if (
            event.event_id is None
            and event.timestamp is None
            and self._plain_ids
            and self.config.clock is None
        ):
            # Both ids and no unknown keys (checked above): the bytes below
            # (codec.CREATED_HEAD), without the dict; the JSON of the two ids
            # makes the tail of the response's text deltas too.
            rid = event.response_id
            rid_json, sid_json = _dumps(rid), _dumps(sid)
            eid = self.last_event_id = next(self._evt_ids)
            data = _join(
                (
                    CREATED_HEAD,
                    rid_json,
                    CREATED_SESSION,
                    sid_json,
                    EVENT_ID_KEY,
                    eid.encode(),
                    EVENT_END,
                )
            )
            self._delta_tail = (
                sid,
                rid,
                _join((TEXT_DELTA_SESSION, sid_json, TEXT_DELTA_RESPONSE, rid_json, EVENT_ID_KEY)),
            )
            return data
        out = to_dict(event)
        if event.session_id is None:
            out["session_id"] = sid
        return self._serialise(out)

    def _send_done(self, event: ev.ResponseDone) -> bytes | None:
        """The server's ``response.done`` of the session's current response, named in full.

        What the general path does where the tables end the response with it
        (``_DONE_SESSION_STATES``, ``_DONE_MOVES``) and payment does not
        hold content back: the tracker takes it, the response ends and its
        turn joins the history. An event without both ids (the general path
        stamps them), with extra fields (a chat's fanned-out response),
        another response's id, an unknown session -- anything else returns
        ``None`` for the general path.
        """
        sid = event.session_id
        if sid is None or event.response_id is None or event.unknown:
            return None
        session = self._sessions.get(sid)
        tracker = None if session is None else session.response
        if tracker is None or tracker.response_id != event.response_id:
            return None
        assert session is not None
        if session.state not in _DONE_SESSION_STATES or session.payment.state in BLOCKING_STATES:
            return None
        after = _DONE_MOVES.get(tracker.state)
        if after is None:
            return None
        tracker.apply(event)
        tracker.state = after
        session._finish_response(keep_output=True)
        session.bound_history(self.config)
        return self._serialise(to_dict(event))

    def _shortcut_session(self, sid: str | None) -> SessionContext | None:
        """The session a client's event names, or the only one; ``None``: the general path."""
        if sid is None:
            if len(self._sessions) != 1:
                return None
            return next(iter(self._sessions.values()))
        return self._sessions.get(sid)

    def _receive_text(self, event: ev.InputText) -> bool:
        """The server's usual ``input.text``: applied here, else ``False`` (the general path).

        What the general path does with it where the session table lets it
        in as it is (``_TEXT_SESSION_STATES``) and it is plain text for the
        session's next response: the text joins the pending input. A chat
        session, a ``context``, ``messages`` or a ``payment_token``, an
        unknown or ended session, a session-less event with several
        sessions -- anything else returns ``False`` having changed nothing.
        """
        sid = event.session_id  # the lookup inline when named (the usual case)
        session = self._sessions.get(sid) if sid is not None else self._shortcut_session(sid)
        if (
            session is None
            or session.state not in _TEXT_SESSION_STATES
            or session.chats
            or event.context is not None
            or event.messages is not None
            or event.payment_token is not None
            or session.pending_bytes + len(event.text) > self.config.max_pending_input_bytes
        ):
            return False
        session.pending_input.append((event.role or "user", _make_text(event.text)))
        session.pending_bytes += len(event.text)
        return True

    def _receive_create(self, event: ev.ResponseCreate) -> bool:
        """The server's ``response.create`` for a free slot: applied here, else ``False``.

        What the general path does where the session table lets it in as it
        is (``_CREATE_SESSION_STATES``) and the slot is free: the pending
        input becomes a new response, requested (``_CREATE_MOVE``). A busy
        slot (held or refused), a conversation in ``response.messages``, an
        unknown or ended session, a session-less event with several
        sessions -- anything else returns ``False`` having changed nothing.
        """
        sid = event.session_id  # the lookup inline when named (the usual case)
        session = self._sessions.get(sid) if sid is not None else self._shortcut_session(sid)
        config = event.response
        if (
            session is None
            or session.response is not None
            or session.state not in _CREATE_SESSION_STATES
            or (config is not None and config.messages is not None)
        ):
            return False
        messages = session._take_input()
        tracker = session.response = ResponseTracker(
            self._ids("resp"), messages, self.config.max_response_output_bytes
        )
        if session.pending_context is not None:
            tracker.context, session.pending_context = session.pending_context, None
        tracker.state = _CREATE_MOVE
        return True
