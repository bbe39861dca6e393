"""One response of an agent, driven on anyio (asyncio or Trio underneath).

The contract is the Trio driver's (:mod:`uamp_trio.hosting.turns`): send
``response.created``, call ``agent.respond(request, emit)`` with an ``emit``
that stamps the ids, feeds the :class:`~uamp_proto.response.ResponseTracker`
and awaits the sink (backpressure), then end with the one terminal event
:func:`uamp_proto.outcome.conclude` picks. A charge held for the response is
settled exactly once, however it ends. :meth:`Turn.cancel` ends it with
``response.cancelled``. Output is bounded as there: an event past the
tracker's ``max_output_bytes`` stops the agent and the turn ends with
``response.error`` ``output_too_large``.

The settings every turn shares (the output bound) are one
:class:`TurnOptions`, which the app's host builds once from its
:class:`~uamp_asgi.config.Config` (``host.turns``); transports start their
turns through it (``host.turns.turn(...)``, ``await host.turns.run(...)``)
and pass no setting by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import attrs

from uamp_proto import events as ev
from uamp_proto.errors import OutputTooLarge
from uamp_proto.outcome import ResponseOutcome, conclude
from uamp_proto.payment import Charge
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.response import MAX_OUTPUT_BYTES, ResponseTracker

__all__ = ["DEFAULT_TURN_OPTIONS", "Sink", "Turn", "TurnOptions", "run_turn"]

log = logging.getLogger("uamp_asgi.turns")

#: Takes one event of the turn; awaiting it is the agent's backpressure.
Sink = Callable[[ev.Event], Awaitable[None]]

_TERMINAL = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)


@attrs.frozen(kw_only=True)
class TurnOptions:
    """The settings every turn of an app shares, and its turns started on them.

    The host builds one from its config (``Config.max_response_output_bytes``
    ...); :class:`Turn` reads it once, when it is built.

    Attributes:
        max_output_bytes: The most output one response keeps; the event past
            it ends the turn with ``output_too_large``.
    """

    max_output_bytes: int = MAX_OUTPUT_BYTES

    def turn(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None,
        *,
        charge: Charge | None = None,
        tracker: ResponseTracker | None = None,
        created: bool = True,
    ) -> Turn:
        """A :class:`Turn` on these options (its arguments)."""
        return Turn(
            agent, request, sink, charge=charge, tracker=tracker, created=created, options=self
        )

    async def run(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None = None,
        *,
        charge: Charge | None = None,
        tracker: ResponseTracker | None = None,
        created: bool = True,
    ) -> ResponseOutcome:
        """Run one response of ``agent`` on these options, every event to ``sink``.

        ``sink`` ``None``: the events go nowhere, the outcome's tracker has them.
        """
        return await self.turn(
            agent, request, sink, charge=charge, tracker=tracker, created=created
        ).run()


#: The defaults (:class:`TurnOptions`).
DEFAULT_TURN_OPTIONS: Final = TurnOptions()


class _SinkFailed(Exception):
    """The sink raised: the peer is gone; the turn stops without a terminal event."""


class Turn:
    """One response of ``agent`` (see the module docstring)."""

    def __init__(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None,
        *,
        charge: Charge | None = None,
        tracker: ResponseTracker | None = None,
        created: bool = True,
        options: TurnOptions = DEFAULT_TURN_OPTIONS,
    ) -> None:
        self.agent = agent
        self.request = request
        self.tracker = tracker or ResponseTracker(
            request.response_id, request.messages, options.max_output_bytes
        )
        self._sink = sink
        self._charge = charge
        self._created = created
        self._scope = anyio.CancelScope()
        self._sink_error: BaseException | None = None
        self._finished = False
        self.outcome: ResponseOutcome | None = None

    def cancel(self) -> None:
        """End the turn with ``response.cancelled``."""
        self._scope.cancel()

    async def emit(self, event: ev.Event) -> None:
        """The ``emit`` the agent is given."""
        if self._finished:
            raise RuntimeError("emit() called after the agent's respond() returned")
        if self._sink_error is not None:
            raise _SinkFailed
        event = ev.with_ids(
            event, session_id=self.request.session_id, response_id=self.request.response_id
        )
        if type(event) is not ev.ResponseDelta and isinstance(event, _TERMINAL):
            raise RuntimeError("the turn driver sends the terminal event, not the agent")
        try:
            self.tracker.apply(event)
        except OutputTooLarge as exc:
            self._sink_error = exc  # the turn ends output_too_large (_run)
            raise _SinkFailed from None
        await self._deliver(event)

    async def _deliver(self, event: ev.Event) -> None:
        if self._sink is None:
            return
        try:
            await self._sink(event)
        except Exception as exc:
            self._sink_error = exc
            raise _SinkFailed from None

    async def run(self) -> ResponseOutcome:
        """Run the turn to its end; the sink's own failure is re-raised."""
        try:
            return await self._run()
        finally:
            with anyio.CancelScope(shield=True):
                await self._settle()
            # Nothing is sent after the end; the sink's owner often holds this
            # turn (to cancel it): without the sink there is no cycle.
            self._sink = None

    async def _settle(self) -> ResponseOutcome | None:
        charge, self._charge = self._charge, None
        if charge is None:
            return None
        used = self.tracker.usage is not None or bool(self.tracker.output)
        balance = await charge.settle(self.tracker.usage, used=used)
        if self.outcome is not None and balance is not None:
            self.outcome = ResponseOutcome(
                status=self.outcome.status,
                tracker=self.tracker,
                final=self.outcome.final,
                balance=balance,
            )
        return self.outcome

    async def _run(self) -> ResponseOutcome:
        request, tracker = self.request, self.tracker
        sid = request.session_id
        if self._created:
            created = ev.ResponseCreated(response_id=request.response_id, session_id=sid)
            tracker.apply(created)
            try:
                await self._deliver(created)
            except _SinkFailed:
                assert self._sink_error is not None
                raise self._sink_error from None
        error: BaseException | None = None
        with self._scope:
            try:
                await self.agent.respond(request, self.emit)
            except Exception as exc:
                error = exc
        self._finished = True
        if self._sink_error is not None:
            if type(self._sink_error) is not OutputTooLarge:
                raise self._sink_error
            # The output reached its bound: the agent was stopped for it.
            error, self._sink_error = self._sink_error, None
        status, final, unexpected = conclude(
            tracker, error, self._scope.cancelled_caught, session_id=sid
        )
        if unexpected:
            log.error("agent %r failed", request.agent, exc_info=error)
        # Caught in this frame, the error's traceback holds the frame, and
        # the frame the error and the request: let it go (no cycle).
        error = None
        if final is not None:
            tracker.apply(final)
        self.outcome = ResponseOutcome(status=status, tracker=tracker, final=final)
        with anyio.CancelScope(shield=True):
            await self._settle()
        outcome = self.outcome
        if final is not None and self._sink is not None:
            await self._sink(final)
        return outcome


#: Run one response of ``agent`` on the defaults, every event to ``sink``
#: (``None``: nowhere): ``await run_turn(agent, request)``. An app's turns
#: run on its host's options instead (``host.turns.run(...)``).
run_turn = DEFAULT_TURN_OPTIONS.run
