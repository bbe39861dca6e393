"""A session's response slot: the rules of the response events, held creates, delta windows.

Theory of operation
-------------------
One response per session at a time (UAMP section 6): the response table
(:data:`~uamp_proto._state.RESPONSE_TRANSITIONS`) says which event may move
the slot where, and :meth:`ResponsePart._response_rules` applies the move
and its effects, for the events either side sends:

* ``response.create`` takes the session's pending input (and a conversation
  on ``response.messages``) into a new
  :class:`~uamp_proto.response.ResponseTracker`, requested. One that comes
  while the slot is busy is refused ``response_in_progress``, unless the
  configuration's ``on_busy`` holds it (:meth:`ResponsePart._hold`): it
  keeps its input, and the host starts it once the slot is free
  (:meth:`ResponsePart.start_held`) or forgets it
  (:meth:`ResponsePart.drop_held`).
* ``response.created`` names the response (a client's tracker held a
  provisional id until then) and starts its send window; the deltas, tool
  calls and results that follow feed the tracker, which keeps the output
  within ``max_response_output_bytes`` (a server past a client's bound is
  cancelled: :meth:`ResponsePart._output_refused`); a terminal event ends
  the response, and its turn joins the session's history.
* No response content is sent or accepted while payment is required
  (:mod:`uamp_proto.payment`); an event naming another response than the
  current one is refused ``unknown_response`` (a ``response.cancel`` racing
  the response's end is let through).
* In a voice call the server may start a response the client did not ask
  for (section 8.1: a turn it heard): the client's side answers it as if it
  had sent ``response.create`` (:meth:`ResponsePart._server_turn`).

On a session that opted into delta windows (spec 003 section 5,
:mod:`uamp_proto.flow`) the sender stamps each delta frame's
``delta_seq``, the receiver checks it and owes acknowledgements
(:meth:`ResponsePart._flow`), and the sender's window opens with each
acknowledgement it receives (:meth:`ResponsePart._ack`).

Each raises :class:`~uamp_proto.errors.LocalProtocolError` for a broken rule
before changing anything; the general path says whose fault it was.
:class:`ResponsePart` is that side of
:class:`~uamp_proto.connection.Connection`, which subclasses it and sets
every attribute it declares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import events as ev
from . import flow
from . import types as ty
from ._state import (
    RESPONSE_TRANSITIONS,
    TERMINAL_RESPONSE_STATES,
    ResponseState,
    Role,
    next_response_state,
    refuse,
)
from .errors import OutputTooLarge, ProtocolError, RemoteProtocolError
from .payment import CONTENT_EVENTS
from .response import ResponseTracker
from .session_context import HeldResponse, SessionContext
from .voice import CallState

if TYPE_CHECKING:
    from .connection_config import ConnectionConfig
    from .ids import IdSource

__all__ = ["ResponsePart"]


class ResponsePart:
    """A connection's response side (module docstring): each session's response
    slot, the creates held while it is busy, and its delta windows."""

    if TYPE_CHECKING:
        our_role: Role
        config: ConnectionConfig
        _ids: IdSource
        _sessions: dict[str, SessionContext]
        owed: list[bytes]

        def _encode_reply(self, event: ev.Event) -> bytes: ...

    def _server_turn(
        self, session: SessionContext, etype: str, sender: Role, phase: ResponseState
    ) -> bool:
        """Whether the server starts a response the client did not ask for: in a call."""
        return (
            etype == "response.created"
            and phase is ResponseState.IDLE
            and sender is Role.SERVER
            and self.our_role is Role.CLIENT
            and session.call.state is CallState.ACTIVE
        )

    def _response_rules(
        self, session: SessionContext, event: ev.Event, sender: Role
    ) -> dict[str, Any] | None:
        etype = event.type
        tracker = session.response
        phase = ResponseState.IDLE if tracker is None else tracker.state
        after = RESPONSE_TRANSITIONS[(sender, phase)].get(etype)
        if after is None:
            if self._server_turn(session, etype, sender, phase):
                # A turn the server found in a call (an ``is_final`` chunk, or a
                # pause its ``server_vad`` heard): it answers the caller's audio
                # as if the client had sent ``response.create`` (UAMP 8.1).
                self._response_rules(session, ev.ResponseCreate(session_id=session.id), Role.CLIENT)
                return self._response_rules(session, event, sender)
            on_busy = self.config.on_busy
            if etype == "response.create" and on_busy is not None and sender is not self.our_role:
                assert isinstance(event, ev.ResponseCreate)
                self._hold(session, event, on_busy)
                return None
            after = next_response_state(sender, phase, etype, session_id=session.id)
        if sender is Role.SERVER and etype in CONTENT_EVENTS and session.payment.blocks_content:
            raise refuse(
                "payment_required",
                "no response content may be released while payment is "
                f"{session.payment.state.value}",
            )
        response_id = getattr(event, "response_id", None)
        if (
            tracker is not None
            and response_id is not None
            and sender is Role.SERVER
            and self.our_role is Role.CLIENT
            and phase is ResponseState.REQUESTED
            # (not a late event of one that ended: one past the bound, cancelled)
            and response_id not in session.finished_responses
        ):
            # Until the server names the response, the client's tracker holds
            # a provisional id; a response that ends before it starts (refused,
            # cancelled while held for payment) names it on its terminal event.
            tracker.response_id = response_id
        if (
            tracker is not None
            and response_id is not None
            and etype != "response.created"
            and response_id != tracker.response_id
        ):
            if etype == "response.cancel" and response_id in session.finished_responses:
                return None  # a cancel racing the response's end: nothing to do
            raise refuse(
                "unknown_response",
                f"response_id {response_id!r} is not the session's current response "
                f"{tracker.response_id!r}",
                "response_id",
            )
        stamps: dict[str, Any] | None = None
        if etype == "response.create":
            assert isinstance(event, ev.ResponseCreate)
            if event.response is not None and event.response.messages is not None:
                # The conversation on response.create (Robutler's clients):
                # exactly what input.text.messages is (section 5.6).
                session.stateless_history = list(event.response.messages)
            messages = session._take_input()
            tracker = session.response = ResponseTracker(
                self._ids("resp"), messages, self.config.max_response_output_bytes
            )
            if session.pending_context is not None:
                tracker.context, session.pending_context = session.pending_context, None
        elif etype == "response.created":
            assert tracker is not None
            created_id = event.response_id  # type: ignore[attr-defined]
            tracker.response_id = created_id
            tracker.apply(event)
            if session.send_window is not None:
                session.send_window.start_stream(created_id)
        elif etype == "tool.result":
            assert isinstance(event, ev.ToolResult) and tracker is not None
            try:
                tracker.add_tool_result(event.call_id, event.result, event.is_error)
            except (ProtocolError, OutputTooLarge) as exc:
                raise refuse(exc.code, exc.message) from None
        elif etype == "response.cancel":
            pass
        elif tracker is not None:
            if etype in flow.FLOW_CONTROLLED_TYPES:
                stamps = self._flow(session, tracker, event, sender)
            try:
                tracker.apply(event)
            except OutputTooLarge as exc:
                if sender is self.our_role:
                    raise  # ours: the server ends the response (response.error)
                raise self._output_refused(session, tracker, exc) from None
            if after in TERMINAL_RESPONSE_STATES:
                tracker.state = after
                session._finish_response(keep_output=after is not ResponseState.FAILED)
                session.bound_history(self.config)
                return stamps
        if tracker is not None:
            tracker.state = after  # the table's move (tracker.apply agrees)
        return stamps

    def _output_refused(
        self, session: SessionContext, tracker: ResponseTracker, exc: OutputTooLarge
    ) -> RemoteProtocolError:
        """A server's response past the client's bound: it ends here, failed, and
        the server is owed its ``response.cancel`` (the error's ``reply``)."""
        tracker.error = ty.ErrorInfo(code=exc.code, message=exc.message)
        tracker.state = ResponseState.FAILED
        session._finish_response(keep_output=False)
        session.bound_history(self.config)
        return RemoteProtocolError(
            f"the server's response {tracker.response_id} passed this client's bound "
            f"of {exc.limit} bytes of output; it was cancelled",
            code=exc.code,
            session_id=session.id,
            reply=ev.ResponseCancel(response_id=tracker.response_id, session_id=session.id),
        )

    def _hold(
        self,
        session: SessionContext,
        event: ev.ResponseCreate,
        on_busy: Callable[[str, ev.ResponseCreate], object],
    ) -> None:
        """Hold a ``response.create`` that came while the slot is busy, or refuse it."""
        token = on_busy(session.id, event)  # a LocalProtocolError refuses it
        if event.response is not None and event.response.messages is not None:
            session.stateless_history = list(event.response.messages)
        messages = session._take_input()
        context, session.pending_context = session.pending_context, None
        held = HeldResponse(
            token=token,
            create=event,
            response_id=self._ids("resp"),
            messages=messages,
            context=context,
        )
        session.held.append(held)

    def start_held(self, session_id: str, token: object) -> ev.ResponseCreate:
        """Start the held ``response.create`` of ``token`` now that the slot is free.

        Its response becomes the session's current one (requested), with the
        input it took when it arrived after the history as it now stands.

        Raises:
            LocalProtocolError: No such session or held create, or the slot
                is still busy.
        """
        session = self._sessions.get(session_id)
        if session is None:
            raise refuse("unknown_session", f"no session {session_id!r}")
        held = next((h for h in session.held if h.token == token), None)
        if held is None:
            raise refuse("invalid_event", "no such held response.create")
        if session.phase is not ResponseState.IDLE:
            raise refuse("response_in_progress", "the response slot is still busy")
        session.held.remove(held)
        tracker = session.response = ResponseTracker(
            held.response_id, held.messages, self.config.max_response_output_bytes
        )
        if held.context is not None:
            tracker.context = held.context
        tracker.state = ResponseState.REQUESTED
        return held.create

    def drop_held(self, session_id: str, token: object) -> None:
        """Forget the held ``response.create`` of ``token`` (its input with it), if any."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.held[:] = [h for h in session.held if h.token != token]

    def _flow(
        self, session: SessionContext, tracker: ResponseTracker, event: ev.Event, sender: Role
    ) -> dict[str, Any] | None:
        if sender is self.our_role:
            window = session.send_window
            if window is None:
                return None
            return {"delta_seq": window.stamp(tracker.response_id)}
        receive = session.receive_window
        if receive is None:
            return None
        seq = getattr(event, "delta_seq", None)
        if seq is None:
            raise refuse(flow.ERR_MISSING_DELTA_SEQ, "missing delta_seq on a delta frame")
        try:
            due = receive.receive(tracker.response_id, seq)
        except ProtocolError as exc:
            raise refuse(exc.code, exc.message) from None
        if due is not None:
            ack = flow.ack_event(tracker.response_id, due, session_id=event.session_id)
            self.owed.append(self._encode_reply(ack))
            receive.acknowledged(tracker.response_id, due)
        return None

    def _ack(self, session: SessionContext, event: ev.Event, sender: Role) -> None:
        window = session.send_window
        if window is None or sender is self.our_role:
            return
        assert isinstance(event, ev.Progress)
        try:
            window.acknowledge(*flow.ack_of(event))
        except ProtocolError as exc:
            raise refuse(exc.code, exc.message) from None
