"""The turn driver: runs one response of an :class:`~uamp_proto.agent.Agent`.

A transport opens a turn and iterates its events::

    async with open_turn(agent, request) as turn:
        async for event in turn:
            ...                       # write it in the transport's format
    outcome = turn.outcome            # completed / requires_action / cancelled / failed

The driver owns the response lifecycle (the agent boundary's contract):

1. it sends ``response.created``;
2. it runs ``agent.respond(request, emit)`` in its own task; ``emit`` stamps
   the ``response_id``, feeds a :class:`~uamp_proto.response.ResponseTracker`
   and puts the event on a bounded memory channel, so a slow reader slows the
   agent down (backpressure) instead of growing a queue;
3. it ends with exactly one terminal event: ``response.done`` with the
   accumulated output and usage; ``response.cancelled`` with the partial
   output when :meth:`Turn.cancel` was called (a cancel scope around
   ``respond``); ``response.error`` with the :class:`AgentError`'s code, or
   ``internal_error`` for any other exception (logged, never re-raised, so
   the server keeps running);
4. except when the agent asked the client to run tools (``tool.call``) and
   returned: then no terminal event is sent, the outcome's status is
   ``requires_action`` and :attr:`TurnOutcome.pending_tool_calls` lists the
   calls. Completions ends its HTTP response with ``finish_reason:
   "tool_calls"``; a UAMP WebSocket waits for ``tool.result`` and calls
   :func:`open_turn` again with the extended conversation.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.agent import Agent, AgentError, TurnRequest
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.response import ResponseTracker

__all__ = ["DEFAULT_BUFFER", "Turn", "TurnOutcome", "TurnStatus", "open_turn"]

log = logging.getLogger("uamp_trio.turns")

#: Events buffered between the agent and the transport before ``emit`` waits.
DEFAULT_BUFFER = 16

TurnStatus = Literal["completed", "requires_action", "cancelled", "failed"]


@attrs.frozen(kw_only=True)
class TurnOutcome:
    """How a turn ended.

    Attributes:
        status: ``completed``, ``requires_action`` (client tools pending),
            ``cancelled`` or ``failed``.
        tracker: The response's accumulated output, usage and tool calls.
        final: The terminal event sent, or ``None`` for ``requires_action``.
    """

    status: TurnStatus
    tracker: ResponseTracker
    final: ev.ResponseDone | ev.ResponseCancelled | ev.ResponseError | None

    @property
    def pending_tool_calls(self) -> list[ty.ToolInvocation]:
        """Client tool calls waiting for results."""
        return self.tracker.pending_tool_calls

    @property
    def error(self) -> ty.ErrorInfo | None:
        """The error of a failed turn."""
        return self.final.error if isinstance(self.final, ev.ResponseError) else None


def _stamp(event: ev.Event, response_id: str, session_id: str) -> ev.Event:
    """Fill in the response and session ids the agent left out."""
    changes: dict[str, str] = {}
    if getattr(event, "response_id", "") is None:
        changes["response_id"] = response_id
    if event.session_id is None:
        changes["session_id"] = session_id
    return attrs.evolve(event, **changes) if changes else event  # type: ignore[arg-type]


def _agent_error(exc: BaseException) -> AgentError | None:
    """The AgentError behind ``exc`` (also a lone one inside an exception group)."""
    if isinstance(exc, AgentError):
        return exc
    if isinstance(exc, PaymentRequiredError):
        return AgentError(
            "payment_required",
            "Payment is required to continue this response.",
            {"accepts": exc.accepts()},
        )
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _agent_error(exc.exceptions[0])
    return None


class Turn:
    """One running response: iterate it for its events, then read :attr:`outcome`."""

    def __init__(
        self, agent: Agent, request: TurnRequest, receive: trio.MemoryReceiveChannel[ev.Event]
    ) -> None:
        self.agent = agent
        self.request = request
        self.tracker = ResponseTracker(request.response_id, request.messages)
        #: Set once the driver has sent its last event.
        self.outcome: TurnOutcome | None = None
        self._receive = receive
        self._scope: trio.CancelScope | None = None
        self._cancel_requested = False
        self._done = False

    def cancel(self) -> None:
        """Cancel the agent; the turn ends with ``response.cancelled``."""
        self._cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ev.Event]:
        async for event in self._receive:
            yield event

    async def _drive(self, send: trio.MemorySendChannel[ev.Event]) -> None:
        request = self.request
        rid, sid = request.response_id, request.session_id
        tracker = self.tracker
        finished = False

        async def emit(event: ev.Event) -> None:
            if finished:
                raise RuntimeError("emit() called after the agent's respond() returned")
            event = _stamp(event, rid, sid)
            tracker.apply(event)
            await send.send(event)

        async with send:
            created = ev.ResponseCreated(response_id=rid, session_id=sid)
            tracker.apply(created)
            await send.send(created)
            final: ev.ResponseDone | ev.ResponseCancelled | ev.ResponseError | None = None
            status: TurnStatus = "completed"
            with trio.CancelScope() as scope:
                self._scope = scope
                if self._cancel_requested:
                    scope.cancel()
                try:
                    await self.agent.respond(request, emit)
                except Exception as exc:
                    agent_error = _agent_error(exc)
                    status = "failed"
                    if agent_error is not None:
                        final = tracker.error_event(
                            agent_error.code, agent_error.message, agent_error.details
                        )
                    else:
                        log.exception("agent %r failed", request.agent)
                        final = tracker.error_event(
                            "internal_error", f"The agent failed: {type(exc).__name__}"
                        )
            finished = True
            self._scope = None
            if scope.cancelled_caught:
                status, final = "cancelled", tracker.cancelled_event()
            elif final is None:
                if tracker.pending_tool_calls:
                    status = "requires_action"
                else:
                    final = tracker.done_event()
            if final is not None:
                final = _stamp(final, rid, sid)  # type: ignore[assignment]
                tracker.apply(final)
            self.outcome = TurnOutcome(status=status, tracker=tracker, final=final)
            if final is not None:
                await send.send(final)
        self._done = True


@asynccontextmanager
async def open_turn(
    agent: Agent, request: TurnRequest, *, buffer: int = DEFAULT_BUFFER
) -> AsyncIterator[Turn]:
    """Start one response of ``agent``; see the module docstring.

    Leaving the block before the events are exhausted cancels the agent.
    """
    send, receive = trio.open_memory_channel[ev.Event](buffer)
    turn = Turn(agent, request, receive)
    async with trio.open_nursery() as nursery, receive:
        nursery.start_soon(turn._drive, send)
        try:
            yield turn
        finally:
            if not turn._done:
                nursery.cancel_scope.cancel()
