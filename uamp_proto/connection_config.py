"""The options of one UAMP connection (:class:`ConnectionConfig`), validated once.

:class:`~uamp_proto.connection.Connection` reads them on every event; the
callbacks (``on_busy``, ``on_history``) are a server's say on what the core
cannot decide alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

from . import events as ev
from .ids import IdSource, random_ids
from .response import MAX_OUTPUT_BYTES

__all__ = ["MAX_SESSION_HISTORY_BYTES", "ConnectionConfig"]

#: What one session keeps of its conversation by default (``ConnectionConfig.max_history_bytes``).
MAX_SESSION_HISTORY_BYTES: Final = 4 * 1024 * 1024


@attrs.define(kw_only=True)
class ConnectionConfig:
    """Options of a connection, validated once.

    Attributes:
        ids: Id source for event, session, response and content ids. The
            default, :func:`~uamp_proto.ids.random_ids`, is the one place the
            core draws randomness (from the OS); pass
            :func:`~uamp_proto.ids.counter_ids` or your own for determinism.
        clock: Returns Unix time in seconds; when given, outgoing events get a
            ``timestamp`` (ms). The core never reads a clock of its own.
        uamp_version: The protocol version this side speaks.
        max_sessions: Most live sessions on one connection.
        max_event_size: Largest message accepted, in bytes (spec 003 4.13).
        max_queued: Most messages ``receive`` keeps before ``next_event``.
        max_delta_window: The largest delta window a server grants.
        delta_window: The window a client asks for when it opts in (None: no
            flow control).
        on_busy: A server's say on a ``response.create`` while its session's
            response slot is busy (docs/busy.md): called with the session id
            and the event, it returns a token (any object) and the create is
            *held* -- its input taken now, its response started later by
            :meth:`Connection.start_held` -- or raises
            :class:`~uamp_proto.errors.LocalProtocolError`, which refuses it.
            ``None`` (the default): refused with ``response_in_progress``.
        max_pending_input_bytes: Most input (text, media as sent) a session
            gathers for its next response; more is refused ``invalid_request``
            until ``response.create`` takes it.
        max_history_bytes / max_history_messages: Most a session's kept
            conversation holds (about its JSON size; messages). Past either,
            its oldest turns are dropped, down to three quarters of both
            (:func:`uamp_proto.history.trim`), so a long session costs each
            turn a bounded copy and the server bounded memory.
        on_history: A server's say on what its sessions keep together
            (:class:`uamp_proto.history.SessionHistories`): called with a
            session's id and its kept conversation's weight each time a turn
            joined it (after the bounds above) or :meth:`Connection.bound_history`
            weighed it. ``None`` (the default): nobody is told.
        max_response_output_bytes: Most output one response keeps
            (:attr:`ResponseTracker.max_output_bytes
            <uamp_proto.response.ResponseTracker.max_output_bytes>`). A
            server's ``send`` of an event past it raises
            :class:`~uamp_proto.errors.OutputTooLarge` (the server ends the
            response with ``response.error`` ``output_too_large``); a
            server's event past it is, to a client, a
            :class:`~uamp_proto.errors.RemoteProtocolError` of that code:
            the client ends the response there and owes the server its
            ``response.cancel`` (the error's ``reply``).
    """

    ids: IdSource = random_ids
    clock: Callable[[], float] | None = None
    uamp_version: str = "1.0"
    max_sessions: int = attrs.field(default=64)
    max_event_size: int = attrs.field(default=16 * 1024 * 1024)
    max_queued: int = attrs.field(default=1024)
    max_delta_window: int = attrs.field(default=1024)
    delta_window: int | None = None
    on_busy: Callable[[str, ev.ResponseCreate], object] | None = None
    max_pending_input_bytes: int = attrs.field(default=8 * 1024 * 1024)
    max_history_bytes: int = attrs.field(default=MAX_SESSION_HISTORY_BYTES)
    max_history_messages: int = attrs.field(default=1000)
    on_history: Callable[[str, int], None] | None = None
    max_response_output_bytes: int = attrs.field(default=MAX_OUTPUT_BYTES)

    @max_sessions.validator
    @max_event_size.validator
    @max_queued.validator
    @max_delta_window.validator
    @max_pending_input_bytes.validator
    @max_history_bytes.validator
    @max_history_messages.validator
    @max_response_output_bytes.validator
    def _positive(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value < 1:
            raise ValueError(f"{attribute.name} must be at least 1, got {value}")
