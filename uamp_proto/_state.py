"""The rules of a UAMP connection as data: who may send what, in which state.

Theory of operation
-------------------
Every session runs two small machines, and every event either side sends or
receives is looked up in them before anything changes
(:mod:`uamp_proto.connection` applies them, UAMP sections 3, 5, 6, 10):

* The **session machine**, :data:`SESSION_TRANSITIONS`:
  ``IDLE -> CREATING -> ACTIVE -> ENDED``. ``IDLE`` is "no session": the
  connection level, where ``session.create`` starts a session and the events
  that need none live (``ping``, ``capabilities.query``, a session-less
  ``session.update``; the server's ``pong``, ``capabilities`` and its errors
  about sessions that do not exist). A client may pipeline input while its
  session is ``CREATING``; the server says nothing but ``session.created``,
  an error, ``session.end`` or ``pong`` until then.
* The **response machine**, :data:`RESPONSE_TRANSITIONS`: one response slot
  per session, ``IDLE -> REQUESTED -> IN_PROGRESS -> COMPLETED | CANCELLED |
  FAILED``. A terminal state frees the slot, which reads ``IDLE`` again, so
  only the three live states have rows. Only :data:`RESPONSE_EVENTS` are
  constrained by it; other events pass whatever the slot's state.

Both tables are ``{(sender, state): {event type: next state}}``: a missing
key is the violation. As in h11's ``_state.py`` they know who *sent* an
event but not which side is local, so one table checks what we send and what
the peer sends. :func:`next_session_state` and :func:`next_response_state`
look a move up and raise :class:`~uamp_proto.errors.LocalProtocolError`
(code and message of the rule broken) when there is none; the connection
attaches the reply and, on the receive path, turns it into a
:class:`~uamp_proto.errors.RemoteProtocolError`.

Payment (:mod:`uamp_proto.payment`) is a third machine with its own table;
delta windows (:mod:`uamp_proto.flow`) are counters, not states.
"""

from __future__ import annotations

import enum
from typing import Final

from . import events as ev
from .errors import LocalProtocolError
from .payment import CONTENT_EVENTS

__all__ = [
    "CLIENT_EVENTS",
    "CONNECTION_EVENTS",
    "RESPONSE_EVENTS",
    "RESPONSE_OUTCOMES",
    "RESPONSE_TRANSITIONS",
    "SERVER_EVENTS",
    "SESSION_TRANSITIONS",
    "TERMINAL_RESPONSE_STATES",
    "ResponseState",
    "Role",
    "SessionState",
    "next_response_state",
    "next_session_state",
    "refuse",
]


class Role(enum.Enum):
    """Which side of the connection an event comes from."""

    # Members are singletons: hash by identity, not by name (these enums key
    # the transition tables, looked up on every event).
    __hash__ = object.__hash__

    CLIENT = "client"
    SERVER = "server"


class SessionState(enum.Enum):
    """The lifecycle of one session."""

    __hash__ = object.__hash__

    #: No session: the connection level, before ``session.create``.
    IDLE = "idle"
    #: ``session.create`` seen, ``session.created`` not yet.
    CREATING = "creating"
    ACTIVE = "active"
    ENDED = "ended"


class ResponseState(enum.Enum):
    """Where a session's response slot, and a response, is in its lifecycle."""

    __hash__ = object.__hash__

    #: No response: the slot is free.
    IDLE = "idle"
    #: ``response.create`` accepted; ``response.created`` not yet seen.
    REQUESTED = "requested"
    #: Streaming content.
    IN_PROGRESS = "in_progress"
    #: Finished with ``response.done``.
    COMPLETED = "completed"
    #: Finished with ``response.cancelled``.
    CANCELLED = "cancelled"
    #: Finished with ``response.error``.
    FAILED = "failed"


TERMINAL_RESPONSE_STATES: Final = frozenset(
    {ResponseState.COMPLETED, ResponseState.CANCELLED, ResponseState.FAILED}
)


def _types(direction: str) -> frozenset[str]:
    return frozenset(t for t, cls in ev.EVENT_TYPES.items() if cls.direction in (direction, "both"))


#: The event types each side sends (``direction`` of the event class).
CLIENT_EVENTS: Final = _types("client")
SERVER_EVENTS: Final = _types("server")

_S = SessionState


def _session_table() -> dict[tuple[Role, SessionState], dict[str, SessionState]]:
    in_session = {
        Role.CLIENT: {t: _S.ACTIVE for t in CLIENT_EVENTS - {"session.create"}},
        Role.SERVER: {t: _S.ACTIVE for t in SERVER_EVENTS - {"session.created"}},
    }
    for row in in_session.values():
        row["session.end"] = _S.ENDED
    creating_client = {t: _S.CREATING for t in in_session[Role.CLIENT]}
    creating_client["session.end"] = _S.ENDED
    return {
        (Role.CLIENT, _S.IDLE): {
            "session.create": _S.CREATING,
            "ping": _S.IDLE,
            "capabilities.query": _S.IDLE,
            # Section 5.2: without a session id it applies to every session.
            "session.update": _S.IDLE,
        },
        (Role.SERVER, _S.IDLE): {
            "pong": _S.IDLE,
            "capabilities": _S.IDLE,
            "session.error": _S.IDLE,
            "response.error": _S.IDLE,
        },
        (Role.CLIENT, _S.CREATING): creating_client,
        (Role.SERVER, _S.CREATING): {
            "session.created": _S.ACTIVE,
            "session.error": _S.ENDED,
            "response.error": _S.ENDED,
            "session.end": _S.ENDED,
            "pong": _S.CREATING,
        },
        (Role.CLIENT, _S.ACTIVE): in_session[Role.CLIENT],
        (Role.SERVER, _S.ACTIVE): in_session[Role.SERVER],
        (Role.CLIENT, _S.ENDED): {},
        (Role.SERVER, _S.ENDED): {},
    }


#: (sender, session state) -> {event type: session state after it}.
SESSION_TRANSITIONS: Final = _session_table()

#: Events that need no session (the ``IDLE`` rows, less ``session.create``).
CONNECTION_EVENTS: Final = {
    role: frozenset(SESSION_TRANSITIONS[(role, _S.IDLE)]) - {"session.create"} for role in Role
}

_R = ResponseState
_CONTENT = CONTENT_EVENTS | {"usage.delta", "tool.call_done"}

#: (sender, slot state) -> {event type: state after it}, for the events that
#: concern a response. A terminal state frees the slot (it reads ``IDLE``).
RESPONSE_TRANSITIONS: Final[dict[tuple[Role, ResponseState], dict[str, ResponseState]]] = {
    (Role.CLIENT, _R.IDLE): {"response.create": _R.REQUESTED, "response.cancel": _R.IDLE},
    (Role.CLIENT, _R.REQUESTED): {"response.cancel": _R.REQUESTED},
    (Role.CLIENT, _R.IN_PROGRESS): {
        "response.cancel": _R.IN_PROGRESS,
        "tool.result": _R.IN_PROGRESS,
    },
    # A response.error with no response refuses something else (a version, a
    # session): the slot stays free.
    (Role.SERVER, _R.IDLE): {"response.error": _R.IDLE},
    (Role.SERVER, _R.REQUESTED): {
        "response.created": _R.IN_PROGRESS,
        "response.error": _R.FAILED,
        "response.cancelled": _R.CANCELLED,
    },
    (Role.SERVER, _R.IN_PROGRESS): {
        **{t: _R.IN_PROGRESS for t in _CONTENT},
        "response.done": _R.COMPLETED,
        "response.error": _R.FAILED,
        "response.cancelled": _R.CANCELLED,
    },
}

#: The events the response machine constrains.
RESPONSE_EVENTS: Final = frozenset(t for row in RESPONSE_TRANSITIONS.values() for t in row)


def _outcomes() -> dict[str, ResponseState]:
    out: dict[str, ResponseState] = {}
    for (role, state), row in RESPONSE_TRANSITIONS.items():
        for etype, after in row.items():
            if role is Role.SERVER and after is not state and after is not _R.IDLE:
                assert out.setdefault(etype, after) is after, etype
    return out


#: The state a server event moves a response to, whatever it came from: what
#: :class:`~uamp_proto.response.ResponseTracker` follows when it is fed
#: events without the connection's checks.
RESPONSE_OUTCOMES: Final = _outcomes()


def refuse(code: str, message: str, field: str | None = None) -> LocalProtocolError:
    """A rule broken outside the tables, raised as a local error; the receive path converts it.

    The connection's own rules (:mod:`uamp_proto.connection` and its parts)
    raise it as the tables' lookups do: ``code`` and ``message`` name the
    rule, ``field`` the offending field when one is to blame.
    """
    return LocalProtocolError(message, code=code, field=field)


def next_session_state(
    sender: Role, state: SessionState, etype: str, *, session_id: str | None, live: int
) -> SessionState:
    """The session state after ``sender`` sends ``etype`` in ``state``.

    Args:
        session_id: The session's id (``None`` at the connection level).
        live: How many sessions the connection has (names the complaint at
            the connection level).

    Raises:
        LocalProtocolError: the table has no such move; ``code`` and
            ``message`` name the rule.
    """
    after = SESSION_TRANSITIONS[(sender, state)].get(etype)
    if after is not None:
        return after
    if state is _S.IDLE:
        if live == 0:
            raise LocalProtocolError(
                "no session is open: send session.create first", code="no_session"
            )
        raise LocalProtocolError(
            f"{live} sessions share this connection: the event must carry session_id",
            code="session_id_required",
        )
    if etype == "session.create":
        raise LocalProtocolError(f"session {session_id!r} already exists", code="duplicate_session")
    if etype == "session.created":
        raise LocalProtocolError(
            f"session {session_id!r} is already {state.value}", code="invalid_event"
        )
    if state is _S.CREATING:
        raise LocalProtocolError(
            f"not allowed before session {session_id!r} is created", code="invalid_event"
        )
    raise LocalProtocolError(f"not allowed in session state {state.value}", code="invalid_event")


def next_response_state(
    sender: Role, state: ResponseState, etype: str, *, session_id: str
) -> ResponseState:
    """The slot state after ``sender`` sends ``etype`` (one of :data:`RESPONSE_EVENTS`).

    Raises:
        LocalProtocolError: the table has no such move; ``code`` is
            ``response_in_progress``, ``invalid_tool_result`` or
            ``invalid_event``.
    """
    after = RESPONSE_TRANSITIONS[(sender, state)].get(etype)
    if after is not None:
        return after
    if etype == "response.create":
        raise LocalProtocolError(
            f"session {session_id!r} already has a response {state.value}; "
            "cancel it or wait for it to finish",
            code="response_in_progress",
        )
    if etype == "tool.result":
        raise LocalProtocolError(
            "there is no response waiting for tool results", code="invalid_tool_result"
        )
    if etype == "response.created" and state is _R.IDLE:
        raise LocalProtocolError("response.created without a response.create", code="invalid_event")
    if state is _R.REQUESTED:
        raise LocalProtocolError("response.created must come first", code="invalid_event")
    raise LocalProtocolError(
        f"not allowed while the response slot is {state.value}", code="invalid_event"
    )
